"""Benchmark: where two gloo ranks run, and what it does to their figures (CPU only).

The README's "Where CPU ranks run" rests on these measurements, all of two gloo ranks doing fp32
all_reduce on this machine, in alternating rounds:

1. **Cores.** A bare per-call loop (barrier, perf_counter, all_reduce, perf_counter; the slowest
   rank per sample) with the ranks on two cores (one each, as commprof pins them) and with both on
   core 0: the p50, and the share of samples over 1.5 ms (the slow mode of a VM whose cross-core
   wake-ups are slow), at 4 KiB, 64 KiB and 1 MiB.
2. **Sessions.** A bare loop of 50 synchronous 4 KiB calls with no barrier between them (what
   ``--timing back-to-back`` times), both ranks on core 0, the two ranks started as plain
   processes of one session, and each under ``setsid`` (a session of its own, as torchrun starts
   its workers): per-call average, p50 over samples.
3. **Launchers.** ``commprof sweep --tp 2 --sizes 4K`` per-call and back-to-back, started by
   commprof itself and under ``torchrun --standalone --nproc-per-node 2``, on core 0.

    python scripts/bench_cpu_placement.py [--rounds 4] [--out results/bench]

Writes cpu_placement.json and cpu_placement.md (machine, command, every round's figures, medians).
No target: this records what the README says, with the machine it was seen on.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchfile import measured, run_gloo_ranks, write_result

SIZES = [4 << 10, 64 << 10, 1 << 20]
SLOW_US = 1500.0

# One rank of the session test: started by this script as a plain process, env:// rendezvous.
_SESSION_RANK = r"""
import os, sys, time, json
import torch, torch.distributed as dist
os.sched_setaffinity(0, {0})
torch.set_num_threads(1)
dist.init_process_group("gloo")
x = torch.zeros(1024)
lat = []
for i in range(-3, int(sys.argv[1])):
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(50):
        dist.all_reduce(x)
    if i >= 0:
        lat.append((time.perf_counter() - t0) * 1e6 / 50)
