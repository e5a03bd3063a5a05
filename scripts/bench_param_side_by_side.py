"""Benchmark: commprof's back-to-back timing beside PARAM comms on the same machine, interleaved.

PARAM comms (facebookresearch/param, ``train/comms/pt/comms.py``) times a loop of back-to-back
collectives per size, as nccl-tests does; ``commprof sweep --timing back-to-back`` follows the same
method. Each round runs both, alternating which goes first, on gloo with two ranks, fp32
all_reduce at 4 KiB, 64 KiB and 1 MiB, ``--loop``/``--n`` calls per timed loop. PARAM is not a
dependency: pass a directory holding its source as the package ``param_bench`` (for example
``git archive`` of the repository extracted into DIR/param_bench); nothing of it is copied here.
PARAM's two ranks are started as plain processes of this session (see ``param_run`` for why not
under torchrun), with its default non-blocking mode.

    python scripts/bench_param_side_by_side.py --param DIR [--rounds 6] [--loop 50] [--cpus 0|all] [--out results/bench]

Both tools run on core 0 by default (``--cpus``; see ``benchfile.restrict_cpus`` for why).

Writes param_side_by_side.json and .md: per round both p50s (PARAM: the p50 over ranks of each
rank's average per call; commprof: the p50 over loops of the slowest rank's average per call), the
ratio commprof / PARAM, and the median per size; the per-call (default) commprof figure of the
same round is listed beside them to show how far the two methods differ, and so is a bare loop of
``async_op=True`` calls waited at the end (the gloo form of nccl-tests' enqueue-then-wait, what PARAM
does by default), to show what the calls cost with no tool around them.
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

from benchfile import measured, restrict_cpus, run_gloo_ranks, write_result  # noqa: E402

SIZES = [4 << 10, 64 << 10, 1 << 20]


def param_run(param_dir: str, n: int, warmup: int) -> dict:
    """PARAM comms' two ranks as plain processes of this session (RANK/WORLD_SIZE/MASTER_* in the
    environment, as PARAM reads them), not under torchrun: torchrun starts each worker in a session
    of its own, and with Linux's autogroup scheduling two ranks of different sessions that share a
    core hand over to each other slowly (measured here: a bare loop of 50 synchronous 4 KiB
    all_reduce calls, 0.25 ms per call in one session, 1.0 ms with each rank under ``setsid``), so
    the launcher, not the method, would decide the comparison. commprof's ranks share a session."""
    import socket

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    cmd = [sys.executable, "-m", "param_bench.train.comms.pt.comms", "--backend", "gloo", "--device", "cpu",
           "--b", "4K", "--e", "1M", "--f", "16", "--n", str(n), "--w", str(warmup), "--collective", "all_reduce",
           "--data-type", "float32", "--master-ip", "127.0.0.1", "--master-port", str(port)]
    env = dict(os.environ, PYTHONPATH=param_dir, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2",
               LOCAL_WORLD_SIZE="2", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=param_dir,
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r))) for r in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    out, err = outs[0]
    got = {}
    for line in out.splitlines():
        m = re.match(r"\s*COMMS-RES-all_reduce-float32\s+(\d+)\s+\d+\s+([\d.]+)", line)
        if m:
            got[int(m.group(1))] = float(m.group(2))
    # PARAM's ranks sometimes abort in their own teardown ("terminate called without an active
    # exception") after printing every size: a run counts when rank 0 printed all sizes.
    if set(got) != set(SIZES):
        raise RuntimeError(f"PARAM comms printed sizes {sorted(got)}, expected {SIZES} "
                           f"(exit {[p.returncode for p in procs]}):\n{out[-1000:]}\n{err[-1500:]}")
    return got


