"""Validation: does ``commprof trace --predict`` land near a live trace? (CPU, gloo, TP=2)

Each round runs, back to back: a gloo sweep at the model's decode sizes, a live gloo TP=2 trace,
and a prediction from that round's sweep (compute measured on one process with TP=2 shard
shapes). Errors are relative: (predicted - live) / live, for ms/token and communication share.

    python scripts/validate_predict.py [--rounds 5] [--bound 15] [--retries 1] [--out results/bench]

Writes predict_validation.json/.md with the machine. Target: |median error| <= 15% (--bound) for
both. The machine is usually shared and noisy, so when a set of rounds misses, up to --retries
further sets run; the last set is judged. Prints one PASS/FAIL line and exits 1 on a miss, so CI
can run it as the benchmark check (this bound is not asserted in the test suite: it is timed).
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


ERRORS = ("error_ms_per_token_pct", "error_comm_share_pct")


def run_set(rounds: int, tokens: int, iters: int) -> list[dict]:
    """``rounds`` rounds of :func:`validate_once`, each in a fresh temporary dir."""
    out = []
    for _ in range(rounds):
        work = tempfile.mkdtemp(prefix="commprof-validate-")
        try:
            out.append(validate_once(work, tokens, iters))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return out


def median_errors(rounds: list[dict]) -> dict:
    df = pd.DataFrame(rounds)
    return {k: float(df[k].median()) for k in ERRORS}


def within(med: dict, bound_pct: float) -> bool:
    return all(abs(v) <= bound_pct for v in med.values())


def main() -> int:
    from commprof.model.machine import now_iso

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--bound", type=float, default=15.0,
                    help="allowed |median error| in percent, for ms/token and communication share")
    ap.add_argument("--retries", type=int, default=1,
                    help="further sets of --rounds when a set misses the bound (shared, noisy machines)")
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    args = ap.parse_args()
    start = now_iso()
    sets = []
    for _ in range(1 + max(0, args.retries)):
        rounds = run_set(args.rounds, args.tokens, args.iters)
        med = median_errors(rounds)
        sets.append({"rounds": rounds, "median_errors_pct": med, "met": within(med, args.bound)})
        if sets[-1]["met"]:
            break
    rounds, med, met = sets[-1]["rounds"], sets[-1]["median_errors_pct"], sets[-1]["met"]
    result = {
        **measured(__file__, start, "prediction vs live trace: gloo TP=2 on CPU, toy-dense-1024 synthetic shape "
                                    "(tests/data/toy-dense-config.json), batch 1, context 512; each round: sweep, live trace, "
                                    "prediction from that sweep"),
        "rounds": rounds, "median_errors_pct": med,
        "target": f"|error| <= {args.bound:g}% for ms/token and communication share (median over rounds)",
        "bound_pct": args.bound, "met": met,
        # every set that ran, the judged (last) one included: a miss followed by a pass stays visible
        "sets": [{"median_errors_pct": s_["median_errors_pct"], "met": s_["met"]} for s_ in sets],
    }
    table = ["| round | live ms/token | predicted | error | live comm share | predicted | error |",
             "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rounds):
        table.append(f"| {i + 1} | {r['live_ms_per_token']:.2f} | {r['predicted_ms_per_token']:.2f} | "
                     f"{r['error_ms_per_token_pct']:+.1f}% | {r['live_comm_share_pct']:.1f}% | "
                     f"{r['predicted_comm_share_pct']:.1f}% | {r['error_comm_share_pct']:+.1f}% |")
    table.append(f"| median | | | {med['error_ms_per_token_pct']:+.1f}% | | | {med['error_comm_share_pct']:+.1f}% |")
    for i, s_ in enumerate(sets[:-1]):
        m = s_["median_errors_pct"]
        table += ["", f"Set {i + 1} of {len(sets)} missed the bound (median errors "
                      f"{m['error_ms_per_token_pct']:+.1f}% ms/token, {m['error_comm_share_pct']:+.1f}% "
                      f"communication share); the table is set {len(sets)}."]
    write_result(args.out, "predict_validation", "Prediction vs live trace", result, table)
    verdict = (f"predict validation: {'PASS' if met else 'FAIL'}: median error {med['error_ms_per_token_pct']:+.1f}% "
               f"ms/token, {med['error_comm_share_pct']:+.1f}% communication share (bound +/-{args.bound:g}%, "
               f"{len(sets)} set(s) of {args.rounds} rounds); results in {args.out}")
    print(verdict, file=sys.stdout if met else sys.stderr)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
