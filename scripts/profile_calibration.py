"""Modelled vs imported: every reference profile against every real log of its class in the corpus.

For each box of tests/data/nccl-tests/corpus.toml and each reference profile of its class and link
generation (pcie4-p2p / pcie4-nop2p, pcie5-*, nvlink3/4/5; a profile at the box's TP degree, eager:
every corpus log is nccl-tests without CUDA graphs), per size band: the profile's modelled latency
over the log's out-of-place average (model / real; below 1 the profile is faster than the real
box), median, smallest and largest over the band's sizes. The box's class is the corpus's (P2P
known from the source): a profile of the other P2P class is listed too, marked, since a log alone
cannot tell P2P. Nothing is measured here.

    python scripts/profile_calibration.py [--out results/bench]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tomllib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
CORPUS = os.path.join(REPO, "tests", "data", "nccl-tests")
sys.path.insert(0, os.path.join(REPO, "tests"))
from helpers import corpus_log  # noqa: E402  (a log out of a repository snapshot lies beside the checkout)
NAME = "profile_calibration"


def _median(v):
    v = sorted(v)
    m = len(v) // 2
    return v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2


def rows() -> list[dict]:
    from commprof.analysis.costmodel import CALIBRATION_BANDS, profile_latency_us
    from commprof.analysis.expect import _profiles
    from commprof.analysis.profiles import PROFILES
    from scripts.healthy_boxes import _log_rows

    with open(os.path.join(CORPUS, "corpus.toml"), "rb") as f:
        boxes = tomllib.load(f)["box"]
    out = []
    for b in boxes:
        pts = [(s, t) for s, t, _ in _log_rows(corpus_log(b["file"]))]
        own = set(_profiles(b["class"], b["link"]))
        for name in _profiles("pcie" if b["class"].startswith("pcie") else b["class"], b["link"]):
            prof = PROFILES[name]
            if not any(q["op"] == "all_reduce" and q["tp"] == b["tp"] and q["mode"] == "eager" for q in prof["params"]):
                out.append({"profile": name, "box": b["name"], "file": b["file"], "source": b["source"], "tp": b["tp"],
                            "own_class": name in own, "bands": [],
                            "unmatched": f"no {name} all_reduce entry at TP={b['tp']}"})
                continue
            row = {"profile": name, "box": b["name"], "file": b["file"], "source": b["source"], "tp": b["tp"],
                   "own_class": name in own, "bands": []}
            for band, lo, hi in CALIBRATION_BANDS:
                r = [profile_latency_us(name, "all_reduce", b["tp"], s, "eager") / t for s, t in pts if lo <= s <= hi]
                if r:
                    row["bands"].append({"band": band, "sizes": len(r), "median_ratio": round(_median(r), 3),
                                         "min_ratio": round(min(r), 3), "max_ratio": round(max(r), 3)})
            out.append(row)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    args = ap.parse_args()
    from commprof.model.machine import now_iso

    data = {"kind": "modelled vs imported", "what": __doc__.split("\n\n")[1].replace("\n", " "),
            "command": "python scripts/profile_calibration.py" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else ""),
            "created": now_iso(), "rows": rows()}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{NAME}.json"), "w") as f:
        json.dump(data, f, indent=2)
    lines = ["# Reference profiles against the real logs of their class (modelled vs imported)", "",
             data["what"], "", f"Command: `{data['command']}`; {data['created']}.", "",
             "| profile | real log (TP) | class | <= 64 KiB | 128 KiB - 2 MiB | >= 64 MiB |", "|---|---|---|---|---|---|"]
    for r in data["rows"]:
        if r.get("unmatched"):
            continue
        cells = []
        for band in ("<= 64 KiB", "128 KiB - 2 MiB", ">= 64 MiB"):
            b = next((x for x in r["bands"] if x["band"] == band), None)
            cells.append("-" if b is None else f"{b['median_ratio']:.2f} ({b['min_ratio']:.2f}-{b['max_ratio']:.2f})")
        lines.append(f"| {r['profile']} | {r['box']} ({r['tp']}) | {'own' if r['own_class'] else 'other P2P class'} | "
                     + " | ".join(cells) + " |")
    lines += ["", "Median model / real over the band's sizes (smallest-largest in brackets); below 1 the profile "
              "is faster (optimistic) than the real box, above 1 slower."]
    miss = [r for r in data["rows"] if r.get("unmatched")]
    if miss:
        lines += ["", "Not compared (the profile has no entry at the log's TP degree): " + "; ".join(
            f"{r['box']} (TP={r['tp']}): {r['unmatched']}" for r in miss) + "."]
    with open(os.path.join(args.out, f"{NAME}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
