"""Writing a benchmark's result: ``NAME.json`` (everything) and ``NAME.md`` (the table quoted)."""
from __future__ import annotations

import json
import os


def measured(script: str, start_time: str, what: str) -> dict:
    """The provenance every benchmark result starts with: what was measured, by which command, when,
    on which machine and versions. ``script`` is the benchmark's ``__file__``."""
    import sys

    from commprof.model.machine import machine, now_iso, versions

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return {"kind": "measured", "what": what,
            "command": "python " + " ".join([os.path.relpath(script, repo)] + sys.argv[1:]),
            "start_time": start_time, "end_time": now_iso(), "machine": machine(), "versions": versions()}


def restrict_cpus(spec: str) -> list[int]:
    """Run this benchmark and every process it starts (inherited) on the cores in ``spec`` ("0",
    "0,1"; "all" leaves the affinity as it is); return the cores in use. On the shared 2-core VM
    these benchmarks were written on, waking a rank on the other vCPU takes 3-4 ms in 16-53% of
    gloo calls, so a p50 lands in either mode from run to run; on one core that mode almost
    disappears (see scripts/bench_cli_overhead.py)."""
    if spec != "all":
        os.sched_setaffinity(0, {int(c) for c in spec.split(",")})
    return sorted(os.sched_getaffinity(0))


def write_result(out_dir: str, name: str, title: str, result: dict, table: list[str]) -> None:
    """``result`` must hold what/command/start_time/machine/versions/target/met; ``table`` is the
    Markdown table's lines."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=2)
    m = result["machine"]
    lines = [f"# {title} (measured)", "", result["what"] + ".", "",
             f"Machine: {m['host']}, {m['cpu']}, {m['cpu_cores']} cores; torch {result['versions']['torch']}; "
             f"{result['start_time']}. Command: `{result['command']}`.", "", *table,
             *(["", f"Target {result['target']}: "
                    f"{result.get('verdict') or ('met' if result['met'] else 'NOT met')}."] if result.get("target") else [])]
    with open(os.path.join(out_dir, f"{name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def _rank_entry(rank_fn, rank, world, port, args, q, pin=False):
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    if pin:                 # the core placement commprof's own gloo ranks use
        from microbench.rank import pin_to_core

        pin_to_core(rank)
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, world + 1, False, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    out = rank_fn(rank, world, *args)
    if rank == 0:
        q.put(out)
    dist.destroy_process_group()


def run_gloo_ranks(rank_fn, world: int, args: tuple = (), extra=None, pin: bool = False):
    """Spawn ``world`` gloo ranks running ``rank_fn(rank, world, *args[, extra(ctx)])``; return
    rank 0's result. ``extra`` builds shared objects from the spawn context (e.g. shared memory);
    ``pin`` puts rank r on one core as commprof's gloo ranks are (``microbench.rank.pin_to_core``)."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    if extra is not None:
        args = (*args, extra(ctx))
    q = ctx.SimpleQueue()
    store = dist.TCPStore("127.0.0.1", 0, world + 1, True, wait_for_workers=False)
    procs = [ctx.Process(target=_rank_entry, args=(rank_fn, r, world, store.port, args, q, pin)) for r in range(world)]
    for p in procs:
        p.start()
    out = q.get()
    for p in procs:
        p.join()
    return out
