"""What a set of results dirs says about the boxes they describe: :class:`Evidence` per box.

Every dir holding a sweep (measured, imported or a reference profile) is one box; a dir without one
(trace, topo, p2p, hostbw, moe, serve) joins the box whose hosts it shares, else the box before it
on the command line. ``check``, ``gap`` and ``report`` read their dirs through :func:`gather_boxes`.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from commprof import results
from commprof.model.errors import UsageError
from commprof.model.fileio import shown_path
from commprof.analysis.verdict import Interconnect


@dataclass
class Evidence:
    """What the results dirs of one box hold. :func:`gather` returns the first box's with
    ``boxes`` listing every box (itself included) when the dirs describe several."""
    topo: dict | None = None
    sweep: object = None          # pandas DataFrame
    sweep_meta: dict | None = None
    sweep_custom: object = None   # pandas DataFrame: the sweep's --impl custom rows (one-shot kernel)
    trace: object = None          # pandas DataFrame (trace_summary.csv)
    trace_meta: dict | None = None
    hostbw: dict | None = None
    p2p: object = None            # pandas DataFrame (p2p.csv from commprof p2p)
    moe_dir: str | None = None    # a commprof moe results dir
    serve: object = None          # pandas DataFrame (serve_levels.csv from commprof serve)
    serve_meta: dict | None = None
    dirs: tuple = ()
    metas: list = field(default_factory=list)   # each dir's provenance (results.load)
    label: str = ""               # the box's name (its sweep dir's, else its first dir's)
    sweep_dir: str | None = None
    trace_dir: str | None = None
    topo_meta: dict | None = None
    loaded: list = field(default_factory=list)  # each dir's results.Results
    interconnect: Interconnect | None = None    # set by resolve_interconnect
    boxes: list = field(default_factory=list)
    sweep_timing: str = "per-call"  # the one timing method the box's sweep rows are judged by
    notes: list = field(default_factory=list)
    unfinished: list = field(default_factory=list)  # one line per dir whose run did not finish
    inspector: object = None      # pandas DataFrame (nccl_inspector.csv from import nccl-inspector)
    inspector_dir: str | None = None
    nccl_debug: object = None     # the results.Results of an import nccl-debug dir (NCCL's own account)

    def all_boxes(self) -> list:
        return self.boxes or [self]


def _absorb(ev: Evidence, r, d: str) -> bool:
    """Take what one loaded dir holds into a box; False when it holds nothing check reads."""
    found = False
    ev.dirs = ev.dirs + (d,)
    ev.metas.append(r.meta)
    ev.loaded.append(r)
    if r.unfinished:
        ev.unfinished.append(f"'{shown_path(d)}': {r.unfinished}")     # recorded in check.json
    if "topo" in r.docs:
        ev.topo, ev.topo_meta, found = r.docs["topo"], r.meta, True
    if "hostbw" in r.docs:
        ev.hostbw, found = r.docs["hostbw"], True
    if "health" in r.docs:             # GPU health samples: judged by checkitems_health from ev.dirs
        found = True
    if "sweep" in r.tables:
        df = r.tables["sweep"]
        base = df[df["impl"] != "custom"]
        # One timing method per box: per-call (what a decode step pays) when the dir has it, else
        # the back-to-back averages it holds (nccl-tests' method); never the two mixed.
        ev.sweep_timing, base, mixed = results.one_timing(base)
        if mixed:
            ev.notes.append(f"'{d}' holds per-call and back-to-back rows: only the per-call rows are judged")
        ev.sweep = base.reset_index(drop=True)
        custom = df[df["impl"] == "custom"].reset_index(drop=True)
        ev.sweep_custom = custom if not custom.empty else None
        ev.sweep_meta, ev.sweep_dir = r.meta, d
        found = True
    if "trace_summary" in r.tables:
        ev.trace, ev.trace_meta, ev.trace_dir, found = r.tables["trace_summary"], r.meta, d, True
    if "p2p" in r.tables:
        ev.p2p, found = r.tables["p2p"], True
    if "moe_steps" in r.tables:
        ev.moe_dir, found = d, True
    if "serve_levels" in r.tables:
        ev.serve, ev.serve_meta, found = r.tables["serve_levels"], r.meta, True
    if "nccl_inspector" in r.tables:
        ev.inspector, ev.inspector_dir, found = r.tables["nccl_inspector"], d, True
    if "nccl_comms" in r.tables:
        ev.nccl_debug, found = r, True
    return found


def _hosts_of(r) -> set:
    hosts = {str(h) for h in (r.meta.get("hosts") or []) if h}
    if "topo" in r.docs and r.docs["topo"].get("host") not in (None, "", "n/a"):
        hosts.add(str(r.docs["topo"]["host"]))
    return hosts - {"n/a", "?"}


def parse_labels(labels) -> list[str]:
    """``--label A100,4090``: one name per box, in the boxes' order; [] when not given."""
    if not labels:
        return []
    names = [n.strip() for n in (labels.split(",") if isinstance(labels, str) else labels)]
    if any(not n for n in names):
        raise UsageError(f"--label '{labels}': an empty name; give one name per box, comma-separated")
    if len(set(names)) != len(names):
        raise UsageError(f"--label '{labels}': the same name twice; each box needs its own")
    return names


