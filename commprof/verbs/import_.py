"""``commprof import KIND FILE...``: another tool's output as a commprof results dir, by kind:
``nccl-tests`` logs (:mod:`commprof.ingest.nccltests`, a sweep dir), ``nvidia-smi-topo`` text
(:mod:`commprof.ingest.smitopo`, a topo.json) or ``kineto`` traces of a serving engine
(:mod:`commprof.ingest.kineto`, a trace dir)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from datetime import datetime

from commprof import results
from commprof.model.errors import UsageError
from commprof.ingest.nccltests import EXIT_WRONG_RESULTS, import_nccl_tests, wrong_summary
from commprof.results.meta import check_writable


def default_import_dir(kind: str, root: str = results.RUNS_DIR) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(root, f"{stamp}-import-{kind}")


@dataclass
class ImportConfig:
    """``commprof import``'s arguments and flags (``step_marker``, ``model``, ``tp``: kineto only)."""
    kind: str = "nccl-tests"
    paths: list = field(default_factory=list)
    out: str | None = None
    in_place: bool = False
    step_marker: str | None = None
    model: str | None = None
    tp: int | None = None
    label: str | None = None        # --label: the box's short name in gap, check and report
    expect_gpus: int | None = None  # nccl-debug: what the box was sold with
    expect_nodes: int | None = None


def run(cfg: ImportConfig) -> int:
    """``commprof import KIND FILE...``: the exit code; ``out`` is checked writable first."""
    if cfg.out is not None:
        try:
            check_writable(cfg.out)
        except UsageError as e:
            raise UsageError(f"--out: {e}") from None
    if cfg.label is not None and not cfg.label.strip():
        raise UsageError("--label '': give the box a name (e.g. --label 'A100 DGX')")
    if cfg.label is not None and cfg.kind not in ("nccl-tests", "kineto"):
        raise UsageError(f"import {cfg.kind}: --label is for 'import nccl-tests' and 'import kineto'")
    given = [f for f, v in (("--expect-gpus", cfg.expect_gpus), ("--expect-nodes", cfg.expect_nodes)) if v is not None]
    if given and cfg.kind != "nccl-debug":
        raise UsageError(f"import {cfg.kind}: {', '.join(given)} is for 'import nccl-debug' only; drop it")
    for f, v in (("--expect-gpus", cfg.expect_gpus), ("--expect-nodes", cfg.expect_nodes)):
        if v is not None and v < 1:
            raise UsageError(f"{f} {v}: give a count of 1 or more")
    out = cfg.out or default_import_dir(cfg.kind)
    if cfg.kind == "nccl-debug":
        return _import_nccl_debug(list(cfg.paths), out, cfg.expect_gpus, cfg.expect_nodes)
    rc = _dispatch(cfg.kind, list(cfg.paths), out, in_place=cfg.in_place, step_marker=cfg.step_marker,
                   model=cfg.model, tp=cfg.tp)
    if cfg.label and rc == 0:
        meta = results.read_meta(out)
        meta["label"] = cfg.label.strip()
        results.write_meta(out, meta)
    return rc


def _dispatch(kind: str, paths, out: str, in_place: bool = False, step_marker: str | None = None,
              model: str | None = None, tp: int | None = None) -> int:
    """One importer by ``kind``: import, print one line, return the exit code (0).
    ``step_marker``, ``model`` and ``tp`` are for ``kineto`` only."""
    given = [f for f, v in (("--step-marker", step_marker), ("--model", model), ("--tp", tp)) if v is not None]
    if given and kind in ("nvidia-smi-topo", "nccl-tests", "nvidia-smi-q"):
        raise UsageError(f"import {kind}: {', '.join(given)} {'is' if len(given) == 1 else 'are'} for "
                         "'import kineto' only; drop it")
    if kind == "nvidia-smi-topo":
        from commprof.ingest.smitopo import run_import_smi_topo     # each importer loads only when asked for

        return run_import_smi_topo(list(paths), out or default_import_dir(kind))
    if kind == "nvidia-smi-q":
        from commprof.ingest.nvidiasmiq import run_import_nvidia_smi_q     # nvidia-smi -q text or -q -x XML

        return run_import_nvidia_smi_q(list(paths), out or default_import_dir(kind))
    if kind == "kineto":
        from commprof.ingest.kineto import run_import_kineto

        return run_import_kineto(list(paths), out or default_import_dir(kind), step_marker=step_marker,
                                 model=model, tp=tp)
    if step_marker is not None or model is not None or tp is not None:
        raise UsageError(f"import {kind}: --step-marker, --model and --tp are for 'import kineto' only")
    if kind != "nccl-tests":
        raise UsageError(f"import: unknown kind '{kind}' (known: nccl-tests, nccl-debug, nvidia-smi-topo, nvidia-smi-q, kineto)")
    out_dir = out or default_import_dir(kind)
    import_nccl_tests(list(paths), out_dir, in_place=in_place)
    rows = results.read_rows(out_dir)
    ops = sorted({r["op"] for r in rows})
    tps = sorted({int(r["tp"]) for r in rows})
    modes = sorted({r["mode"] for r in rows})
    unchecked = sum(r.get("status") == "unchecked" for r in rows)
    print(f"imported {len(rows)} rows ({', '.join(ops)}; tp {', '.join(map(str, tps))}; "
          f"{', '.join(modes)}) from {len(paths)} file(s) into {out_dir}"
          + (f"; correctness not checked in {unchecked} rows (#wrong N/A: validation off)" if unchecked else ""))
    bad = wrong_summary(out_dir)
    if bad:
        print(f"commprof: error: {bad}", file=sys.stderr)
        return EXIT_WRONG_RESULTS
    return 0


def _import_nccl_debug(paths, out: str, expect_gpus, expect_nodes) -> int:
    """``import nccl-debug``: the account, its lines, and the exit code (9: no NCCL line at all;
    8: an item FAILed; 0 otherwise)."""
    from commprof.ingest.nccldebug import import_nccl_debug
    from commprof.model.errors import EXIT_CHECK_FAILED, EXIT_INSUFFICIENT_EVIDENCE
    from commprof.results.nccldebug import NCCL_COMMS_CSV, NCCL_VERDICT_CSV
    from commprof.views.nccldebug import account_lines

    meta = import_nccl_debug(paths, out, expect_gpus=expect_gpus, expect_nodes=expect_nodes)
    _, comms = results.read_table_rows(os.path.join(out, NCCL_COMMS_CSV))
    _, items = results.read_table_rows(os.path.join(out, NCCL_VERDICT_CSV))
    for line in account_lines(meta, comms, items):
        print(line)
    print(f"imported {len(paths)} NCCL_DEBUG log(s) into {out}")
    if not meta["nccl_debug"]["nccl_lines"]:
        print(f"commprof: error: no NCCL INFO line in {', '.join(paths)}: run the engine with NCCL_DEBUG=INFO "
              "(docs/nccl-debug.md)", file=sys.stderr)
        return EXIT_INSUFFICIENT_EVIDENCE
    return EXIT_CHECK_FAILED if any(it["verdict"] == "FAIL" for it in items) else 0
