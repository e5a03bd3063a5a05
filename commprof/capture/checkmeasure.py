"""What ``commprof check`` measures when it is given no results dir: the topology, a decode-size
sweep and a short scaled trace (each the CLI in a subprocess, so one failing step keeps the others'
dirs), and the pinned host-to-GPU copy bandwidth (``hostbw.json``). The verb judges what lands in
the dirs (:mod:`commprof.verbs.check`).
"""
from __future__ import annotations

import os
import subprocess
import sys

from commprof import results
from commprof.capture import launch
from commprof.capture.nvmltopo import try_collect_topology
from commprof.model.errors import CommprofError
from commprof.model.fileio import write_json
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


def measure(root: str, model: str) -> list[str]:
    """Run what the checklist needs on this machine: topology, a decode-size sweep, a short
    scaled trace, host-GPU bandwidth. Each step is the CLI in a subprocess; returns the dirs."""
    results.check_out_dir(root, resume=False)
    os.makedirs(root, exist_ok=True)
    gpus = launch.cuda_device_count()
    tps = [t for t in (2, 4, 8) if t <= gpus] if gpus >= 2 else [2, 4, 8]
    sweep_dir, trace_dir = os.path.join(root, "sweep"), os.path.join(root, "trace")
    for args in (["sweep", "--tp", ",".join(map(str, tps)), "--model", model, "--out", sweep_dir],
                 ["trace", "--model", model, "--tp", str(max(tps)), "--batch", "1", "--tokens", "8",
                  "--layers", "2", "--out", trace_dir]):
        print(f"commprof check: running commprof {' '.join(args)}", file=sys.stderr)
        res = subprocess.run([sys.executable, "-m", "commprof", *args, "--no-charts"])
        if res.returncode not in (0, 1):
            raise CommprofError(f"check: 'commprof {args[0]}' failed (exit {res.returncode}); "
                                f"partial results kept in {root}", res.returncode)
    topo = try_collect_topology()
    if topo is not None:
        write_topology(topo, os.path.join(sweep_dir, "topo.json"))
    bw = measure_host_bw()
    if bw is not None:
        write_json(os.path.join(sweep_dir, "hostbw.json"), bw)
    return [sweep_dir, trace_dir]
