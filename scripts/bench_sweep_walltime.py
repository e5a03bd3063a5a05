"""Benchmark: wall time of the default ``commprof sweep --tp 2,4,8``, start-up included.

    python scripts/bench_sweep_walltime.py [--repeats 2] [--out results/bench]

Runs the CLI as a user would (a fresh process each time, ranks spawned, charts drawn) and keeps
the last run's results dir as ``results/sweep-default-<host>/``. Writes sweep_walltime.json/.md
with the machine. Target: under 120 s on a 2-core CPU machine.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchfile import measured, write_result  # noqa: E402


def main():
    from commprof.model.machine import now_iso

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    args = ap.parse_args()
    keep = os.path.join(REPO, "results", f"sweep-default-{socket.gethostname()}")
    runs = []
    start = now_iso()
    for i in range(args.repeats):
        out = keep if i == args.repeats - 1 else os.path.join(REPO, "results", f".walltime-tmp-{i}")
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "commprof", "sweep", "--tp", "2,4,8", "--out", out]
        t0 = time.perf_counter()
        res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if res.returncode != 0:
            sys.exit(f"sweep failed (exit {res.returncode}): {res.stderr.strip().splitlines()[-1:]}")
        runs.append({"wall_s": round(wall, 2), "results_dir": os.path.relpath(out, REPO)})
        if out != keep:
            shutil.rmtree(out, ignore_errors=True)
    result = {
        **measured(__file__, start, "wall time of the default `commprof sweep --tp 2,4,8` (gloo on CPU; 8 ranks spawned; "
                                    "24 cells; charts drawn), process start to exit"),
        "runs": runs, "target": "under 120 s, start-up included",
        "met": all(r["wall_s"] < 120 for r in runs),
    }
    table = ["| run | wall time (s) | results |", "|---|---|---|"]
    table += [f"| {i + 1} | {r['wall_s']:.1f} | {r['results_dir']} |" for i, r in enumerate(runs)]
    write_result(args.out, "sweep_walltime", "Sweep wall time", result, table)


if __name__ == "__main__":
    main()
