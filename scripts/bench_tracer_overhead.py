"""Benchmark: the tracer's overhead. Traced vs untraced per-token latency of the same engine.

Two gloo ranks (TP=2) decode with the synthetic engine; rounds alternate traced (every segment
stamped) and untraced (only the token's start and end) blocks of tokens on the *same* engine, so
drift and noise fall on both alike. The statistic is the median token latency of each.

    python scripts/bench_tracer_overhead.py [--rounds 40] [--tokens 10] [--out results/bench]

Writes tracer_overhead.json/.md with the machine. Target: traced / untraced - 1 <= 3%.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchfile import measured, run_gloo_ranks, write_result  # noqa: E402

MODEL = os.path.join(REPO, "tests", "data", "toy-dense-config.json")


def rank_main(rank, world, args):
    import torch
    import torch.distributed as dist

    from commprof.model.models import get_model
    from microbench.decode_engine import DecodeEngine
    from microbench.trace_rank import run_tokens

    shape = get_model(args.model).to_dict()
    eng = DecodeEngine(torch, dist, shape, world, rank, 1, args.context, torch.bfloat16, torch.device("cpu"),
                       shape["layers"], group=dist.group.WORLD)
    samples = {"traced": [], "untraced": []}
    run_tokens(torch, eng, 0, 3, "eager")
    for rnd in range(args.rounds):
        order = ("traced", "untraced") if rnd % 2 == 0 else ("untraced", "traced")
        for m in order:
            lat, _, _ = run_tokens(torch, eng, args.tokens, 0, "eager", traced=(m == "traced"))
            samples[m].extend(lat.tolist())
    return samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--tokens", type=int, default=10)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    args = ap.parse_args()

    from commprof.model.machine import now_iso

    start = now_iso()
    samples = run_gloo_ranks(rank_main, 2, (args,))
    t, u = np.array(samples["traced"]), np.array(samples["untraced"])
    ratio = float(np.median(t) / np.median(u))
    result = {
        **measured(__file__, start, "tracer overhead: median per-token latency of the synthetic decode engine traced (every "
                                    "segment stamped) vs untraced, gloo TP=2 on CPU, toy-dense-1024 shape, context "
                                    f"{args.context}, alternating blocks of {args.tokens} tokens"),
        "traced_median_us": float(np.median(t)), "untraced_median_us": float(np.median(u)),
        "traced_mean_us": float(t.mean()), "untraced_mean_us": float(u.mean()),
        "overhead_pct": 100 * (ratio - 1), "tokens_each": int(t.size),
        "target": "overhead <= 3%", "met": ratio - 1 <= 0.03,
    }
    table = ["| | median ms/token | mean ms/token | tokens |", "|---|---|---|---|",
             f"| traced | {np.median(t) / 1e3:.3f} | {t.mean() / 1e3:.3f} | {t.size} |",
             f"| untraced | {np.median(u) / 1e3:.3f} | {u.mean() / 1e3:.3f} | {u.size} |",
             f"| overhead | {100 * (ratio - 1):+.2f}% | {100 * (t.mean() / u.mean() - 1):+.2f}% | |"]
    write_result(args.out, "tracer_overhead", "Tracer overhead", result, table)


if __name__ == "__main__":
    main()
