"""A stand-in for ``torch.cuda`` that models one GPU stream against the host's real clock.

Work queued on the stream starts when the stream is free and the host has queued it, and runs for
its given device time; an event fires when every item queued before it has finished. So a test
can give an op a known host dispatch cost and a known device time, and check what a timing method
reports: what a real GPU would show, without one. Graph capture records the stream's work and
events; a replay queues them again (the host dispatch cost is paid once, at capture).

As strict as torch 2.13 on CUDA where a timing method could go wrong (c10/cuda/CUDAEvent.h, and
the CUDA runtime's stream-capture rules), so that a method that passes here cannot fail there:

* ``query()`` on an event never recorded is True (torch returns early when the event was never
  created); ``synchronize()`` on one is a no-op;
* ``elapsed_time`` raises ValueError unless both events were created with ``enable_timing=True``
  and both were recorded, and RuntimeError unless both have *completed* (torch checks ``query()``
  on both first): it never waits;
* during a capture, ``torch.cuda.synchronize()``, a stream's ``synchronize()``, or a query or
  synchronize of an event recorded into the capture raise RuntimeError (CUDA: operation not
  permitted when stream is capturing) and invalidate the capture, whose end then raises too;
* an event recorded during a capture without ``external=True`` becomes a dependency inside the
  graph, not a node: afterwards querying, synchronising or timing it raises RuntimeError
  (cudaErrorCapturedEvent);
* an ``external=True`` event recorded only inside a graph that was never replayed has no
  timestamp: ``elapsed_time`` raises RuntimeError (invalid resource handle).

Knobs for what only a GPU can tell: ``idle_clock_hz``/``ramp_s`` (the spin kernel runs at the idle
clock until the GPU has been busy ``ramp_s``, as a GPU ramps its clock under load), and
``mixed_graph_events=False`` (``elapsed_time`` between an event a graph node recorded and one
recorded outside the graph raises), ``graph_event_timing=False`` (no event a graph node recorded
times at all): the cases a graph-mode timing method needs a fallback for.
"""
from __future__ import annotations

import contextlib
import time
from types import SimpleNamespace


def busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


CAPTURING = "CUDA error: operation not permitted when stream is capturing"
CAPTURED_EVENT = "CUDA error: operation not permitted on an event last recorded in a capturing stream"


