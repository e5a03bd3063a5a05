"""The per-rank side of ``commprof sweep --impl custom``: commprof's one-shot all-reduce
(``cuda_ext/oneshot_allreduce.cu``) timed beside the backend's own all_reduce.

Before the first custom cell every active TP group sets up once, and every member must agree at
every step (a step that fails on one rank refuses the group on all of them, so no rank ever
waits in a kernel barrier for a peer that gave up):

1. the kernels are built (nvcc or NVRTC, cached; local rank 0 first, the others then load the cache);
2. the group must sit on one host (IPC buffers do not cross machines) and hold 1..8 ranks (TP=1
   is the kernel's single-rank path, a barrier with itself and a copy: a self-test on one GPU);
3. the driver must allow P2P for every pair (``cudaDeviceCanAccessPeer``), or nothing is touched;
4. each rank allocates its IPC region, the group exchanges handles and each rank maps its peers';
5. the P2P probe runs through those very mappings (:meth:`CustomAllReduce._probe_ipc`: every rank
   writes a pattern into each peer's buffer, the owner checks it in its own memory, the writer
   reads it back across the link and checks it) and :func:`cuda_ext.oneshot.check_eligible` must
   accept the gathered matrix: the driver's claim alone is never trusted.

A refusal at any step, or a cell size the kernel does not take (:func:`cuda_ext.oneshot.check_size`),
refuses the custom cell with one line of reason; the sweep then measures it with the backend's
all_reduce instead (or, when the backend's own cell is in the same run, leaves it to that cell),
and ``meta.json`` lists every refusal under ``custom_refused``.

``COMMPROF_TEST_ONESHOT`` (commprof's own tests only) stands a CPU emulation in for the kernel so
that everything above is tested with gloo across real processes: ``emulate`` (every rank gathers
every input and sums in fp32 in rank order, as the kernel does), with options
``emulate:p2p_fail=TP`` (the probe of TP's groups reports a bad pair), ``max_bytes=N`` (the size
limit) and ``corrupt_rank=R`` (rank R's custom results are off by one, for --verify).
"""
from __future__ import annotations

import os

from commprof.model.sweepconfig import CUSTOM

PROBE_CHUNK = 4096      # bytes each rank writes into (and reads back from) each peer's buffer


def _hook() -> dict | None:
    spec = os.environ.get("COMMPROF_TEST_ONESHOT", "")
    if not spec:
        return None
    kind, _, rest = spec.partition(":")
    opts = dict(kv.split("=", 1) for kv in rest.split(",") if "=" in kv)
    opts["kind"] = kind.strip()
    return opts


class _StreamHandle:
    """A raw ``cudaStream_t`` that speaks the CUDA stream protocol (for a torch too old to)."""

    def __init__(self, ptr: int):
        self.ptr = int(ptr)

    def __cuda_stream__(self):
        return (0, self.ptr)


def cupy_stream(cupy, torch_stream, device_index: int):
    """torch's CUDA stream as a cupy stream, so our kernel is ordered with torch's work on it.

    cupy >= 14 takes foreign streams through the CUDA stream protocol
    (``cupy.cuda.Stream.from_external``) and deprecates ``cupy.cuda.ExternalStream``; older cupy
    has only the latter. ``from_external`` does not record the stream's device, so launch on it
    inside ``cupy.cuda.Device(device_index)`` (``OneShotAllReduce.launch`` does).
    """
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is None:
        return cupy.cuda.ExternalStream(torch_stream.cuda_stream, device_index)
    if not hasattr(torch_stream, "__cuda_stream__"):      # torch before the protocol
        torch_stream = _StreamHandle(torch_stream.cuda_stream)
    return from_external(torch_stream)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


class _Group:
    """This rank's state in one TP group: why it is refused (or the op that runs it)."""

    def __init__(self, tp: int, ranks: list[int], refusal: str = ""):
        self.tp, self.ranks, self.refusal = tp, ranks, refusal
        self.op = None          # cuda_ext.oneshot.OneShotAllReduce (GPU) when set up
        self.region = None
        self.peer_bases: list[int] = []
        self.max_bytes = 0


