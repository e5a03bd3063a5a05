"""Benchmark: commprof's back-to-back timing beside PARAM comms on the same machine, interleaved.

PARAM comms (facebookresearch/param, ``train/comms/pt/comms.py``) times a loop of back-to-back
collectives per size, as nccl-tests does; ``commprof sweep --timing back-to-back`` follows the same
method. Each round runs both, alternating which goes first, on gloo with two ranks, fp32
all_reduce at 4 KiB, 64 KiB and 1 MiB, ``--loop``/``--n`` calls per timed loop. PARAM is not a
dependency: pass a directory holding its source as the package ``param_bench`` (for example
``git archive`` of the repository extracted into DIR/param_bench); nothing of it is copied here.

    python scripts/bench_param_side_by_side.py --param DIR [--rounds 6] [--loop 50] [--out results/bench]

Writes param_side_by_side.json and .md: per round both p50s (PARAM: the p50 over ranks of each
rank's average per call; commprof: the p50 over loops of the slowest rank's average per call), the
ratio commprof / PARAM, and the median per size; the per-call (default) commprof figure of the
same round is listed beside them to show how far the two methods differ.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchfile import measured, write_result  # noqa: E402

SIZES = [4 << 10, 64 << 10, 1 << 20]


def param_run(param_dir: str, n: int, warmup: int) -> dict:
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    cmd = [torchrun, "--standalone", "--nproc-per-node", "2", "-m", "param_bench.train.comms.pt.comms", "--",
           "--backend", "gloo", "--device", "cpu", "--b", "4K", "--e", "1M", "--f", "16", "--n", str(n),
           "--w", str(warmup), "--collective", "all_reduce", "--data-type", "float32"]
    env = dict(os.environ, PYTHONPATH=param_dir)
    for attempt in range(2):            # torchrun's standalone rendezvous can lose a port race: once more
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=param_dir)
        if res.returncode == 0:
            break
    else:
        raise RuntimeError(f"PARAM comms failed twice (exit {res.returncode}): {res.stderr[-1500:]}")
    out = res.stdout
    got = {}
    for line in out.splitlines():
        m = re.match(r"\s*COMMS-RES-all_reduce-float32\s+(\d+)\s+\d+\s+([\d.]+)", line)
        if m:
            got[int(m.group(1))] = float(m.group(2))
    if set(got) != set(SIZES):
        raise RuntimeError(f"PARAM printed sizes {sorted(got)}, expected {SIZES}:\n{out[-2000:]}")
    return got


def commprof_run(timing: str, n: int, iters: int, warmup: int) -> dict:
    from commprof.results import load_frame

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "s")
        cmd = [sys.executable, "-m", "commprof", "sweep", "--tp", "2", "--ops", "all_reduce", "--backend", "gloo",
               "--dtype", "fp32", "--sizes", "4K,64K,1M", "--iters", str(iters), "--warmup", str(warmup),
               "--timing", timing, "--loop", str(n), "--out", out, "--no-charts"]
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=REPO)
        return {int(r.size_bytes): float(r.latency_us_p50) for r in load_frame(out).itertuples()}


def main():
    from commprof.runinfo import now_iso

    ap = argparse.ArgumentParser()
    ap.add_argument("--param", required=True, help="a directory holding PARAM's source as the package param_bench")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--loop", type=int, default=50)
    ap.add_argument("--iters", type=int, default=5, help="commprof back-to-back: timed loops per size")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    args = ap.parse_args()
    start = now_iso()
    rev = subprocess.run(["git", "-C", os.path.join(args.param, "param_bench"), "rev-parse", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    if not rev and os.path.exists(os.path.join(args.param, "COMMIT")):      # an exported tree: its commit noted beside it
        with open(os.path.join(args.param, "COMMIT")) as f:
            rev = f.read().strip()
    rounds = []
    for r in range(args.rounds):
        order = ("commprof", "param") if r % 2 == 0 else ("param", "commprof")
        got = {}
        for which in order:
            got[which] = commprof_run("back-to-back", args.loop, args.iters, args.warmup) if which == "commprof" \
                else param_run(args.param, args.loop, args.warmup)
        got["per_call"] = commprof_run("per-call", args.loop, 40, args.warmup)
        rounds.append({"round": r, "first": order[0], **{k: {str(s): v for s, v in d.items()} for k, d in got.items()}})
        print(f"round {r}: " + ", ".join(f"{s >> 10}K b2b {got['commprof'][s]:.0f} / PARAM {got['param'][s]:.0f} "
                                          f"(per-call {got['per_call'][s]:.0f})" for s in SIZES), flush=True)
    table = ["| size | commprof back-to-back p50 us | PARAM p50 us | ratio (median, min-max) | commprof per-call p50 us |",
             "|---|---|---|---|---|"]
    summary = []
    for s in SIZES:
        b2b = np.array([x["commprof"][str(s)] for x in rounds])
        par = np.array([x["param"][str(s)] for x in rounds])
        pc = np.array([x["per_call"][str(s)] for x in rounds])
        ratio = b2b / par
        summary.append({"size_bytes": s, "commprof_b2b_p50_us": float(np.median(b2b)), "param_p50_us": float(np.median(par)),
                        "ratio_median": float(np.median(ratio)), "ratio_min": float(ratio.min()),
                        "ratio_max": float(ratio.max()), "commprof_per_call_p50_us": float(np.median(pc))})
        table.append(f"| {s >> 10} KiB | {np.median(b2b):.0f} | {np.median(par):.0f} | **{np.median(ratio):.2f}** "
                     f"({ratio.min():.2f}-{ratio.max():.2f}) | {np.median(pc):.0f} |")
    res = measured(__file__, start, f"commprof sweep --timing back-to-back --loop {args.loop} beside PARAM comms "
                                   f"(facebookresearch/param {rev[:12] or '?'}, --n {args.loop}) on gloo, 2 ranks, fp32 "
                                   f"all_reduce, {args.rounds} alternating rounds; commprof per-call listed beside")
    met = all(0.67 <= x["ratio_median"] <= 1.5 for x in summary)
    res.update(param_commit=rev, rounds=rounds, summary=summary, met=bool(met),
               target="the two back-to-back methods agree within 1.5x at every size (median over rounds)")
    write_result(args.out, "param_side_by_side", "commprof back-to-back vs PARAM comms", res, table)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