def gather_boxes(dirs: list[str], labels=None) -> list[Evidence]:
    """The boxes the dirs describe (``results.load`` reads each; a corrupt file is an error naming
    it). Every dir with a sweep table is one box; any other dir joins the box whose hosts it shares,
    else the box before it on the command line (the first box for dirs before any sweep). Each box
    is named by ``labels`` (``--label``, in order), else by its sweep's ``import --label``, else by
    its sweep dir's base name."""
    names_given = parse_labels(labels)
    loaded = [(d, results.load(d)) for d in dirs]
    boxes: list[Evidence] = []
    owner = {}
    for i, (d, r) in enumerate(loaded):
        if "sweep" in r.tables:
            ev = Evidence()
            _absorb(ev, r, d)
            boxes.append(ev)
            owner[i] = ev
    if not boxes:
        boxes.append(Evidence())
    for i, (d, r) in enumerate(loaded):
        if i in owner:
            continue
        hosts = _hosts_of(r)
        match = [b for b in boxes if hosts and hosts & set(b.sweep_meta.get("hosts", []) if b.sweep_meta else [])]
        if match:
            box = match[0]
        else:
            before = [owner[k] for k in sorted(owner) if k < i]
            box = before[-1] if before else boxes[0]
        if not _absorb(box, r, d):
            raise UsageError(f"results dir '{d}': holds no topo.json, health.json, sweep.csv, trace_summary.csv, p2p.csv, "
                             "moe_steps.csv, serve_levels.csv, nccl_comms.csv or nccl_inspector.csv")
    if len(names_given) > len(boxes):
        raise UsageError(f"--label: {len(names_given)} names for {len(boxes)} box(es) (every dir with a sweep is "
                         "one box)")
    names = []
    for k, b in enumerate(boxes):
        base = os.path.basename(os.path.normpath(b.sweep_dir or b.dirs[0])) if b.dirs else "box"
        base = names_given[k] if k < len(names_given) else (str((b.sweep_meta or {}).get("label") or "") or base)
        name = base
        k = 2
        while name in names:
            name, k = f"{base} ({k})", k + 1
        b.label = name
        names.append(name)
    return boxes


def gather(dirs: list[str], labels=None) -> Evidence:
    """The evidence of the dirs' first box; ``.boxes`` lists every box when there are several."""
    boxes = gather_boxes(dirs, labels)
    first = boxes[0]
    if len(boxes) > 1:
        first.boxes = boxes
    return first


def unfinished_lines(ev) -> list[str]:
    """Warn (stderr) about every dir whose run did not finish; returns the lines (``check.json``
    and the report carry them too)."""
    lines = [u for b in ev.all_boxes() for u in b.unfinished]
    for line in lines:
        print(f"commprof: warning: {line}", file=sys.stderr)
    return lines
