"""Benchmark: ``commprof predict --mode piecewise`` against published piecewise vs full CUDA graph A/B runs.

    python scripts/bench_piecewise_ab.py [--out results/bench]

Each row of ``tests/data/published-decode/piecewise-ab.csv`` is one model on one box run twice by vLLM's V1
engine, with piecewise CUDA graphs and with full decode graphs, nothing else changed. The model prices both
(:func:`commprof.analysis.predictmodel.predict_point`, ``--ep`` through
:func:`commprof.analysis.predictmoe.apply_ep`) and is judged on the difference, the part ``--mode piecewise``
adds: the attention op's launches outside a graph and the host's own time per layer. The ``sets`` row is the
one ``piecewise_layer_us`` comes from; the ``check`` rows judge. Writes piecewise_ab.json/.md.
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchfile import measured, write_result  # noqa: E402

CORPUS = os.path.join(REPO, "tests", "data", "published-decode")
#: A check row is within its band when the modelled difference is within this share of the measured one.
WITHIN = 0.25


def load_pairs(path: str = os.path.join(CORPUS, "piecewise-ab.csv")) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        for k in ("tp", "ep", "batch", "context"):
            r[k] = int(r[k])
        for k in ("piecewise_ms", "full_ms"):
            r[k] = float(r[k])
    return rows


def _model(name: str):
    from commprof.model.models import get_model, load_config

    return load_config(os.path.join(CORPUS, name)) if name.endswith(".json") else get_model(name)


def legacy_path(vllm: str) -> bool:
    """Whether a pair's vLLM ran the unfused DeepSeek path of 0.7-0.10.1 (the row's ``vllm``: a version such as
    0.9 or 0.23.0, or ``main of YYYY-MM``, main before 2025-09 being that era; 0.10.2 fused the routing,
    vllm-project/vllm#23274)."""
    words = vllm.split()
    if words[:2] == ["main", "of"] and len(words) > 2:
        return words[2][:7] < "2025-09"
    parts = [int(x) for x in words[0].split(".")[:3] if x.isdigit()]
    return tuple(parts + [0] * (3 - len(parts))) < (0, 10, 2)


def price(r: dict, cal: dict | None = None) -> dict:
    """The pair's two steps as the model prices them (ms per token); a pair of vLLM >= 0.10.2 without the
    0.7-0.10.1 DeepSeek path's kernels (computemodel.PIECEWISE_PATH_KERNELS: a pair run by a later vLLM forced
    into PIECEWISE graphs runs the fused routing that version ships)."""
    from commprof.analysis.commsource import comm_source
    from commprof.analysis.computemodel import PIECEWISE_PATH_KERNELS
    from commprof.analysis.predictmodel import default_comm, predict_point
    from commprof.analysis.predictmoe import apply_ep
    from commprof.model.gpus import get_gpu

    if not legacy_path(r["vllm"]):
        cal = {**(cal or {}), **{k: 0.0 for k in PIECEWISE_PATH_KERNELS}}
    model, gpu = _model(r["model"]), get_gpu(r["gpu"])
    comm = comm_source(default_comm(gpu)[0])
    out = {}
    for mode in ("piecewise", "graph"):
        row = predict_point(model, gpu, comm, r["tp"], r["batch"], r["context"], mode=mode, weights=r["weights"], cal=cal)
        if r["ep"] > 1:
            row = apply_ep(row, model, gpu, comm, r["ep"], r["batch"], r["context"], mode=mode, cal=cal,
                           weights=r["weights"])
        out[mode] = row["ms_per_token"]
    return {"piecewise_ms": out["piecewise"], "full_ms": out["graph"], "diff_ms": out["piecewise"] - out["graph"],
            "comm": comm.label}


def judge(pairs: list[dict], cal: dict | None = None) -> tuple[list[dict], dict]:
    rows = []
    for r in pairs:
        p = price(r, cal)
        d_meas = r["piecewise_ms"] - r["full_ms"]
        rows.append({"id": r["id"], "role": r["role"], "model": r["model"], "gpu": r["gpu"], "tp": r["tp"], "ep": r["ep"],
                     "batch": r["batch"], "vllm": r["vllm"], "measured_piecewise_ms": r["piecewise_ms"],
                     "measured_full_ms": r["full_ms"], "measured_diff_ms": d_meas,
                     "predicted_piecewise_ms": p["piecewise_ms"], "predicted_full_ms": p["full_ms"],
                     "predicted_diff_ms": p["diff_ms"], "diff_ratio": p["diff_ms"] / d_meas,
                     "within": abs(p["diff_ms"] / d_meas - 1.0) <= WITHIN, "comm": p["comm"],
                     "source_url": r["source_url"], "where": r["where"], "note": r["note"]})
    checks = [x for x in rows if x["role"] == "check"]
    summary = {"checks": len(checks), "checks_within": sum(x["within"] for x in checks),
               "median_diff_ratio": statistics.median(x["diff_ratio"] for x in checks),
               "sets": [x["id"] for x in rows if x["role"] == "sets"]}
    return rows, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    a = ap.parse_args()
    from commprof.analysis.computemodel import CALIBRATION
    from commprof.model.machine import now_iso

    start = now_iso()
    rows, summary = judge(load_pairs())
    res = {**measured(__file__, start, "commprof predict --mode piecewise against published A/B runs of vLLM's V1 engine "
                      "with piecewise and with full decode CUDA graphs (tests/data/published-decode/piecewise-ab.csv): "
                      "the measured times are the pages', the predicted ones modelled, at the committed calibration"),
           "calibration": {k: CALIBRATION[k] for k in ("piecewise_layer_us", "piecewise_attn_kernels",
                                                       "piecewise_mla_attn_kernels", "eager_gap_us", "floor_us",
                                                       "step_overhead_us")},
           "rows": rows, "summary": summary,
           "target": f"every check row's modelled piecewise - full difference within {WITHIN:.0%} of the measured one",
           "met": summary["checks_within"] == summary["checks"]}
    table = ["| pair | role | vLLM | measured piecewise / full ms (diff) | predicted piecewise / full ms (diff) | "
             "diff predicted / measured | source |", "|---|---|---|---|---|---|---|"]
    for x in rows:
        table.append(f"| {x['id']} | {x['role']} | {x['vllm']} | {x['measured_piecewise_ms']:.2f} / {x['measured_full_ms']:.2f} "
                     f"({x['measured_diff_ms']:+.2f}) | {x['predicted_piecewise_ms']:.2f} / {x['predicted_full_ms']:.2f} "
                     f"({x['predicted_diff_ms']:+.2f}) | {x['diff_ratio']:.2f} | {x['source_url']} ({x['where']}) |")
    table += ["", f"Check rows whose modelled difference is within {WITHIN:.0%} of the measured one: "
                  f"{summary['checks_within']} of {summary['checks']} (median modelled / measured difference "
                  f"{summary['median_diff_ratio']:.2f}). The `sets` row is the one `piecewise_layer_us` is set from, "
                  "not a check. Each row's assumptions (context, GPU, weights where the page is silent) are in its note "
                  "in the CSV. A pair run by vLLM >= 0.10.2 (or main from 2025-09) is priced without the 0.7-0.10.1 "
                  "DeepSeek path's own kernels (piecewise_path: an MLA model's unfused routing and shared-expert MLP), "
                  "which that version does not run in either mode."]
    write_result(a.out, "piecewise_ab", "commprof predict --mode piecewise vs published piecewise/full-graph A/B runs",
                 res, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
