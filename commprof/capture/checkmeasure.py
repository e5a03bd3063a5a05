"""What ``commprof check`` measures when it is given no results dir: the topology, a decode-size
sweep and a short scaled trace (each the CLI in a subprocess, so one failing step keeps the others'
dirs), and the pinned host-to-GPU copy bandwidth (``hostbw.json``). The verb judges what lands in
the dirs (:mod:`commprof.verbs.check`).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from commprof import results
from commprof.capture.nvmlhealth import sample_once
from commprof.capture.nvmltopo import try_collect_topology
from commprof.model.errors import CommprofError
from commprof.model.fileio import write_json
from commprof.results.health import write_health
from commprof.results.topo import write_topology


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
