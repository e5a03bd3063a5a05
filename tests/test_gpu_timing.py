"""The sweep's GPU timing method on a modelled GPU (tests/fake_cuda.py): the latency column is the
op's device time, host dispatch and host-observed time are their own columns, the spin that hides
dispatch widens itself when it falls short, and graph mode refuses a torch without external events.
"""
from types import SimpleNamespace

import numpy as np
import pytest

from commprof.model.errors import UsageError
from fake_cuda import FakeGpu, FakeTorch
from microbench.collective_bench import CellRunner
from microbench.heartbeat import Heartbeat
from microbench.timing import DeviceTimer

DISPATCH_US, DEVICE_US = 300.0, 40.0


class NoDist:
    @staticmethod
    def barrier(group=None):
        return None


def _runner(gpu, iters=40, warmup=5):
    cfg = SimpleNamespace(dtype="bf16", warmup=warmup, iters=iters, verify=False)
    return CellRunner(FakeTorch(gpu), NoDist, cfg, 0, SimpleNamespace(type="cuda", index=0), Heartbeat(0), None)


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_latency_is_device_time_not_host_dispatch(mode):
    gpu = FakeGpu()
    runner = _runner(gpu)
    cell = SimpleNamespace(label=f"all_reduce 4KiB {mode}", mode=mode)
    s, _, wrong = runner._measure_cuda(cell, gpu.op(DISPATCH_US, DEVICE_US), None, -1, None)
    assert wrong == 0
    lat = np.median(s.latency_us)
    # Timed the old way (start event on an idle stream) an eager sample would be ~340 us.
    assert DEVICE_US - 0.5 <= lat <= DEVICE_US + 5, lat
    host = np.median(s.host_us)
    enq = np.median(s.enqueue_us)
    if mode == "eager":
        assert enq >= DISPATCH_US and host >= DISPATCH_US + DEVICE_US
        assert s.spin_us >= 2 * DISPATCH_US          # sized from the warm-up dispatch times
    else:
        # a replay dispatches nothing: the captured op's host cost was paid once, at capture
        assert enq < DISPATCH_US / 2 and DEVICE_US <= host < DISPATCH_US
    assert len(gpu.sleeps) >= runner.cfg.iters       # one spin per timed sample (and 3 calibrations)


def test_short_spin_is_counted_and_widened():
    gpu = FakeGpu()
    timer = DeviceTimer(FakeTorch(gpu), SimpleNamespace(type="cuda"), spin_us=20)
    call = timer.prepare(gpu.op(DISPATCH_US, DEVICE_US), "eager")
    samples = [timer.device_sample(call) for _ in range(12)]
    lats = [lat for lat, _, _ in samples]
    assert timer.spin_short >= 1                      # 20 us cannot hide a 300 us dispatch
    assert timer.spin_us > DISPATCH_US                # ... so it doubled until it could
    assert samples[0][2] and lats[0] > DISPATCH_US    # the uncovered sample holds host time, and says so
    covered = [lat for lat, _, short in samples[-6:] if not short]   # (a loaded host may still stall one)
    assert covered and abs(np.median(covered) - DEVICE_US) < 5       # covered samples are the op alone


def test_calibration_reads_the_spin_clock():
    gpu = FakeGpu(clock_hz=2.0e9)
    timer = DeviceTimer(FakeTorch(gpu), SimpleNamespace(type="cuda"))
    assert timer.cycles_per_us == pytest.approx(2000, rel=0.05)


