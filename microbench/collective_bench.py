"""The per-rank side of ``commprof sweep``: process groups, timing loops, correctness checks.

Every rank walks the same ordered list of cells (``commprof.model.sweepconfig.plan_cells``). For each
cell the ranks of the measured TP group(s) time one collective per iteration:

* every iteration starts barrier-aligned (a gloo barrier on the group, or on the world when groups
  run concurrently), and one op is one sample: several ops are never timed as one;
* CPU (gloo): ``time.perf_counter`` around the call; GPU (NCCL): CUDA events around the call
  (``eager``) or around one CUDA-graph replay of a captured call (``graph``), plus the CPU time
  to enqueue it;
* the sample of an iteration is the maximum over the group's ranks;
* an untimed correctness check compares every rank's result with the exact expected value;
* ``--impl custom`` cells time commprof's one-shot all-reduce (``microbench.oneshot_rank``) the
  same way, right after the backend's own cell of the same size; with ``--verify`` every timed
  custom call also runs on known inputs and is compared (untimed) with torch's all_reduce.

Rank 0 receives the rows of every measured group and appends them to the results table at once,
so an interrupted sweep keeps every finished cell. With ``--repeat N`` the whole list is walked N
times (repeats interleaved, so a busy minute touches every cell once rather than one cell N times);
a cell's row is written after its last repeat, its percentiles over every repeat's samples, each
repeat's median in ``p50_us_repeats`` (``commprof.analysis.noise`` says when they disagree).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from commprof.model.collectives import COLLECTIVES, check_input
from commprof.analysis import noise
from commprof.analysis.stats import summarize_us
from commprof.model.sweepconfig import BACK_TO_BACK, CUSTOM, Cell, SweepRunConfig, plan_cells, repeat_count
from microbench.heartbeat import Heartbeat, TextProgress
from microbench.rank import rank_session
from microbench.timing import CLOCK, CLOCK_OUTER, DeviceTimer
from commprof import results

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
NO_COMM = "none (1 rank)"


@dataclass
class Samples:
    """One rank's samples of one cell, in us (GPU columns are None on CPU ranks)."""
    latency_us: np.ndarray
    enqueue_us: np.ndarray | None = None
    host_us: np.ndarray | None = None
    spin_us: float | None = None
    spin_short: int | None = None
    short: np.ndarray | None = None      # GPU: per iteration, the spin ended before the op was enqueued
    clock: str = ""                      # GPU: timing.CLOCK, or CLOCK_OUTER after the graph-event fallback
    wrong: int = 0


class GroupSet:
    """The TP groups of one degree: consecutive ranks, ``world // tp`` full groups."""

    def __init__(self, tp: int, groups: list[list[int]], data: list, ctrl: list):
        self.tp = tp
        self.groups = groups
        self.data = data
        self.ctrl = ctrl

    def index_of(self, rank: int):
        for i, g in enumerate(self.groups):
            if rank in g:
                return i
        return None


