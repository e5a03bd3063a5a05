"""A stand-in for ``torch.cuda`` that models one GPU stream against the host's real clock.

Work queued on the stream starts when the stream is free and the host has queued it, and runs for
its given device time; an event fires when every item queued before it has finished. So a test
can give an op a known host dispatch cost and a known device time, and check what a timing method
reports: what a real GPU would show, without one. Graph capture records the stream's work and
events; a replay queues them again (the host dispatch cost is paid once, at capture).
"""
from __future__ import annotations

import contextlib
import time
from types import SimpleNamespace


def busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class FakeGpu:
    def __init__(self, clock_hz: float = 1.0e9, external_events: bool = True):
        self.clock_hz = clock_hz
        self.tail = 0.0              # host-clock time at which the last queued item ends
        self.capture = None          # list of recorded nodes while capturing a graph
        self.sleeps = []             # cycles of every _sleep call (outside capture)
        gpu = self

        class Event:
            def __init__(self, enable_timing=False, blocking=False, interprocess=False, **kw):
                self.t = None
                self.external = kw.get("external", False)

            def record(self, stream=None):
                if gpu.capture is not None:
                    gpu.capture.append(("event", self))
                else:
                    self.t = max(time.perf_counter(), gpu.tail)

            def query(self):
                return self.t is not None and time.perf_counter() >= self.t

            def synchronize(self):
                while self.t is not None and time.perf_counter() < self.t:
                    pass

            def elapsed_time(self, other):
                if self.t is None or other.t is None:    # as torch (c10 CUDAEvent::elapsed_time)
                    raise ValueError("Both events must be recorded before calculating elapsed time.")
                return (other.t - self.t) * 1e3          # ms, as torch

        if external_events:
            class ExternalEvent(Event):
                def __init__(self, enable_timing=False, blocking=False, interprocess=False, external=False):
                    super().__init__(enable_timing, blocking, interprocess, external=external)
            self.Event = ExternalEvent
        else:
            self.Event = Event

        class CUDAGraph:
            def __init__(self):
                self.nodes = []

            def replay(self):
                for kind, x in self.nodes:
                    if kind == "event":
                        x.t = max(time.perf_counter(), gpu.tail)
                    else:
                        gpu._queue(x)

        @contextlib.contextmanager
        def graph(g):
            gpu.capture = g.nodes
            try:
                yield
            finally:
                gpu.capture = None

        def synchronize(device=None):
            while time.perf_counter() < gpu.tail:
                pass

        self.cuda = SimpleNamespace(
            Event=self.Event, CUDAGraph=CUDAGraph, graph=graph, synchronize=synchronize,
            _sleep=self._sleep, current_stream=lambda device=None: SimpleNamespace(synchronize=synchronize))

    def _queue(self, seconds: float) -> None:
        start = max(time.perf_counter(), self.tail)
        self.tail = start + seconds

    def work(self, seconds: float) -> None:
        """Queue device work (or record it into the graph being captured)."""
        if self.capture is not None:
            self.capture.append(("work", seconds))
        else:
            self._queue(seconds)

    def _sleep(self, cycles: int) -> None:
        if self.capture is None:
            self.sleeps.append(cycles)
        self.work(cycles / self.clock_hz)

    def op(self, dispatch_us: float, device_us: float):
        """An op that costs the host ``dispatch_us`` to enqueue and the GPU ``device_us`` to run."""
        def call():
            busy_wait(dispatch_us * 1e-6)
            self.work(device_us * 1e-6)
        return call


class FakeTorch:
    """Real torch for tensors, the fake GPU for ``torch.cuda``."""

    def __init__(self, gpu: FakeGpu):
        import torch

        self._torch = torch
        self.cuda = gpu.cuda

    def __getattr__(self, name):
        return getattr(self._torch, name)
