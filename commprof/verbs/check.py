"""``commprof check``: the pre-purchase checklist, in the buyer's acceptance order.

Every item reads evidence from results dirs (``topo.json``, ``sweep.csv``, ``trace_summary.csv``,
``hostbw.json``) and gives PASS / WARN / FAIL / SKIP with the measured value, the threshold, the
threshold's source (or "proposed") and a hint. Thresholds live in a versioned TOML file
(``commprof/data/thresholds.toml``) that ``--thresholds FILE`` overrides key by key.

Dirs describe boxes: every dir holding a sweep (measured, imported or a reference profile) is one
box; a dir without one (trace, topo, p2p, hostbw) joins the box whose hosts it shares, else the box
before it on the command line (:mod:`commprof.analysis.evidence`). Each box is judged by its own interconnect
(:func:`commprof.analysis.interconnect.resolve_interconnect`):
the ``--interconnect`` flag, else its ``topo.json`` (NVML, or ``nvidia-smi topo`` text imported), else
the GPU names its logs carry; unknown stays unknown (its link items SKIP and say what would decide).

The items are :mod:`commprof.analysis.checkitems`, the thresholds :mod:`commprof.analysis.thresholds`; this module
wires them: flags -> evidence (or, with no dir, a measuring run: :func:`measure`) -> items ->
``check.json`` + ``check.md`` -> the table.
"""
from __future__ import annotations

from commprof.model.registry import CheckConfig  # noqa: F401 - the flags, declared once

import os
import sys
from dataclasses import dataclass, field

from commprof import results
from commprof.analysis.checkitems import run_items
from commprof.model.errors import EXIT_CHECK_FAILED, EXIT_INSUFFICIENT_EVIDENCE, CommprofError, UsageError
from commprof.analysis.evidence import Evidence, gather, unfinished_lines
from commprof.model.fileio import all_or_none, write_atomic, write_json
from commprof.analysis.interconnect import parse_interconnect, resolve_interconnect
from commprof.analysis.verdict import INSUFFICIENT, Item, headline, scope, verdict
from commprof.results.meta import check_writable, shown_path
from commprof.analysis.thresholds import load_thresholds
from commprof.views.check import markdown, render
from commprof.model.machine import now_iso
from commprof.capture.nvmltopo import try_collect_topology
from commprof.results.topo import write_topology


def write_check(items: list[Item], th: dict, ev: Evidence, out_dir: str, could_not=()) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    boxes = ev.all_boxes()
    per_box = []
    for b in boxes:
        mine = [i for i in items if i.box in ("", b.label)] if len(boxes) > 1 else items
        ic = b.interconnect or resolve_interconnect(b)
        per_box.append({"box": b.label, "dirs": [shown_path(d) for d in b.dirs],
                        "interconnect": ic.to_dict(), "interconnect_evidence": ic.evidence or "none",
                        "verdict": verdict(mine), "headline": headline(mine), "scope": scope(mine),
                        "items": [i.to_dict() for i in mine]})
    data = {"kind": "checklist", "created": now_iso(), "thresholds_version": th.get("version"),
            "evidence_dirs": [shown_path(d) for b in boxes for d in b.dirs],
            "items": [i.to_dict() for i in items], "verdict": verdict(items), "headline": headline(items),
            "scope": scope(items), "could_not": list(could_not), "boxes": per_box,
            "unfinished_dirs": [u for b in boxes for u in b.unfinished]}
    if len(boxes) == 1:
        data["interconnect"] = per_box[0]["interconnect"]
    jp = os.path.join(out_dir, "check.json")
    mp = os.path.join(out_dir, "check.md")
    with all_or_none(jp, mp, os.path.join(out_dir, results.META_JSON)):
        write_json(jp, data)
        metas = [m for b in boxes for m in b.metas]
        results.stamp(out_dir, results.provenance(
            "check", "checklist", "pre-purchase checklist over results dirs (commprof check)", status="complete",
            hosts=sorted({h for d in metas for h in d.get("hosts", [])}) or None,
            gpus=sorted({g for d in metas for g in d.get("gpus", [])}) or None,
            evidence_dirs=data["evidence_dirs"], verdict=data["verdict"],
            boxes=[{"box": p["box"], "verdict": p["verdict"], "interconnect": p["interconnect"]["cls"],
                    "interconnect_evidence": p["interconnect_evidence"]} for p in per_box]))
        write_atomic(mp, markdown(items, data))
    return [jp, mp]


# --- measuring what the checklist needs -------------------------------------------------------------

