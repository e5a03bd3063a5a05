"""Host side of the one-shot all-reduce: layout, limits, eligibility, P2P verification, verify.

The kernel (``oneshot_allreduce.cu``) has every rank read every rank's input buffer through
IPC-mapped pointers, sum in fp32 in rank order and write its own output, between two flag barriers.
This module holds what decides whether and how it may run:

* :class:`RegionLayout`: one rank's IPC region (input buffer, flag rows, status word) and the
  offsets the kernel relies on;
* :func:`check_size` / :func:`check_eligible`: the limits (16-byte multiples, at most ``max_bytes``,
  2..8 ranks, bf16/fp16/fp32, every pair P2P-verified), each refusal one line, so the sweep can
  print it and fall back to NCCL;
* :class:`PairProbe`, :func:`pair_verdict`, :func:`p2p_matrix`: the rule that the one-shot path is
  used only after a real probe of every ordered pair (write, read back, verify) passed: a driver
  that *says* P2P works is not enough. :func:`probe_pairs` runs that probe (needs GPUs and cupy);
  the decision logic is pure and tested with fake results;
* :func:`verify`, :func:`reference_sum`, :func:`rank_pattern`: correctness checks (exact for fp32
  sums of small integers, a tolerance for bf16/fp16);
* :class:`OneShotAllReduce`, :class:`Region` and :func:`emulate_on_one_gpu`: running it (cupy).

Everything above the "GPU side" marker is pure Python; numpy and cupy are imported inside the
functions that need them, so ``import cuda_ext.oneshot`` works without either.
"""
from __future__ import annotations

from contextlib import contextmanager

import math
from dataclasses import dataclass, field

from commprof.model.errors import RankHung, UsageError

MIN_WORLD = 2               # the one-shot path's smallest group (1 runs only as a self-test)
MAX_WORLD = 8               # the kernel's pointer tables and flag rows hold 8 ranks
VECTOR_BYTES = 16           # the kernel moves 16-byte vectors: sizes must be multiples
FLAG_ALIGN = 128            # flag rows start on 128-byte boundaries (their own cache lines)
DEFAULT_MAX_BYTES = 8 << 20     # 8 MiB: beyond this a one-shot all-reduce loses to ring/two-shot
DEFAULT_MAX_BLOCKS = 32     # blocks per launch (one flag slot per block per row)
THREADS_PER_BLOCK = 512     # matches __launch_bounds__(512, 1) in the kernel
DEFAULT_TIMEOUT_S = 10.0    # a barrier that waits longer than this gives up and reports it
PHASES = 2                  # entry and exit barrier

#: dtype name -> bytes per element. Aliases are accepted by :func:`dtype_name`.
DTYPES = {"bf16": 2, "fp16": 2, "fp32": 4}
_ALIASES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "half": "fp16", "fp16": "fp16",
            "float32": "fp32", "float": "fp32", "fp32": "fp32"}

#: Default verify tolerances (absolute, relative) for the 16-bit types: a few units in the last place,
#: since a reference that sums in another order or precision rounds differently. fp32 is exact.
TOLERANCES = {"bf16": (2.0 ** -6, 2.0 ** -6), "fp16": (2.0 ** -10, 2.0 ** -9), "fp32": (0.0, 0.0)}


