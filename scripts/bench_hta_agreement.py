"""Benchmark: commprof's Kineto import beside Holistic Trace Analysis (HTA) on the same real traces.

HTA (facebookresearch/HolisticTraceAnalysis) is not a dependency: it needs jupyterlab. Give the
Python of an environment where it is installed (``pip install HolisticTraceAnalysis``); this script
asks HTA, in that interpreter, for its GPU kernel breakdown (COMMUNICATION / COMPUTATION time per
rank, ``include_last_profiler_step=True``) and its communication/computation overlap, and puts
commprof's ``kineto_ranks`` figures for the same files beside them:

    python scripts/bench_hta_agreement.py [--hta-python /path/to/hta-venv/bin/python] \\
        [--traces DIR] [--out results/bench]

Without ``--hta-python`` it uses ``.venv-hta`` (made by ``bash scripts/hta_venv.sh`` when missing).

The traces are HTA's own test data (``tests/data`` of the HTA repository: ``trace_filter`` ranks
0 and 1, ``df_index_resolver``, ``nccl_parser_config/nccl_data``), looked for in ``--traces`` with
``/`` written as ``__``. Writes hta_agreement.json and .md. Target: kernel time within 1% of HTA's,
or above it by less than 1 us per kernel (HTA keeps whole microseconds), and the overlap within one
percentage point.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))

from benchfile import measured, write_result
from helpers import SHARED_DATA       # HTA's traces lie beside the checkout (never committed)

SETS = {
    "trace_filter (2 ranks)": ["trace_filter__sampled_rank-0.json.gz", "trace_filter__sampled_rank-1.json.gz"],
    "df_index_resolver": ["df_index_resolver__df_index_resolver.json.gz"],
    "nccl_data": ["nccl_parser_config__nccl_data.json.gz"],
}

# Run inside the HTA interpreter: argv[1] is a dir holding the traces; prints JSON.
_HTA = r"""
import json, sys, warnings
import hta
from hta.trace_analysis import TraceAnalysis
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    a = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
    _, per_kernel = a.get_gpu_kernel_breakdown(visualize=False)
    overlap = a.get_comm_comp_overlap(visualize=False)
col = next(c for c in per_kernel.columns if c.startswith("sum"))
scale = 1e3 if "(ns)" in col else 1.0
sums = per_kernel.groupby(["rank", "kernel_type"])[col].sum() / scale
out = {"version": getattr(hta, "__version__", "?"), "ranks": {}}
for (rank, kind), v in sums.items():
    out["ranks"].setdefault(str(int(rank)), {})[kind] = float(v)
for _, row in overlap.iterrows():
    out["ranks"].setdefault(str(int(row["rank"])), {})["overlap_pct"] = float(row.iloc[-1])
print(json.dumps(out))
"""


def hta_figures(python: str, files: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as d:
        for f in files:
            shutil.copy(f, os.path.join(d, os.path.basename(f)))
        res = subprocess.run([python, "-c", _HTA, d], capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        raise RuntimeError(f"HTA failed: {res.stderr[-1500:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def hta_venv_python() -> str:
    """The python of ``.venv-hta`` (``scripts/hta_venv.sh`` makes it when missing; it prints the path)."""
    res = subprocess.run(["bash", os.path.join(REPO, "scripts", "hta_venv.sh")], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"bench_hta_agreement: scripts/hta_venv.sh failed: {res.stderr.strip()[-300:]}")
    return res.stdout.strip().splitlines()[-1]


def main():
    from commprof.ingest.kinetoread import read_file
    from commprof.ingest.kinetosteps import attribute_steps
    from commprof.model.machine import now_iso

    ap = argparse.ArgumentParser()
    ap.add_argument("--hta-python", help="python of an environment with HolisticTraceAnalysis "
                                         "(default: .venv-hta, made by scripts/hta_venv.sh)")
    ap.add_argument("--traces", default=os.path.join(SHARED_DATA, "kineto"),
                    help="the folder of HTA's test traces (default: the one beside the checkout, helpers.SHARED_DATA)")
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    args = ap.parse_args()
    args.hta_python = args.hta_python or hta_venv_python()
    start = now_iso()
    rows, table, met, version = [], [
        "| traces | rank | communication us: commprof / HTA (diff) | computation us: commprof / HTA (diff) | "
        "overlap %: commprof / HTA |", "|---|---|---|---|---|"], True, "?"
    for name, names in SETS.items():
        files = [os.path.join(args.traces, n) for n in names]
        missing = [f for f in files if not os.path.exists(f)]
        if missing:
            raise SystemExit(f"bench_hta_agreement: {missing[0]}: not found (see --traces)")
        theirs = hta_figures(args.hta_python, files)
        version = theirs["version"]
        mine = attribute_steps([rt for f in files for rt in read_file(f)])["ranks"]
        for row in mine:
            h = theirs["ranks"][str(row["rank"])]
            cells = []
            for kind, us, n in (("COMMUNICATION", row["comm_kernel_us"], row["comm_kernels"]),
                                ("COMPUTATION", row["compute_kernel_us"], row["compute_kernels"])):
                ref = h.get(kind, 0.0)
                ok = abs(us - ref) <= 0.01 * ref or 0 <= us - ref < n
                met &= ok
                cells.append(f"{us:,.0f} / {ref:,.0f} ({100 * (us - ref) / ref:+.2f}%)" if ref else f"{us:,.0f} / 0")
            ok = abs(row["hta_overlap_pct"] - h.get("overlap_pct", float("nan"))) <= 1.0
            met &= ok
            rows.append({"traces": name, "rank": row["rank"], "commprof": {k: row[k] for k in (
                "comm_kernel_us", "compute_kernel_us", "comm_kernels", "compute_kernels", "hta_overlap_pct")},
                "hta": h})
            table.append(f"| {name} | {row['rank']} | {cells[0]} | {cells[1]} | "
                         f"{row['hta_overlap_pct']:.2f} / {h.get('overlap_pct', float('nan')):.2f} |")
    res = measured(__file__, start, f"commprof import kineto's per-rank kernel time and overlap beside "
                                   f"HolisticTraceAnalysis {version} on HTA's own test traces")
    res.update(hta_version=version, rows=rows, met=bool(met),
               target="kernel time within 1% of HTA's or above it by < 1 us per kernel; overlap within 1 point")
    write_result(args.out, "hta_agreement", "commprof vs HTA on real Kineto traces", res, table)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
