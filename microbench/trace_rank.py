"""The per-rank side of ``commprof trace``: run the synthetic decode engine, stamp every segment,
send the stamps to rank 0, which attributes and writes them (``commprof.verbs.trace``)."""
from __future__ import annotations

import gc
import sys
import time

import numpy as np

from microbench.decode_engine import CpuStamps, CudaStamps, DecodeEngine, no_mark
from microbench.rank import rank_session
from commprof.analysis.attribution import attribute_tokens, pool_repeats, slowest_token_ms
from commprof.analysis.noise import trace_run_noise
from commprof.results.trace import open_trace
from commprof.model.traceconfig import plan_runs, repeat_count

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def run_tokens(torch, eng: DecodeEngine, tokens: int, warmup: int, mode: str, traced: bool = True,
               mark_hook=None, on_token=None, info: dict | None = None):
    """Decode ``warmup`` untimed then ``tokens`` timed steps. Returns (latency_us[t],
    offsets_us[t][seg], durations_us[t][seg]); offsets/durations are None when untraced.
    ``info`` (a dict), when given, receives ``origin``: what the offsets count from."""
    cuda = eng.cuda
    nseg = len(eng.segments)
    stamps = CudaStamps(torch, nseg, external=mode == "graph") if cuda else CpuStamps(nseg)
    mark = stamps.mark if traced else no_mark
    if mark_hook is not None:
        mark = mark_hook(mark)
    for _ in range(warmup):
        eng.step(no_mark)
    if cuda:
        torch.cuda.synchronize()
    step = lambda: eng.step(mark)  # noqa: E731
    if mode == "graph":
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            eng.step(mark)
        torch.cuda.synchronize()
        step = graph.replay
    lat = np.empty(tokens)
    offs = np.empty((tokens, nseg)) if traced else None
    durs = np.empty((tokens, nseg)) if traced else None
    for t in range(tokens):
        stamps.begin()
        step()
        stamps.finish()
        if traced:
            lat[t], offs[t], durs[t] = stamps.result_us()
        else:
            lat[t] = stamps.latency_us()
        if on_token is not None:
            on_token()
    if info is not None:
        info["origin"] = getattr(stamps, "origin", "token start")
    return lat, offs, durs


def _delay_hook(fault, rank: int, eng: DecodeEngine):
    """Test-only: sleep at the start of every attention compute segment of the faulty rank."""
    ms = float(fault.opts.get("ms", 20)) / 1e3
    targets = {j for j, s in enumerate(eng.segments) if s.kind == "attn"}

    def hook(mark):
        def delayed(j, end=False):
            mark(j, end)
            if not end and j in targets:
                time.sleep(ms)
        return delayed
    return hook


