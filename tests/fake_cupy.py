"""A simulated GPU standing in for cupy, for testing cuda_ext's and the sweep's custom all-reduce
host code on CPU: ``SimCupy`` (device memory, streams, a Python model of each .cu kernel),
``TorchStream`` (what torch hands cupy as a stream), threaded ranks over one simulator
(``CoopGroup``, ``CoopDist``) and ``sim_custom_setup`` (the per-rank set-up of ``sweep --impl
custom`` run on them). The ``sim`` fixture (conftest.py) installs a ``SimCupy`` as ``cupy``."""
import os
import re

from helpers import REPO

from cuda_ext import loader, oneshot


def kernel_params() -> dict:
    """Each kernel's parameter kinds ("ptr", "int", "u32", "u64"), read from the .cu sources."""
    kinds = {}
    for name, stem in loader.KERNELS.items():
        text = open(os.path.join(REPO, "cuda_ext", stem + ".cu")).read().replace("\\\n", " ")
        m = re.search(r"\b%s\(([^)]*)\)\s*\{" % (name if stem == "p2p_probes" else "NAME"), text)
        assert m, name
        kinds[name] = ["ptr" if "*" in p else p.split()[0] for p in m.group(1).split(",")]
    return kinds


class SimCupy:
    """A stand-in for cupy: "device memory" is host memory at real addresses, streams are queues run
    in order by a cooperative scheduler at every host synchronisation, and each kernel is a Python
    model of its .cu source (flags, barriers and spins included; a spin longer than SPIN_LIMIT steps
    counts as the kernel's timeout). Launch arguments are checked against the .cu parameter lists.

    The one-shot model takes its dtype conversions from ``cuda_ext.oneshot`` (``decode``/``encode``,
    which claim to match the kernel's); the tests judge its outputs against ``oneshot_reference``,
    which shares none of that code. What the tests can observe, besides memory:

    * ``events``: the one-shot model's protocol steps in scheduler time, ``("arrive", clock, rank,
      phase, epoch)`` when a rank's flags are written, ``("pass", ...)`` when its barrier lets it
      through, ``("read", clock, rank, epoch, q, bytes)`` for each read of rank q's input buffer,
      ``("write", clock, rank, epoch)`` when the output is stored;
    * ``copies``: each ``commprof_p2p_copy`` as ``(seq, launching GPU, src, dst, nbytes, src bytes)``,
      the source read when the copy runs;
    * ``gets``: each device-to-host read of an array, ``(seq, its GPU, address, bytes)``; ``seq``
      orders copies and gets on one timeline;
    * ``slow``: rank -> extra scheduler steps after each input read (a slow reader, to widen races)."""

    SPIN_LIMIT = 3000

    def __init__(self, devices=2, sms=132, no_p2p=()):
        import ctypes
        import itertools
        import types
        import warnings

        import numpy as np

        sim = self
        self.np, self.ct, self.devices, self.no_p2p = np, ctypes, devices, set(no_p2p)
        self.uint8, self.uint16, self.uint32, self.uint64 = np.uint8, np.uint16, np.uint32, np.uint64
        self.float16, self.float32 = np.float16, np.float32
        self.params = kernel_params()
        self.queues, self.launches, self.keep, self.peer_enabled, self.streams = {}, [], {}, set(), {}
        self.stream_calls = []      # how foreign (torch) streams were wrapped: from_external or ExternalStream
        self.events, self.copies, self.gets, self.slow = [], [], [], {}
        self.seq = itertools.count()
        self.allocs = {}            # raw allocation -> (its GPU, bytes)
        self.clock, self.dev_stack, self.stream_stack = 0, [0], []

        class Arr(np.ndarray):
            # The GPU an array lives on, as cupy tracks it (a view or slice keeps its base's).
            def __array_finalize__(self_, obj):
                self_.sim_device = getattr(obj, "sim_device", None)
                if self_.sim_device is None:
                    self_.sim_device = sim.dev_stack[-1]

            @property
            def data(self_):
                addr = self_.ctypes.data

                def copy_from_device(src, n):
                    sim._enqueue(sim._current_stream(), sim._memmove(addr, src.ptr, n))
                return types.SimpleNamespace(ptr=addr, copy_from_device=copy_from_device)

            def get(self_):
                sim.flush()
                sim.gets.append((next(sim.seq), self_.sim_device, self_.ctypes.data, self_.tobytes()))
                return np.array(self_)

        self.Arr = Arr

        class Stream:
            _next = [1000]

            def __init__(self_, non_blocking=False, ptr=None, device=None):
                if ptr is None:
                    Stream._next[0] += 16
                    ptr = Stream._next[0]
                self_.ptr, self_.device = ptr, sim.dev_stack[-1] if device is None else device
                sim.queues[self_.key] = []
                if ptr:
                    sim.streams[ptr] = self_

            @property
            def key(self_):
                return (self_.device, self_.ptr)

            @classmethod
            def from_external(cls, obj):
                # cupy >= 14 (cupy/cuda/stream.pyx): a foreign stream through the CUDA stream
                # protocol; cupy does not learn the stream's device (device_id -1).
                version, ptr = obj.__cuda_stream__()
                if version != 0 or not isinstance(ptr, int):
                    raise TypeError("__cuda_stream__() must return (0, int)")
                sim.stream_calls.append(("from_external", ptr))
                return sim.streams[ptr]

            def __enter__(self_):
                sim.stream_stack.append(self_)
                return self_

            def __exit__(self_, *a):
                sim.stream_stack.pop()

            def synchronize(self_):
                sim.flush()

        self.nulls = {d: Stream(ptr=0, device=d) for d in range(devices)}

        class Device:
            compute_capability = "90"

            def __init__(self_, i=None):
                self_.id = sim.dev_stack[-1] if i is None else i
                self_.attributes = {"MultiProcessorCount": sms}

            def __enter__(self_):
                sim.dev_stack.append(self_.id)
                return self_

            def __exit__(self_, *a):
                sim.dev_stack.pop()

            def synchronize(self_):
                sim.flush()

        class Event:
            t = None

            @property
            def done(self_):                 # cupy: cudaEventQuery == success (no flush: no sync)
                return self_.t is not None

            def record(self_, stream):
                def op():
                    self_.t = sim.clock
                    return
                    yield
                sim._enqueue(stream, op())

            def synchronize(self_):
                sim.flush()

        class CUDARuntimeError(RuntimeError):
            status = 0

        rt = types.SimpleNamespace(
            getDeviceCount=lambda: devices, CUDARuntimeError=CUDARuntimeError,
            getDeviceProperties=lambda i: {"name": f"simulated GPU {i}".encode()},
            deviceCanAccessPeer=lambda a, b: int((a, b) not in sim.no_p2p),
            deviceEnablePeerAccess=lambda peer: sim.peer_enabled.add((sim.dev_stack[-1], peer)),
            malloc=self._malloc, free=lambda p: sim.keep.pop(p), memset=lambda p, v, n: ctypes.memset(p, v, n),
            memcpyDeviceToDevice=3, memcpyDeviceToHost=2, memcpyHostToDevice=1,
            memcpyAsync=lambda d, s_, n, kind, sp: sim._enqueue(sim._stream_by_ptr(sp), sim._memmove(d, s_, n)),
            memcpyPeerAsync=lambda d, dd, s_, sd, n, sp: sim._enqueue(sim._stream_by_ptr(sp), sim._memmove(d, s_, n)),
            memcpy=lambda d, s_, n, kind: (sim.flush(), ctypes.memmove(d, s_, n)),
            ipcGetMemHandle=lambda p: p.to_bytes(64, "little"),
            ipcOpenMemHandle=lambda h: int.from_bytes(h, "little"), ipcCloseMemHandle=lambda p: None)
        def external_stream(ptr, device_id=-1):
            if hasattr(Stream, "from_external"):     # cupy 14 deprecates ExternalStream
                warnings.warn("ExternalStream is deprecated. Use Stream.from_external() instead",
                              DeprecationWarning, stacklevel=2)
            sim.stream_calls.append(("ExternalStream", ptr, device_id))
            return sim.streams[ptr]

        def alloc_pinned_memory(n):
            buf = np.zeros(max(1, n), np.uint8)
            return types.SimpleNamespace(ptr=buf.ctypes.data, buf=buf)

        self.cuda = types.SimpleNamespace(
            Device=Device, Stream=Stream, Event=Event, runtime=rt,
            ExternalStream=external_stream, alloc_pinned_memory=alloc_pinned_memory,
            get_current_stream=self._current_stream,
            get_elapsed_time=lambda a, b: (b.t - a.t) * 1e-3)

        class RawModule:
            def __init__(self_, code=None, *, path=None, options=(), backend="nvrtc"):
                pass

            def get_function(self_, name):
                return lambda grid, block, args: sim._launch(name, grid, block, args)

        self.RawModule = RawModule

    # arrays ---------------------------------------------------------------------------------------
    def asarray(self, x):
        return x if isinstance(x, self.Arr) else self.np.array(x).view(self.Arr)

    def zeros(self, n, dtype):
        return self.np.zeros(n, dtype).view(self.Arr)

    def arange(self, n, dtype):
        return self.np.arange(n, dtype=dtype).view(self.Arr)

    def empty_like(self, x):
        out = self.np.empty_like(x).view(self.Arr)
        out.view(self.np.uint8)[...] = 0xAB        # garbage, so an unwritten output shows
        return out

    def zeros_like(self, x):
        return self.np.zeros_like(x).view(self.Arr)

    def array_equal(self, a, b):
        # As strict as cupy's elementwise ops: a numpy array is a TypeError ("Unsupported type"),
        # an array on another GPU without peer access a ValueError; the answer is a 0-dim device array.
        cur = self.dev_stack[-1]
        for x in (a, b):
            if not isinstance(x, self.Arr):
                raise TypeError(f"Unsupported type {type(x)}")
            if x.sim_device != cur and (cur, x.sim_device) in self.no_p2p:
                raise ValueError(f"The device where the array resides ({x.sim_device}) is different from the "
                                 f"current device ({cur}). Peer access is unavailable between these devices.")
        self.flush()
        return self.np.asarray(self.np.array_equal(a, b)).view(self.Arr)

    def _malloc(self, n):
        buf = self.np.zeros(n + 256, self.np.uint8)
        addr = buf.ctypes.data + (-buf.ctypes.data) % 256
        self.keep[addr] = buf
        self.allocs[addr] = (self.dev_stack[-1], n)
        return addr

    def owner(self, addr):
        """``(GPU, base)`` of the raw allocation (``runtime.malloc``) that holds ``addr``, else None."""
        for base, (dev, n) in self.allocs.items():
            if base <= addr < base + n and base in self.keep:
                return dev, base
        return None

    # streams and the scheduler ------------------------------------------------------------------------
    def _current_stream(self):
        return self.stream_stack[-1] if self.stream_stack else self.nulls[self.dev_stack[-1]]

    def _stream_by_ptr(self, ptr):
        if ptr == 0:
            return self.nulls[self.dev_stack[-1]]
        return self.streams[ptr]

    def _enqueue(self, stream, op):
        self.queues.setdefault(stream.key, []).append(op)

    def _memmove(self, dst, src, n):
        self.ct.memmove(dst, src, n)   # runs when the scheduler reaches it (a generator needs a yield)
        return
        yield

    def flush(self):
        steps = 0
        while any(self.queues.values()):
            for q in list(self.queues.values()):
                if q:
                    try:
                        next(q[0])
                    except StopIteration:
                        q.pop(0)
            self.clock += 1
            steps += 1
            assert steps < 10 ** 6, "the simulated GPU never finished"

    # memory access ------------------------------------------------------------------------------------
    def u32(self, addr, value=None):
        cell = self.ct.c_uint32.from_address(addr)
        if value is not None:
            cell.value = value & 0xFFFFFFFF
        return cell.value

    def u64(self, addr, value=None):
        cell = self.ct.c_uint64.from_address(addr)
        if value is not None:
            cell.value = value
        return cell.value

    # kernels ----------------------------------------------------------------------------------------------
    def _launch(self, name, grid, block, args):
        np = self.np
        want = self.params[name]
        assert len(args) == len(want), (name, len(args), want)
        types_ = {"int": np.int32, "u32": np.uint32, "u64": np.uint64}
        vals = []
        for kind, a in zip(want, args):
            if kind == "ptr":
                assert isinstance(a, (self.Arr, np.uint64)), (name, kind, type(a))
                vals.append(a.ctypes.data if isinstance(a, self.Arr) else int(a))
            else:
                assert type(a) is types_[kind], (name, kind, type(a))
                vals.append(int(a))
        self.launches.append((name, self.dev_stack[-1], grid, block))
        assert self._current_stream().device == self.dev_stack[-1], (name, "launched on another GPU's stream")
        model = {"commprof_p2p_copy": self._copy, "commprof_pingpong": self._pingpong,
                 "commprof_spin": self._spin}.get(name, self._oneshot)
        run = model(name, grid[0], *vals)
        if name == "commprof_p2p_copy":
            run = self._logged_copy(self.dev_stack[-1], vals, run)
        self._enqueue(self._current_stream(), run)

    def _logged_copy(self, device, vals, run):
        src, dst, nbytes = vals
        self.copies.append((next(self.seq), device, src, dst, nbytes, self.ct.string_at(src, nbytes)))
        yield from run

    def _spin(self, name, blocks, ns):
        for _ in range(min(ns // 1000, 50)):      # a few scheduler steps: other streams run meanwhile
            yield

    def _copy(self, name, blocks, src, dst, nbytes):
        self.ct.memmove(dst, src, nbytes)
        return
        yield

    def _pingpong(self, name, blocks, ping, pong, rounds, first_side, timeout_ns, result):
        def side(s):
            last = rounds + 1
            wait, post, slot = (pong, ping, 3) if s == 0 else (ping, pong, 4)
            t0 = 0
            for i in range(1, last + 1):
                if s == 0:
                    if i == 2:
                        t0 = self.clock
                    self.u32(post, i)
                spins = 0
                while self.u32(wait) != i:
                    spins += 1
                    if spins > self.SPIN_LIMIT:
                        self.u64(result + 8 * slot, 1)
                        return
                    yield
                if s == 1:
                    self.u32(post, i)
            if s == 0:
                self.u64(result, (self.clock - t0) * 100)
                self.u64(result + 8, (self.clock - t0) * 200)
                self.u64(result + 16, rounds)
        if rounds < 1:
            return
        sides = [side(first_side + b) for b in range(blocks)]
        while sides:
            for g in list(sides):
                try:
                    next(g)
                except StopIteration:
                    sides.remove(g)
            yield

    def _oneshot(self, name, blocks, in_ptrs, flag_ptrs, out, n16, world, rank, epoch, row_words, timeout_ns,
                 status):
        np = self.np
        if not (1 <= world <= 8 and 0 <= rank < world and epoch != 0 and blocks <= row_words):
            self.u32(status, self.u32(status) | 4)
            return
        flags = [self.u64(flag_ptrs + 8 * q) for q in range(world)]

        def barrier(phase):
            for b in range(blocks):
                for t in range(world):
                    self.u32(flags[t] + 4 * ((phase * 8 + rank) * row_words + b), epoch)
            self.events.append(("arrive", self.clock, rank, phase, epoch))
            spins = 0
            while not all(((self.u32(flags[rank] + 4 * ((phase * 8 + t) * row_words + b)) - epoch) & 0xFFFFFFFF)
                          < 0x80000000 for t in range(world) for b in range(blocks)):
                spins += 1
                if spins > self.SPIN_LIMIT:
                    self.u32(status, self.u32(status) | (1 << phase))
                    return
                yield
            self.events.append(("pass", self.clock, rank, phase, epoch))

        yield from barrier(0)
        dt = name.rsplit("_", 1)[1]
        acc = np.zeros(16 * n16 // {"bf16": 2, "fp16": 2, "fp32": 4}[dt], np.float32)   # acc[8] = {0.f, ...}
        for q in range(world):                                       # rank order, one fp32 rounding per add
            data = self.ct.string_at(self.u64(in_ptrs + 8 * q), 16 * n16)
            self.events.append(("read", self.clock, rank, epoch, q, data))
            raw = np.frombuffer(data, np.uint8)
            vals = oneshot.decode(raw.view(np.float16 if dt == "fp16" else np.uint16 if dt == "bf16" else np.float32),
                                  dt).astype(np.float32)
            acc = (acc + vals).astype(np.float32)
            for _ in range(1 + self.slow.get(rank, 0)):
                yield
        res = np.ascontiguousarray(oneshot.encode(acc, dt))
        self.ct.memmove(out, res.ctypes.data, 16 * n16)
        self.events.append(("write", self.clock, rank, epoch))
        yield from barrier(1)



class TorchStream:
    """What torch 2.13's ``torch.cuda.current_stream()`` offers cupy: the raw handle and the CUDA
    stream protocol."""

    def __init__(self, ptr: int):
        self.cuda_stream = ptr

    def __cuda_stream__(self):
        return (0, self.cuda_stream)


class CoopGroup:
    """A process group for ranks run as threads over the simulated GPU: one rank at a time touches
    the simulator (a shared run lock, like a GIL), switching only inside collectives."""

    def __init__(self, members, run):
        import threading

        self.members, self.run, self.n = list(members), run, len(members)
        self.cv, self.round, self.vals, self.result = threading.Condition(), 0, {}, None

    def exchange(self, rank, value):
        with self.cv:
            mine = self.round
            self.vals[self.members.index(rank)] = value
            if len(self.vals) == self.n:
                self.result, self.vals = [self.vals[i] for i in range(self.n)], {}
                self.round += 1
                self.cv.notify_all()
                return list(self.result)
            self.run.release()
            self.cv.wait_for(lambda: self.round > mine, timeout=30)
            assert self.round > mine, "a simulated rank never reached the collective"
            out = list(self.result)
        self.run.acquire()
        return out


class CoopDist:
    def __init__(self, rank):
        self.rank = rank

    def all_gather_object(self, out, obj, group):
        out[:] = group.exchange(self.rank, obj)

    def barrier(self, group):
        group.exchange(self.rank, None)

    def get_world_size(self, group):
        return group.n


def sim_custom_setup(world, tp, cells_sizes=(4096,)):
    """Run CustomAllReduce.setup on `world` threaded ranks (one simulated GPU each); returns them."""
    import threading
    import types

    from commprof.model.sizes import SizePoint
    from commprof.model.sweepconfig import SweepRunConfig, plan_cells
    from microbench.collective_bench import GroupSet
    from microbench.oneshot_rank import CustomAllReduce

    run = threading.Lock()
    world_ctrl = CoopGroup(range(world), run)
    groups = [list(range(g * tp, (g + 1) * tp)) for g in range(world // tp)]
    ctrls = [world_ctrl if tp == world else CoopGroup(g, run) for g in groups]
    sets = {tp: GroupSet(tp, groups, [None] * len(groups), ctrls)}
    cfg = SweepRunConfig(ops=["all_reduce"], tps=[tp], points=[SizePoint("all_reduce", s) for s in cells_sizes],
                      backend="nccl", modes=["eager"], impls=["nccl", "custom"], timeout_s=5.0)
    cells = plan_cells(cfg)
    hb = types.SimpleNamespace(stage=lambda *_: None)
    made, errors = [None] * world, []

    def body(r):
        run.acquire()
        try:
            c = CustomAllReduce(None, CoopDist(r), cfg, r, r, types.SimpleNamespace(index=r), sets,
                                ["box"] * world, world_ctrl, hb)
            c.setup(cells)
            made[r] = c
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
        finally:
            run.release()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return made, cells
