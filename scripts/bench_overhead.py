"""Benchmark: commprof's harness overhead against a bare barrier-aligned torch.distributed loop.

Two gloo ranks on this machine. For each size, commprof's own per-rank timing code
(``microbench.collective_bench.CellRunner.measure``, with the shared-memory heartbeat of a local
launch) and a bare loop (barrier, perf_counter, all_reduce, perf_counter) run interleaved: every
round runs both back to back, alternating which goes first, so drift and noise on a shared machine
fall on both alike. Each iteration's sample is the max across the two ranks for both methods.

    python scripts/bench_overhead.py [--rounds 150] [--iters 10] [--out results/bench]

Writes harness_overhead.json and harness_overhead.md (machine, command, per-size p50s, ratio).
Target: ratio of p50s <= 1.05 at every size.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchfile import measured, run_gloo_ranks, write_result  # noqa: E402

SIZES = [4 << 10, 64 << 10, 1 << 20]


def rank_main(rank, world, args, slots):
    import torch
    import torch.distributed as dist

    from commprof.model.collectives import COLLECTIVES
    from commprof.model.sweepconfig import Cell, SweepRunConfig
    from microbench.collective_bench import CellRunner
    from microbench.heartbeat import Heartbeat

    g = dist.group.WORLD
    cfg = SweepRunConfig(ops=["all_reduce"], tps=[world], points=[], iters=args.iters, warmup=args.warmup)
    runner = CellRunner(torch, dist, cfg, rank, torch.device("cpu"), Heartbeat(rank, slots), None)
    ranks = list(range(world))

    def bare(numel):
        x = torch.zeros(numel, dtype=torch.bfloat16)
        for _ in range(args.warmup):
            dist.barrier(group=g)
            dist.all_reduce(x, group=g)
        lat = np.empty(args.iters)
        for i in range(args.iters):
            dist.barrier(group=g)
            t0 = time.perf_counter()
            dist.all_reduce(x, group=g)
            t1 = time.perf_counter()
            lat[i] = (t1 - t0) * 1e6
        return lat

    def harness(size):
        lay = COLLECTIVES["all_reduce"].layout(size, world, 2)
        cell = Cell("all_reduce", world, lay.size_bytes, lay.in_numel, lay.out_numel, "eager", None, "")
        s = runner.measure(cell, ranks, g, g)
        lat, wrong = s.latency_us, s.wrong
        assert wrong == 0
        return lat

    samples = {(m, s): [] for m in ("commprof", "bare") for s in SIZES}
    for rnd in range(args.rounds):
        for size in SIZES:
            order = ("commprof", "bare") if rnd % 2 == 0 else ("bare", "commprof")
            for m in order:
                lat = harness(size) if m == "commprof" else bare(size // 2)
                t = torch.from_numpy(lat)
                dist.all_reduce(t, op=dist.ReduceOp.MAX, group=g)   # max across ranks per iteration
                samples[(m, size)].append(t.numpy().tolist())
    return {f"{m}|{s}": v for (m, s), v in samples.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=150)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    args = ap.parse_args()

    from commprof.model.machine import now_iso
    from microbench.heartbeat import SharedSlots

    start = now_iso()
    raw = run_gloo_ranks(rank_main, 2, (args,), extra=lambda ctx: SharedSlots(ctx, 2))
    rows = []
    for s in SIZES:
        c_rounds = raw[f"commprof|{s}"]
        b_rounds = raw[f"bare|{s}"]
        c_all, b_all = np.concatenate(c_rounds), np.concatenate(b_rounds)
        per_round = [np.percentile(c, 50) / np.percentile(b, 50) for c, b in zip(c_rounds, b_rounds)]
        rows.append({
            "size_bytes": s,
            "commprof_p50_us": float(np.percentile(c_all, 50)),
            "bare_p50_us": float(np.percentile(b_all, 50)),
            "ratio_p50": float(np.percentile(c_all, 50) / np.percentile(b_all, 50)),
            "ratio_median_of_rounds": float(np.median(per_round)),
            "ratio_rounds_p10": float(np.percentile(per_round, 10)),
            "ratio_rounds_p90": float(np.percentile(per_round, 90)),
            "samples_each": int(c_all.size),
        })
    result = {
        **measured(__file__, start, "harness overhead: commprof p50 all_reduce latency vs a bare barrier-aligned "
                                    "torch.distributed loop, gloo tp=2, bf16, interleaved rounds"),
        "rounds": args.rounds, "iters_per_round": args.iters, "warmup": args.warmup,
        "target": "ratio_p50 <= 1.05 at every size", "rows": rows,
        "met": all(r["ratio_p50"] <= 1.05 for r in rows),
    }
    table = ["| size | commprof p50 (us) | bare p50 (us) | ratio of p50s | per-round ratios: p10 / median / p90 "
             "| samples each |", "|---|---|---|---|---|---|"]
    for r in rows:
        table.append(f"| {r['size_bytes'] // 1024} KiB | {r['commprof_p50_us']:.1f} | {r['bare_p50_us']:.1f} | "
                     f"{r['ratio_p50']:.3f} | {r['ratio_rounds_p10']:.2f} / {r['ratio_median_of_rounds']:.2f} / "
                     f"{r['ratio_rounds_p90']:.2f} | {r['samples_each']} |")
    write_result(args.out, "harness_overhead", "Harness overhead", result, table)


if __name__ == "__main__":
    main()