class FakeGpu:
    def __init__(self, clock_hz: float = 1.0e9, external_events: bool = True, idle_clock_hz: float | None = None,
                 ramp_s: float = 0.0, mixed_graph_events: bool = True, graph_event_timing: bool = True):
        self.clock_hz = clock_hz
        self.idle_clock_hz = idle_clock_hz or clock_hz
        self.ramp_s = ramp_s
        self.busy_s = 0.0            # device time queued so far (the clock ramps with it)
        self.mixed_graph_events = mixed_graph_events
        self.graph_event_timing = graph_event_timing
        self.tail = 0.0              # host-clock time at which the last queued item ends
        self.capture = None          # list of recorded nodes while capturing a graph
        self.capture_error = None    # set by an illegal call during the capture
        self.sleeps = []             # cycles of every _sleep call (outside capture)
        gpu = self

        class Event:
            def __init__(self, enable_timing=False, blocking=False, interprocess=False, **kw):
                self.enable_timing = enable_timing
                self.external = kw.get("external", False)
                self.t = None            # host-clock time at which it fires (None: never recorded)
                self.created = False     # torch creates the CUDA event at its first record
                self.captured = False    # last recorded into a capture as an internal dependency
                self.by_graph = False    # last recorded by a graph node (an external event replayed)

            def record(self, stream=None):
                self.created = True
                if gpu.capture is not None:
                    if self.external:
                        gpu.capture.append(("event", self))
                    else:
                        self.captured = True
                else:
                    self.captured = self.by_graph = False
                    self.t = max(time.perf_counter(), gpu.tail)

            def _usable(self):
                if self.captured or (gpu.capture is not None and any(x is self for _, x in gpu.capture)):
                    gpu._illegal(CAPTURED_EVENT)

            def query(self):
                if not self.created:
                    return True
                self._usable()
                return self.t is None or time.perf_counter() >= self.t

            def synchronize(self):
                if not self.created:
                    return
                self._usable()
                while self.t is not None and time.perf_counter() < self.t:
                    pass

            def elapsed_time(self, other):
                # the order of torch's checks (c10::cuda::CUDAEvent::elapsed_time)
                if not (self.enable_timing and other.enable_timing):
                    raise ValueError("Both events must be created with argument 'enable_timing=True'.")
                if not (self.created and other.created):
                    raise ValueError("Both events must be recorded before calculating elapsed time.")
                if not (self.query() and other.query()):
                    raise RuntimeError("Both events must be completed before calculating elapsed time.")
                if self.t is None or other.t is None:
                    raise RuntimeError("CUDA error: invalid resource handle")
                if (self.by_graph or other.by_graph) and not gpu.graph_event_timing:
                    raise RuntimeError("CUDA error: invalid resource handle (an event recorded by a graph node)")
                if self.by_graph != other.by_graph and not gpu.mixed_graph_events:
                    raise RuntimeError("CUDA error: invalid resource handle (an event recorded by a graph "
                                       "node timed against one recorded outside it)")
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
                        x.by_graph = True
                    else:
                        gpu._queue(x)

        @contextlib.contextmanager
        def graph(g):
            if gpu.capture is not None:
                raise RuntimeError("CUDA error: a capture is already under way")
            gpu.capture, gpu.capture_error = g.nodes, None
            try:
                yield
            finally:
                gpu.capture = None
            if gpu.capture_error:
                err, gpu.capture_error = gpu.capture_error, None
                g.nodes.clear()
                raise RuntimeError(f"CUDA error: operation failed due to a previous error during capture ({err})")

        def synchronize(device=None):
            if gpu.capture is not None:
                gpu._illegal(CAPTURING)
            while time.perf_counter() < gpu.tail:
                pass

        self.cuda = SimpleNamespace(
            Event=self.Event, CUDAGraph=CUDAGraph, graph=graph, synchronize=synchronize,
            _sleep=self._sleep, current_stream=lambda device=None: SimpleNamespace(synchronize=synchronize))

    def _illegal(self, what: str) -> None:
        if self.capture is not None:
            self.capture_error = what
        raise RuntimeError(what)

    def _queue(self, seconds: float) -> None:
        start = max(time.perf_counter(), self.tail)
        self.tail = start + seconds
        self.busy_s += seconds

    def work(self, seconds: float) -> None:
        """Queue device work (or record it into the graph being captured)."""
        if self.capture is not None:
            self.capture.append(("work", seconds))
        else:
            self._queue(seconds)

    def _sleep(self, cycles: int) -> None:
        if self.capture is None:
            self.sleeps.append(cycles)
        hz = self.clock_hz if self.busy_s >= self.ramp_s else self.idle_clock_hz
        self.work(cycles / hz)

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


class FakeCupy:
    """cupy's stream and event API (``cupy.cuda.Event``'s ``done``, ``get_elapsed_time``) over the
    same modelled stream, with ``kernels.get_function("commprof_spin")`` holding it for ``ns``:
    enough for the probes' timing loop (``cuda_ext.probes._timed``). cupy's ``get_elapsed_time`` on
    an event not yet completed raises (cudaErrorNotReady), as here."""

    def __init__(self, gpu: FakeGpu):
        class Event:
            def __init__(self, block=False, disable_timing=False, interprocess=False):
                self.e = gpu.Event(enable_timing=not disable_timing)

            def record(self, stream=None):
                self.e.record()

            @property
            def done(self):
                return self.e.query()

            def synchronize(self):
                self.e.synchronize()

        class Stream:
            def __init__(self, non_blocking=False):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *a):
                return None

            def synchronize(self):
                gpu.cuda.synchronize()

        class Device(Stream):
            def __init__(self, i=0):
                self.id = i

        def get_elapsed_time(a, b):
            if not (a.done and b.done):
                raise RuntimeError("cudaErrorNotReady: device not ready")
            return a.e.elapsed_time(b.e)

        self.cuda = SimpleNamespace(Event=Event, Stream=Stream, Device=Device, get_elapsed_time=get_elapsed_time)
        self.launches = []

        def get_function(name):
            assert name == "commprof_spin", name

            def spin(grid, block, args):
                self.launches.append((name, grid, block))
                gpu.work(int(args[0]) * 1e-9)
            return spin
        self.kernels = SimpleNamespace(get_function=get_function)