def _release(torch, device):
    """Hand a dropped engine's memory back before the next one is built."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def add_repeat(writer, cfg, run: tuple, recs: list[dict], rep: int, started_s: float,
               pending: dict, keep_timeline: bool = True) -> None:
    """One repeat of one run (its ranks' stamps ``recs``) into the results: with ``--repeat`` above 1
    a ``trace_repeats.csv`` row now and, after the run's last repeat, its summary over every
    repeat's tokens; with one repeat the run as before. Either way the summary row carries the
    noise columns (:func:`commprof.analysis.noise.trace_run_noise`)."""
    tp, batch, mode = run
    reps = repeat_count(cfg)
    if reps > 1:
        one = attribute_tokens(recs, cfg.layers_model, tp, batch, cfg.chunk, cfg.prompt)
        writer.add_repeat(tp, batch, mode, rep + 1, started_s, one["summary"],
                          trace_run_noise(slowest_token_ms(one))["unstable"])
        pending.setdefault(run, []).append((recs, float(one["summary"]["ms_per_token"])))
        if rep < reps - 1:
            return
        done = pending.pop(run)
        recs, repeat_ms = pool_repeats([r for r, _ in done]), [m for _, m in done]
    else:
        repeat_ms = []
    att = attribute_tokens(recs, cfg.layers_model, tp, batch, cfg.chunk, cfg.prompt)
    att["summary"].update(trace_run_noise(slowest_token_ms(att), repeat_ms))
    writer.add_attributed(tp, batch, mode, att, recs=recs if keep_timeline else None)


def build_flags(runs: list, reps: int) -> list[bool]:
    """Per cell of the walk (every run's repeat 1, then every run's repeat 2, ...): whether it
    builds an engine, i.e. its TP x batch differs from the cell before it's."""
    keys = [tuple(run[:2]) for _ in range(reps) for run in runs]
    return [i == 0 or k != keys[i - 1] for i, k in enumerate(keys)]


def run_trace_rank(cfg, rank: int, world: int, local_rank: int, store=None, slots=None):
    """Body of one trace rank. Raises on failure (the launcher reports it)."""
    with rank_session(cfg, rank, world, local_rank, store, slots) as env:
        torch, dist, hb = env.torch, env.dist, env.hb
        dtype = getattr(torch, TORCH_DTYPES[cfg.dtype])
        hb.stage("init: groups")
        groups = {}
        for tp in sorted(set(cfg.tps)):
            groups[tp] = dist.group.WORLD if tp == world else dist.new_group(list(range(tp)))
        # Layers to run: the guard decided before the ranks started; under torchrun every rank
        # decided alone, so the smallest decision is the one all take.
        agreed = torch.tensor([cfg.layers], dtype=torch.int64)
        dist.all_reduce(agreed, op=dist.ReduceOp.MIN, group=env.world_ctrl)
        cfg.layers = int(agreed.item())
        writer = open_trace(cfg, env.infos) if rank == 0 else None
        runs = plan_runs(cfg)
        reps = repeat_count(cfg)
        if slots is not None and rank == 0:
            # the cells in their order, and which of them builds an engine (a new TP x batch): the
            # ETA prices a build apart from a cell's decode (--repeat over one run builds once)
            slots.set_setups(build_flags(runs, reps))
        eng, built_for = None, None
        pending: dict = {}          # run -> its repeats' stamps so far (rank 0, --repeat above 1)
        walk_start = time.perf_counter()
        # --repeat N: every run's repeat 1, then every run's repeat 2, ... (a busy minute touches
        # each run once rather than one run N times)
        for rep, run in ((r, run) for r in range(reps) for run in runs):
            tp, batch, mode = run
            label = f"trace tp={tp} batch={batch} {mode}" + (f" repeat {rep + 1}/{reps}" if reps > 1 else "")
            started = 0.0
            rec = None
            t_cell = time.monotonic()
            setup_s = 0.0
            if rank < tp:
                if built_for != (tp, batch):
                    # One engine per (tp, batch), reused across modes.
                    eng = None
                    _release(torch, env.device)
                    hb.stage(f"{label}: build")
                    eng = DecodeEngine(torch, dist, cfg.model, tp, rank, batch, cfg.engine_context, dtype,
                                       env.device, cfg.layers, group=groups[tp], comm=True, seed=cfg.seed,
                                       on_layer=hb.tick, chunk=cfg.chunk)
                    built_for = (tp, batch)
                    setup_s = time.monotonic() - t_cell
                hook = None
                f = env.fault
                if (f is not None and f.kind == "sleep" and int(f.opts.get("rank", -1)) == rank
                        and int(f.opts.get("repeat", rep + 1)) == rep + 1):
                    hook = _delay_hook(f, rank, eng)
                hb.stage(f"{label}: decode")
                started = time.perf_counter() - walk_start
                info = {}
                lat, offs, durs = run_tokens(torch, eng, cfg.steps, cfg.warmup, mode, mark_hook=hook,
                                             on_token=hb.tick, info=info)
                rec = {"rank": rank, "lat": lat, "offs": offs, "durs": durs, "segments": eng.segments,
                       "origin": info["origin"]}
            hb.stage(f"{label}: collecting")
            gathered = [None] * world if rank == 0 else None
            dist.gather_object(rec, gathered, dst=0, group=env.world_ctrl)
            if rank == 0:
                recs = [r for r in gathered if r is not None]
                moved = sorted({r["origin"] for r in recs} - {"token start"})
                if moved:
                    print(f"commprof trace: {label}: segment offsets count from the {moved[0]}", file=sys.stderr)
                add_repeat(writer, cfg, run, recs, rep, started, pending)
                hb.row_written(1, seconds=time.monotonic() - t_cell, setup_s=setup_s)
        eng = None
        _release(torch, env.device)
        if rank == 0:
            writer.close()
