"""Benchmark: wall time of one ``commprof predict`` call, before and after a change, interleaved.

    python scripts/bench_predict_wall.py --before DIR [--runs N] [--out results/bench]

Runs ``python -m commprof.cli predict --gpu rtx5090 --comm reference:pcie5-nop2p --tp 2,4,8 --json``
N times against each tree (``--before``: a checkout of the old code; after: this repository),
alternating before/after so that load on the machine hits both alike (hyperfine-style interleaving),
each with a fresh empty $HOME; and times the model evaluation alone in this process
(:func:`commprof.analysis.predictmodel.predict_table`, median of 20). Writes predict_wall.json/.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchfile import measured, write_result  # noqa: E402

ARGS = ["predict", "--gpu", "rtx5090", "--comm", "reference:pcie5-nop2p", "--tp", "2,4,8", "--json"]


def one(tree: str) -> float:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HOME": home, "PYTHONPATH": tree}
        env.pop("COMMPROF_CACHE_DIR", None)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "commprof.cli", *ARGS], env=env, cwd=home, check=True,
                       stdout=subprocess.DEVNULL)
        return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    a = ap.parse_args()
    from commprof.model.machine import now_iso

    start = now_iso()
    before, after = [], []
    for _ in range(a.runs):
        before.append(one(a.before))
        after.append(one(REPO))
    from commprof.analysis.predictmodel import predict_table

    evals = []
    for _ in range(20):
        t0 = time.perf_counter()
        predict_table("Qwen2.5-32B", ["rtx5090"], ["reference:pcie5-nop2p"], [2, 4, 8], [1, 8, 32])
        evals.append(time.perf_counter() - t0)
    res = {**measured(__file__, start, "wall time of one commprof predict call (fresh $HOME each run), before "
                                      "and after, interleaved; and the model evaluation alone"),
           "kind": "measured", "command": ["commprof", *ARGS], "runs": a.runs,
           "before_s": [round(x, 3) for x in before], "after_s": [round(x, 3) for x in after],
           "before_median_s": round(statistics.median(before), 3), "after_median_s": round(statistics.median(after), 3),
           "model_eval_median_ms": round(statistics.median(evals) * 1e3, 2)}
    lines = [f"Command: `commprof {' '.join(ARGS)}`, {a.runs} runs each, before/after interleaved, a fresh empty "
             "$HOME per run.", "",
             "| tree | median s | runs s |", "|---|---|---|",
             f"| before | {res['before_median_s']} | {', '.join(map(str, res['before_s']))} |",
             f"| after | {res['after_median_s']} | {', '.join(map(str, res['after_s']))} |", "",
             f"Model evaluation alone (predict_table, 9 rows, median of 20): {res['model_eval_median_ms']} ms."]
    write_result(a.out, "predict_wall", "commprof predict wall time, before and after", res, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
