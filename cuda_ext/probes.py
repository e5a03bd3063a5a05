"""Host side of the raw link probes (cupy; needs a GPU): SM copy bandwidth, copy-engine bandwidth,
flag ping-pong latency, between two GPUs or on one GPU as a self-test.

What each measures and how it is timed:

* :func:`copy_bandwidth`: ``commprof_p2p_copy`` launched on ``exec_device`` copying from
  ``src_device``'s memory to ``dst_device``'s. src on the peer = ``read``, dst on the peer =
  ``write``, all three the same GPU = ``same-gpu``. Each iteration is timed alone (see *timing*);
  ``gbps`` is bytes copied / p50 time (a same-GPU copy reads and writes those bytes, so
  device-memory traffic is twice that: ``rw_gbps``). The destination is compared with the source
  after timing (``verified``).
* :func:`copy_engine_bandwidth`: ``cudaMemcpyPeerAsync`` (``cudaMemcpyAsync`` device-to-device
  on one GPU), the DMA engines instead of SMs; no kernel of ours. Timed and verified the same way.
* :func:`pingpong_latency`: ``commprof_pingpong``; the kernel times ``rounds`` round trips with
  ``%globaltimer`` (ns) after an untimed handshake, so launch overhead and launch skew between
  two GPUs are not in the figure; ``oneway_us`` is half the round trip.

*Timing* (the sweep's spin-first method, ``microbench/timing.py``): a start event recorded on an
idle stream fires at once, so an event pair around a launch would also hold the host's launch
time (worst at small sizes). Per iteration, ``commprof_spin`` holds the stream first (sized from
the warm-ups' enqueue times: twice the slowest plus 20 us, in ``%globaltimer`` ns, so no clock
calibration), then the start event, the copy, the end event. If the start event has already
fired when the copy's enqueue returns, the spin was short: that iteration is left out of the
figures and counted (``spin_short``), and the spin doubles.

Only the standard library is imported at module level.
"""
from __future__ import annotations

import statistics

from .loader import CudaUnavailable, load, require_gpu

COPY_THREADS = 512
BLOCKS_PER_SM = 4
SPIN_MIN_US = 20.0
SPIN_MAX_US = 20000.0


def enable_peer_access(device: int, peer: int) -> None:
    """Let ``device``'s kernels access ``peer``'s memory; an already-enabled pair is fine."""
    cupy = require_gpu()
    if device == peer:
        return
    if not cupy.cuda.runtime.deviceCanAccessPeer(device, peer):
        raise CudaUnavailable(f"driver reports no P2P access from GPU {device} to GPU {peer}: "
                              f"the probe needs P2P (copy-engine copies still work through the host)")
    with cupy.cuda.Device(device):
        try:
            cupy.cuda.runtime.deviceEnablePeerAccess(peer)
        except cupy.cuda.runtime.CUDARuntimeError as e:
            if getattr(e, "status", None) != 704:   # cudaErrorPeerAccessAlreadyEnabled
                raise


