"""Fuzz every parser commprof owns with 10,000 inputs each; write results/bench/fuzz.md and .json.

    python scripts/fuzz.py [--inputs 10000] [--seed 0] [--out results/bench]

The generators and the property are tests/fuzz_inputs.py's, the same ones tests/test_fuzz_parsers.py
runs under hypothesis with 200 examples: mutated real inputs (nccl-tests logs of real boxes, the -J
fixture, two real Kineto traces, a real imported results dir, the built-in models as config.json,
all under tests/data with their SOURCE notes) and inputs built from each format's grammar.
Input ``i`` of parser ``P`` comes from ``random.Random(f"{seed}:{P}:{i}")``, so
a crash listed in fuzz.json is reproduced by that seed alone.

Per parser: inputs, rejected (commprof's own one-line error), accepted (a result with no NaN,
infinite, negative or non-physical figure: bandwidths, times, link counts, NUMA nodes, token
counts and ports inside their bounds), crashes (any other exception, or a property broken).
Target: 0 crashes for every parser, so 0 accepted non-physical values.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import shutil
import sys
import tempfile
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchfile import measured, write_result  # noqa: E402


def fuzz_one(name: str, gen, check, inputs: int, seed: int, tmp: str) -> dict:
    """Run one parser on ``inputs`` generated inputs; count outcomes, keep the first crash of each kind."""
    counts = {"accepted": 0, "rejected": 0, "crashes": 0}
    crashes: dict[str, dict] = {}
    t0 = time.perf_counter()
    for i in range(inputs):
        case = gen(random.Random(f"{seed}:{name}:{i}"))
        try:
            with contextlib.redirect_stderr(io.StringIO()):         # warnings of legal but odd inputs
                counts[check(case, tmp)] += 1
        except Exception as e:  # noqa: BLE001 - every other exception is what this script counts
            counts["crashes"] += 1
            where = traceback.extract_tb(e.__traceback__)[-1]
            kind = f"{type(e).__name__} at {os.path.basename(where.filename)}:{where.lineno}"
            crashes.setdefault(kind, {"kind": kind, "count": 0, "first_input_index": i,
                                      "message": str(e)[:300], "input": repr(case)[:600]})["count"] += 1
    return {"parser": name, "inputs": inputs, **counts, "seconds": round(time.perf_counter() - t0, 1),
            "crash_kinds": list(crashes.values())}


def main():
    import fuzz_inputs as F

    from commprof.model.machine import now_iso

    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs", type=int, default=10000, help="inputs per parser")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    ap.add_argument("--targets", default="", help="comma list of parser names: run only these (a part)")
    ap.add_argument("--part", default="", help="write the part's runs to OUT/fuzz-part-<PART>.json only")
    ap.add_argument("--merge", nargs="*", default=None, help="part files to merge into fuzz.md/fuzz.json")
    args = ap.parse_args()
    start = now_iso()
    if args.merge is not None:          # parts run side by side (one process each), then merged here
        import json

        parts = [json.load(open(p, encoding="utf-8")) for p in args.merge]
        by = {r["parser"]: r for part in parts for r in part["parsers"]}
        runs = [by[n] for n in F.TARGETS if n in by]
        missing = [n for n in F.TARGETS if n not in by]
        if missing:
            sys.exit(f"fuzz.py --merge: no part holds {', '.join(missing)}")
        start = min(part["start"] for part in parts)
        return _write(args, F, start, runs, REPO, parts=len(parts))
    wanted = [t.strip() for t in args.targets.split(",") if t.strip()]
    tmp = tempfile.mkdtemp(prefix="commprof-fuzz-")
    try:
        runs = []
        for name, (what, gen, check) in F.TARGETS.items():
            if wanted and name not in wanted:
                continue
            r = fuzz_one(name, gen, check, args.inputs, args.seed, tmp)
            r["what"] = what
            runs.append(r)
            print(f"{name}: {r['inputs']} inputs, {r['rejected']} rejected, {r['accepted']} accepted, "
                  f"{r['crashes']} crashes ({r['seconds']} s)", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.part:
        import json

        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"fuzz-part-{args.part}.json"), "w", encoding="utf-8") as f:
            json.dump({"start": start, "seed": args.seed, "inputs_per_parser": args.inputs, "parsers": runs}, f)
        return None
    return _write(args, F, start, runs, REPO)


def _write(args, F, start, runs, REPO, parts: int = 1):
    seeds = ([os.path.relpath(p, REPO) for p in F.real_log_paths()]
             + ["tests/data/nccl-tests/all_reduce_perf_8xA100_v3.json", "tests/data/toy-dense-config.json",
                *F.KINETO_REAL,
                "tests/data/nccl-tests/all_reduce_perf_8xA100.log imported as a results dir",
                "the built-in models of commprof/model/models.py written as config.json"])
    result = {
        **measured(__file__, start, f"{args.inputs:,} generated inputs per parser (seed {args.seed}): mutated real "
                                    "inputs and inputs built from each format's grammar "
                                    "(tests/fuzz_inputs.py). Rejected = commprof's own one-line error "
                                    "(exit 2); accepted = a result with no NaN, infinite, negative or "
                                    "non-physical figure; crash = any other exception or a broken property"),
        "seed": args.seed, "inputs_per_parser": args.inputs, "real_inputs_mutated": seeds, "parsers": runs,
        "target": "0 crashes for every parser", "met": all(r["crashes"] == 0 for r in runs),
    }
    table = ["| parser | parses | inputs | rejected | accepted | crashes | time (s) |", "|---|---|---:|---:|---:|---:|---:|"]
    table += [f"| `{r['parser']}` | {r['what']} | {r['inputs']:,} | {r['rejected']:,} | {r['accepted']:,} | "
              f"{r['crashes']} | {r['seconds']:.1f} |" for r in runs]
    table += ["", "Real inputs mutated: " + ", ".join(f"`{s}`" for s in seeds) + ".",
              "", "`servermetrics (serve)`: a server's `/metrics` text is never an error; \"rejected\" there "
              "counts the inputs from which a level's queue columns came back empty (not reported)."]
    if parts > 1:
        table += ["", f"Run as {parts} processes side by side (`--targets`/`--part`, then `--merge`): the times "
                      "of one part include the others' load."]
    write_result(args.out, "fuzz", "Parser fuzzing", result, table)
    if not result["met"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
