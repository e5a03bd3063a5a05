"""Wall time of the verbs that only read files (``import nccl-tests``, ``gap``, ``check`` on an
imported log), as a user runs them, beside the same runs with ``import torch`` first: what each
of them paid while ``runinfo`` imported torch only to record its version.

Both sides run the CLI in a fresh Python process (``python -c``: the plain side calls
``commprof.cli.main``; the other imports torch, then calls it), alternating which goes first in
each round, so drift on a shared machine falls on both. No target: it records the cost the
change removed. Writes results/bench/verb_startup.{json,md}.

    python scripts/bench_verb_startup.py [--rounds 8] [--out results/bench]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchfile import measured, write_result  # noqa: E402

from commprof.model.machine import now_iso  # noqa: E402

LOG = os.path.join(REPO, "tests", "data", "nccl-tests", "all_reduce_perf_8xA100.log")
VERBS = ("import", "gap", "check")
MAIN = "import sys; {pre}from commprof.cli import main; sys.argv = ['commprof', *sys.argv[1:]]; main()"


def _args(verb: str, work: str) -> list[str]:
    imp = os.path.join(work, "imp")
    return {"import": ["import", "nccl-tests", LOG, "--out", imp],
            "gap": ["gap", imp, "--out", os.path.join(work, "gap")],
            "check": ["check", imp, "--out", os.path.join(work, "chk")]}[verb]


def _run(verb: str, work: str, with_torch: bool) -> float:
    if verb == "import":
        shutil.rmtree(os.path.join(work, "imp"), ignore_errors=True)
    else:
        shutil.rmtree(os.path.join(work, "gap" if verb == "gap" else "chk"), ignore_errors=True)
    code = MAIN.format(pre="import torch; " if with_torch else "")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code, *_args(verb, work)], cwd=work, env=env,
                         capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if res.returncode not in (0, 8):        # check: 8 = a checklist item FAILed (the A100 log does)
        raise SystemExit(f"{verb}: exit {res.returncode}: {res.stderr.strip()[-500:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    a = ap.parse_args()
    start = now_iso()
    work = tempfile.mkdtemp(prefix="commprof-bench-startup-")
    raw = {v: {"plain_s": [], "torch_first_s": []} for v in VERBS}
    try:
        for r in range(a.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            for with_torch in order:
                for v in VERBS:           # import first: gap and check read its dir
                    raw[v]["torch_first_s" if with_torch else "plain_s"].append(_run(v, work, with_torch))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for v in VERBS:
        p, t = statistics.median(raw[v]["plain_s"]), statistics.median(raw[v]["torch_first_s"])
        rows.append({"verb": v, "plain_s_median": round(p, 3), "torch_first_s_median": round(t, 3),
                     "saved_s_median": round(t - p, 3),
                     "plain_s_min_max": [round(min(raw[v]["plain_s"]), 3), round(max(raw[v]["plain_s"]), 3)],
                     "torch_first_s_min_max": [round(min(raw[v]["torch_first_s"]), 3),
                                               round(max(raw[v]["torch_first_s"]), 3)]})
    result = {**measured(__file__, start, f"wall time of commprof import nccl-tests, gap and check (an 8x A100 "
                                         f"nccl-tests log) as a user runs them, with and without importing torch "
                                         f"first, {a.rounds} alternating rounds"),
              "rounds": a.rounds, "rows": rows, "raw": raw}
    table = ["| verb | without torch (median s, min-max) | torch imported first (median s, min-max) | saved (s) |",
             "|---|---|---|---|"]
    for r in rows:
        table.append(f"| {r['verb']} | {r['plain_s_median']:.2f} ({r['plain_s_min_max'][0]:.2f}-"
                     f"{r['plain_s_min_max'][1]:.2f}) | {r['torch_first_s_median']:.2f} "
                     f"({r['torch_first_s_min_max'][0]:.2f}-{r['torch_first_s_min_max'][1]:.2f}) | "
                     f"{r['saved_s_median']:.2f} |")
    write_result(a.out, "verb_startup", "Start-up of the file-reading verbs", result, table)


if __name__ == "__main__":
    main()
