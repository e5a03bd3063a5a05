"""What a set of results dirs says about the boxes they describe: :class:`Evidence` per box.

Every dir holding a sweep (measured, imported or a reference profile) is one box; a dir without one
(trace, topo, p2p, hostbw, moe, serve) joins the box whose hosts it shares, else the box before it
on the command line. The engine's own account (an ``import nccl-debug`` or ``nccl-inspector`` dir)
joins the box its label names, else the box whose hostname and GPU count its log agrees with, and
is a box of its own where the log contradicts the box it would join. ``check``, ``gap`` and ``report`` read their dirs through :func:`gather_boxes`.
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
        if ev.inspector_dir is not None:
            ev.notes.append(f"'{shown_path(d)}' replaces '{shown_path(ev.inspector_dir)}' as this box's NCCL Inspector "
                            "records (one dir per box: import all of a box's files together)")
        ev.inspector, ev.inspector_dir, found = r.tables["nccl_inspector"], d, True
    if "nccl_comms" in r.tables:
        if ev.nccl_debug is not None:
            ev.notes.append(f"'{shown_path(d)}' replaces '{shown_path(ev.nccl_debug.path)}' as this box's NCCL_DEBUG "
                            "account (one dir per box: import all of a box's logs together)")
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


#: the tables of a dir that holds the engine's own account of a box, and the import that wrote it
ENGINE_TABLES = (("nccl_comms", "nccl-debug"), ("nccl_inspector", "nccl-inspector"))


def engine_kind(r) -> str | None:
    """``nccl-debug`` or ``nccl-inspector`` for a dir holding the engine's own account (and no
    sweep), else None."""
    if "sweep" in r.tables:
        return None
    return next((kind for table, kind in ENGINE_TABLES if table in r.tables), None)


def _short(host: str) -> str:
    """A hostname as NCCL prints it (cut at the first '.'), lower-case: how hosts are compared."""
    return str(host).split(".")[0].lower()


def _box_hosts(b: Evidence) -> set:
    return {_short(h) for r in b.loaded for h in _hosts_of(r)}


def _box_gpus(b: Evidence) -> int | None:
    """The box's GPU count where its topo.json says (NVML or nvidia-smi topo: every GPU of it)."""
    n = (b.topo or {}).get("gpu_count")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def _engine_identity(r) -> tuple[list, dict]:
    """The hosts an engine-account dir was printed on (most lines first) and the GPUs it names per
    host: its ``box_identity`` (recorded by the import), else its meta's hosts."""
    bi = r.meta.get("box_identity") or {}
    hosts = [str(h) for h in (bi.get("hosts") or r.meta.get("hosts") or []) if h and str(h) not in ("n/a", "?")]
    gpus = {str(h): n for h, n in (bi.get("gpus_per_host") or {}).items() if isinstance(n, int) and n > 0}
    return hosts, gpus


def _contradiction(b: Evidence, name: str, hosts: list, gpus: dict) -> str | None:
    """Why an engine account printed on ``hosts`` (``gpus`` per host) cannot be box ``b``: its
    hosts are known and none is the box's, or a host of it used more GPUs than the box has; None
    when nothing contradicts it."""
    mine = _box_hosts(b)
    if hosts and mine and not {_short(h) for h in hosts} & mine:
        return f"host {', '.join(hosts[:3])} is not the box of {name} (host {', '.join(sorted(mine)[:3])})"
    n = _box_gpus(b)
    over = [(h, k) for h, k in gpus.items() if n is not None and k > n]
    if over:
        h, k = over[0]
        return f"host {h} used {k} GPUs, more than the {n} of the box of {name} (its topo.json)"
    return None


def _box_name(k: int, b: Evidence, names_given: list) -> str:
    """A box's name before de-duplication: ``--label``, the name it was given (an engine account's
    own box), its sweep's ``import --label``, else its sweep dir's (first dir's) base name."""
    if k < len(names_given):
        return names_given[k]
    if b.label:
        return b.label
    given = str((b.sweep_meta or {}).get("label") or "")
    return given or (os.path.basename(os.path.normpath(b.sweep_dir or b.dirs[0])) if b.dirs else "box")


def _own_box(d: str, r, name: str, why: str, hint: str = "") -> Evidence:
    ev = Evidence()
    ev.label = name
    ev.notes.append(f"{engine_kind(r)} dir '{shown_path(d)}': {why}: judged as its own box{hint}")
    return ev


def _place_engine_dir(i: int, d: str, r, boxes: list, owner: dict, names_given: list) -> Evidence:
    """The box an engine-account dir (``import nccl-debug``/``nccl-inspector``) belongs to: the one
    its ``--label`` names, else one whose hosts it shares (and whose GPU count does not contradict
    it), else the box before it on the command line when nothing contradicts that, else a box of
    its own, named by its label or its hostname (appended to ``boxes``)."""
    hosts, gpus = _engine_identity(r)
    names = {id(b): _box_name(k, b, names_given) for k, b in enumerate(boxes)}
    label = str(r.meta.get("label") or "")
    if label:
        match = [b for b in boxes if names[id(b)] == label]
        if match:
            return match[0]
        empty = next((b for b in boxes if not b.loaded), None)
        if empty is not None:             # no dir before it: the box is the one it names
            empty.label = label
            return empty
        own = _own_box(d, r, label, f"labelled '{label}', which names no box here "
                       f"({', '.join(repr(n) for n in names.values() if n != 'box') or 'none'})")
        boxes.append(own)
        return own
    short = {_short(h) for h in hosts}
    match = [b for b in boxes if short & _box_hosts(b) and _contradiction(b, names[id(b)], hosts, gpus) is None]
    if match:
        return match[0]
    before = [owner[k] for k in sorted(owner) if k < i]
    box = before[-1] if before else boxes[0]
    why = _contradiction(box, names[id(box)], hosts, gpus) if box.loaded else None
    if why is None:
        return box
    own = _own_box(d, r, hosts[0] if hosts else os.path.basename(os.path.normpath(d)),
                   why, " (if it is that box, give both imports the same --label)")
    boxes.append(own)
    return own


def gather_boxes(dirs: list[str], labels=None) -> list[Evidence]:
    """The boxes the dirs describe (``results.load`` reads each; a corrupt file is an error naming
    it). Every dir with a sweep table is one box; any other dir joins the box whose hosts it shares,
    else the box before it on the command line (the first box for dirs before any sweep). A dir of
    the engine's own account (``import nccl-debug``/``nccl-inspector``) is placed last, by
    :func:`_place_engine_dir`: by its label, its hostname and GPU count, and never into a box its
    log contradicts (it is then a box of its own, with a note saying so). Each box is named by
    ``labels`` (``--label``, in order), else by its sweep's ``import --label``, else by its sweep
    dir's base name (an engine account's own box: by its label or hostname)."""
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
    engine = []
    for i, (d, r) in enumerate(loaded):
        if i in owner:
            continue
        if engine_kind(r) is not None:
            engine.append((i, d, r))
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
    for i, d, r in engine:
        _absorb(_place_engine_dir(i, d, r, boxes, owner, names_given), r, d)
    if len(names_given) > len(boxes):
        raise UsageError(f"--label: {len(names_given)} names for {len(boxes)} box(es) (every dir with a sweep is "
                         "one box)")
    names = []
    for k, b in enumerate(boxes):
        base = _box_name(k, b, names_given)
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