t = torch.tensor(lat, dtype=torch.float64)
dist.all_reduce(t, op=dist.ReduceOp.MAX)
if dist.get_rank() == 0:
    print(json.dumps(sorted(t.tolist())[len(lat) // 2]))
dist.destroy_process_group()
"""


def per_call_rank(rank, world, iters: int):
    import time

    import torch
    import torch.distributed as dist

    out = {}
    for size in SIZES:
        x = torch.zeros(size // 4)
        for _ in range(5):
            dist.barrier()
            dist.all_reduce(x)
        lat = torch.empty(iters, dtype=torch.float64)
        for i in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            lat[i] = (time.perf_counter() - t0) * 1e6
        dist.all_reduce(lat, op=dist.ReduceOp.MAX)
        a = lat.numpy()
        out[size] = {"p50_us": float(np.percentile(a, 50)), "slow_share": float((a > SLOW_US).mean())}
    return out


def cores_run(one_core: bool, iters: int) -> dict:
    """The per-call loop, ranks pinned as commprof pins them, on both cores or all on core 0."""
    old = os.sched_getaffinity(0)
    try:
        if one_core:
            os.sched_setaffinity(0, {min(old)})
        return run_gloo_ranks(per_call_rank, 2, (iters,), pin=True)
    finally:
        os.sched_setaffinity(0, old)


def session_run(own_sessions: bool, iters: int) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, "-c", _SESSION_RANK, str(iters)], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=own_sessions) for r in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"session rank failed: {outs[0][1][-800:]} {outs[1][1][-800:]}")
    return float(json.loads(outs[0][0].strip().splitlines()[-1]))


def sweep_run(launcher: str, timing: str) -> float:
    from commprof.results import load_frame

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "s")
        args = ["sweep", "--tp", "2", "--ops", "all_reduce", "--backend", "gloo", "--dtype", "fp32", "--sizes", "4K",
                "--iters", "60" if timing == "per-call" else "10", "--timing", timing, "--loop", "50",
                "--out", out, "--no-charts"]
        if launcher == "torchrun":
            torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
            cmd = ["taskset", "-c", "0", torchrun, "--standalone", "--nproc-per-node", "2", "-m", "commprof", *args]
        else:
            cmd = ["taskset", "-c", "0", sys.executable, "-m", "commprof", *args]
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for attempt in range(2):        # torchrun's standalone rendezvous can lose a port race
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
            if res.returncode == 0:
                break
        else:
            raise RuntimeError(f"{' '.join(cmd)} failed: {res.stderr[-800:]}")
        return float(load_frame(out)["latency_us_p50"].iloc[0])


def main():
    from commprof.capture.launch import autogroup_on
    from commprof.model.machine import now_iso

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    args = ap.parse_args()
    start = now_iso()
    rounds = []
    for r in range(args.rounds):
        flip = r % 2 == 1
        got = {}
        for one in ((True, False) if flip else (False, True)):
            got["one_core" if one else "two_cores"] = cores_run(one, args.iters)
        for own in ((True, False) if flip else (False, True)):
            got["setsid" if own else "one_session"] = session_run(own, max(10, args.iters // 10))
        for launcher in (("torchrun", "commprof") if flip else ("commprof", "torchrun")):
            for timing in ("per-call", "back-to-back"):
                got[f"{launcher}_{timing}"] = sweep_run(launcher, timing)
        rounds.append({"round": r, **{k: ({str(s): v for s, v in d.items()} if isinstance(d, dict) else d)
                                      for k, d in got.items()}})
        print(f"round {r}: " + json.dumps(rounds[-1]), flush=True)

    def med(key, size=None, field=None):
        vals = [x[key][str(size)][field] if size else x[key] for x in rounds]
        return float(np.median(vals)), float(min(vals)), float(max(vals))

    table = ["| what | 4 KiB | 64 KiB | 1 MiB |", "|---|---|---|---|"]
    summary = {}
    for key, label in (("two_cores", "per-call, one rank per core"), ("one_core", "per-call, both ranks on core 0")):
        cells = []
        for s in SIZES:
            p50, share = med(key, s, "p50_us"), med(key, s, "slow_share")
            summary[f"{key}_{s}"] = {"p50_us": p50, "slow_share": share}
            cells.append(f"p50 {p50[0]:.0f} us ({p50[1]:.0f}-{p50[2]:.0f}); over 1.5 ms: "
                         f"{100 * share[0]:.0f}% ({100 * share[1]:.0f}-{100 * share[2]:.0f}%)")
        table.append(f"| {label} | " + " | ".join(cells) + " |")
    table += ["", "| 4 KiB, both ranks on core 0 | median us per call (min-max) |", "|---|---|"]
    for key, label in (("one_session", "bare back-to-back loop, one session"),
                       ("setsid", "bare back-to-back loop, each rank under setsid"),
                       ("commprof_per-call", "commprof sweep per-call p50, its own launcher"),
                       ("torchrun_per-call", "commprof sweep per-call p50, under torchrun"),
                       ("commprof_back-to-back", "commprof sweep back-to-back p50, its own launcher"),
                       ("torchrun_back-to-back", "commprof sweep back-to-back p50, under torchrun")):
        m = med(key)
        summary[key] = m
        table.append(f"| {label} | {m[0]:.0f} ({m[1]:.0f}-{m[2]:.0f}) |")
    res = measured(__file__, start, f"two gloo ranks, fp32 all_reduce: per-call loops on one or two cores, "
                                   f"back-to-back loops in one or two sessions, commprof sweep under its own "
                                   f"launcher and torchrun; {args.rounds} alternating rounds")
    autogroup = "1" if autogroup_on() else "0"
    res.update(rounds=rounds, summary=summary, slow_us=SLOW_US, sched_autogroup_enabled=autogroup,
               target=None, met=None)
    table.append("")
    table.append(f"kernel.sched_autogroup_enabled = {autogroup}.")
    write_result(args.out, "cpu_placement", "Where two gloo ranks run", res, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
