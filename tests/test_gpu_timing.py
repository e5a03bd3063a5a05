"""The sweep's GPU timing method on a modelled GPU (tests/fake_cuda.py): the latency column is the
op's device time, host dispatch and host-observed time are their own columns, the spin that hides
dispatch widens itself when it falls short, and graph mode refuses a torch without external events.
"""
from types import SimpleNamespace

import numpy as np
import pytest

from commprof.errors import UsageError
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
    lats = [timer.device_sample(call)[0] for _ in range(12)]
    assert timer.spin_short >= 1                      # 20 us cannot hide a 300 us dispatch
    assert timer.spin_us > DISPATCH_US                # ... so it doubled until it could
    assert lats[0] > DISPATCH_US                      # the uncovered sample holds host time
    assert abs(np.median(lats[-4:]) - DEVICE_US) < 5  # covered samples are the op alone


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

    from commprof.launch import parse_modes

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