class CustomAllReduce:
    """One rank's ``--impl custom``: setup per TP group, per-cell refusal, the timed call."""

    def __init__(self, torch, dist, cfg, rank: int, local_rank: int, device, sets, hosts_by_rank, world_ctrl, hb):
        self.torch, self.dist, self.cfg, self.rank, self.local_rank = torch, dist, cfg, rank, local_rank
        self.device, self.sets, self.hosts, self.world_ctrl, self.hb = device, sets, hosts_by_rank, world_ctrl, hb
        self.hook = _hook()
        self.kernels = None
        self.groups: dict[int, _Group] = {}
        self.refusal_by_tp: dict[int, str] = {}

    # -- setup ------------------------------------------------------------------------------

    def _agree(self, group, mine: str) -> str:
        """Every member's reason gathered over a gloo group; the first non-empty one (naming its rank)."""
        n = self.dist.get_world_size(group)
        got = [None] * n
        self.dist.all_gather_object(got, (self.rank, mine), group=group)
        for r, why in got:
            if why:
                return why if why.startswith("rank ") else f"rank {r}: {why}"
        return ""

    def setup(self, cells) -> None:
        """Collective over every rank: prepare every TP degree that has a custom cell."""
        from cuda_ext import oneshot

        tps = sorted({c.tp for c in cells if c.custom})
        if not tps:
            return
        sizes = {tp: max(c.size_bytes for c in cells if c.custom and c.tp == tp) for tp in tps}
        load_err = self._load_kernels()
        for tp in tps:
            gs = self.sets[tp]
            gi = gs.index_of(self.rank)
            active = gi is not None and (self.cfg.concurrent or gi == 0)
            mine = ""
            if active:
                ranks = gs.groups[gi]
                g = _Group(tp, ranks)
                self.groups[tp] = g
                self.hb.stage(f"custom all_reduce tp={tp}: setup")
                g.refusal = self._setup_group(g, gs.ctrl[gi], load_err, sizes[tp], oneshot)
                mine = g.refusal and f"group {gi} (ranks {ranks[0]}-{ranks[-1]}): {g.refusal}"
            # Every rank agrees per TP degree, so concurrent groups never split between a custom
            # cell and its fallback (they share one world barrier per iteration).
            self.refusal_by_tp[tp] = self._agree(self.world_ctrl, mine).split(": ", 1)[-1]

    def _load_kernels(self) -> str:
        if self.hook is not None:
            return ""
        from cuda_ext.loader import load

        err = ""
        self.hb.stage("custom all_reduce: building kernels")
        if self.local_rank == 0:
            try:
                self.kernels = load()
            except Exception as e:  # noqa: BLE001 - any build failure refuses custom, with its reason
                err = f"kernels did not build or load ({_first_line(e)})"
        self.dist.barrier(group=self.world_ctrl)
        if self.local_rank != 0:
            try:
                self.kernels = load()
            except Exception as e:  # noqa: BLE001
                err = f"kernels did not build or load ({_first_line(e)})"
        return self._agree(self.world_ctrl, err)

    def _setup_group(self, g: _Group, ctrl, load_err: str, max_size: int, oneshot) -> str:
        """Steps 2-4 of the module docstring for one group; "" when it is ready, else why not."""
        n = len(g.ranks)
        if load_err:
            return load_err
        hosts = sorted({self.hosts[r] for r in g.ranks})
        if len(hosts) > 1:
            return f"spans hosts {', '.join(hosts)}: IPC buffers need every rank on one host"
        if not 1 <= n <= oneshot.MAX_WORLD:
            return f"{n} ranks: the one-shot all-reduce supports {oneshot.MIN_WORLD} to {oneshot.MAX_WORLD}"
        max_bytes = int(self.hook.get("max_bytes", oneshot.DEFAULT_MAX_BYTES)) if self.hook else oneshot.DEFAULT_MAX_BYTES
        g.max_bytes = max_bytes
        me = g.ranks.index(self.rank)
        if self.hook is not None:
            return self._emulated_probe(g, ctrl, n, me, max_bytes, oneshot) if n > 1 else ""

        # The driver's word first: a pair it refuses is never touched.
        devs = [None] * n
        self.dist.all_gather_object(devs, self.device.index, group=ctrl)
        try:
            import cupy

            mine = [True if q == me else bool(cupy.cuda.runtime.deviceCanAccessPeer(devs[me], devs[q]))
                    for q in range(n)]
        except Exception as e:  # noqa: BLE001
            mine = _first_line(e)
        drivers = [None] * n
        self.dist.all_gather_object(drivers, mine, group=ctrl)
        bad = next((f"rank {g.ranks[i]}: cudaDeviceCanAccessPeer failed ({d})" for i, d in enumerate(drivers)
                    if isinstance(d, str)), "")
        if bad:
            return bad
        if n > 1:
            ok, why = oneshot.check_eligible(16, n, self.cfg.dtype,
                                             [[oneshot.PairProbe(devs[i], devs[j], drivers[i][j], True, True)
                                               for j in range(n)] for i in range(n)], max_bytes)
            if not ok:
                return why

        # IPC: allocate, exchange handles, map the peers'. TP=1 is the kernel's single-rank path
        # (a barrier with itself and a copy): a self-test of the whole path on one GPU.
        need = max(oneshot._round_up(max(16, max_size), 16), n * PROBE_CHUNK if n > 1 else 16)
        layout = oneshot.RegionLayout(max_bytes=min(max_bytes, need))
        g.max_bytes = layout.max_bytes
        handle, err = b"", ""
        try:
            g.region = oneshot.Region(layout, self.device.index)
            handle = g.region.ipc_handle() if n > 1 else b""
        except Exception as e:  # noqa: BLE001
            err = f"IPC buffer: {_first_line(e)}"
        handles = [None] * n
        self.dist.all_gather_object(handles, (handle, err), group=ctrl)
        err = next((f"rank {g.ranks[i]}: {e}" for i, (_, e) in enumerate(handles) if e), "")
        if not err:
            try:
                g.peer_bases = [g.region.ptr if q == me else oneshot.open_ipc_handle(h, self.device.index)
                                for q, (h, _) in enumerate(handles)]
            except Exception as e:  # noqa: BLE001
                err = f"opening peers' IPC buffers: {_first_line(e)}"
        err = self._agree(ctrl, err)
        if err:
            return err
        if n > 1:
            why = self._probe_ipc(g, ctrl, n, me, devs, drivers, oneshot)
            if why:
                return why
        try:
            g.op = oneshot.OneShotAllReduce(self.kernels, g.region, me, n, g.peer_bases,
                                            timeout_s=min(oneshot.DEFAULT_TIMEOUT_S, self.cfg.timeout_s))
        except Exception as e:  # noqa: BLE001
            err = f"one-shot set-up: {_first_line(e)}"
        return self._agree(ctrl, err)

    def _probe_ipc(self, g: _Group, ctrl, n: int, me: int, devs, drivers, oneshot) -> str:
        """The P2P probe through the very mappings the kernel will use: rank i's SMs write a pattern
        into slot i of every peer j's buffer; j checks it in its own memory (write, read back by the
        owner); i reads slot i back across the link and checks it (read). The group gathers the
        results into the matrix :func:`cuda_ext.oneshot.check_eligible` judges."""
        import cupy
        import numpy as np

        from cuda_ext.probes import launch_copy

        words = PROBE_CHUNK // 4
        base = [b + g.region.layout.input_offset for b in g.peer_bases]

        def pattern(i: int, j: int):
            k = np.arange(words, dtype=np.uint64)
            return ((k * 2654435761 + (i * 8 + j + 1) * 40503) & 0xFFFFFFFF).astype(np.uint32)

        err, read_ok, write_col = "", [None] * n, [None] * n
        dev = devs[me]
        try:
            with cupy.cuda.Device(dev):
                src = cupy.asarray(np.concatenate([pattern(me, j) for j in range(n)]))
                for j in range(n):
                    if j != me:
                        launch_copy(self.kernels, src.data.ptr + j * PROBE_CHUNK, base[j] + me * PROBE_CHUNK,
                                    PROBE_CHUNK)
                cupy.cuda.Device(dev).synchronize()
        except Exception as e:  # noqa: BLE001
            err = f"P2P write probe: {_first_line(e)}"
        self.dist.barrier(group=ctrl)            # every rank's writes have landed (or failed)
        try:
            with cupy.cuda.Device(dev):
                mine = cupy.zeros(n * words, dtype=cupy.uint32)
                cupy.cuda.runtime.memcpy(mine.data.ptr, base[me], n * PROBE_CHUNK, cupy.cuda.runtime.memcpyDeviceToDevice)
                host = mine.get()
                for i in range(n):
                    if i != me:
                        write_col[i] = bool(np.array_equal(host[i * words:(i + 1) * words], pattern(i, me)))
                back = cupy.zeros(n * words, dtype=cupy.uint32)
                for j in range(n):
                    if j != me:
                        launch_copy(self.kernels, base[j] + me * PROBE_CHUNK, back.data.ptr + j * PROBE_CHUNK,
                                    PROBE_CHUNK)
                cupy.cuda.Device(dev).synchronize()
                host = back.get()
                for j in range(n):
                    if j != me:
                        read_ok[j] = bool(np.array_equal(host[j * words:(j + 1) * words], pattern(me, j)))
        except Exception as e:  # noqa: BLE001
            err = err or f"P2P read probe: {_first_line(e)}"
        got = [None] * n
        self.dist.all_gather_object(got, (err, write_col, read_ok), group=ctrl)
        rows = [[oneshot.PairProbe(devs[i], devs[j], bool(drivers[i][j]), got[j][1][i] if i != j else True,
                                   got[i][2][j] if i != j else True, got[i][0])
                 for j in range(n)] for i in range(n)]
        ok, why = oneshot.check_eligible(16, n, self.cfg.dtype, rows, g.region.layout.max_bytes)
        try:       # the probe's patterns must not look like inputs to the first call
            with cupy.cuda.Device(dev):
                cupy.cuda.runtime.memset(base[me], 0, n * PROBE_CHUNK)
                cupy.cuda.Device(dev).synchronize()
        except Exception as e:  # noqa: BLE001
            return f"clearing the probe: {_first_line(e)}"
        self.dist.barrier(group=ctrl)
        return "" if ok else why

    def _emulated_probe(self, g: _Group, ctrl, n: int, me: int, max_bytes: int, oneshot) -> str:
        """Tests only: the P2P verdicts the hook asks for, gathered and judged as the real ones are."""
        fail = str(g.tp) == self.hook.get("p2p_fail", "")
        row = [oneshot.PairProbe(me, j, True, not (fail and j != me), True) for j in range(n)]
        rows = [None] * n
        self.dist.all_gather_object(rows, row, group=ctrl)
        ok, why = oneshot.check_eligible(16, n, self.cfg.dtype, rows, max_bytes)
        return "" if ok else why

    # -- per cell ---------------------------------------------------------------------------

    def refusal(self, cell) -> str:
        """Why this custom cell cannot run the kernel ("" when it can); the same on every rank."""
        from cuda_ext import oneshot

        why = self.refusal_by_tp.get(cell.tp, "custom all_reduce was not set up for this TP degree")
        if why:
            return why
        g = self.groups.get(cell.tp)
        max_bytes = g.max_bytes if g is not None else oneshot.DEFAULT_MAX_BYTES
        return oneshot.check_size(cell.size_bytes, self.cfg.dtype, max_bytes)

    def bind(self, cell, inp, data_group):
        """The timed call: in place on ``inp``, like ``dist.all_reduce``."""
        g = self.groups[cell.tp]
        if self.hook is not None:
            return self._emulated(g, inp, data_group)
        import cupy

        stream = cupy_stream(cupy, self.torch.cuda.current_stream(self.device), self.device.index)
        ptr, nbytes, dtype, op = inp.data_ptr(), inp.numel() * inp.element_size(), self.cfg.dtype, g.op

        def call():
            op.launch(ptr, ptr, nbytes, dtype, stream)
        return call

    def _emulated(self, g: _Group, inp, data_group):
        """CPU stand-in for the kernel (tests only): gather every input, sum in fp32 in rank order."""
        torch, dist = self.torch, self.dist
        n = len(g.ranks)
        bufs = [torch.empty_like(inp) for _ in range(n)]
        corrupt = str(self.rank) == self.hook.get("corrupt_rank", "")

        def call():
            dist.all_gather(bufs, inp, group=data_group)
            acc = torch.zeros(inp.numel(), dtype=torch.float32)
            for b in bufs:
                acc += b.float()
            if corrupt:
                acc[0] += 1
            inp.copy_(acc.to(inp.dtype))
        return call

    def check_status(self, cell) -> None:
        """After a cell: the kernel's sticky status word (a barrier timeout raises RankHung)."""
        g = self.groups.get(cell.tp)
        if g is None or g.op is None:
            return
        self.torch.cuda.synchronize(self.device)
        g.op.raise_for_status()

    def close(self) -> None:
        """Unmap the peers' buffers and free this rank's (after a barrier over every rank)."""
        for g in self.groups.values():
            if g.region is None:
                continue
            import cupy

            for step in [lambda: cupy.cuda.Device(self.device.index).synchronize()] + \
                    [lambda b=b: cupy.cuda.runtime.ipcCloseMemHandle(b) for b in g.peer_bases if b != g.region.ptr] + \
                    [g.region.close]:
                try:
                    step()
                except Exception:  # noqa: BLE001 - teardown must not mask the run's result
                    pass


__all__ = ["CustomAllReduce", "CUSTOM"]