def make_groups(dist, tps, world: int, backend: str) -> dict[int, GroupSet]:
    """Create every group on every rank, in the same order (torch.distributed requires it).

    Keep it that way on NCCL: with a device bound to the default group, torch 2.13's ``new_group``
    makes every rank *outside* a new group take part in an ``ncclCommSplit`` with no colour, even
    for a gloo group, while the gloo group's members make no split call at all. NCCL pairs split
    calls by their order on each rank, so this only works because every rank makes the same number
    of split calls (per TP degree: one per NCCL group, one per gloo group it is not in) and the
    members of one group make theirs at the same position. Creating a group on some ranks only, or
    in a different order, would pair the wrong calls and hang."""
    sets = {}
    for tp in sorted(set(tps)):
        groups = [list(range(g * tp, (g + 1) * tp)) for g in range(world // tp)]
        data, ctrl = [], []
        for ranks in groups:
            if tp == world:
                d = dist.group.WORLD
            else:
                d = dist.new_group(ranks)
            # Barriers and max-reductions go through gloo on the CPU so they never queue behind
            # (or get timed with) the measured NCCL stream.
            c = d if backend == "gloo" else dist.new_group(ranks, backend="gloo")
            data.append(d)
            ctrl.append(c)
        sets[tp] = GroupSet(tp, groups, data, ctrl)
    return sets


class CellRunner:
    """Times one cell on one group member."""

    def __init__(self, torch, dist, cfg: SweepRunConfig, rank: int, device, hb: Heartbeat, fault, custom=None):
        self.torch, self.dist, self.cfg, self.rank = torch, dist, cfg, rank
        self.device, self.hb, self.fault = device, hb, fault
        self.custom = custom          # microbench.oneshot_rank.CustomAllReduce, for custom cells
        self.dtype = getattr(torch, TORCH_DTYPES[cfg.dtype])
        self.cuda = device.type == "cuda"
        self.timer = None             # microbench.timing.DeviceTimer, made (and calibrated) at first use

    def _buffers(self, cell: Cell):
        t = self.torch
        inp = t.zeros(cell.in_numel, dtype=self.dtype, device=self.device)
        out = t.empty(cell.out_numel, dtype=self.dtype, device=self.device) if cell.out_numel else None
        return inp, out

    def measure(self, cell: Cell, ranks: list[int], data_group, align_group, use_custom: bool = False):
        """This rank's :class:`Samples` of the cell. ``use_custom``: time the one-shot kernel
        instead of the backend's collective."""
        coll = COLLECTIVES[cell.op]
        dist, torch, hb = self.dist, self.torch, self.hb
        hb.stage(f"{cell.label}: buffers")
        inp, out = self._buffers(cell)
        root = ranks[0]
        group_rank = ranks.index(self.rank)
        fault_iter = -1
        if self.fault is not None and self.fault.kind in ("hang", "die", "sleep") and \
                self.fault.applies(self.rank, cell.op, cell.tp, cell.mode):
            fault_iter = self.fault.iter

        op = self.custom.bind(cell, inp, data_group) if use_custom else coll.bind(inp, out, data_group, root)
        verify = None
        if use_custom and self.cfg.verify:
            # Known inputs before every timed call; torch's all_reduce of them is the reference.
            pattern = check_input(group_rank, cell.in_numel, self.dtype).to(self.device)
            reference = pattern.clone()
            dist.all_reduce(reference, group=data_group)
            verify = (pattern, reference, inp)
        verify_wrong = 0
        hb.stage(f"{cell.label}: warm-up")
        for _ in range(self.cfg.warmup):
            dist.barrier(group=align_group)
            op()
        if self.cuda:
            torch.cuda.synchronize(self.device)

        iters = self.cfg.iters
        lat = np.empty(iters, dtype=np.float64)
        barrier = dist.barrier
        hb.stage(f"{cell.label}: timing")
        if self.cfg.timing == BACK_TO_BACK:
            samples, call = self._measure_loop(cell, op, align_group, fault_iter)
        elif not self.cuda:
            call = op
            perf = time.perf_counter
            for i in range(iters):
                if verify is not None:
                    inp.copy_(verify[0])
                barrier(group=align_group)
                if i == fault_iter:
                    self.fault.trigger()
                hb.enter()
                t0 = perf()
                call()
                t1 = perf()
                hb.leave()
                lat[i] = (t1 - t0) * 1e6
                if verify is not None:
                    verify_wrong += int((inp != verify[1]).sum().item())
            samples = Samples(lat)
        else:
            samples, call, verify_wrong = self._measure_cuda(cell, op, align_group, fault_iter, verify)

        hb.stage(f"{cell.label}: correctness check")
        wrong = self._check(cell, coll, inp, out, op, call, group_rank, len(ranks))
        if use_custom:
            self.custom.check_status(cell)
        samples.wrong = wrong + verify_wrong
        return samples

    def _measure_loop(self, cell: Cell, op, align_group, fault_iter: int):
        """nccl-tests' method (``--timing back-to-back``): per sample, after one barrier, ``loop``
        calls back to back with no barrier between them, one host clock around the whole loop
        (and, on a GPU, the stream's completion), divided by ``loop``. Graph mode captures the
        ``loop`` calls in one graph and times its replay (nccl-tests -G). The average hides
        per-call launch gaps and includes pipelining between calls."""
        torch, dist, hb = self.torch, self.dist, self.hb
        n, iters, perf = self.cfg.loop, self.cfg.iters, time.perf_counter
        call = op
        if self.cuda:
            if cell.mode == "graph":
                hb.stage(f"{cell.label}: graph capture")
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    for _ in range(n):
                        op()
                torch.cuda.synchronize(self.device)
                loop = graph.replay
                call = op                       # the correctness check runs one call, not the loop
            else:
                def loop():
                    for _ in range(n):
                        op()
            sync = torch.cuda.current_stream(self.device).synchronize
        else:
            def loop():
                for _ in range(n):
                    op()
            sync = None
        lat = np.empty(iters, dtype=np.float64)
        enq = np.empty(iters, dtype=np.float64) if self.cuda else None
        for i in range(iters):
            dist.barrier(group=align_group)
            if i == fault_iter:
                self.fault.trigger()
            hb.enter()
            t0 = perf()
            loop()
            t1 = perf()
            if sync is not None:
                sync()
            t2 = perf()
            hb.leave()
            lat[i] = (t2 - t0) * 1e6 / n
            if enq is not None:
                enq[i] = (t1 - t0) * 1e6 / n
        return Samples(lat, enq), call

    def _measure_cuda(self, cell: Cell, op, align_group, fault_iter: int, verify):
        """Device-side samples (``microbench.timing``): per iteration one spin-covered sample of
        the op's GPU time and its enqueue time, then one host-observed sample on an idle GPU."""
        torch, dist, hb = self.torch, self.dist, self.hb
        if self.timer is None:
            self.timer = DeviceTimer(torch, self.device)
        timer = self.timer
        if cell.mode == "graph":
            hb.stage(f"{cell.label}: graph capture")
        call = timer.prepare(op, cell.mode)
        torch.cuda.synchronize(self.device)
        perf = time.perf_counter
        warm = []
        for _ in range(self.cfg.warmup):
            dist.barrier(group=align_group)
            t0 = perf()
            call()
            warm.append((perf() - t0) * 1e6)
            torch.cuda.synchronize(self.device)
        timer.fit_spin(warm[len(warm) // 2:] or warm)
        timer.spin_short = 0
        # the clock may have dropped while the host gathered the last cell's rows: the warm-up
        # just ran the GPU, so measure the spin's rate again for this cell
        timer.calibrate()
        iters = self.cfg.iters
        lat, enq, host = (np.empty(iters, dtype=np.float64) for _ in range(3))
        short = np.zeros(iters, dtype=bool)
        verify_wrong = 0
        barrier = dist.barrier
        hb.stage(f"{cell.label}: timing")
        for i in range(iters):
            if verify is not None:
                inp = verify[2]
                inp.copy_(verify[0])
            barrier(group=align_group)
            if i == fault_iter:
                self.fault.trigger()
            hb.enter()
            lat[i], enq[i], short[i] = timer.device_sample(call)
            hb.leave()
            if verify is not None:
                verify_wrong += int((inp != verify[1]).sum().item())
                inp.copy_(verify[0])
            barrier(group=align_group)
            hb.enter()
            host[i] = timer.host_sample(call)
            hb.leave()
            if verify is not None:
                verify_wrong += int((inp != verify[1]).sum().item())
        clock = timer.clock if cell.mode == "graph" else CLOCK
        return Samples(lat, enq, host, timer.spin_us, timer.spin_short, short, clock), call, verify_wrong

    def _check(self, cell, coll, inp, out, op, call, group_rank: int, n: int) -> int:
        """Untimed: deterministic inputs through the same buffers (and the same graph), compared
        element by element with the exact expected result."""
        torch = self.torch
        mine = check_input(group_rank, cell.in_numel, self.dtype)
        inp.copy_(mine.to(self.device))
        if out is not None:
            out.fill_(-1)
        call()           # the graph replays the captured call on the same buffers
        if self.cuda:
            torch.cuda.synchronize(self.device)
        result = (out if out is not None else inp).cpu()
        if self.fault is not None and self.fault.kind == "corrupt" and \
                self.fault.applies(self.rank, cell.op, cell.tp, cell.mode):
            result[0] += 1
        inputs = [check_input(r, cell.in_numel, self.dtype) for r in range(n)]
        expected = coll.expected(inputs, group_rank)
        return int((result != expected).sum().item())


def _kept(agg: dict):
    keep = agg.get("keep")                # GPU: iterations where no rank's spin fell short
    if keep is None or not keep.any():    # every one short: nothing better to report than all
        keep = slice(None)
    return keep


def _pool(aggs: list[dict]) -> dict:
    """The repeats of one cell (``--repeat``) as one ``_aggregate`` result: every repeat's samples
    together (the row's percentiles are over all of them), wrong elements and short spins summed."""
    if len(aggs) == 1:
        return aggs[0]
    out = {}
    for k in ("latency_us", "latency_us_rankavg", "skew_us", "enqueue_us", "host_us"):
        vals = [a.get(k) for a in aggs]
        out[k] = None if any(v is None for v in vals) else np.concatenate(vals)
    keeps = [a.get("keep") for a in aggs]
    out["keep"] = None if all(k is None for k in keeps) else np.concatenate(
        [k if k is not None else np.ones(len(a["latency_us"]), dtype=bool) for k, a in zip(keeps, aggs)])
    out.update(clock=aggs[-1].get("clock", ""), wrong=sum(int(a["wrong"]) for a in aggs),
               spin_short=sum(int(a["spin_short"]) for a in aggs), spin_us=max(float(a["spin_us"]) for a in aggs))
    return out


def _row(cell: Cell, cfg: SweepRunConfig, group_index: int, ranks, agg: dict, hosts,
         impl: str = "", fallback: str = "", repeats: list[dict] | None = None) -> dict:
    """One sweep.csv row from the group's per-iteration samples (``agg``: see ``_aggregate``;
    ``repeats``: each repeat's own, whose medians go into ``p50_us_repeats``)."""
    coll = COLLECTIVES[cell.op]
    keep = _kept(agg)
    stats = summarize_us(agg["latency_us"][keep])
    algbw, busbw = coll.bandwidth_gbps(cell.size_bytes, stats["latency_us_p50"], cell.tp)
    gpu = cfg.backend == "nccl"
    row = {
        "op": cell.op, "tp": cell.tp, "group": group_index, "ranks": f"{ranks[0]}-{ranks[-1]}",
        "mode": cell.mode, "clock": ("perf_counter_loop" if cfg.timing == BACK_TO_BACK else agg.get("clock") or CLOCK)
        if gpu else "perf_counter",
        "backend": cfg.backend, "impl": impl or cfg.baseline_impl, "dtype": cfg.dtype, "size_bytes": cell.size_bytes,
        "count": cell.in_numel, "batch": cell.batch if cell.batch is not None else "",
        "site": cell.site, "iters": cfg.iters, "warmup": cfg.warmup, "concurrent": int(cfg.concurrent),
        "comm": NO_COMM if cell.tp == 1 else "collective", "timing": cfg.timing,
        "loop": cfg.loop if cfg.timing == BACK_TO_BACK else 1,
    }
    row.update(stats)
    rank_avg = agg["latency_us_rankavg"][keep]
    skew = agg["skew_us"][keep]
    row.update(latency_us_rankavg_p50=float(np.percentile(rank_avg, 50)),
               latency_us_rankavg_mean=float(rank_avg.mean()),
               skew_us_p50=float(np.percentile(skew, 50)), skew_us_p99=float(np.percentile(skew, 99)))
    for name in ("enqueue_us", "host_us"):
        v = agg.get(name)
        row[f"{name}_p50"] = float(np.percentile(v, 50)) if v is not None else ""
        row[f"{name}_p99"] = float(np.percentile(v, 99)) if v is not None else ""
    spun = gpu and cfg.timing != BACK_TO_BACK
    row["spin_us"] = agg["spin_us"] if spun else ""
    row["spin_short"] = agg["spin_short"] if spun else ""
    wrong = agg["wrong"]
    row.update(algbw_gbps=algbw, busbw_gbps=busbw, wrong=wrong, status="ok" if wrong == 0 else "WRONG",
               hosts=";".join(sorted(set(hosts))), fallback=fallback)
    reps = repeats or [agg]
    p50s = [float(np.percentile(a["latency_us"][_kept(a)], 50)) for a in reps]
    s, t = noise.spread(p50s), noise.tail_ratio(stats["latency_us_p50"], stats["latency_us_p95"])
    row.update(repeats=len(reps), p50_us_repeats=";".join(f"{v:.6g}" for v in p50s) if len(reps) > 1 else "",
               repeat_spread=s if s is not None else "", tail_ratio=t if t is not None else "",
               unstable=noise.unstable_reason(p50s, stats["latency_us_p50"], stats["latency_us_p95"]))
    return row


def _repeat_row(cell: Cell, cfg: SweepRunConfig, group_index: int, ranks, agg: dict, rep: int,
                start_s: float, impl: str = "") -> dict:
    """One ``sweep_repeats.csv`` row: one repeat of one cell (``--repeat``), its own percentiles,
    and when it started (seconds since this rank began walking the cells)."""
    stats = summarize_us(agg["latency_us"][_kept(agg)])
    return {"op": cell.op, "tp": cell.tp, "group": group_index, "ranks": f"{ranks[0]}-{ranks[-1]}",
            "mode": cell.mode, "impl": impl or cfg.baseline_impl, "size_bytes": cell.size_bytes,
            "batch": cell.batch if cell.batch is not None else "", "repeat": rep + 1, "start_s": round(start_s, 6),
            "iters": cfg.iters, **stats}


def _aggregate(torch, dist, s: Samples, group, n: int) -> dict:
    """Per iteration across the group's ranks: the slowest rank's time (the sample), the
    average rank's (nccl-tests -a 1), and the skew (max - min: how much of the slowest rank's
    time was waiting for the last to arrive). Enqueue and host times: the slowest rank's."""
    lat = s.latency_us
    # every rank of the group has the same set of columns (same backend, same timing)
    present = [k for k in ("enqueue_us", "host_us") if getattr(s, k) is not None]
    mx = torch.from_numpy(np.stack([lat] + [getattr(s, k) for k in present]))
    dist.all_reduce(mx, op=dist.ReduceOp.MAX, group=group)
    mn = torch.from_numpy(lat.copy())
    dist.all_reduce(mn, op=dist.ReduceOp.MIN, group=group)
    avg = torch.from_numpy(lat.copy())
    dist.all_reduce(avg, group=group)
    counts = torch.tensor([s.wrong], dtype=torch.int64)
    dist.all_reduce(counts, group=group)
    # GPU: per iteration, 1 where any rank's spin fell short (that sample may hold host time), and
    # 1 where any rank fell back to the outer graph clock
    flags = np.zeros(len(lat) + 2, dtype=np.float64)
    if s.short is not None:
        flags[:-2] = s.short
    flags[-2] = float(s.spin_us or 0.0)
    flags[-1] = float(bool(s.clock) and s.clock != CLOCK)
    fl = torch.from_numpy(flags)
    dist.all_reduce(fl, op=dist.ReduceOp.MAX, group=group)
    fl = fl.numpy()
    short = fl[:-2] > 0
    mx = mx.numpy()
    out = {"latency_us": mx[0], "latency_us_rankavg": avg.numpy() / n, "skew_us": mx[0] - mn.numpy(),
           "enqueue_us": None, "host_us": None}
    out.update({k: mx[1 + i] for i, k in enumerate(present)})
    clock = (CLOCK_OUTER if fl[-1] > 0 else CLOCK) if s.clock else ""
    return {**out, "keep": ~short if s.short is not None else None, "clock": clock,
            "wrong": int(counts[0].item()), "spin_short": int(short.sum()), "spin_us": float(fl[-2])}


def run_rank(cfg: SweepRunConfig, rank: int, world: int, local_rank: int, store=None, slots=None):
    """Body of one sweep rank. Raises on failure (the launcher reports it)."""
    with rank_session(cfg, rank, world, local_rank, store, slots) as env:
        torch, dist, hb, world_ctrl = env.torch, env.dist, env.hb, env.world_ctrl
        hb.stage("init: groups")
        sets = make_groups(dist, cfg.tps, world, cfg.backend)
        hosts_by_rank = [i["host"] for i in env.infos]

        cells = plan_cells(cfg)
        done: set = set()
        writer = None
        if rank == 0:
            writer = results.open_sweep(cfg, env.infos)
            done = writer.done_keys
        box = [done]
        dist.broadcast_object_list(box, src=0, group=world_ctrl)
        done = box[0]
        todo = [c for c in cells if c.key not in done]
        if slots is not None and rank == 0:
            # each (repeat, cell) in walk order, by its bytes on the links (nccl-tests' bus factor):
            # what its time grows with
            slots.set_cells(c.size_bytes * COLLECTIVES[c.op].busbw_factor(c.tp)
                            for _ in range(repeat_count(cfg)) for c in todo)

        custom = None
        if any(c.custom for c in todo):
            from microbench.oneshot_rank import CustomAllReduce

            custom = CustomAllReduce(torch, dist, cfg, rank, env.local_rank, env.device, sets, hosts_by_rank,
                                     world_ctrl, hb)
            custom.setup(todo)
        runner = CellRunner(torch, dist, cfg, rank, env.device, hb, env.fault, custom)
        _walk(cells=todo, sets=sets, rank=rank, world=world, cfg=cfg, runner=runner, custom=custom,
              torch=torch, dist=dist, hb=hb, world_ctrl=world_ctrl, hosts_by_rank=hosts_by_rank,
              writer=writer, slots=slots)
        if custom is not None:
            dist.barrier(group=world_ctrl)      # no peer still maps a region about to be freed
            custom.close()
        if rank == 0:
            writer.close()


def _walk(*, cells, sets, rank, world, cfg, runner, custom, torch, dist, hb, world_ctrl, hosts_by_rank,
          writer, slots):
    """Every rank walks the same cells in the same order; rank 0 writes each cell's rows at once."""
    impls = cfg.impl_list()
    reps = repeat_count(cfg)
    pending: dict = {}          # cell key -> its repeats' samples so far (on the group's first rank)
    rep_rows: dict = {}         # cell key -> its sweep_repeats.csv rows so far (with --repeat > 1)
    walk_start = time.perf_counter()
    progress = None
    if rank == 0 and slots is None and cfg.progress:
        progress = TextProgress(len(cells) * reps)
    try:
        for rep, cell in ((rep, cell) for rep in range(reps) for cell in cells):    # repeats interleaved
            t_cell = time.monotonic()
            gs = sets[cell.tp]
            gi = gs.index_of(rank)
            active = gi is not None and (cfg.concurrent or gi == 0)
            payload = None
            fallback = custom.refusal(cell) if cell.custom else ""
            if fallback and rank == 0 and rep == 0:
                writer.note_refused([{
                    "op": cell.op, "tp": cell.tp, "size_bytes": cell.size_bytes, "reason": fallback,
                    "then": (f"measured with {cfg.baseline_impl} (column fallback)" if cfg.baseline_impl not in impls
                             else f"only the {cfg.baseline_impl} row")}])
            # A refused custom cell whose backend twin is in this run adds nothing: skip it.
            skip = bool(fallback) and cfg.baseline_impl in impls
            if active and not skip:
                ranks = gs.groups[gi]
                align = world_ctrl if cfg.concurrent else gs.ctrl[gi]
                use_custom = cell.custom and not fallback
                started = time.perf_counter()
                samples = runner.measure(cell, ranks, gs.data[gi], align, use_custom)
                agg = _aggregate(torch, dist, samples, gs.ctrl[gi], len(ranks))
                if rank == ranks[0]:
                    done = pending.setdefault(cell.key, [])
                    done.append(agg)
                    if reps > 1:
                        rep_rows.setdefault(cell.key, []).append(
                            _repeat_row(cell, cfg, gi, ranks, agg, rep, started - walk_start,
                                        impl=CUSTOM if use_custom else ""))
                    if rep == reps - 1:         # the cell's last repeat: its one row, over every repeat
                        payload = {"row": _row(cell, cfg, gi, ranks, _pool(done), [hosts_by_rank[r] for r in ranks],
                                               impl=CUSTOM if use_custom else "", fallback=fallback, repeats=done),
                                   "repeats": rep_rows.pop(cell.key, [])}
                        del pending[cell.key]
            hb.stage(f"{cell.label}: collecting rows")
            gathered = [None] * world if rank == 0 else None
            dist.gather_object(payload, gathered, dst=0, group=world_ctrl)
            if rank == 0:
                got = [p for p in gathered if p is not None]
                writer.write_rows([p["row"] for p in got])
                writer.write_repeats([r for p in got for r in p["repeats"]])
                hb.row_written(1, seconds=time.monotonic() - t_cell)
                if progress is not None:
                    progress.advance()
    finally:
        if progress is not None:
            progress.close()
