"""Validation: does ``commprof trace --predict`` land near a live trace? (CPU, gloo, TP=2)

Each round runs, back to back: a gloo sweep at the model's decode sizes, a live gloo TP=2 trace,
and a prediction from that round's sweep (compute measured on one process with TP=2 shard
shapes). Errors are relative: (predicted - live) / live, for ms/token and communication share.

    python scripts/validate_predict.py [--rounds 5] [--out results/bench]

Writes predict_validation.json/.md with the machine. Target: |error| <= 15% for both.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import pandas as pd

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchfile import measured, write_result  # noqa: E402

MODEL = os.path.join(REPO, "tests", "data", "toy-dense-config.json")


def cli(*args):
    res = subprocess.run([sys.executable, "-m", "commprof", *args], cwd=REPO, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"commprof {' '.join(args[:1])} failed: {res.stderr.strip().splitlines()[-1:]}")


def validate_once(work: str, tokens: int, iters: int, model: str = MODEL, context: int = 512) -> dict:
    a, b, c = (os.path.join(work, n) for n in ("sweep", "live", "pred"))
    common = ["--model", model, "--batch", "1"]
    cli("sweep", "--tp", "2", *common, "--iters", str(iters), "--out", a, "--no-charts")
    cli("trace", "--tp", "2", *common, "--context", str(context), "--tokens", str(tokens), "--out", b, "--no-charts")
    cli("trace", "--predict", "--comm-from", a, "--tp", "2", *common, "--context", str(context),
        "--tokens", str(tokens), "--out", c, "--no-charts")
    live = pd.read_csv(os.path.join(b, "trace_summary.csv")).iloc[0]
    pred = pd.read_csv(os.path.join(c, "trace_summary.csv")).iloc[0]
    return {
        "live_ms_per_token": float(live.ms_per_token), "predicted_ms_per_token": float(pred.ms_per_token),
        "live_comm_share_pct": float(live.comm_share_pct), "predicted_comm_share_pct": float(pred.comm_share_pct),
        "error_ms_per_token_pct": 100 * (pred.ms_per_token - live.ms_per_token) / live.ms_per_token,
        "error_comm_share_pct": 100 * (pred.comm_share_pct - live.comm_share_pct) / live.comm_share_pct,
        "live_compute_ms": float(live.compute_ms), "predicted_compute_ms": float(pred.compute_ms),
    }


def main():
    from commprof.runinfo import now_iso

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    args = ap.parse_args()
    start = now_iso()
    rounds = []
    for _ in range(args.rounds):
        work = tempfile.mkdtemp(prefix="commprof-validate-")
        try:
            rounds.append(validate_once(work, args.tokens, args.iters))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    df = pd.DataFrame(rounds)
    med = {k: float(df[k].median()) for k in ("error_ms_per_token_pct", "error_comm_share_pct")}
    result = {
        **measured(__file__, start, "prediction vs live trace: gloo TP=2 on CPU, toy-dense-1024 synthetic shape "
                                    "(tests/data/toy-dense-config.json), batch 1, context 512; each round: sweep, live trace, "
                                    "prediction from that sweep"),
        "rounds": rounds, "median_errors_pct": med,
        "target": "|error| <= 15% for ms/token and communication share (median over rounds)",
        "met": all(abs(v) <= 15 for v in med.values()),
    }
    table = ["| round | live ms/token | predicted | error | live comm share | predicted | error |",
             "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rounds):
        table.append(f"| {i + 1} | {r['live_ms_per_token']:.2f} | {r['predicted_ms_per_token']:.2f} | "
                     f"{r['error_ms_per_token_pct']:+.1f}% | {r['live_comm_share_pct']:.1f}% | "
                     f"{r['predicted_comm_share_pct']:.1f}% | {r['error_comm_share_pct']:+.1f}% |")
    table.append(f"| median | | | {med['error_ms_per_token_pct']:+.1f}% | | | {med['error_comm_share_pct']:+.1f}% |")
    write_result(args.out, "predict_validation", "Prediction vs live trace", result, table)


if __name__ == "__main__":
    main()