def test_graph_mode_needs_external_events(monkeypatch):
    gpu = FakeGpu(external_events=False)
    timer = DeviceTimer(FakeTorch(gpu), SimpleNamespace(type="cuda"))
    with pytest.raises(RuntimeError, match="external"):
        timer.prepare(gpu.op(1, 1), "graph")

    import torch

    from commprof.capture.launch import parse_modes

    assert parse_modes("eager,graph", "nccl") == ["eager", "graph"]     # torch 2.13 has them
    monkeypatch.setattr(torch.cuda, "Event", gpu.Event)                # a torch without them
    with pytest.raises(UsageError, match=r"torch >= 2\.8.*--modes eager"):
        parse_modes("eager,graph", "nccl")
    assert parse_modes("eager", "nccl") == ["eager"]


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_back_to_back_averages_a_loop_like_nccl_tests(mode):
    """A loop of calls timed as one: eager pays the host dispatch of every call (the GPU waits on
    the host), a captured graph of the loop does not (nccl-tests -G)."""
    from microbench.collective_bench import CellRunner

    gpu = FakeGpu()
    cfg = SimpleNamespace(dtype="bf16", warmup=2, iters=5, verify=False, timing="back-to-back", loop=8)
    runner = CellRunner(FakeTorch(gpu), NoDist, cfg, 0, SimpleNamespace(type="cuda", index=0), Heartbeat(0), None)
    cell = SimpleNamespace(label=f"all_reduce 4KiB {mode}", mode=mode)
    s, call = runner._measure_loop(cell, gpu.op(DISPATCH_US, DEVICE_US), None, -1)
    per_call = float(np.median(s.latency_us))
    if mode == "eager":
        assert per_call >= DISPATCH_US                 # launch-bound: dispatch dominates each call
    else:
        assert DEVICE_US - 0.5 <= per_call <= DEVICE_US + 15
    assert s.host_us is None and s.spin_us is None     # no spin, no per-call host samples
    assert gpu.sleeps == []                            # no spin kernel: nothing hides the launches


def test_untraced_cuda_token_is_timed_without_segment_events():
    """An untraced decode step (the tracer-overhead benchmark's other half) records only the
    token's two events; reading the segment events it never recorded raises on a GPU."""
    from microbench.decode_engine import CudaStamps

    gpu = FakeGpu()
    stamps = CudaStamps(FakeTorch(gpu), nseg=3)
    stamps.begin()
    gpu.work(DEVICE_US * 1e-6)
    stamps.finish()
    assert stamps.latency_us() == pytest.approx(DEVICE_US, abs=5)
    with pytest.raises(ValueError, match="recorded"):
        stamps.result_us()


# ---- the fake is as strict as torch on CUDA (c10/cuda/CUDAEvent.h, CUDA's stream-capture rules) ----

def test_fake_events_are_as_strict_as_torch():
    gpu = FakeGpu()
    E = lambda: gpu.Event(enable_timing=True)  # noqa: E731
    a, b = E(), E()
    assert a.query() is True                     # never recorded: torch returns True
    a.synchronize()                              # ... and synchronize is a no-op
    with pytest.raises(ValueError, match="recorded"):
        a.elapsed_time(b)
    with pytest.raises(ValueError, match="enable_timing"):
        gpu.Event().elapsed_time(b)
    a.record()
    gpu.work(0.05)
    b.record()
    assert not b.query()
    with pytest.raises(RuntimeError, match="completed"):
        a.elapsed_time(b)                        # never waits: raises until both completed
    b.synchronize()
    assert a.elapsed_time(b) == pytest.approx(50, abs=5)


def test_fake_refuses_to_synchronise_during_a_capture():
    gpu = FakeGpu()
    for sync in (gpu.cuda.synchronize, gpu.cuda.current_stream().synchronize):
        g = gpu.cuda.CUDAGraph()
        with pytest.raises(RuntimeError, match="previous error during capture"):
            with gpu.cuda.graph(g):
                gpu.work(1e-6)
                with pytest.raises(RuntimeError, match="capturing"):
                    sync()
        assert g.nodes == []                      # the capture was invalidated
    inside, plain = gpu.Event(enable_timing=True, external=True), gpu.Event(enable_timing=True)
    g = gpu.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="previous error"):
        with gpu.cuda.graph(g):
            inside.record()
            with pytest.raises(RuntimeError, match="capturing"):
                inside.query()
    with gpu.cuda.graph(g):
        plain.record()                           # not external: a dependency inside the graph
    for use in (plain.query, plain.synchronize, lambda: plain.elapsed_time(plain)):
        with pytest.raises(RuntimeError, match="capturing"):
            use()


