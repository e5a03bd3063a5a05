"""What commprof assumes of a real GPU, each checked on the GPU at hand: confirmed, refuted, or not
reached (with why). The GPU check (scripts/gpu_check.sh) runs it as its first steps after the
machine's description, so that one short run on one GPU settles what the CPU tests can only model.

    python scripts/gpu_assumptions.py OUTDIR [--only KEY,KEY] [--group GROUP,GROUP]   (events, nccl, oneshot, trace)
    python scripts/gpu_assumptions.py --list
    python scripts/gpu_assumptions.py --summarize OUTDIR

Each check writes OUTDIR/<key>.json when it starts (status "running": a check killed by its time
box stays so, and reads "not reached (killed while running)") and again when it ends, so every
finished check survives a later one that hangs. Exit status: 0 when every check run was
confirmed, 1 otherwise.

The CPU-side models these checks settle: tests/fake_cuda.py (event and capture rules),
microbench/timing.py (spin, clock, graph events), the sweep's and the trace's graph modes, NCCL's
one-rank paths (src/enqueue.cc hostToDevRedOp and src/device/onerank.cu ncclLaunchOneRank in
NVIDIA/nccl at 5067397c: a one-rank AVG on a float type becomes PreMulSum and launches the
``oneRankReduce`` kernel, SUM launches nothing in place), and cuda_ext.oneshot's one-GPU emulation.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from types import SimpleNamespace

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

CONFIRMED, REFUTED, NOT_REACHED = "confirmed", "refuted", "not reached"
SPIN_CYCLES_LONG = 200_000_000      # ~0.1 s at 1980 MHz: long enough that a query meets it running


class Refuted(Exception):
    """The check ran and the assumption does not hold (the message says what was seen)."""


class NotReached(Exception):
    """The check could not run here (the message says why)."""


# --- shared state, made on first use ------------------------------------------------------------

class Context:
    def __init__(self, torch=None):
        self._torch = torch
        self._dist = None

    @property
    def torch(self):
        if self._torch is None:
            try:
                import torch
            except ImportError as e:
                raise NotReached(f"no torch: {e}") from None
            if not torch.cuda.is_available():
                raise NotReached("no CUDA GPU visible to torch")
            self._torch = torch
        return self._torch

    @property
    def device(self):
        return self.torch.device("cuda", 0)

    def dist(self):
        """torch.distributed with a one-rank NCCL world and a gloo control group (as the sweep)."""
        if self._dist is None:
            torch = self.torch
            import torch.distributed as dist

            if not dist.is_nccl_available():
                raise NotReached("torch has no NCCL")
            dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=self.device)
            self._dist = (dist, dist.new_group([0], backend="gloo"))
            torch.cuda.synchronize()
        return self._dist


def _spin_pair(torch, cycles: int):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(cycles)
    b.record()
    return a, b


# --- the checks ----------------------------------------------------------------------------------

def check_never_recorded(ctx):
    torch = ctx.torch
    e, f = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if e.query() is not True:
        raise Refuted(f"query() on a never-recorded event returned {e.query()!r}")
    e.synchronize()
    f.record()
    f.synchronize()
    try:
        e.elapsed_time(f)
    except ValueError as err:
        return f"query() True; elapsed_time raised ValueError: {err}"
    except Exception as err:  # noqa: BLE001 - which type CUDA raises is the finding
        raise Refuted(f"elapsed_time raised {type(err).__name__} (the fake raises ValueError): {err}") from None
    raise Refuted("elapsed_time with a never-recorded event returned a value")


def check_elapsed_before_complete(ctx):
    torch = ctx.torch
    a, b = _spin_pair(torch, SPIN_CYCLES_LONG)
    try:
        ms = a.elapsed_time(b)
    except RuntimeError as err:
        b.synchronize()
        return f"raised RuntimeError while the spin ran: {err}; after synchronize: {a.elapsed_time(b):.3f} ms"
    b.synchronize()
    raise Refuted(f"elapsed_time returned {ms!r} ms before the end event completed (the fake raises)")


def check_graph_events_time(ctx):
    torch = ctx.torch
    from commprof.model.machine import supports_graph_events

    if not supports_graph_events(torch):
        raise Refuted("torch.cuda.Event has no external=True: graph mode is refused")
    ms = _time_around_graph_spin(torch, inside_start=True, fallback="the sweep falls back to clock "
                                 "cuda_event_spin_outer")
    if not ms > 0:
        raise Refuted(f"graph-recorded events gave {ms} ms around a 2M-cycle spin")
    return f"{ms * 1e3:.1f} us around a 2M-cycle spin inside the graph"


def check_graph_events_mixed(ctx):
    ms = _time_around_graph_spin(ctx.torch, inside_start=False, fallback="the trace falls back to offsets "
                                 "from the first segment")
    return f"outside -> graph-recorded: {ms * 1e3:.1f} us around a 2M-cycle spin"


def _time_around_graph_spin(torch, inside_start: bool, fallback: str) -> float:
    """ms from a start event to an end event a graph node records after a 2M-cycle spin; the start
    is recorded by a node too (``inside_start``) or outside, before the replay."""
    start = torch.cuda.Event(enable_timing=True, external=True)
    end = torch.cuda.Event(enable_timing=True, external=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        if inside_start:
            start.record()
        torch.cuda._sleep(2_000_000)
        end.record()
    torch.cuda.synchronize()
    if not inside_start:
        start.record()
    g.replay()
    torch.cuda.synchronize()
    try:
        return start.elapsed_time(end)
    except RuntimeError as err:
        where = "two graph-recorded events" if inside_start else "an outside and a graph-recorded event"
        raise Refuted(f"elapsed_time between {where} raised: {err} ({fallback})") from None


def check_sync_in_capture(ctx):
    torch = ctx.torch
    g = torch.cuda.CUDAGraph()
    inside = None
    try:
        with torch.cuda.graph(g):
            torch.cuda._sleep(1000)
            try:
                torch.cuda.synchronize()
            except RuntimeError as err:
                inside = err
                raise
    except RuntimeError as err:
        torch.cuda.synchronize()         # the device is usable again
        if inside is None:
            raise Refuted(f"the capture failed, but not at the synchronize: {err}") from None
        return f"synchronize raised: {str(inside).splitlines()[0]}; the capture then failed: {str(err).splitlines()[0]}"
    raise Refuted("torch.cuda.synchronize() during a capture returned (the fake raises)")


def check_spin_clock(ctx):
    """The spin's rate measured cold (three 1M-cycle spins, the method before the fix) against
    the timer's warmed calibration and a second, per-cell calibration."""
    torch = ctx.torch
    from microbench.timing import DeviceTimer

    cold = []
    for _ in range(3):
        a, b = _spin_pair(torch, 1_000_000)
        b.synchronize()
        cold.append(1_000_000 / (a.elapsed_time(b) * 1e3))
    timer = DeviceTimer(torch, ctx.device)
    warm = timer.cycles_per_us
    again = timer.calibrate()
    data = {"cold_cycles_per_us": cold, "warm_cycles_per_us": warm, "recalibrated_cycles_per_us": again,
            "calibration_rounds": timer.calibrations}
    off = abs(cold[-1] - warm) / warm
    text = (f"cold {cold[-1]:.0f} cycles/us (3rd of 3), warmed {warm:.0f} after {timer.calibrations[0][0]} spins, "
            f"again {again:.0f}; the cold rate is {off:.0%} off")
    if off <= 0.05:
        raise Refuted(text + " (no clock ramp seen here; the GPU may have been warm already)")
    return text, data