def bare_async_rank(rank, world, n: int, iters: int, warmup: int):
    """The gloo form of nccl-tests' enqueue-then-wait, with nothing else: per sample, after one
    barrier, ``n`` all_reduce calls with ``async_op=True``, then a wait on each, one clock around
    the lot, divided by ``n``; the slowest rank per sample, p50 over samples (as commprof's)."""
    import time

    import torch
    import torch.distributed as dist

    out = {}
    for size in SIZES:
        x = torch.zeros(size // 4)
        lat = torch.empty(iters, dtype=torch.float64)
        for i in range(-warmup, iters):
            dist.barrier()
            t0 = time.perf_counter()
            for w in [dist.all_reduce(x, async_op=True) for _ in range(n)]:
                w.wait()
            if i >= 0:
                lat[i] = (time.perf_counter() - t0) * 1e6 / n
        dist.all_reduce(lat, op=dist.ReduceOp.MAX)
        out[size] = float(np.percentile(lat.numpy(), 50))
    return out


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
    from commprof.model.machine import now_iso

    ap = argparse.ArgumentParser()
    ap.add_argument("--param", required=True, help="a directory holding PARAM's source as the package param_bench")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--loop", type=int, default=50)
    ap.add_argument("--iters", type=int, default=5, help="commprof back-to-back: timed loops per size")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--cpus", default="0",
                    help="cores both tools run on (comma list; 'all' = no restriction); default one core")
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    args = ap.parse_args()
    cpus = restrict_cpus(args.cpus)     # inherited by commprof's ranks and by PARAM's
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
        got["bare_async"] = run_gloo_ranks(bare_async_rank, 2, (args.loop, args.iters, args.warmup), pin=True)
        rounds.append({"round": r, "first": order[0], **{k: {str(s): v for s, v in d.items()} for k, d in got.items()}})
        print(f"round {r}: " + ", ".join(f"{s >> 10}K b2b {got['commprof'][s]:.0f} / PARAM {got['param'][s]:.0f} "
                                          f"(per-call {got['per_call'][s]:.0f}, bare async {got['bare_async'][s]:.0f})"
                                          for s in SIZES), flush=True)
    table = ["| size | commprof back-to-back p50 us | PARAM p50 us | ratio (median, min-max) | commprof per-call p50 us "
             "| bare async loop p50 us |", "|---|---|---|---|---|---|"]
    summary = []
    for s in SIZES:
        b2b = np.array([x["commprof"][str(s)] for x in rounds])
        par = np.array([x["param"][str(s)] for x in rounds])
        pc = np.array([x["per_call"][str(s)] for x in rounds])
        ba = np.array([x["bare_async"][str(s)] for x in rounds])
        ratio = b2b / par
        summary.append({"size_bytes": s, "commprof_b2b_p50_us": float(np.median(b2b)), "param_p50_us": float(np.median(par)),
                        "ratio_median": float(np.median(ratio)), "ratio_min": float(ratio.min()),
                        "ratio_max": float(ratio.max()), "commprof_per_call_p50_us": float(np.median(pc)),
                        "bare_async_p50_us": float(np.median(ba))})
        table.append(f"| {s >> 10} KiB | {np.median(b2b):.0f} | {np.median(par):.0f} | **{np.median(ratio):.2f}** "
                     f"({ratio.min():.2f}-{ratio.max():.2f}) | {np.median(pc):.0f} | {np.median(ba):.0f} |")
    res = measured(__file__, start, f"commprof sweep --timing back-to-back --loop {args.loop} beside PARAM comms "
                                   f"(facebookresearch/param {rev[:12] or '?'}, --n {args.loop}) on gloo, 2 ranks, fp32 "
                                   f"all_reduce, {args.rounds} alternating rounds, both on core(s) {','.join(map(str, cpus))}; "
                                   f"commprof per-call and a bare async loop (scripts' own, no tool) listed beside")
    met = all(0.67 <= x["ratio_median"] <= 1.5 for x in summary)
    res.update(param_commit=rev, cpus=cpus, rounds=rounds, summary=summary, met=bool(met),
               target="the two back-to-back methods agree within 1.5x at every size (median over rounds)")
    name = "param_side_by_side" if args.cpus == "0" else f"param_side_by_side_cpus-{args.cpus.replace(',', '-')}"
    write_result(args.out, name, "commprof back-to-back vs PARAM comms", res, table)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
