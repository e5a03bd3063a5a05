"""``commprof p2p``: raw link probes between every pair of GPUs (and each GPU with itself), with
P2P on (SM copies and flag ping-pong through peer pointers, copy engines) and off (a copy staged
through pinned host memory, the path NCCL's SHM transport takes when P2P is unavailable).

The kernels and their host side live in ``cuda_ext`` (built at first use); this module only
orders the probes, writes the results dir and prints the matrices. Needs CUDA GPUs and cupy.
"""
from __future__ import annotations

from commprof.model.registry import P2pConfig  # noqa: F401 - the flags, declared once


import os

from commprof import results
from commprof.views.p2p import render_p2p
from commprof.model.errors import UsageError
from commprof.results.meta import check_writable
from commprof.model.sizes import MAX_MESSAGE_BYTES
from commprof.model.units import parse_bytes

P2P_CSV = "p2p.csv"
COLUMNS = ["src_device", "dst_device", "probe", "kind", "p2p", "size_bytes", "gbps", "gbps_best",
           "time_us_p50", "roundtrip_us", "oneway_us", "verified", "clock", "spin_short"]


def host_staged_bandwidth(src_device: int, dst_device: int, nbytes: int, iters: int = 10) -> dict:
    """P2P off: device -> pinned host -> device, timed end to end (two copy-engine hops).

    ``verified`` compares both buffers on the host: ``src`` and ``dst`` sit on different GPUs that,
    on the boxes this probe is for, have no peer access, and cupy refuses to compare a device
    array with a host one, so neither GPU can do the comparison.
    """
    import statistics
    import time

    import numpy as np

    from cuda_ext.loader import require_gpu

    cupy = require_gpu()
    with cupy.cuda.Device(src_device):
        src = cupy.arange(nbytes, dtype=cupy.uint8)
    with cupy.cuda.Device(dst_device):
        dst = cupy.zeros(nbytes, dtype=cupy.uint8)
    host = cupy.cuda.alloc_pinned_memory(nbytes)
    times = []
    for i in range(iters + 2):
        cupy.cuda.Device(src_device).synchronize()
        t0 = time.perf_counter()
        cupy.cuda.runtime.memcpy(host.ptr, src.data.ptr, nbytes, cupy.cuda.runtime.memcpyDeviceToHost)
        cupy.cuda.runtime.memcpy(dst.data.ptr, host.ptr, nbytes, cupy.cuda.runtime.memcpyHostToDevice)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    p50 = statistics.median(times)
    ok = bool(np.array_equal(dst.get(), src.get()))     # .get() copies from each array's own GPU
    return {"probe": "host_staged", "kind": "same-gpu" if src_device == dst_device else "peer",
            "src_device": src_device, "dst_device": dst_device, "size_bytes": nbytes,
            "time_us_p50": p50 * 1e6, "gbps": nbytes / p50 / 1e9, "gbps_best": nbytes / min(times) / 1e9,
            "verified": ok, "clock": "perf_counter"}


MAX_P2P_ROUNDS = 10_000_000




def run(cfg: P2pConfig) -> int:
    """``commprof p2p``: validate the flags (one line, exit 2), then probe; the exit code."""
    try:
        # src and dst buffers on each GPU, like a sweep message: the same 64 GiB bound
        nbytes = parse_bytes(cfg.size, MAX_MESSAGE_BYTES)
    except ValueError as e:
        raise UsageError(f"--size: {e}") from None
    if isinstance(cfg.rounds, bool) or not isinstance(cfg.rounds, int) or not 1 <= cfg.rounds <= MAX_P2P_ROUNDS:
        raise UsageError(f"--rounds {cfg.rounds}: must be from 1 to {MAX_P2P_ROUNDS:,}")
    if cfg.out is not None:
        try:
            check_writable(cfg.out)
        except UsageError as e:
            raise UsageError(f"--out: {e}") from None
    return probe_all(cfg.out, nbytes, cfg.rounds)


def probe_all(out: str | None = None, size_bytes: int = 64 << 20, rounds: int = 10000) -> int:
    """Probe every ordered pair; write p2p.csv + meta.json; print the matrices."""
    from cuda_ext.loader import load, require_gpu
    from cuda_ext.probes import copy_bandwidth, copy_engine_bandwidth, pingpong_latency

    cupy = require_gpu()                  # one line and exit 3 without CUDA / cupy
    n = cupy.cuda.runtime.getDeviceCount()
    kernels = load()
    out = out or results.default_out_dir().rstrip("/") + "-p2p"
    results.check_out_dir(out, resume=False)
    os.makedirs(out, exist_ok=True)
    names = [cupy.cuda.runtime.getDeviceProperties(i)["name"] for i in range(n)]
    names = [x.decode() if isinstance(x, bytes) else str(x) for x in names]
    meta = results.provenance(
        "p2p", "measured", "raw GPU-to-GPU link probes (commprof p2p)", gpus=names, gpu_count=n,
        size_bytes=size_bytes, pingpong_rounds=rounds, kernels=kernels.backend,
        columns={"gbps": "bytes copied / p50 time, GB = 1e9 B", "p2p": "on: peer pointers or "
                 "copy-engine peer copies; off: staged through pinned host memory"})
    results.write_meta(out, meta)
    rows = []
    table = results.TableAppender(os.path.join(out, P2P_CSV), COLUMNS)
    try:
        def emit(r, p2p, src, dst):
            r = {**r, "p2p": p2p, "src_device": src, "dst_device": dst}
            rows.append(r)
            table.write([r])

        for i in range(n):
            for j in range(n):
                if i == j:
                    emit(copy_bandwidth(i, i, i, size_bytes, kernels=kernels), "on", i, i)
                    emit(copy_engine_bandwidth(i, i, size_bytes, kernels=kernels), "on", i, i)
                    emit(pingpong_latency(i, i, rounds, kernels=kernels), "on", i, i)
                    continue
                emit(copy_bandwidth(i, j, i, size_bytes, kernels=kernels), "on", j, i)      # i reads j
                emit(copy_bandwidth(i, i, j, size_bytes, kernels=kernels), "on", i, j)      # i writes j
                emit(copy_engine_bandwidth(i, j, size_bytes, kernels=kernels), "on", i, j)
                emit(pingpong_latency(i, j, rounds, kernels=kernels), "on", i, j)
                emit(host_staged_bandwidth(i, j, size_bytes), "off", i, j)
    finally:
        table.close()
    results.finish_meta(out, "complete")
    render_p2p(rows, n)
    print(f"wrote {os.path.join(out, P2P_CSV)}")
    return 0


