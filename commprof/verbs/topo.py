"""``commprof topo``: what connects this box's GPUs, as NVML reports it (:mod:`commprof.capture.nvmltopo`),
printed and (``--out``) written as ``topo.json``."""
from __future__ import annotations

from commprof.model.registry import TopoConfig  # noqa: F401 - the flags, declared once

import os
import socket

from commprof import results
from commprof.model.errors import EXIT_OK, UsageError
from commprof.capture.nvmltopo import collect_topology
from commprof.capture.nvmlhealth import sample_once, save_health
from commprof.results.topo import TOPO_JSON, write_topology
from commprof.views.console import emit
from commprof.views.topo import render_topology




def run(cfg: TopoConfig, *, nvml=None, console=None) -> int:
    """The whole ``commprof topo`` command: collect, print (JSON to stdout when ``as_json``),
    write ``topo.json`` into ``out`` (created) when given; the exit code."""
    as_json, out = cfg.as_json, cfg.out
    topo = collect_topology(nvml)
    path = None
    if out:
        try:
            path = write_topology(topo, os.path.join(out, TOPO_JSON))
            save_health(out, sample_once(nvml))          # the GPUs' health now (health.json/.csv)
            results.stamp(out, results.provenance(
                "topo", "measured", "NVML topology, P2P and link state (commprof topo)", status="complete",
                hosts=[topo.get("host") or socket.gethostname()],
                gpus=[g.get("name", "?") for g in topo.get("gpus", [])]))
        except OSError as e:
            raise UsageError(f"--out '{out}': cannot write {TOPO_JSON} ({e.strerror or e})") from None
    emit(topo, as_json, lambda c: render_topology(topo, c), [path] if path else [], console, 160)
    return EXIT_OK