def dtype_name(dtype) -> str:
    """``"bf16"``/``"fp16"``/``"fp32"`` from a name, an alias or a torch/numpy dtype; else UsageError."""
    text = str(dtype).lower().replace("torch.", "")
    if text in _ALIASES:
        return _ALIASES[text]
    raise UsageError(f"dtype {dtype} is not supported by the one-shot all-reduce (bf16, fp16, fp32)")


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _fmt_bytes(n: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class RegionLayout:
    """Byte layout of one rank's IPC region (one ``cudaMalloc``, shared with the peers).

    ::

        offset 0              input buffer, max_bytes rounded up to 128 (16-aligned vectors)
        flags_offset          2 phases x 8 writers rows; row = max_blocks u32 slots rounded up to
                              128 bytes; slot (phase, writer, block) holds the epoch that rank
                              `writer`'s block `block` last reached in that phase
        status_offset         one u32 status word (this rank's kernel only), padded to 128 bytes

    Attributes:
        max_bytes: largest message in bytes (a multiple of 16).
        max_blocks: blocks per launch, one flag slot each per row.
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    max_blocks: int = DEFAULT_MAX_BLOCKS

    def __post_init__(self):
        if not isinstance(self.max_bytes, int) or self.max_bytes <= 0 or self.max_bytes % VECTOR_BYTES:
            raise UsageError(f"one-shot max_bytes {self.max_bytes} must be a positive multiple of {VECTOR_BYTES}")
        if not isinstance(self.max_blocks, int) or not 1 <= self.max_blocks <= 1024:
            raise UsageError(f"one-shot max_blocks {self.max_blocks} must be 1..1024")

    input_offset = 0

    @property
    def input_bytes(self) -> int:
        return _round_up(self.max_bytes, FLAG_ALIGN)

    @property
    def flags_offset(self) -> int:
        return self.input_offset + self.input_bytes

    @property
    def row_bytes(self) -> int:
        return _round_up(4 * self.max_blocks, FLAG_ALIGN)

    @property
    def row_words(self) -> int:
        """u32 slots per flag row: the kernel's ``row_words`` argument."""
        return self.row_bytes // 4

    @property
    def flags_bytes(self) -> int:
        return PHASES * MAX_WORLD * self.row_bytes

    @property
    def status_offset(self) -> int:
        return self.flags_offset + self.flags_bytes

    @property
    def total_bytes(self) -> int:
        return self.status_offset + FLAG_ALIGN

    def flag_offset(self, phase: int, writer: int, block: int) -> int:
        """Byte offset in the region of the slot rank ``writer``'s block ``block`` writes in ``phase``."""
        if not (0 <= phase < PHASES and 0 <= writer < MAX_WORLD and 0 <= block < self.max_blocks):
            raise IndexError(f"flag slot ({phase}, {writer}, {block}) outside the layout")
        return self.flags_offset + (phase * MAX_WORLD + writer) * self.row_bytes + 4 * block


def launch_config(nbytes: int, layout: RegionLayout | None = None) -> tuple[int, int]:
    """``(blocks, threads)`` for a message of ``nbytes``: the same on every rank, as the barrier needs.

    One thread per 16-byte vector up to ``layout.max_blocks`` blocks of 512 threads; larger
    messages loop (grid-stride).
    """
    layout = layout or RegionLayout()
    n16 = max(1, nbytes // VECTOR_BYTES)
    return max(1, min(layout.max_blocks, math.ceil(n16 / THREADS_PER_BLOCK))), THREADS_PER_BLOCK


def check_size(nbytes: int, dtype, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """Why a message of ``nbytes`` of ``dtype`` cannot go through the one-shot kernel; "" when it can."""
    try:
        name = dtype_name(dtype)
    except UsageError as e:
        return str(e)
    if not isinstance(nbytes, int) or nbytes <= 0:
        return f"message size {nbytes} bytes: the one-shot all-reduce needs a positive size"
    if nbytes % VECTOR_BYTES:
        return (f"message of {nbytes} bytes is not a multiple of {VECTOR_BYTES} bytes "
                f"({VECTOR_BYTES // DTYPES[name]} {name} elements), which the one-shot kernel moves at once")
    if nbytes > max_bytes:
        return f"message of {_fmt_bytes(nbytes)} exceeds the one-shot limit of {_fmt_bytes(max_bytes)}"
    return ""


# ---------------------------------------------------------------------------------------------
# P2P verification: the decision logic (pure) and the probe (GPU)


@dataclass(frozen=True)
class PairProbe:
    """What one ordered pair's probe found. ``initiator``'s SMs access ``target``'s memory.

    Attributes:
        initiator, target: CUDA device indices.
        driver_says: ``cudaDeviceCanAccessPeer(initiator, target)``.
        write_ok: a pattern written from ``initiator`` into ``target``'s memory read back intact;
            None when not tried.
        read_ok: a pattern in ``target``'s memory read by ``initiator`` arrived intact; None when not tried.
        error: what went wrong when the probe could not run (enabling peer access, a launch, ...).
    """

    initiator: int
    target: int
    driver_says: bool
    write_ok: bool | None = None
    read_ok: bool | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return pair_verdict(self)[0]

    @property
    def reason(self) -> str:
        return pair_verdict(self)[1]


def pair_verdict(p: PairProbe) -> tuple[bool, str]:
    """``(ok, reason)`` for one probed pair: OK only if the driver allows it *and* both the write and
    the read were tried and verified. The driver's claim alone is never enough."""
    a, b = p.initiator, p.target
    if a == b:
        return True, f"GPU {a} to itself"
    if p.error:
        return False, f"P2P probe GPU {a} -> GPU {b} failed: {p.error}"
    if not p.driver_says:
        return False, f"driver reports no P2P access from GPU {a} to GPU {b}"
    if p.write_ok is None or p.read_ok is None:
        return False, f"P2P GPU {a} -> GPU {b} claimed by the driver but not verified (probe not run)"
    if not p.write_ok:
        return False, f"P2P write GPU {a} -> GPU {b} read back wrong data (the driver claims P2P works)"
    if not p.read_ok:
        return False, f"P2P read by GPU {a} from GPU {b} returned wrong data (the driver claims P2P works)"
    return True, f"P2P GPU {a} -> GPU {b} verified (write and read)"


def p2p_matrix(probes) -> list[list[bool]]:
    """Square matrix of :class:`PairProbe` (as :func:`probe_pairs` returns) -> ``ok`` booleans."""
    return [[pair_verdict(p)[0] for p in row] for row in probes]


def _entry_verdict(entry, i: int, j: int) -> tuple[bool, str]:
    if isinstance(entry, PairProbe):
        return pair_verdict(entry)
    if isinstance(entry, bool):
        return entry, "" if entry else f"P2P between ranks {i} and {j} not verified"
    raise UsageError(f"P2P matrix entry ({i}, {j}) is {entry!r}: expected a bool or a PairProbe")


def check_eligible(nbytes: int, world: int, dtype, p2p_ok_matrix, max_bytes: int = DEFAULT_MAX_BYTES) \
        -> tuple[bool, str]:
    """May this all-reduce go through the one-shot kernel? Else the caller falls back to NCCL.

    Args:
        nbytes: one rank's buffer in bytes.
        world: ranks in the group.
        dtype: ``bf16``/``fp16``/``fp32`` (aliases and torch dtypes accepted).
        p2p_ok_matrix: world x world, entry ``[i][j]`` says whether rank i's GPU may access rank j's
            memory: a bool, or a :class:`PairProbe` from :func:`probe_pairs` (its reason is then
            quoted). None means no probe was run, which refuses.
        max_bytes: size limit (default 8 MiB).

    Returns:
        ``(True, "eligible: ...")`` or ``(False, reason)`` with a one-line reason.
    """
    reason = check_size(nbytes, dtype, max_bytes)
    if reason:
        return False, reason
    if not isinstance(world, int) or not MIN_WORLD <= world <= MAX_WORLD:
        return False, f"{world} ranks: the one-shot all-reduce supports {MIN_WORLD} to {MAX_WORLD}"
    if p2p_ok_matrix is None:
        return False, "no P2P probe was run: the one-shot path needs every GPU pair verified first"
    rows = list(p2p_ok_matrix)
    if len(rows) != world or any(len(list(r)) != world for r in rows):
        return False, f"P2P matrix is not {world} x {world}: probe exactly the group's GPUs"
    for i, row in enumerate(rows):
        for j, entry in enumerate(row):
            if i == j:
                continue
            ok, why = _entry_verdict(entry, i, j)
            if not ok:
                return False, why
    return True, (f"eligible: {world} ranks, {dtype_name(dtype)}, {_fmt_bytes(nbytes)}, "
                  f"every pair P2P-verified")


# ---------------------------------------------------------------------------------------------
# Correctness: reference results and element-wise comparison (numpy, imported lazily)


def rank_pattern(rank: int, n: int):
    """Deterministic input of one rank: small integers in [-7, 7] (float32 numpy array).

    Sums over up to 8 ranks stay within [-56, 56], exact in bf16, fp16 and fp32.
    """
    import numpy as np

    i = np.arange(n, dtype=np.int64)
    return (((i * 7 + rank * 5) % 15) - 7).astype(np.float32)


def to_bf16_bits(x):
    """float array -> bf16 bit patterns (uint16), rounding to nearest even like the kernel."""
    import numpy as np

    u = np.ascontiguousarray(np.asarray(x, dtype=np.float32)).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    return np.where(nan, ((u >> 16) | 0x40) & 0xFFFF, rounded).astype(np.uint16)


def from_bf16_bits(bits):
    """bf16 bit patterns (uint16) -> float32 values."""
    import numpy as np

    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def encode(x, dtype):
    """float values -> the array the kernel reads: uint16 bits for bf16, float16, or float32."""
    import numpy as np

    name = dtype_name(dtype)
    if name == "bf16":
        return to_bf16_bits(x)
    return np.asarray(x, dtype=np.float16 if name == "fp16" else np.float32)


def decode(x, dtype):
    """The kernel's output (or any array of ``dtype``) -> float64 values for comparison.

    Accepts numpy arrays, cupy arrays (``.get()``) and torch tensors; bf16 given as uint16 bits is
    decoded, bf16 given as floats is taken as is.
    """
    import numpy as np

    name = dtype_name(dtype)
    if hasattr(x, "detach"):  # torch: numpy has no bfloat16, so widen on the torch side
        x = x.detach().float().cpu().numpy()
    elif hasattr(x, "get") and not isinstance(x, (dict, np.ndarray)):
        x = x.get()
    a = np.asarray(x)
    if a.dtype == np.uint16:
        a = from_bf16_bits(a) if name == "bf16" else a.view(np.float16)
    return a.astype(np.float64).ravel()


def reference_sum(inputs, dtype):
    """What the kernel must produce: the inputs (float values, one array per rank) summed in fp32 in
    rank order, then rounded once to ``dtype``; returned as float64 values."""
    import numpy as np

    acc = np.zeros_like(np.asarray(inputs[0], dtype=np.float32))
    for x in inputs:
        acc = (acc + decode(x, "fp32").astype(np.float32).reshape(acc.shape)).astype(np.float32)
    return decode(encode(acc, dtype), dtype)


def verify(result, expected, dtype="fp32", atol: float | None = None, rtol: float | None = None) -> int:
    """Count the elements of ``result`` that differ from ``expected``.

    fp32 compares exactly (the check data are sums of small integers, exact in fp32); bf16 and
    fp16 allow ``|r - e| <= atol + rtol * |e|`` (defaults in :data:`TOLERANCES`). Two NaNs agree.
    A length mismatch counts every element of the longer array as wrong.

    Args:
        result, expected: numpy/cupy arrays or torch tensors; bf16 as uint16 bits or as floats.
        dtype: the dtype the result was produced in.

    Returns:
        The number of wrong elements (0 = correct).
    """
    import numpy as np

    name = dtype_name(dtype)
    r, e = decode(result, name), decode(expected, name)
    if r.shape != e.shape:
        return max(r.size, e.size)
    d_atol, d_rtol = TOLERANCES[name]
    atol = d_atol if atol is None else atol
    rtol = d_rtol if rtol is None else rtol
    both_nan = np.isnan(r) & np.isnan(e)
    with np.errstate(invalid="ignore"):
        if atol == 0 and rtol == 0:
            good = r == e
        else:
            good = np.abs(r - e) <= atol + rtol * np.abs(e)
    return int(np.count_nonzero(~(good | both_nan)))


# ---------------------------------------------------------------------------------------------
# GPU side (cupy; needs a GPU): the P2P probe, regions, the launcher


def probe_pairs(devices, nbytes: int = 1 << 20, kernels=None) -> list[list[PairProbe]]:
    """Probe every ordered pair of ``devices`` for real: write, read back, verify; then read, verify.

    For each ordered pair (a, b), a != b: ask the driver (``cudaDeviceCanAccessPeer``); if it says
    yes, enable peer access, have GPU a's SMs write a pattern into a buffer on GPU b (the copy
    kernel), copy that buffer back through GPU b and compare; then have GPU a's SMs read another
    pattern from GPU b's memory and compare. Any exception becomes the pair's ``error``.

    Returns:
        ``probes[i][j]`` for ``devices[i]`` -> ``devices[j]`` (the diagonal is trivially OK); feed it
        to :func:`check_eligible` or :func:`p2p_matrix`.
    """
    devices = list(devices)
    return [probe_from(a, devices, nbytes, kernels) for a in devices]


def probe_from(initiator: int, devices, nbytes: int = 1 << 20, kernels=None) -> list[PairProbe]:
    """One row of :func:`probe_pairs`: ``initiator``'s SMs write to and read from each of ``devices``
    (one process reaching every GPU; ``sweep --impl custom`` probes across processes instead, through
    its IPC mappings: ``microbench/oneshot_rank.py``)."""
    from .loader import load, require_gpu

    cupy = require_gpu()
    kernels = kernels or load()
    devices = list(devices)
    return [_probe_pair(cupy, kernels, initiator, b, devices.index(initiator) if initiator in devices else 0,
                        j, len(devices), nbytes) for j, b in enumerate(devices)]


def _probe_pair(cupy, kernels, a: int, b: int, i: int, j: int, n: int, nbytes: int) -> PairProbe:
    import numpy as np

    from .probes import enable_peer_access, launch_copy

    if a == b:
        return PairProbe(a, b, True, True, True)
    nbytes = _round_up(max(16, nbytes), 16)
    n_words = nbytes // 4
    try:
        can = bool(cupy.cuda.runtime.deviceCanAccessPeer(a, b))
    except Exception as e:
        return PairProbe(a, b, False, error=f"cudaDeviceCanAccessPeer: {e}")
    if not can:
        return PairProbe(a, b, False)
    try:
        enable_peer_access(a, b)
        seed = (i * n + j) * 2654435761
        pat_w = ((np.arange(n_words, dtype=np.uint64) * 2654435761 + seed) & 0xFFFFFFFF).astype(np.uint32)
        pat_r = pat_w ^ np.uint32(0xA5A5A5A5)
        with cupy.cuda.Device(b):
            remote = cupy.zeros(n_words, dtype=cupy.uint32)
            remote_src = cupy.asarray(pat_r)
            cupy.cuda.Device(b).synchronize()   # GPU a's kernels are not ordered after b's stream
        with cupy.cuda.Device(a):
            local_src = cupy.asarray(pat_w)
            local_dst = cupy.zeros(n_words, dtype=cupy.uint32)
            launch_copy(kernels, local_src.data.ptr, remote.data.ptr, nbytes)   # a writes into b
            launch_copy(kernels, remote_src.data.ptr, local_dst.data.ptr, nbytes)  # a reads from b
            cupy.cuda.Device(a).synchronize()
            read_ok = bool(np.array_equal(local_dst.get(), pat_r))
        with cupy.cuda.Device(b):
            write_ok = bool(np.array_equal(remote.get(), pat_w))   # read back through b itself
        return PairProbe(a, b, True, write_ok, read_ok)
    except Exception as e:
        return PairProbe(a, b, True, error=str(e).strip().splitlines()[0] if str(e).strip()
                         else type(e).__name__)


@dataclass
class Region:
    """One rank's IPC region on one GPU: a raw ``cudaMalloc`` of ``layout.total_bytes``, zeroed.

    Raw (not cupy's pool) so that its IPC handle maps exactly this allocation in a peer process.
    """

    layout: RegionLayout
    device: int
    ptr: int = field(default=0, init=False)

    def __post_init__(self):
        from .loader import require_gpu

        cupy = require_gpu()
        with cupy.cuda.Device(self.device):
            self.ptr = int(cupy.cuda.runtime.malloc(self.layout.total_bytes))
            cupy.cuda.runtime.memset(self.ptr, 0, self.layout.total_bytes)
            cupy.cuda.Device(self.device).synchronize()   # zeroed before any peer's kernel looks

    def ipc_handle(self) -> bytes:
        """The handle a peer process passes to :func:`open_ipc_handle`."""
        import cupy

        with cupy.cuda.Device(self.device):
            return bytes(cupy.cuda.runtime.ipcGetMemHandle(self.ptr))

    def close(self) -> None:
        if self.ptr:
            import cupy

            with cupy.cuda.Device(self.device):
                cupy.cuda.runtime.free(self.ptr)
            self.ptr = 0


def open_ipc_handle(handle: bytes, device: int) -> int:
    """Map a peer's region (from :meth:`Region.ipc_handle`) into this process on ``device``; its base pointer."""
    import cupy

    with cupy.cuda.Device(device):
        return int(cupy.cuda.runtime.ipcOpenMemHandle(handle))   # cupy's default: lazy peer access


class OneShotAllReduce:
    """One rank's one-shot all-reduce over regions already shared (IPC) or local (one process).

    Args:
        kernels: from :func:`cuda_ext.loader.load`.
        region: this rank's :class:`Region`.
        rank, world: this rank and the group size (1..8; 1 only as a self-test).
        peer_bases: every rank's region base pointer as seen from this process, rank order
            (``peer_bases[rank] == region.ptr``).
        timeout_s: a barrier gives up after this long and the call raises :class:`RankHung`.

    Every rank must make the same sequence of calls with the same sizes (the epoch and the grid
    must agree). ``out`` must not be any rank's region.
    """

    def __init__(self, kernels, region: Region, rank: int, world: int, peer_bases, timeout_s=DEFAULT_TIMEOUT_S):
        import cupy
        import numpy as np

        if not 1 <= world <= MAX_WORLD or not 0 <= rank < world or len(peer_bases) != world:
            raise UsageError(f"one-shot all-reduce: rank {rank} of {world} with {len(peer_bases)} regions")
        self.kernels, self.region, self.rank, self.world = kernels, region, rank, world
        self.layout = region.layout
        self.timeout_ns = int(timeout_s * 1e9)
        self.epoch = 0
        with cupy.cuda.Device(region.device):
            self.in_ptrs = cupy.asarray(np.array([b + self.layout.input_offset for b in peer_bases], np.uint64))
            self.flag_ptrs = cupy.asarray(np.array([b + self.layout.flags_offset for b in peer_bases], np.uint64))
            cupy.cuda.Device(region.device).synchronize()   # tables in place for launches on any stream

    def next_epoch(self) -> int:
        self.epoch = self.epoch + 1 if self.epoch < 0xFFFFFFFF else 1   # 0 is never an epoch
        return self.epoch

    def launch(self, src_ptr: int, out_ptr: int, nbytes: int, dtype, stream=None) -> None:
        """Enqueue one all-reduce: copy ``nbytes`` at ``src_ptr`` into this rank's input buffer, run the
        kernel into ``out_ptr``. Refuses sizes :func:`check_size` refuses. Does not synchronise."""
        import cupy
        import numpy as np

        reason = check_size(nbytes, dtype, self.layout.max_bytes)
        if reason:
            raise UsageError(f"one-shot all-reduce: {reason}")
        name = dtype_name(dtype)
        blocks, threads = launch_config(nbytes, self.layout)
        fn = self.kernels.get_function(f"commprof_oneshot_allreduce_{name}")
        rt = cupy.cuda.runtime
        with cupy.cuda.Device(self.region.device):
            stream = stream or cupy.cuda.get_current_stream()
            rt.memcpyAsync(self.region.ptr + self.layout.input_offset, src_ptr, nbytes,
                           rt.memcpyDeviceToDevice, stream.ptr)
            with stream:
                fn((blocks,), (threads,),
                   (self.in_ptrs, self.flag_ptrs, np.uint64(out_ptr), np.uint64(nbytes // VECTOR_BYTES),
                    np.int32(self.world), np.int32(self.rank), np.uint32(self.next_epoch()),
                    np.uint32(self.layout.row_words), np.uint64(self.timeout_ns),
                    np.uint64(self.region.ptr + self.layout.status_offset)))

    def status(self) -> int:
        """The kernel's status word, sticky over every call since the region was made (synchronise
        first): 0 = fine; see the kernel's header for the bits."""
        import cupy
        import numpy as np

        word = np.zeros(1, np.uint32)
        with cupy.cuda.Device(self.region.device):
            cupy.cuda.runtime.memcpy(word.ctypes.data, self.region.ptr + self.layout.status_offset, 4,
                                     cupy.cuda.runtime.memcpyDeviceToHost)
        return int(word[0])

    def raise_for_status(self) -> None:
        """Raise :class:`RankHung` (a barrier timed out) or :class:`UsageError` (bad arguments)."""
        s = self.status()
        if s & 3:
            which = " and ".join(n for bit, n in ((1, "entry"), (2, "exit")) if s & bit)
            raise RankHung(f"one-shot all-reduce rank {self.rank} of {self.world}: the {which} barrier timed "
                           f"out after {self.timeout_ns / 1e9:g} s (a peer never arrived); use NCCL")
        if s & 4:
            raise UsageError(f"one-shot all-reduce rank {self.rank}: the kernel refused its arguments (status {s})")


@contextmanager
def _emulated_ranks(inputs, kernels, layout, timeout_s: float):
    """``(ranks, streams, outs)`` of a ``len(inputs)``-rank emulation on the current GPU; regions
    freed on exit. Sizing: see :func:`emulate_on_one_gpu`."""
    from .loader import load, require_gpu

    cupy = require_gpu()
    kernels = kernels or load()
    world = len(inputs)
    device = cupy.cuda.Device().id
    if layout is None:
        sms = int(cupy.cuda.Device(device).attributes["MultiProcessorCount"])
        layout = RegionLayout(max_blocks=max(1, min(DEFAULT_MAX_BLOCKS, sms // max(1, world))))
    regions = [Region(layout, device) for _ in range(world)]
    try:
        bases = [r.ptr for r in regions]
        ranks = [OneShotAllReduce(kernels, regions[q], q, world, bases, timeout_s) for q in range(world)]
        streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(world)]
        outs = [cupy.empty_like(x) for x in inputs]
        cupy.cuda.Device().synchronize()   # inputs and zeroed regions are in place before any rank starts
        yield ranks, streams, outs
        for s in streams:
            s.synchronize()
        for r in ranks:
            r.raise_for_status()
    finally:
        cupy.cuda.Device().synchronize()
        for r in regions:
            r.close()


def emulate_on_one_gpu(inputs, dtype, kernels=None, layout: RegionLayout | None = None,
                       timeout_s: float = 5.0, calls: int = 1):
    """Run a ``len(inputs)``-rank one-shot all-reduce on the current GPU: one region and one stream per
    emulated rank, all kernels in flight at once (so the barriers really synchronise them).

    ``len(inputs) == 1`` is the single-rank path. Each input is a cupy array of ``dtype``
    (uint16 bits for bf16). ``calls`` back-to-back calls (epochs 1..calls, no host synchronisation
    between them, so ranks run ahead of each other as in a real decode step) write the same
    outputs. Returns one output cupy array per rank; raises on a barrier timeout.

    All emulated ranks share one GPU, so every block of every rank must be resident at once (a
    block spinning on a barrier holds its SM until a peer's block arrives): the default layout gives
    each rank at most ``SMs // world`` blocks (at least one block fits on every SM). Each rank's
    kernels run on its own stream; streams that share one of the GPU's hardware queues
    (``CUDA_DEVICE_MAX_CONNECTIONS``, 8 by default) can order one rank's kernel behind another's
    spinning one, and the barrier then times out: set it to 32 for more than a few ranks.
    """
    with _emulated_ranks(inputs, kernels, layout, timeout_s) as (ranks, streams, outs):
        for _ in range(calls):
            for q, r in enumerate(ranks):
                r.launch(inputs[q].data.ptr, outs[q].data.ptr, int(inputs[q].nbytes), dtype, streams[q])
    return outs


def time_on_one_gpu(inputs, dtype, iters: int = 50, spin_us: float = 500.0, kernels=None,
                    layout: RegionLayout | None = None, timeout_s: float = 5.0) -> dict:
    """Device time of ``iters`` emulated one-shot all-reduces (see :func:`emulate_on_one_gpu`), each
    timed alone, spin first: every rank's stream is held by ``commprof_spin`` until a common moment
    (each spin is shortened by the host time since the first was queued), so all ranks' launches
    are enqueued before any runs and the ranks start together. Per call and rank, CUDA events
    around the rank's input copy and kernel. Returns ``transfer_us`` (per call, the fastest rank's
    time: the others' extra is waiting), ``slowest_us`` (per call, the slowest rank's) and
    ``spin_short`` (calls where some rank's start had fired before all launches were in)."""
    import time

    import numpy as np

    from .loader import load, require_gpu

    cupy = require_gpu()
    kernels = kernels or load()
    spin = kernels.get_function("commprof_spin")
    world = len(inputs)
    fastest, slowest, short = [], [], 0
    with _emulated_ranks(inputs, kernels, layout, timeout_s) as (ranks, streams, outs):
        for _ in range(iters):
            starts = [cupy.cuda.Event() for _ in range(world)]
            ends = [cupy.cuda.Event() for _ in range(world)]
            t0 = time.perf_counter()
            for q, r in enumerate(ranks):
                left_ns = max(0, int((spin_us - (time.perf_counter() - t0) * 1e6) * 1e3))
                with streams[q]:
                    spin((1,), (1,), (np.uint64(left_ns),))
                starts[q].record(streams[q])
                r.launch(inputs[q].data.ptr, outs[q].data.ptr, int(inputs[q].nbytes), dtype, streams[q])
                ends[q].record(streams[q])
            short += int(any(e.done for e in starts))
            for e in ends:
                e.synchronize()
            per_rank = [cupy.cuda.get_elapsed_time(a, b) * 1e3 for a, b in zip(starts, ends)]
            fastest.append(min(per_rank))
            slowest.append(max(per_rank))
    return {"world": world, "iters": iters, "size_bytes": int(inputs[0].nbytes), "spin_short": short,
            "transfer_us": fastest, "slowest_us": slowest, "outputs": outs}