def _kernels_seen(torch, fn) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = []
    for e in prof.events():
        kind = str(getattr(e, "device_type", ""))
        if "CUDA" in kind:
            names.append(e.name)
    return names


def _nccl_names(names):
    return [n for n in names if "nccl" in n.lower() or "onerank" in n.lower()]


def check_nccl_kernels(ctx):
    torch = ctx.torch
    dist, _ = ctx.dist()
    x = torch.full((8192,), 3.0, dtype=torch.bfloat16, device=ctx.device)
    sentinel = _kernels_seen(torch, lambda: x.mul_(1.0))
    if not sentinel:
        raise NotReached("the profiler saw no CUDA kernel at all (no CUPTI?)")
    avg = _kernels_seen(torch, lambda: dist.all_reduce(x, op=dist.ReduceOp.AVG))
    total = _kernels_seen(torch, lambda: dist.all_reduce(x))
    ok = bool(torch.all(x == 3.0).item())
    data = {"avg_kernels": avg, "sum_kernels": total, "sentinel_kernels": sentinel, "avg_result_ok": ok}
    if not _nccl_names(avg):
        raise Refuted(f"no NCCL kernel for AVG at one rank (saw {avg})")
    if _nccl_names(total):
        raise Refuted(f"in-place SUM at one rank launched {total}")
    if not ok:
        raise Refuted("AVG at one rank changed the values")
    return f"AVG launched {_nccl_names(avg)}; in-place SUM launched {total or 'nothing'}; values kept", data


