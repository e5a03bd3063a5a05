"""Modelled: the time to first token's communication for one long prompt on reference boxes.

For a model at TP=N, the prefill of a P-token prompt in chunks of K tokens runs ceil(P / K) steps,
each with the decode step's 2L+2 collectives (2L+1 all-reduces of K x hidden, one logits
all-gather of the chunk's last token; ``commprof plan --phase prefill``). Each collective is priced
by a reference profile (``commprof/analysis/profiles.py``: alpha-beta, piecewise by NCCL protocol where a real log
shows the steps; every parameter with its source), in
eager mode (serving engines run prefill outside CUDA graphs), and nothing overlaps compute. Per
profile: the communication of the whole prompt in one step, at chunks of 512 and 2048 (common
``max_num_batched_tokens`` budgets), and the chunk size the box favours: the smallest power of two
within 5% of the least communication (with alpha-beta prices the least is the whole prompt: each
chunk pays every collective's fixed cost again).

    python scripts/ttft_comm_modelled.py [--model Gemma-3-27B] [--tp 8] [--prompt 4096]
        [--profiles pcie4-nop2p,pcie5-nop2p,pcie5-p2p,nvlink4] [--out results/bench]

Writes ``ttft_comm_modelled.json`` (everything, with provenance) and ``ttft_comm_modelled.md``
(the table). Nothing is measured: every figure is modelled.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

NAME = "ttft_comm_modelled"
CHUNKS_SHOWN = (512, 2048)


def model_rows(model_name: str, tp: int, prompt: int, profiles: list[str], dtype: str = "bf16") -> dict:
    from commprof.analysis.costmodel import profile_latency_us, profile_param
    from commprof.model.models import get_model
    from commprof.analysis.stepmodel import FAVOURED_WITHIN_PCT, favoured_chunk, prefill_comm_us, prefill_totals, step_collectives
    from commprof.analysis.profiles import get_profile

    model = get_model(model_name)
    sites = step_collectives(model, tp, prompt, 1, dtype)
    totals = prefill_totals(model, tp, prompt, prompt, 0, dtype)
    rows, params = [], {}
    for name in profiles:
        prof = get_profile(name)

        def price(op, size, name=name):
            return profile_latency_us(name, op, tp, size, "eager")

        fav = favoured_chunk(model, tp, prompt, price, dtype)
        row = {"profile": name, "title": prof["title"],
               "comm_ms_unchunked": prefill_comm_us(model, tp, prompt, prompt, price, dtype=dtype) / 1e3,
               "favoured_chunk": fav["favoured_chunk"], "favoured_comm_ms": fav["favoured_comm_us"] / 1e3,
               "least_chunk": fav["least_chunk"], "least_comm_ms": fav["least_comm_us"] / 1e3,
               "by_chunk": [{**r, "comm_ms": r["comm_us"] / 1e3} for r in fav["rows"]]}
        for k in CHUNKS_SHOWN:
            if k < prompt:
                row[f"comm_ms_chunk{k}"] = prefill_comm_us(model, tp, prompt, k, price, dtype=dtype) / 1e3
        rows.append(row)
        params[name] = {"title": prof["title"],
                        "calibrated_on": prof.get("calibrated_on", []),
                        "params": [profile_param(name, op, tp, "eager") for op in ("all_reduce", "all_gather")]}
    ar = next(s for s in sites if s.op == "all_reduce")
    ag = next(s for s in sites if s.op == "all_gather")
    return {"model": model.name, "model_source": model.source, "layers": model.layers, "hidden": model.hidden,
            "vocab": model.vocab, "tp": tp, "prompt": prompt, "dtype": dtype,
            "collectives_per_step": len(sites), "all_reduce_bytes": ar.size_bytes, "all_gather_bytes": ag.size_bytes,
            "prompt_totals": totals, "favoured_within_pct": FAVOURED_WITHIN_PCT, "rows": rows, "profiles": params}


def markdown(res: dict) -> list[str]:
    from commprof.model.units import human_bytes

    shown = [k for k in CHUNKS_SHOWN if k < res["prompt"]]
    head = (["profile", f"{res['prompt']:,} tokens in one step (ms)"] + [f"chunks of {k} (ms)" for k in shown]
            + ["favoured chunk (ms)"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in res["rows"]:
        cells = [r["profile"], f"{r['comm_ms_unchunked']:.1f}"] + [f"{r[f'comm_ms_chunk{k}']:.1f}" for k in shown]
        cells.append(f"{r['favoured_chunk']} ({r['favoured_comm_ms']:.1f})")
        lines.append("| " + " | ".join(cells) + " |")
    intro = (f"{res['model']} ({res['layers']} layers, hidden {res['hidden']}), TP={res['tp']}, {res['dtype']}, a "
             f"{res['prompt']:,}-token prompt: each step runs {res['collectives_per_step']} collectives (all-reduces "
             f"of chunk x hidden, {human_bytes(res['all_reduce_bytes'])} unchunked; one logits all-gather of the "
             f"chunk's last token, {human_bytes(res['all_gather_bytes'])}). Eager-mode prices from each reference "
             "profile; no overlap with compute. Favoured chunk: the smallest power of two (from 64) within "
             f"{res['favoured_within_pct']:g}% of the least communication, which alpha-beta prices put at the "
             "whole prompt.")
    return [intro, ""] + lines


def main(argv=None) -> int:
    from commprof.model.machine import machine, now_iso, versions

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="Gemma-3-27B")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=4096)
    ap.add_argument("--profiles", default="pcie4-nop2p,pcie5-nop2p,pcie5-p2p,nvlink4")
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    a = ap.parse_args(argv)
    start = now_iso()
    res = model_rows(a.model, a.tp, a.prompt, [p.strip() for p in a.profiles.split(",") if p.strip()])
    res = {"kind": "modelled",
           "what": ("communication of the time to first token: the collectives of one prompt's prefill priced by "
                    "reference profiles (alpha-beta, commprof/analysis/profiles.py), unchunked and chunked"),
           "command": "python " + " ".join([os.path.relpath(os.path.abspath(__file__), REPO)] + list(argv or sys.argv[1:])),
           "start_time": start, "end_time": now_iso(), "machine": machine(), "versions": versions(),
           "inputs": {"model": a.model, "tp": a.tp, "prompt": a.prompt, "profiles": a.profiles,
                      "mode": "eager", "statistic": "alpha + bytes / beta per collective (the profile's model)",
                      "logits": "one token per chunk step (the chunk's last), as vLLM computes it",
                      "overlap": "none: collectives do not overlap compute"},
           **res}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"{NAME}.json"), "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    cal = {n: p["calibrated_on"] for n, p in res["profiles"].items()}
    calib = "; ".join(f"{n}: {'calibrated on ' + str(len(c)) + ' real log(s)' if c else 'no real log (error unknown)'}"
                      for n, c in cal.items())
    lines = ["# TTFT communication, modelled (reference profiles, nothing measured)", "",
             *markdown(res), "",
             f"Profiles: {calib}. A 42 MiB all-reduce sits between the calibrated bands (<= 2 MiB, >= 64 MiB); "
             "where a profile follows LL / LL128 / Simple pieces fitted to a real log it is priced on the Simple "
             "piece. The error per band and profile is in docs/gap.md (results/bench/profile_calibration.md).", "",
             f"Command: `{res['command']}`; commprof {res['versions'].get('commprof', '?')}; {res['start_time']}. "
             f"Full figures (every chunk size, every profile parameter and its source): `{NAME}.json`."]
    with open(os.path.join(a.out, f"{NAME}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