def copy_grid(nbytes: int, device: int | None = None) -> tuple[int, int]:
    """``(blocks, threads)`` for the copy kernel: 4 blocks of 512 threads per SM, fewer for small copies."""
    cupy = require_gpu()
    dev = cupy.cuda.Device(device) if device is not None else cupy.cuda.Device()
    sms = int(dev.attributes["MultiProcessorCount"])
    vectors = max(1, -(-nbytes // 16))
    return max(1, min(sms * BLOCKS_PER_SM, -(-vectors // COPY_THREADS))), COPY_THREADS


def launch_copy(kernels, src_ptr: int, dst_ptr: int, nbytes: int, stream=None) -> None:
    """Enqueue ``commprof_p2p_copy`` on the current device (its stream, or ``stream``)."""
    import numpy as np

    cupy = require_gpu()
    blocks, threads = copy_grid(nbytes)
    fn = kernels.get_function("commprof_p2p_copy")
    with (stream or cupy.cuda.get_current_stream()):
        fn((blocks,), (threads,), (np.uint64(src_ptr), np.uint64(dst_ptr), np.uint64(nbytes)))


def _summary(timed: dict, nbytes: int) -> dict:
    times_ms = timed["times_ms"]
    p50 = statistics.median(times_ms)
    return {"size_bytes": nbytes, "iters": len(times_ms), "time_us_p50": p50 * 1e3,
            "time_us_min": min(times_ms) * 1e3, "gbps": nbytes / (p50 * 1e-3) / 1e9,
            "gbps_best": nbytes / (min(times_ms) * 1e-3) / 1e9, "clock": "cuda_event_spin",
            "spin_us": timed["spin_us"], "spin_short": timed["spin_short"]}


def _timed(cupy, device: int, enqueue, iters: int, warmup: int, kernels) -> dict:
    """Spin-first timing of ``enqueue(stream)`` (module docstring): ``times_ms`` of the iterations
    whose spin covered the enqueue (all of them if none did), ``spin_short``, final ``spin_us``."""
    import time

    import numpy as np

    spin = kernels.get_function("commprof_spin")
    with cupy.cuda.Device(device):
        stream = cupy.cuda.Stream(non_blocking=True)
        enq = []
        for _ in range(max(1, warmup)):
            t0 = time.perf_counter()
            enqueue(stream)
            enq.append((time.perf_counter() - t0) * 1e6)
            stream.synchronize()
        spin_us = min(max(2.0 * max(enq) + SPIN_MIN_US, SPIN_MIN_US), SPIN_MAX_US)
        covered, short = [], []
        for _ in range(iters):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            with stream:
                spin((1,), (1,), (np.uint64(int(spin_us * 1e3)),))
            start.record(stream)
            enqueue(stream)
            was_short = start.done          # the GPU reached the copy before its launch was in
            end.record(stream)
            end.synchronize()
            ms = cupy.cuda.get_elapsed_time(start, end)
            if was_short:
                short.append(ms)
                spin_us = min(spin_us * 2.0, SPIN_MAX_US)
            else:
                covered.append(ms)
        return {"times_ms": covered or short, "spin_short": len(short), "spin_us": spin_us}


def _buffers(cupy, src_device: int, dst_device: int, nbytes: int):
    with cupy.cuda.Device(src_device):   # a counting pattern of u32 words, seen as bytes
        src = cupy.arange(-(-nbytes // 4), dtype=cupy.uint32).view(cupy.uint8)[:nbytes]
    with cupy.cuda.Device(dst_device):
        dst = cupy.zeros(nbytes, dtype=cupy.uint8)
    for d in {src_device, dst_device}:   # the timed work runs on other streams (and maybe GPUs)
        cupy.cuda.Device(d).synchronize()
    return src, dst


def _same(cupy, src, dst, dst_device: int) -> bool:
    with cupy.cuda.Device(dst_device):
        cupy.cuda.Device(dst_device).synchronize()
        ref = cupy.empty_like(dst)
        ref.data.copy_from_device(src.data, src.nbytes)   # a plain (possibly peer) memcpy, no kernel of ours
        return bool(cupy.array_equal(ref, dst))


def copy_bandwidth(exec_device: int, src_device: int, dst_device: int, nbytes: int = 256 << 20,
                   iters: int = 20, warmup: int = 3, kernels=None) -> dict:
    """SM-initiated copy bandwidth (see the module docstring); returns a dict of figures."""
    cupy = require_gpu()
    kernels = kernels or load()
    for peer in {src_device, dst_device} - {exec_device}:
        enable_peer_access(exec_device, peer)
    src, dst = _buffers(cupy, src_device, dst_device, nbytes)
    kind = "same-gpu" if src_device == dst_device == exec_device else \
        "read" if dst_device == exec_device else "write" if src_device == exec_device else "remote-to-remote"
    times = _timed(cupy, exec_device, lambda s: launch_copy(kernels, src.data.ptr, dst.data.ptr, nbytes, s),
                   iters, warmup, kernels)
    out = {"probe": "sm_copy", "kind": kind, "exec_device": exec_device, "src_device": src_device,
           "dst_device": dst_device, **_summary(times, nbytes)}
    if kind == "same-gpu":
        out["rw_gbps"] = 2 * out["gbps"]
    out["verified"] = _same(cupy, src, dst, dst_device)
    return out


def copy_engine_bandwidth(src_device: int, dst_device: int, nbytes: int = 256 << 20, iters: int = 20,
                          warmup: int = 3, kernels=None) -> dict:
    """Copy-engine bandwidth: ``cudaMemcpyPeerAsync`` between GPUs, ``cudaMemcpyAsync`` on one GPU
    (no kernel of ours does the copy; ``commprof_spin`` holds the stream before it)."""
    cupy = require_gpu()
    kernels = kernels or load()
    rt = cupy.cuda.runtime
    src, dst = _buffers(cupy, src_device, dst_device, nbytes)
    if src_device == dst_device:
        def enqueue(s):
            rt.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, rt.memcpyDeviceToDevice, s.ptr)
    else:
        def enqueue(s):
            rt.memcpyPeerAsync(dst.data.ptr, dst_device, src.data.ptr, src_device, nbytes, s.ptr)
    times = _timed(cupy, src_device, enqueue, iters, warmup, kernels)
    out = {"probe": "copy_engine", "kind": "same-gpu" if src_device == dst_device else "peer",
           "src_device": src_device, "dst_device": dst_device, **_summary(times, nbytes)}
    if src_device == dst_device:
        out["rw_gbps"] = 2 * out["gbps"]
    out["verified"] = _same(cupy, src, dst, dst_device)
    return out


def pingpong_latency(device_a: int, device_b: int, rounds: int = 10000, poll: str = "local",
                     timeout_s: float = 5.0, kernels=None) -> dict:
    """Flag ping-pong round-trip latency between two GPUs (or two blocks of one GPU when equal).

    Args:
        poll: ``"local"``: each side spins on a flag in its own memory and the other side writes it
            remotely (posted writes); ``"remote"``: each side spins on a flag in the *peer's*
            memory (remote reads). Same GPU: both flags are local either way.
        timeout_s: a side that waits longer gives up; the call then raises CudaUnavailable.

    Returns:
        ``roundtrip_us``, ``oneway_us`` (half), ``cycles_per_roundtrip`` (clock64 of side 0's SM),
        ``rounds``, ``clock: "globaltimer"``.
    """
    import numpy as np

    if poll not in ("local", "remote"):
        raise ValueError("poll must be 'local' or 'remote'")
    cupy = require_gpu()
    kernels = kernels or load()
    timeout_ns = np.uint64(int(timeout_s * 1e9))
    # side 0 runs on A and waits on pong; side 1 runs on B and waits on ping
    ping_dev, pong_dev = (device_b, device_a) if poll == "local" else (device_a, device_b)
    if device_a != device_b:
        enable_peer_access(device_a, device_b)
        enable_peer_access(device_b, device_a)
    with cupy.cuda.Device(ping_dev):
        ping = cupy.zeros(32, dtype=cupy.uint32)      # 128 bytes: the flag alone on its line
    with cupy.cuda.Device(pong_dev):
        pong = cupy.zeros(32, dtype=cupy.uint32)
    results = {}
    for d in {device_a, device_b}:
        with cupy.cuda.Device(d):
            results[d] = cupy.zeros(8, dtype=cupy.uint64)
            cupy.cuda.Device(d).synchronize()
    fn = kernels.get_function("commprof_pingpong")
    if device_a == device_b:
        with cupy.cuda.Device(device_a):
            fn((2,), (32,), (ping, pong, np.int32(rounds), np.int32(0), timeout_ns, results[device_a]))
            cupy.cuda.Device(device_a).synchronize()
        res_a = res_b = results[device_a].get()
    else:
        with cupy.cuda.Device(device_b):   # the waiting side first, so it is resident when A starts
            sb = cupy.cuda.Stream(non_blocking=True)
            with sb:
                fn((1,), (32,), (ping, pong, np.int32(rounds), np.int32(1), timeout_ns, results[device_b]))
        with cupy.cuda.Device(device_a):
            sa = cupy.cuda.Stream(non_blocking=True)
            with sa:
                fn((1,), (32,), (ping, pong, np.int32(rounds), np.int32(0), timeout_ns, results[device_a]))
        sa.synchronize()
        sb.synchronize()
        res_a, res_b = results[device_a].get(), results[device_b].get()
    if res_a[3] or res_b[4]:
        raise CudaUnavailable(f"ping-pong GPU {device_a} <-> GPU {device_b} timed out after {timeout_s:g} s "
                              f"(side {'0' if res_a[3] else '1'} never saw its flag): P2P writes are not arriving")
    ns, cycles, timed = int(res_a[0]), int(res_a[1]), int(res_a[2])
    if timed != rounds or ns <= 0:
        raise CudaUnavailable(f"ping-pong GPU {device_a} <-> GPU {device_b} returned no timing "
                              f"(rounds {timed}/{rounds}, {ns} ns)")
    rt_us = ns / rounds / 1e3
    return {"probe": "pingpong", "device_a": device_a, "device_b": device_b, "poll": poll, "rounds": rounds,
            "roundtrip_us": rt_us, "oneway_us": rt_us / 2, "cycles_per_roundtrip": cycles / rounds,
            "clock": "globaltimer"}