def test_fake_external_event_times_only_after_a_replay():
    gpu = FakeGpu()
    a, b = gpu.Event(enable_timing=True, external=True), gpu.Event(enable_timing=True, external=True)
    g = gpu.cuda.CUDAGraph()
    with gpu.cuda.graph(g):
        a.record()
        gpu.work(1e-3)
        b.record()
    with pytest.raises(RuntimeError):
        a.elapsed_time(b)                        # created, but no node has recorded them yet
    g.replay()
    b.synchronize()
    assert a.elapsed_time(b) == pytest.approx(1.0, abs=0.3)


# ---- the biases: spin clock, short samples, graph-event fallback --------------------------------------

def test_calibration_warms_the_clock_before_it_counts():
    """A modelled GPU idling at 345 MHz that spins at 1980 MHz once busy 30 ms: three 1M-cycle spins from idle
    (8.7 ms) would all run at the idle clock. The calibration spins until the clock has settled."""
    gpu = FakeGpu(clock_hz=1.98e9, idle_clock_hz=0.345e9, ramp_s=0.03)
    timer = DeviceTimer(FakeTorch(gpu), SimpleNamespace(type="cuda"))
    assert timer.cycles_per_us == pytest.approx(1980, rel=0.05)
    rounds, _ = timer.calibrations[0]
    assert rounds > 3                            # it went on past the idle-clock rounds


class OneRankDist:
    """torch.distributed for a group of one rank: collectives leave the tensor as it is."""
    ReduceOp = SimpleNamespace(MAX="max", MIN="min", SUM="sum")

    @staticmethod
    def barrier(group=None):
        return None

    @staticmethod
    def all_reduce(t, op=None, group=None):
        return None


def test_short_spin_samples_are_left_out_of_the_statistics_and_counted():
    """Two timed calls dispatch for 30 ms: longer than the spin can ever be (SPIN_MAX_US), so it falls short, the
    sample holds host time; the row counts those iterations and its latency is the op's alone."""
    from microbench.collective_bench import _aggregate, _row

    gpu = FakeGpu()
    calls = [0]

    def op():
        calls[0] += 1
        gpu.op(30000.0 if calls[0] in (16, 32) else DISPATCH_US, DEVICE_US)()   # calls 6, 8, ...: timed
    runner = _runner(gpu, iters=40, warmup=5)
    cell = SimpleNamespace(label="all_reduce 4KiB eager", mode="eager", op="all_reduce", tp=1, size_bytes=4096,
                           in_numel=2048, batch=None, site="")
    s, _, _ = runner._measure_cuda(cell, op, None, -1, None)
    assert s.short.sum() >= 2 and s.latency_us.max() > 9000          # the long dispatches show in raw samples
    agg = _aggregate(FakeTorch(gpu), OneRankDist, s, None, 1)
    cfg = SimpleNamespace(backend="nccl", timing="per-call", baseline_impl="nccl", dtype="bf16", iters=40,
                          warmup=5, concurrent=False, loop=1)
    row = _row(cell, cfg, 0, [0], agg, ["h"])
    assert row["spin_short"] == int(s.short.sum())
    assert row["latency_us_max"] < DEVICE_US + 20, row["latency_us_max"]
    assert row["clock"] == "cuda_event_spin"


def test_graph_mode_falls_back_to_outer_events_when_graph_events_do_not_time():
    gpu = FakeGpu(graph_event_timing=False)
    runner = _runner(gpu)
    cell = SimpleNamespace(label="all_reduce 4KiB graph", mode="graph")
    s, _, _ = runner._measure_cuda(cell, gpu.op(DISPATCH_US, DEVICE_US), None, -1, None)
    assert s.clock == "cuda_event_spin_outer"
    assert DEVICE_US - 0.5 <= np.median(s.latency_us) <= DEVICE_US + 10


