"""Benchmark: the whole CLI run against a bare torch.distributed loop, end to end.

Each round runs, in alternating order, (a) ``commprof sweep --tp 2 --ops all_reduce --backend gloo
--dtype D --sizes 4K,64K,1M --iters N`` as a user would (its own process, ranks spawned, heartbeat,
watchdog, results written) and (b) a bare loop in its own two processes: gloo, barrier, perf_counter,
all_reduce, perf_counter, the max over the two ranks per iteration, p50 over iterations. Both use
zero-filled buffers (an in-place sum of zeros stays zero) and one torch thread per rank, as commprof's
CPU ranks do. The ratio is commprof's p50 / the bare loop's p50 of the same round, size and dtype.

    python scripts/bench_cli_overhead.py [--rounds 8] [--iters 60] [--out results/bench]

Writes cli_overhead.json and cli_overhead.md (machine, command, per-round p50s, the median ratio
and its spread). Target: median ratio <= 1.05 at every size and dtype.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchfile import measured, run_gloo_ranks, write_result  # noqa: E402

SIZES = [4 << 10, 64 << 10, 1 << 20]
DTYPES = ("fp32", "bf16")


def bare_rank(rank, world, dtype: str, iters: int, warmup: int):
    import time

    import torch
    import torch.distributed as dist

    tdt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    g = dist.group.WORLD
    out = {}
    for size in SIZES:
        x = torch.zeros(size // (4 if dtype == "fp32" else 2), dtype=tdt)
        for _ in range(warmup):
            dist.barrier(group=g)
            dist.all_reduce(x, group=g)
        lat = torch.empty(iters, dtype=torch.float64)
        for i in range(iters):
            dist.barrier(group=g)
            t0 = time.perf_counter()
            dist.all_reduce(x, group=g)
            lat[i] = (time.perf_counter() - t0) * 1e6
        dist.all_reduce(lat, op=dist.ReduceOp.MAX, group=g)       # the slowest rank, per iteration
        out[size] = float(np.percentile(lat.numpy(), 50))
    return out


def cli_run(dtype: str, iters: int, warmup: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "s")
        cmd = [sys.executable, "-m", "commprof", "sweep", "--tp", "2", "--ops", "all_reduce", "--backend", "gloo",
               "--dtype", dtype, "--sizes", ",".join(f"{s >> 10}K" for s in SIZES), "--iters", str(iters),
               "--warmup", str(warmup), "--out", out, "--no-charts"]
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=REPO)
        from commprof.results import load_frame

        df = load_frame(out)
        return {int(r.size_bytes): float(r.latency_us_p50) for r in df.itertuples()}


def main():
    from commprof.runinfo import now_iso

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    args = ap.parse_args()
    start = now_iso()
    rounds = []
    for r in range(args.rounds):
        for dtype in DTYPES:
            first_cli = (r + DTYPES.index(dtype)) % 2 == 0
            got = {}
            for which in (("cli", "bare") if first_cli else ("bare", "cli")):
                got[which] = cli_run(dtype, args.iters, args.warmup) if which == "cli" else \
                    run_gloo_ranks(bare_rank, 2, (dtype, args.iters, args.warmup))
            rounds.append({"round": r, "dtype": dtype, "first": "cli" if first_cli else "bare",
                           "cli_p50_us": {str(k): v for k, v in got["cli"].items()},
                           "bare_p50_us": {str(k): v for k, v in got["bare"].items()}})
            print(f"round {r} {dtype}: " + ", ".join(
                f"{s >> 10}K {got['cli'][s] / got['bare'][s]:.2f}" for s in SIZES), flush=True)
    summary, table, met = [], ["| dtype | size | median ratio | p10 | p90 | min | max | CLI p50 us (median) | bare p50 us (median) |",
                               "|---|---|---|---|---|---|---|---|---|"], True
    for dtype in DTYPES:
        for s in SIZES:
            rs = [x for x in rounds if x["dtype"] == dtype]
            ratio = np.array([x["cli_p50_us"][str(s)] / x["bare_p50_us"][str(s)] for x in rs])
            cli = np.median([x["cli_p50_us"][str(s)] for x in rs])
            bare = np.median([x["bare_p50_us"][str(s)] for x in rs])
            med = float(np.median(ratio))
            met &= med <= 1.05
            summary.append({"dtype": dtype, "size_bytes": s, "median_ratio": med,
                            "p10": float(np.percentile(ratio, 10)), "p90": float(np.percentile(ratio, 90)),
                            "min": float(ratio.min()), "max": float(ratio.max()),
                            "cli_p50_us_median": float(cli), "bare_p50_us_median": float(bare)})
            table.append(f"| {dtype} | {s >> 10} KiB | **{med:.3f}** | {np.percentile(ratio, 10):.2f} | "
                         f"{np.percentile(ratio, 90):.2f} | {ratio.min():.2f} | {ratio.max():.2f} | {cli:.0f} | {bare:.0f} |")
    res = measured(__file__, start, f"commprof sweep (the whole CLI run, gloo tp=2, all_reduce) against a bare "
                                   f"barrier-aligned torch.distributed loop in its own processes, {args.rounds} "
                                   f"alternating rounds x {args.iters} iterations, fp32 and bf16")
    res.update(rounds=rounds, summary=summary, target="median ratio of p50s <= 1.05 at every size and dtype",
               met=bool(met))
    write_result(args.out, "cli_overhead", "CLI overhead, end to end", res, table)
    print(json.dumps({"met": bool(met)}))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
