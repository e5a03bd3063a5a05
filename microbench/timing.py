"""How one collective call is timed on a GPU: the device's time of the op alone.

A CUDA event recorded just before a call on an idle stream fires at once, then waits while the host
dispatches the op (10-30 us through torch.distributed, more through Python launch paths), so the
elapsed time would be mostly host overhead. At decode sizes the op itself takes 5-15 us on NVLink,
so :class:`DeviceTimer` does this instead, per sample:

1. queue a spin kernel (``torch.cuda._sleep``) long enough to cover the host's dispatch;
2. record the start event (eager) -- or, in graph mode, replay a graph that holds the start event,
   the op and the end event (events captured with ``external=True`` stay timeable after replay);
3. call the op: the host enqueues it while the GPU is still spinning;
4. check that the start event had not fired yet when the call returned: if it had, the GPU reached
   the op before it was fully enqueued, the sample may hold host time: it is flagged *short* (the
   sweep drops such iterations from its statistics and counts them in ``spin_short``) and the spin
   is doubled for the next samples;
5. record the end event, wait for it: ``latency_us`` = end - start, device time of the op alone.

The spin is sized in clock cycles (``torch.cuda._sleep``), so its length in time follows the SM
clock, which idles far below its loaded rate (the GPU check's spin-clock assumption records both).
The rate is therefore measured after warming the clock (spinning until two consecutive
measurements agree and the GPU has been busy ``WARM_MS``), and measured again for every cell
(:meth:`DeviceTimer.calibrate`).

Graph mode reads events recorded by graph nodes (``external=True``). Should ``elapsed_time``
between them fail on some driver, the timer falls back to plain events recorded outside the
graph, right after the spin and right after the replay (``clock`` then says
``cuda_event_spin_outer``: the figure then includes the graph launch's device-side start).

``enqueue_us`` is the host time of step 3 (what a graph replay or an eager dispatch costs the CPU).
``host_us`` comes from a separate sample with no spin: the host's view of one call on an idle GPU,
from issuing it until it is seen complete -- what an eager engine that waits on each op pays.

What the spin does not remove is arrival skew between ranks: each rank queues its spin when its
barrier releases, so the first rank's op waits for the last one inside the collective. The sweep
reports that skew per sample (max - min of the ranks' device times).

``torch`` is passed in (a fake in the CPU tests).
"""
from __future__ import annotations

import time

from commprof.model.machine import supports_graph_events

SPIN_MIN_US = 20.0
SPIN_MAX_US = 20000.0
CALIBRATE_CYCLES = 1_000_000     # one calibration spin: 0.5 ms at 2 GHz, 3 ms at 330 MHz
WARM_MS = 50.0                   # device time spun before the first rate counts (clock ramp-up)
RATE_AGREE = 0.02                # two consecutive rates within 2%: the clock has settled
MAX_CALIBRATION_ROUNDS = 200
CLOCK = "cuda_event_spin"
CLOCK_OUTER = "cuda_event_spin_outer"


def timing_event(torch, external: bool = False):
    """A timing CUDA event; ``external=True`` for one recorded inside a captured graph."""
    if external:
        return torch.cuda.Event(enable_timing=True, external=True)
    return torch.cuda.Event(enable_timing=True)