@pytest.mark.parametrize("mixed", [True, False])
def test_traced_graph_step_offsets_with_and_without_mixed_events(mixed):
    """Graph-mode trace: the token's events are outside the graph, the segments' inside. Where
    elapsed_time across the two fails, offsets count from the first segment (origin says so)."""
    from microbench.decode_engine import ORIGIN_FIRST_SEGMENT, ORIGIN_TOKEN, CudaStamps

    gpu = FakeGpu(mixed_graph_events=mixed)
    stamps = CudaStamps(FakeTorch(gpu), nseg=2, external=True)
    g = gpu.cuda.CUDAGraph()
    with gpu.cuda.graph(g):
        for j in range(2):
            stamps.mark(j)
            gpu.work(1e-3)
            stamps.mark(j, end=True)
    stamps.begin()
    g.replay()
    stamps.finish()
    lat, offs, durs = stamps.result_us()
    assert stamps.origin == (ORIGIN_TOKEN if mixed else ORIGIN_FIRST_SEGMENT)
    assert durs == pytest.approx([1000, 1000], abs=150)
    assert offs[1] - offs[0] == pytest.approx(1000, abs=150)
    assert offs[0] >= 0 and offs[1] + durs[1] <= lat + 1


def test_p2p_probe_timing_is_spin_first_not_launch_inclusive():
    """cuda_ext.probes times every copy behind commprof_spin: a 200 us launch of a 30 us copy reads
    30 us, where an event pair recorded on the idle stream around the launch reads 230 us."""
    from cuda_ext.probes import _timed
    from fake_cuda import FakeCupy

    gpu = FakeGpu()
    cp = FakeCupy(gpu)

    def enqueue(stream):
        gpu.op(200.0, 30.0)()
    res = _timed(cp, 0, enqueue, iters=15, warmup=3, kernels=cp.kernels)
    assert len(cp.launches) == 15 and all(g == (1,) and b == (1,) for _, g, b in cp.launches)
    assert np.median(res["times_ms"]) * 1e3 == pytest.approx(30.0, abs=3)
    assert res["spin_us"] >= 2 * 200.0
    # the old method, side by side: start on an idle stream, so the launch is inside the figure
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    enqueue(None)
    b.record()
    b.synchronize()
    assert cp.cuda.get_elapsed_time(a, b) * 1e3 >= 200.0
    a.record()
    gpu.op(0.0, 20000.0)()
    b.record()
    with pytest.raises(RuntimeError, match="not ready"):
        cp.cuda.get_elapsed_time(a, b)               # cupy never waits either


class VirtualClock:
    """``time.perf_counter`` that only the code under test moves: each read advances it by ``tick_s``.
    The fake GPU and the probes' loop both read it, so a host busy with other work cannot stretch a
    dispatch, stall a warm-up or change which launch outran its spin: the same answer on any machine."""

    def __init__(self, tick_s: float = 0.5e-6):
        self.now, self.tick_s = 1000.0, tick_s

    def __call__(self) -> float:
        self.now += self.tick_s
        return self.now


def test_p2p_probe_counts_and_leaves_out_short_spins(monkeypatch):
    import time

    from cuda_ext.probes import _timed
    from fake_cuda import FakeCupy

    clock = VirtualClock()
    monkeypatch.setattr(time, "perf_counter", clock)
    gpu = FakeGpu()
    cp = FakeCupy(gpu)
    n = [0]

    def enqueue(stream):
        n[0] += 1
        gpu.op(8000.0 if n[0] == 6 else 100.0, 30.0)()      # the 3rd timed launch takes 8 ms
    res = _timed(cp, 0, enqueue, iters=10, warmup=3, kernels=cp.kernels)
    assert res["spin_short"] >= 1 and len(res["times_ms"]) == 10 - res["spin_short"]
    assert max(res["times_ms"]) * 1e3 < 100.0                # the uncovered sample is not among them
    # on this clock the answer is exact: the 8 ms launch outran its spin (sized from 100 us warm-ups)
    # and only it; the spin then doubled once
    assert res["spin_short"] == 1 and len(res["times_ms"]) == 9
    assert all(abs(t * 1e3 - 30.0) < 1.0 for t in res["times_ms"])