def measure_host_bw(size_bytes: int = 256 << 20, repeats: int = 5) -> dict | None:
    """Pinned host-to-device and device-to-host copy bandwidth of every GPU, one at a time
    (GB/s, best of ``repeats``, CUDA events). None without CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    out = {"kind": "measured", "what": "pinned H2D/D2H copy bandwidth, one GPU at a time, best of "
           f"{repeats} copies of {size_bytes >> 20} MiB", "gpus": []}
    host = torch.empty(size_bytes, dtype=torch.uint8, pin_memory=True)
    for i in range(torch.cuda.device_count()):
        dev = torch.empty(size_bytes, dtype=torch.uint8, device=f"cuda:{i}")
        res = {}
        for name, dst, src in (("h2d_gbps", dev, host), ("d2h_gbps", host, dev)):
            best = 0.0
            with torch.cuda.device(i):
                for _ in range(repeats):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    dst.copy_(src, non_blocking=True)
                    b.record()
                    b.synchronize()
                    best = max(best, size_bytes / (a.elapsed_time(b) * 1e-3) / 1e9)
            res[name] = best
        out["gpus"].append({"index": i, **res})
        del dev
    out["h2d_gbps_min"] = min(g["h2d_gbps"] for g in out["gpus"])
    out["d2h_gbps_min"] = min(g["d2h_gbps"] for g in out["gpus"])
    return out


CPU_DEFAULT_BUDGET_S = 20.0      # check with no dirs on a machine without GPUs: seconds, not minutes
GPU_DEFAULT_BUDGET_S = 900.0
GLOO_SWEEP_MIN_S = 60.0          # a CPU (gloo) sweep and trace start only with this much budget given
MIN_STEP_S = 5.0                 # a step with less budget left than this is not started


def _gpu_count(doc: dict) -> int:
    """GPUs in a health sample (NVML's answer; 0 without a driver)."""
    samples = doc.get("samples") or []
    return len(samples[0].get("gpus") or []) if samples else 0


def _run_within(argv: list[str], seconds: float) -> int | None:
    """Run ``argv`` in its own process group; past ``seconds`` stop the whole group (the step and
    the ranks it started: SIGTERM, then SIGKILL) and return None; else its exit code."""
    import signal
    import subprocess

    p = subprocess.Popen(argv, start_new_session=True)
    try:
        return p.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        return None


def measure(root: str, model: str, budget_s: float | None = None) -> tuple[list[str], list[str]]:
    """Run what the checklist needs on this machine within ``budget_s`` seconds: the GPUs' health,
    topology, a decode-size sweep, a short scaled trace, host-GPU bandwidth. Each step is the CLI in a
    subprocess, stopped when the budget runs out. On a machine without GPUs the default budget is
    seconds and no CPU sweep runs (one judges no GPU item); ``--budget`` of a minute or more runs a
    small gloo sweep and trace anyway. Returns (the dirs, one line per step not run and why)."""
    import time

    from commprof.capture.nvmlhealth import sample_once
    from commprof.results.health import write_health

    t0 = time.monotonic()
    results.check_out_dir(root, resume=False)
    os.makedirs(root, exist_ok=True)
    health = sample_once()
    gpus = _gpu_count(health)
    budget = budget_s if budget_s is not None else GPU_DEFAULT_BUDGET_S if gpus else CPU_DEFAULT_BUDGET_S
    could_not: list[str] = []
    hdir = os.path.join(root, "health")
    write_health(health, hdir)
    results.stamp(hdir, results.provenance("check", "measured", "the GPUs' health before the checklist's run "
                                           "(NVML)", status="complete"))
    dirs = [hdir]
    sweep_dir, trace_dir = os.path.join(root, "sweep"), os.path.join(root, "trace")
    steps = []
    if gpus >= 2:
        tps = [t for t in (2, 4, 8) if t <= gpus]
        steps = [("sweep", ["sweep", "--tp", ",".join(map(str, tps)), "--model", model, "--out", sweep_dir], sweep_dir),
                 ("trace", ["trace", "--model", model, "--tp", str(max(tps)), "--batch", "1", "--tokens", "8",
                            "--layers", "2", "--out", trace_dir], trace_dir)]
    elif gpus == 1:
        could_not.append("sweep and trace: one GPU: no communication to measure (TP=1); the interconnect items "
                         "need a box of two or more GPUs")
    elif budget >= GLOO_SWEEP_MIN_S:
        could_not.append("every GPU item: no NVIDIA GPU/driver on this machine: a small sweep and trace run on CPU "
                         "ranks (gloo) show the pipeline, not a GPU box")
        steps = [("sweep", ["sweep", "--tp", "2", "--backend", "gloo", "--sizes", "4K,64K", "--iters", "8",
                            "--warmup", "1", "--out", sweep_dir], sweep_dir),
                 ("trace", ["trace", "--tp", "2", "--backend", "gloo", "--batch", "1", "--layers", "1", "--context",
                            "64", "--tokens", "4", "--warmup", "1", "--model", model, "--out", trace_dir], trace_dir)]
    else:
        could_not.append(f"sweep, trace, topology, host-GPU bandwidth and GPU health: no NVIDIA GPU/driver on this "
                         f"machine ({health.get('not_judged') or 'NVML did not start'}); a sweep on CPU ranks judges "
                         f"no GPU item and takes minutes, so none ran within the {budget:g} s budget (run check on "
                         "the GPU box, pass the box's results dirs or nccl-tests logs imported, or give --budget 120 "
                         "to run a small CPU sweep anyway)")
    for name, args, d in steps:
        left = budget - (time.monotonic() - t0)
        if left < MIN_STEP_S:
            could_not.append(f"{name}: not started: the {budget:g} s budget was spent")
            continue
        print(f"commprof check: running commprof {' '.join(args)} ({left:.0f} s of the budget left)", file=sys.stderr)
        rc = _run_within([sys.executable, "-m", "commprof", *args, "--no-charts"], left)
        if rc is None:
            could_not.append(f"{name}: stopped when the {budget:g} s budget ran out (its partial results kept)")
        if rc not in (0, 1, None):
            raise CommprofError(f"check: 'commprof {args[0]}' failed (exit {rc}); partial results kept in {root}", rc)
        if os.path.isdir(d) and os.path.exists(os.path.join(d, results.META_JSON)):
            dirs.append(d)
    if gpus:
        topo = try_collect_topology()
        if topo is not None and os.path.isdir(sweep_dir):
            write_topology(topo, os.path.join(sweep_dir, "topo.json"))
        bw = measure_host_bw()
        if bw is not None and os.path.isdir(sweep_dir):
            write_json(os.path.join(sweep_dir, "hostbw.json"), bw)
    return dirs, could_not


def run(cfg: CheckConfig, console=None) -> int:
    """``commprof check``: the exit code (EXIT_CHECK_FAILED on any FAIL, of any box). Where
    check.json goes (``out``, else the first dir) is checked writable before anything is read;
    with no dir, what the checklist needs is measured on this machine first (:func:`measure`)."""
    # its own dir (never into an input dir): --out, else a new results/runs/<stamp>-<host>-check/
    target = cfg.out or results.default_out_dir().rstrip("/") + "-check"
    try:
        check_writable(target)
    except UsageError as e:
        raise UsageError(f"{'--out' if cfg.out else 'the default check dir (pass --out DIR)'}: {e}") from None
    dirs, out, model = list(cfg.dirs), target, cfg.model
    th = load_thresholds(cfg.thresholds)
    flags = parse_interconnect(cfg.interconnect)
    if cfg.budget_s is not None and not (cfg.budget_s > 0 and cfg.budget_s == cfg.budget_s):
        raise UsageError(f"--budget {cfg.budget_s:g}: give the measuring run's time in seconds (> 0)")
    could_not: list[str] = []
    if not dirs:
        root = out or results.default_out_dir().rstrip("/") + "-check"
        dirs, could_not = measure(root, model or "Qwen2.5-32B", cfg.budget_s)
        out = root
    ev = gather(dirs)
    items = run_items(ev, th, model, flags)
    render(items, console, boxes=[(b.label, b.interconnect) for b in ev.all_boxes()])
    for b in ev.all_boxes():
        for note in b.notes:
            print(f"commprof: note: {note}", file=sys.stderr)
    partial = unfinished_lines(ev)
    for line in could_not:
        print(f"commprof check: could not: {line}", file=sys.stderr)
    for p in write_check(items, th, ev, out or dirs[0], could_not):
        print(f"wrote {p}")
    v = verdict(items)
    if v == INSUFFICIENT:
        for i in items:
            if i.status == "INSUFFICIENT":
                print(f"commprof check: INSUFFICIENT EVIDENCE{f' for box {i.box!r}' if i.box else ''}: {i.value}; "
                      f"{i.hint}", file=sys.stderr)
    if partial and v not in ("FAIL", INSUFFICIENT):
        print("commprof: error: the checklist judged an unfinished run's partial figures; it is no pass "
              "(finish the run, e.g. sweep --resume, and check again)", file=sys.stderr)
        return EXIT_CHECK_FAILED
    return EXIT_CHECK_FAILED if v == "FAIL" else EXIT_INSUFFICIENT_EVIDENCE if v == INSUFFICIENT else 0