class DeviceTimer:
    """Device-side timing of one call on the current CUDA stream (see the module docstring)."""

    def __init__(self, torch, device, spin_us: float = 50.0):
        self.torch, self.device = torch, device
        self.calibrations = []           # (rounds, cycles_per_us) of every calibration
        self.cycles_per_us = self.calibrate(WARM_MS)
        self.spin_us = min(max(spin_us, SPIN_MIN_US), SPIN_MAX_US)
        self.spin_short = 0
        self.start = self.end = None
        self.clock = CLOCK

    def calibrate(self, warm_ms: float = 0.0) -> float:
        """Clock cycles of ``torch.cuda._sleep`` per microsecond, measured here with events: spins
        of ``CALIBRATE_CYCLES`` until the GPU has spun ``warm_ms`` and two consecutive rates agree
        within ``RATE_AGREE`` (the first spin also warms the kernel up). Sets and returns the rate."""
        torch = self.torch
        a, b = timing_event(torch), timing_event(torch)
        rates, spun_us = [], 0.0
        for _ in range(MAX_CALIBRATION_ROUNDS):
            a.record()
            torch.cuda._sleep(CALIBRATE_CYCLES)
            b.record()
            b.synchronize()
            us = a.elapsed_time(b) * 1e3
            spun_us += us
            rates.append(CALIBRATE_CYCLES / us if us > 0 else 1000.0)
            if len(rates) >= 3 and spun_us >= warm_ms * 1e3 and \
                    abs(rates[-1] - rates[-2]) <= RATE_AGREE * rates[-1]:
                break
        self.cycles_per_us = rates[-1]
        self.calibrations.append((len(rates), rates[-1]))
        return rates[-1]

    def prepare(self, op, mode: str):
        """The callable to time: the op (eager), or the replay of a graph that holds the start
        event, the op and the end event (graph)."""
        torch = self.torch
        self._graph = None            # the previous cell's graph (and its memory pool) goes first
        if mode == "graph":
            if not supports_graph_events(torch):
                raise RuntimeError("graph mode needs torch.cuda.Event(external=True) (torch >= 2.8)")
            self.start, self.end = timing_event(torch, True), timing_event(torch, True)

            def timed():
                self.start.record()
                op()
                self.end.record()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                timed()
            torch.cuda.synchronize(self.device)
            self._graph = graph
            # a plain event after the spin, outside the graph, tells whether the spin was still
            # running when the replay call returned (and, with ``_after``, is the fallback clock)
            self._ready, self._after = timing_event(torch), timing_event(torch)
            return graph.replay
        self.start, self.end = timing_event(torch), timing_event(torch)
        self._ready, self._after = self.start, None   # eager: the start event itself follows the spin
        return op

    def fit_spin(self, enqueue_us) -> None:
        """Size the spin from warm-up dispatch times: twice the slowest, plus a margin."""
        if len(enqueue_us):
            self.spin_us = min(max(2.0 * max(enqueue_us) + SPIN_MIN_US, SPIN_MIN_US), SPIN_MAX_US)

    def device_sample(self, call) -> tuple[float, float, bool]:
        """One spin-covered sample: (device latency_us, enqueue_us, short). ``short``: the spin
        ended before the op was enqueued, so the latency may hold host time."""
        torch, perf = self.torch, time.perf_counter
        ready = self._ready
        torch.cuda._sleep(int(self.spin_us * self.cycles_per_us))
        ready.record()
        t0 = perf()
        call()
        t1 = perf()
        short = ready.query()
        if short:
            # The GPU finished the spin before the op was enqueued: widen it for the next samples.
            self.spin_short += 1
            self.spin_us = min(self.spin_us * 2.0, SPIN_MAX_US)
        if self._graph is None:
            self.end.record()
            self.end.synchronize()
            return self.start.elapsed_time(self.end) * 1e3, (t1 - t0) * 1e6, short
        self._after.record()
        self._after.synchronize()
        if self.clock == CLOCK:
            try:
                return self.start.elapsed_time(self.end) * 1e3, (t1 - t0) * 1e6, short
            except RuntimeError:
                self.clock = CLOCK_OUTER       # events inside the graph do not time here
        return ready.elapsed_time(self._after) * 1e3, (t1 - t0) * 1e6, short

    def host_sample(self, call) -> float:
        """The host's view of one call on an idle GPU: issue to seen complete, in us."""
        perf = time.perf_counter
        t0 = perf()
        call()
        self.torch.cuda.current_stream(self.device).synchronize()
        return (perf() - t0) * 1e6