def _p(v, q=50):
    import numpy as np

    return float(np.percentile(v, q))


def check_sweep_path(ctx):
    """microbench's own CellRunner over a one-rank AVG (a real NCCL kernel) and SUM (none)."""
    torch = ctx.torch
    dist, ctrl = ctx.dist()
    from microbench.collective_bench import CellRunner
    from microbench.heartbeat import Heartbeat
    from microbench.timing import CLOCK

    cfg = SimpleNamespace(dtype="bf16", warmup=20, iters=200, verify=False, timing="per-call")
    runner = CellRunner(torch, dist, cfg, 0, ctx.device, Heartbeat(0), None)
    rows, problems = [], []
    for name, op in (("avg", dist.ReduceOp.AVG), ("sum", dist.ReduceOp.SUM)):
        for size in ((16 << 10, 1 << 20, 16 << 20) if name == "avg" else (16 << 10,)):
            x = torch.full((size // 2,), 3.0, dtype=torch.bfloat16, device=ctx.device)
            for mode in ("eager", "graph"):
                cell = SimpleNamespace(label=f"all_reduce {name} {size}B {mode}", mode=mode)
                s, call, _ = runner._measure_cuda(cell, lambda: dist.all_reduce(x, op=op), ctrl, -1, None)
                keep = ~s.short if s.short.any() and not s.short.all() else slice(None)
                row = {"op": name, "size_bytes": size, "mode": mode, "clock": s.clock,
                       "latency_us_p50": _p(s.latency_us[keep]), "latency_us_p99": _p(s.latency_us[keep], 99),
                       "enqueue_us_p50": _p(s.enqueue_us), "host_us_p50": _p(s.host_us),
                       "spin_us": s.spin_us, "spin_short": int(s.short.sum()),
                       "values_ok": bool(torch.all(x == 3.0).item())}
                rows.append(row)
                if row["spin_short"]:
                    problems.append(f"{cell.label}: {row['spin_short']} short spins")
                if mode == "graph" and s.clock != CLOCK:
                    problems.append(f"{cell.label}: graph events did not time (clock {s.clock})")
                if not row["values_ok"]:
                    problems.append(f"{cell.label}: values changed")
    by = {(r["op"], r["size_bytes"], r["mode"]): r for r in rows}
    for mode in ("eager", "graph"):
        a, z = by[("avg", 16 << 10, mode)], by[("sum", 16 << 10, mode)]
        if not a["latency_us_p50"] > z["latency_us_p50"]:
            problems.append(f"{mode}: AVG 16 KiB {a['latency_us_p50']:.2f} us not above in-place SUM's "
                            f"{z['latency_us_p50']:.2f} us (its kernel is not in the figure)")
    text = "; ".join(f"{r['op']} {r['size_bytes'] >> 10} KiB {r['mode']} {r['latency_us_p50']:.2f} us "
                     f"(host {r['host_us_p50']:.1f}, enqueue {r['enqueue_us_p50']:.1f}, short {r['spin_short']})"
                     for r in rows)
    if problems:
        raise Refuted("; ".join(problems) + " | " + text)
    return text, {"rows": rows, "calibrations": runner.timer.calibrations}


def check_oneshot_emulation(ctx):
    """8 emulated ranks x 16 blocks (128 of an H200's 132 SMs), 4 and 2, at decode sizes: no barrier
    timeout, every output verified, and each size's time beside NCCL's one-rank AVG kernel."""
    torch = ctx.torch
    try:
        from cuda_ext import oneshot
        from cuda_ext.loader import load, require_gpu

        cupy = require_gpu()
        t0 = time.perf_counter()
        kernels = load()
        build_s = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - CudaUnavailable or a build failure: not reached
        raise NotReached(f"cuda_ext: {e}") from None
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows, problems = [], []
    for world in (8, 4, 2):
        for size in (16 << 10, 256 << 10, 1 << 20):
            n = size // 2
            host = [oneshot.rank_pattern(r, n) for r in range(world)]
            inputs = [cupy.asarray(oneshot.encode(h, "bf16")) for h in host]
            blocks = oneshot.launch_config(size, oneshot.RegionLayout(
                max_blocks=max(1, min(oneshot.DEFAULT_MAX_BLOCKS, sms // world))))[0]
            try:
                res = oneshot.time_on_one_gpu(inputs, "bf16", iters=50, kernels=kernels, timeout_s=2.0)
            except Exception as e:  # noqa: BLE001 - a barrier timeout is the finding
                problems.append(f"{world} ranks {size >> 10} KiB: {type(e).__name__}: {e}")
                continue
            expected = oneshot.reference_sum(host, "bf16")
            wrong = sum(oneshot.verify(o, expected, "bf16") for o in res["outputs"])
            rows.append({"world": world, "size_bytes": size, "blocks_per_rank": blocks,
                         "transfer_us_p50": _p(res["transfer_us"]), "slowest_us_p50": _p(res["slowest_us"]),
                         "spin_short": res["spin_short"], "wrong": wrong})
            if wrong:
                problems.append(f"{world} ranks {size >> 10} KiB: {wrong} wrong elements")
    nccl = []
    try:
        dist, _ = ctx.dist()
        for size in (16 << 10, 256 << 10, 1 << 20):
            x = torch.full((size // 2,), 3.0, dtype=torch.bfloat16, device=ctx.device)
            times = []
            for _ in range(50):
                torch.cuda._sleep(1_000_000)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                dist.all_reduce(x, op=dist.ReduceOp.AVG)
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) * 1e3)
            nccl.append({"size_bytes": size, "nccl_avg_1rank_us_p50": _p(times)})
    except NotReached as e:
        nccl.append({"error": str(e)})
    data = {"kernel_build_s": build_s, "sms": sms, "rows": rows, "nccl_one_rank": nccl,
            "CUDA_DEVICE_MAX_CONNECTIONS": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")}
    text = "; ".join(f"{r['world']}x{r['blocks_per_rank']} blocks {r['size_bytes'] >> 10} KiB "
                     f"{r['transfer_us_p50']:.1f} us" for r in rows)
    if problems:
        raise Refuted("; ".join(problems) + (" | " + text if text else ""))
    return text, data


def check_trace_full_model(ctx):
    """The whole Qwen2.5-32B decode engine at TP=1: build time, traced vs untraced token latency,
    eager and graph; the cost of the graph's event nodes (2 per segment)."""
    torch = ctx.torch
    from commprof.model.models import get_model
    from microbench.decode_engine import DecodeEngine
    from microbench.trace_rank import run_tokens

    dist, _ = ctx.dist()
    shape = get_model("Qwen2.5-32B").to_dict()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    eng = DecodeEngine(torch, dist, shape, 1, 0, 1, 2048, torch.bfloat16, ctx.device, shape["layers"])
    torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    data = {"model": "Qwen2.5-32B", "layers": shape["layers"], "batch": 1, "context": 2048, "build_s": build_s,
            "segments": len(eng.segments), "event_nodes_per_step": 2 * len(eng.segments),
            "memory_allocated_gb": torch.cuda.memory_allocated() / 1e9}
    for mode in ("eager", "graph"):
        for traced in (False, True):
            info = {}
            lat, _, _ = run_tokens(torch, eng, 16, 3, mode, traced=traced, info=info)
            data[f"{mode}_{'traced' if traced else 'untraced'}_us_p50"] = _p(lat)
            if traced:
                data[f"{mode}_offsets_origin"] = info.get("origin")
    for mode in ("eager", "graph"):
        u, t = data[f"{mode}_untraced_us_p50"], data[f"{mode}_traced_us_p50"]
        data[f"{mode}_tracing_cost_pct"] = 100.0 * (t - u) / u
    text = (f"build {build_s:.1f} s, {data['memory_allocated_gb']:.1f} GB; token p50 eager {data['eager_untraced_us_p50']:.0f}"
            f" us untraced / {data['eager_traced_us_p50']:.0f} traced, graph {data['graph_untraced_us_p50']:.0f} / "
            f"{data['graph_traced_us_p50']:.0f} ({data['event_nodes_per_step']} event nodes: "
            f"{data['graph_tracing_cost_pct']:+.1f}%)")
    return text, data


# key, group, the assumption, the check, its time box (s)
CHECKS = [
    ("spin-clock", "events", "the spin's clock rate measured cold differs from the loaded rate, so the "
     "timer warms the clock before calibrating", check_spin_clock, 20),
    ("event-never-recorded", "events", "query() on a never-recorded event is True and elapsed_time with it "
     "raises ValueError (as tests/fake_cuda.py)", check_never_recorded, 10),
    ("elapsed-before-complete", "events", "elapsed_time raises RuntimeError until both events completed; it "
     "never waits (as tests/fake_cuda.py)", check_elapsed_before_complete, 10),
    ("graph-events-time", "events", "events recorded by graph nodes (external=True) time after a replay "
     "(the sweep's graph mode)", check_graph_events_time, 10),
    ("graph-events-mixed", "events", "elapsed_time between an event recorded outside a graph and one a graph "
     "node recorded works (the trace's graph mode)", check_graph_events_mixed, 10),
    ("nccl-one-rank-kernels", "nccl", "at one rank, AVG on bf16 launches NCCL's one-rank reduce kernel and an "
     "in-place SUM launches none", check_nccl_kernels, 40),
    ("sweep-path", "nccl", "the sweep's timing path times a real NCCL kernel at one rank, eager and graph: no "
     "short spin, events inside the graph time, AVG above in-place SUM", check_sweep_path, 60),
    ("oneshot-emulated-ranks", "oneshot", "8 emulated ranks x 16 blocks of the one-shot all-reduce run at once "
     "on one GPU without a barrier timeout and verify (timed beside NCCL's one-rank AVG)",
     check_oneshot_emulation, 60),
    ("sync-in-capture", "events", "torch.cuda.synchronize() during a capture raises and the capture fails "
     "(as tests/fake_cuda.py)", check_sync_in_capture, 10),
    ("trace-full-model", "trace", "the full Qwen2.5-32B decode engine runs at TP=1 on one GPU, eager and "
     "graph, traced and untraced", check_trace_full_model, 90),
]
GROUPS = ["events", "nccl", "oneshot", "trace"]


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def run_check(ctx, key, statement, fn, box_s: int, outdir: str | None) -> dict:
    rec = {"key": key, "assumption": statement, "status": "running", "detail": "", "data": None,
           "seconds": 0.0, "time_box_s": box_s}
    path = os.path.join(outdir, f"{key}.json") if outdir else None

    def save():
        if path:
            with open(path + ".tmp", "w") as f:
                json.dump(rec, f, indent=1, default=str)
            os.replace(path + ".tmp", path)
    save()
    t0 = time.perf_counter()
    old = signal.signal(signal.SIGALRM, _alarm) if hasattr(signal, "SIGALRM") else None
    if old is not None:
        signal.alarm(box_s)
    try:
        out = fn(ctx)
        text, data = out if isinstance(out, tuple) else (out, None)
        rec.update(status=CONFIRMED, detail=text, data=data)
    except Refuted as e:
        rec.update(status=REFUTED, detail=str(e))
    except NotReached as e:
        rec.update(status=NOT_REACHED, detail=str(e))
    except _Timeout:
        rec.update(status=NOT_REACHED, detail=f"timed out after its {box_s} s box")
    except Exception as e:  # noqa: BLE001 - a crash is not a verdict: say what it was
        rec.update(status=NOT_REACHED, detail=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    finally:
        if old is not None:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
    rec["seconds"] = round(time.perf_counter() - t0, 2)
    save()
    return rec


def summarize(outdir: str) -> list[str]:
    """One line per known assumption, from the JSON files under ``outdir`` (not reached where none)."""
    lines = []
    for key, group, statement, _, _ in CHECKS:
        rec = None
        try:
            with open(os.path.join(outdir, f"{key}.json")) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            pass
        if rec is None:
            status, detail = NOT_REACHED, f"its step ({group}) did not run"
        elif rec.get("status") == "running":
            status, detail = NOT_REACHED, f"killed while running (time box {rec.get('time_box_s')} s)"
        else:
            status, detail = rec.get("status", NOT_REACHED), rec.get("detail", "")
        lines.append(f"{status:<11}  {key}: {statement}" + (f" -- {detail}" if detail else ""))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--only", help="comma-separated check keys")
    ap.add_argument("--group", help=f"comma-separated groups of checks ({', '.join(GROUPS)})")
    ap.add_argument("--list", action="store_true", help="list the checks and exit")
    ap.add_argument("--summarize", action="store_true", help="print one line per assumption from OUTDIR")
    a = ap.parse_args(argv)
    if a.list:
        for key, group, statement, _, box in CHECKS:
            print(f"{key} [{group}, {box} s]: {statement}")
        return 0
    if not a.outdir:
        ap.error("OUTDIR is required")
    if a.summarize:
        print("\n".join(summarize(a.outdir)))
        return 0
    todo = CHECKS
    if a.only:
        keys = a.only.split(",")
        unknown = sorted(set(keys) - {c[0] for c in CHECKS})
        if unknown:
            ap.error(f"unknown check(s) {', '.join(unknown)}")
        todo = [c for c in CHECKS if c[0] in keys]
    if a.group:
        groups = a.group.split(",")
        if set(groups) - set(GROUPS):
            ap.error(f"--group {a.group}: groups are {', '.join(GROUPS)}")
        todo = [c for c in todo if c[1] in groups]
    os.makedirs(a.outdir, exist_ok=True)
    if any(c[1] == "oneshot" for c in todo):
        # Each emulated rank of the one-shot check runs on its own stream; two streams sharing one of
        # the GPU's hardware queues (8 by default) can queue a rank's kernel behind another rank's
        # spinning one. Set before CUDA starts, only for that check's process (a user's setting is kept).
        os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    ctx = Context()
    worst = 0
    for key, _, statement, fn, box in todo:
        rec = run_check(ctx, key, statement, fn, box, a.outdir)
        print(f"[{rec['status']}] {key} ({rec['seconds']:.1f} s): {rec['detail']}", flush=True)
        worst = max(worst, 0 if rec["status"] == CONFIRMED else 1)
    return worst


if __name__ == "__main__":
    sys.exit(main())
