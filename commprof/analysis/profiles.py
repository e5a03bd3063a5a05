"""Reference interconnect profiles: alpha-beta parameters of boxes we cannot measure here.

Each profile models one collective as ``latency_us(bytes) = alpha_us + bytes / (beta_gbps * 1e3)``
per op, TP degree and mode, where

* ``alpha_us`` is the small-message latency, and
* ``beta_gbps`` is the op's *algorithm* bandwidth: the large-message bus bandwidth (``busbw_gbps``,
  nccl-tests definition) divided by the op's nccl-tests bus factor
  (:meth:`commprof.model.collectives.Collective.busbw_factor`), i.e. ``algbw = busbw / factor(n)``.

Where a real log of the class shows NCCL's protocol steps (LL for small messages, LL128 in the
middle, Simple for large ones; NVLS on NVSwitch for large all-reduce), that (op, TP, mode) entry also
has ``pieces``: one such line per size range, fitted to the log (:func:`fit_pieces`, evaluated by
:func:`param_latency_us`); its ``alpha_us`` is the first piece's and its ``busbw_gbps`` the last's.

Every number carries its source. A value is ``published`` only when a public measurement states it
for that op, TP degree and mode (the source is named in ``sources``); anything else is
``derived`` with the rule and inputs spelled out, or ``proposed``. Modes: ``eager`` is NCCL called
once per op without a CUDA graph (nccl-tests' default loop, or torch eager); ``graph`` is the op
replayed inside a CUDA graph. A profile has ``graph`` parameters only where a source separates the
two.

The profiles are data (this module imports nothing heavy); :mod:`commprof.analysis.costmodel` evaluates them.
"""
from __future__ import annotations

import copy

from commprof.model.collectives import COLLECTIVES

PROFILE_OPS = ("all_reduce", "all_gather")
PROFILE_TPS = (2, 4, 8)

# Public sources, by the key the parameters cite. Figures only, each with where it was published.
SOURCES = {
    "nccl-tests#123": "NVIDIA/nccl-tests #123: DGX-A100 (8x A100 SXM, NVLink 3 + NVSwitch), NCCL ring "
                      "all-reduce forced to one channel, 8-128 B, no CUDA graph: 2 GPUs 10 us, 4 GPUs "
                      "16.9 us, 8 GPUs 33.7 us",
    "nccl-tests#149": "NVIDIA/nccl-tests #149: 8x A100 SXM all-reduce busbw about 230 GB/s achievable at "
                      "large sizes (>= 8 GB)",
    "nccl-tests#212": "NVIDIA/nccl-tests #212 (maintainer): 8x H100 SXM all-reduce busbw about 370 GB/s "
                      "with the Ring algorithm, which is also what non-allreduce collectives reach; about "
                      "480 GB/s with NVLS; large sizes",
    "nccl#1455": "NVIDIA/nccl #1455: H100 SXM ring busbw 365-370 GB/s for 2 to 8 GPUs (2-4 GB)",
    "nccl#1259": "NVIDIA/nccl #1259: 2x H100 SXM, nccl-tests all_reduce_perf with CUDA graphs (-G 10), "
                 "NCCL 2.20.5: about 5.5-6 us, flat from 128 B to 64 KB",
    "Triton-distributed#57": "ByteDance-Seed/Triton-distributed #57: 8x H100 SXM, torch.distributed NCCL "
                             "all-reduce, eager (no CUDA graph): 128 B 19.2 us, 16 KB 20.7, 256 KB 24.8, "
                             "1 MB 32.4, 4 MB 59.4",
    "DeepEP#303": "deepseek-ai/DeepEP #303: 8x H20 (NVLink 4, 900 GB/s bidirectional), nccl-tests "
                  "all_reduce_perf without CUDA graph: 12.49 us at 4-16 B",
    "nccl-tests#333": "NVIDIA/nccl-tests #333: GB200 (NVLink 5), 4 GPUs, NCCL symmetric-memory "
                      "all-reduce under CUDA graphs, one GPU per process: under 8 us up to 1 KB, best "
                      "5.18 us",
    "ml-engineering": "stas00/ml-engineering network/README.md: 8x B200 all-reduce busbw 682 GB/s with "
                      "Ring, 838 GB/s with NVLS (large sizes)",
    "rtx6kpro": "voipmonitor/rtx6kpro hardware/pcie-bandwidth.md: 8x RTX PRO 6000 (PCIe 5.0 behind PCIe "
                "switches, P2P working: a custom one-shot all-reduce runs on it): NCCL all-reduce 24.6 / "
                "24.2 / 24.1 / 28.0 us at 256 B / 8 KB / 64 KB / 256 KB (CUDA graph use not stated); "
                "busbw 37.6-41.1 GB/s from 8 MB to 2 GB with NCCL_MIN_NCHANNELS=8",
    "nccl#1639": "NVIDIA/nccl #1639: 8x RTX 5090 (PCIe 5.0, stock driver): all-reduce busbw 28 GB/s with "
                 "8 GPUs, 35 GB/s with 4 (1-8 GB); maintainer: such PCIe systems are bound by CPU/memory "
                 "bandwidth (the data goes through host memory)",
    "nccl#1530": "NVIDIA/nccl #1530: 8x RTX 4090 (PCIe 4.0, stock driver, P2P off), nccl-tests "
                 "all_reduce_perf -g 8 without CUDA graph: 42-43 us at 8 B",
    "tinygrad#17": "tinygrad/open-gpu-kernel-modules #17: 5x RTX 4090 (PCIe 4.0) with the P2P-enabling "
                   "driver, NCCL_P2P_LEVEL=SYS: all-reduce busbw 24.7 GB/s at 32 MB",
    "superbench-a100": "microsoft/superbenchmark tests/data/nccl_allreduce.log (commit 700d6501): 8x A100-SXM4-40GB on "
                       "NVSwitch, nccl-tests all_reduce_perf, no CUDA graph: average 34.5-36.1 us from 4 B to 4 KiB "
                       "(median 34.94), busbw 235.26 GB/s at 8 GiB",
    "chlc-4090x8": "blog.chlc.cc/p/rtx4090-gpudirect-p2p-unlocked, 'Test the original performance', copied as "
                   "tests/data/nccl-tests/rtx4090x8_pcie_allreduce_chlc_blog.txt: 8x RTX 4090, PCIe 4.0, two "
                   "sockets (every pair SYS), stock driver (P2P off), nccl-tests all_reduce_perf, no CUDA graph: "
                   "average 38.7-44.0 us from 8 B to 4 KiB (median 42.495), busbw peak 15.04 GB/s at 32 MiB",
    "kalavai-4090x2": "kalavai-net/kalavai-client scripts/README.md (commit 9588f6d8): 2x RTX 4090 on PCIe, "
                      "nccl-tests all_reduce_perf, no CUDA graph: average 8.97-12.01 us from 8 B to 4 KiB "
                      "(median 10.065), busbw 2.24 GB/s from 256 MiB to 2 GiB",
    "aikitoria-5090x8": "aikitoria/open-gpu-kernel-modules README.md ('Sample nccl-tests all_reduce_perf output', "
                        "https://github.com/aikitoria/open-gpu-kernel-modules), copied as "
                        "tests/data/nccl-tests/rtx5090x8_pcie5_p2p_allreduce_aikitoria.txt: 8x RTX 5090, PCIe 5.0, P2P "
                        "on through that repo's driver, nccl-tests 2.18.2 all_reduce_perf, no CUDA graph: 24.5-25.5 us "
                        "from 8 B to 2 KiB, a step to 36.29 us at 4 KiB, busbw 45.7 GB/s peak at 32 MiB",
    "nccl-tests#290": "https://github.com/NVIDIA/nccl-tests/issues/290, copied as "
                      "tests/data/nccl-tests/h100x8_sxm_nvls_allreduce_nccltests290.txt: 8x H100 80GB HBM3 SXM, "
                      "NVLS (in-switch reduction), nccl-tests all_reduce_perf, no CUDA graph: busbw 473.6 GB/s at "
                      "4 GiB (128 MiB to 4 GiB)",
    "nccl-tests#287": "https://github.com/NVIDIA/nccl-tests/issues/287 (comment of 2025-03-14, NCCL 2.26.2), copied "
                      "as tests/data/nccl-tests/rtx5090x4_pcie5_nop2p_allreduce_nccltests287.txt: 4x RTX 5090, PCIe "
                      "5.0, stock driver (P2P off), nccl-tests all_reduce_perf, no CUDA graph: 15.3-15.9 us from 8 B "
                      "to 1 KiB, a step to 26.16 us at 2 KiB, busbw 27.26 GB/s peak",
    "link-ceilings": "link ceilings per direction, as tabulated in stas00/ml-engineering "
                   "network/README.md: PCIe 4.0 x16 31.5 GB/s, PCIe 5.0 x16 63 GB/s, NVLink 3 (A100) "
                   "300 GB/s, NVLink 4 (H100/H200) 450 GB/s, NVLink 5 (B200) 900 GB/s",
}

# --- real logs the profiles are calibrated against ------------------------------------------------
# (size_bytes, average us) of each log's out-of-place all_reduce rows, as printed (size > 0).
REAL_LOGS = {
    "superbench-a100": {"op": "all_reduce", "tp": 8, "mode": "eager", "busbw_gbps": 235.26, "points": (
        (4, 34.73), (8, 34.66), (16, 35.0), (32, 35.6), (64, 34.83), (128, 34.53), (256, 34.56), (512, 34.94),
        (1024, 36.07), (2048, 35.42), (4096, 35.92), (8192, 35.91), (16384, 36.18), (32768, 36.65),
        (65536, 37.82), (131072, 41.19), (262144, 47.53), (524288, 60.32), (1048576, 74.78), (2097152, 93.48),
        (4194304, 112.0), (8388608, 162.0), (16777216, 226.0), (33554432, 374.3), (67108864, 584.5),
        (134217728, 1162.2), (268435456, 2112.2), (536870912, 4200.3), (1073741824, 8159.5),
        (2147483648, 16215.0), (4294967296, 32070.0), (8589934592, 63896.0))},
    "chlc-4090x8": {"op": "all_reduce", "tp": 8, "mode": "eager", "busbw_gbps": 15.04, "points": (
        (8, 38.83), (16, 38.73), (32, 41.85), (64, 42.55), (128, 42.42), (256, 42.44), (512, 42.58),
        (1024, 44.04), (2048, 42.91), (4096, 43.18), (8192, 44.02), (16384, 43.1), (32768, 44.18),
        (65536, 45.66), (131072, 67.27), (262144, 124.8), (524288, 196.9), (1048576, 222.8), (2097152, 373.4),
        (4194304, 580.8), (8388608, 1041.8), (16777216, 1972.8), (33554432, 3905.6), (67108864, 7907.1),
        (134217728, 16253.0))},
    "kalavai-4090x2": {"op": "all_reduce", "tp": 2, "mode": "eager", "busbw_gbps": 2.24, "points": (
        (8, 8.97), (16, 9.48), (32, 10.28), (64, 9.06), (128, 9.85), (256, 9.72), (512, 10.57), (1024, 10.37),
        (2048, 10.94), (4096, 12.01), (8192, 16.82), (16384, 23.67), (32768, 40.18), (65536, 60.23),
        (131072, 97.9), (262144, 163.4), (524288, 280.1), (1048576, 538.5), (2097152, 1025.7),
        (4194304, 2022.1), (8388608, 4077.0), (16777216, 8137.9), (33554432, 15190.0), (67108864, 30690.0),
        (134217728, 60326.0), (268435456, 120583.0), (536870912, 241172.0), (1073741824, 478533.0),
        (2147483648, 957746.0))},
    "aikitoria-5090x8": {"op": "all_reduce", "tp": 8, "mode": "eager", "busbw_gbps": 45.7, "points": (
        (8, 25.47), (16, 24.52), (32, 24.65), (64, 24.72), (128, 24.67), (256, 24.77), (512, 24.62), (1024, 24.66),
        (2048, 24.54), (4096, 36.29), (8192, 37.0), (16384, 38.06), (32768, 39.33), (65536, 40.96),
        (131072, 42.19), (262144, 45.87), (524288, 56.96), (1048576, 74.74), (2097152, 104.5), (4194304, 176.93),
        (8388608, 326.13), (16777216, 646.48), (33554432, 1284.81), (67108864, 2585.56), (134217728, 5355.16))},
    "nccl-tests#287": {"op": "all_reduce", "tp": 4, "mode": "eager", "busbw_gbps": 27.26, "points": (
        (8, 15.6), (16, 15.32), (32, 15.52), (64, 15.44), (128, 15.46), (256, 15.82), (512, 15.81), (1024, 15.88),
        (2048, 26.16), (4096, 27.21), (8192, 27.45), (16384, 31.06), (32768, 31.64), (65536, 32.58),
        (131072, 35.19), (262144, 45.84), (524288, 70.24), (1048576, 93.45), (2097152, 152.9), (4194304, 261.4),
        (8388608, 490.3), (16777216, 935.7), (33554432, 1860.0), (67108864, 3708.9), (134217728, 7384.4))},
    "nccl-tests#290": {"op": "all_reduce", "tp": 8, "mode": "eager", "busbw_gbps": 473.6, "points": (
        (134217728, 613.3), (268435456, 1139.2), (536870912, 2175.8), (1073741824, 4038.8),
        (2147483648, 8020.3), (4294967296, 15870.0))},
}


def log_small_us(key: str, max_bytes: int = 4096) -> float:
    """Median of a real log's average latency at sizes <= ``max_bytes`` (its small-message latency)."""
    vals = sorted(t for s, t in REAL_LOGS[key]["points"] if s <= max_bytes)
    m = len(vals) // 2
    return vals[m] if len(vals) % 2 else (vals[m - 1] + vals[m]) / 2


# --- protocol pieces -------------------------------------------------------------------------------
# NCCL picks a protocol per size: LL (8-byte stores with inline flags: lowest latency, a fraction of
# the bandwidth) for small messages, LL128 in the middle, Simple for large ones. A real log shows the
# switch as a step or a change of slope. Where a calibrated log shows them, the (op, TP) entry gets
# ``pieces``: one alpha-beta line per size range, each fitted to that log's points in its range.

def _fit_rel(points) -> tuple[float, float]:
    """(alpha_us, us_per_byte) minimising sum(((alpha + c s) / t - 1)^2), both kept >= 0 (pure Python)."""
    suu = suv = svv = su = sv = 0.0
    for s, t in points:
        u, v = 1.0 / t, s / t
        suu, suv, svv, su, sv = suu + u * u, suv + u * v, svv + v * v, su + u, sv + v
    det = suu * svv - suv * suv
    a, c = ((su * svv - suv * sv) / det, (suu * sv - suv * su) / det) if len(points) > 1 and det > 0 else (su / suu, 0.0)
    if c <= 0:
        a, c = su / suu, 0.0
    if a < 0:
        a, c = 0.0, sv / svv
    return a, c


def fit_pieces(key: str, breaks: tuple[tuple[int, str], ...]) -> list[dict]:
    """Pieces fitted to real log ``key``: ``breaks`` is ((from_bytes, protocol), ...), ascending from 0."""
    log = REAL_LOGS[key]
    factor = COLLECTIVES[log["op"]].busbw_factor(log["tp"])
    out = []
    for i, (lo, proto) in enumerate(breaks):
        hi = breaks[i + 1][0] if i + 1 < len(breaks) else float("inf")
        pts = [(s, t) for s, t in log["points"] if lo <= s < hi]
        a, c = _fit_rel(pts)
        beta = 1.0 / (c * 1e3) if c > 0 else float("inf")
        piece = {"from_bytes": int(lo), "protocol": proto, "alpha_us": round(a, 3),
                 "beta_gbps": round(beta, 3) if c > 0 else beta,
                 "busbw_gbps": round(beta * factor, 3) if c > 0 else beta}
        out.append({**piece,
                    "source": (f"calibrated: {key}: alpha {piece['alpha_us']:g} us, busbw {piece['busbw_gbps']:g} "
                               f"GB/s (beta {piece['beta_gbps']:g} GB/s = busbw / {factor:.4g}), least squares in "
                               f"relative error over its "
                               f"{len(pts)} sizes from {lo} B{'' if hi == float('inf') else f' below {int(hi)} B'}; "
                               f"{proto} is what NCCL is taken to run there (the log shows a step or a "
                               "change of slope at the piece's start)")})
    return out


def param_latency_us(q: dict, size_bytes: float) -> float:
    """Modelled latency of one parameter entry: ``alpha_us + size_bytes / (beta_gbps * 1e3)``, or, where
    it has pieces, the line of the piece covering ``size_bytes`` capped at the curve's value where the
    next piece starts (a line fitted below a break may overshoot before it; the cap keeps the curve
    monotone, as NCCL would switch protocol rather than run slower on a larger message)."""
    def line(e: dict, s: float) -> float:
        b = e["beta_gbps"]
        return float(e["alpha_us"]) + (0.0 if b == float("inf") else float(s) / (float(b) * 1e3))

    pieces = q.get("pieces") or ()
    if not pieces:
        return line(q, size_bytes)
    i = max(k for k, e in enumerate(pieces) if size_bytes >= e["from_bytes"] or k == 0)
    cap = float("inf")
    for e in reversed(pieces[i + 1:]):
        cap = min(line(e, e["from_bytes"]), cap)
    return min(line(pieces[i], size_bytes), cap)


def _with_pieces(q: dict, pieces: list[dict]) -> dict:
    """``q`` whose curve follows ``pieces``: its alpha is the first piece's, its busbw the last's."""
    first, last = pieces[0], pieces[-1]
    out = _param(q["op"], q["tp"], q["mode"], first["alpha_us"], f"{first['source']} ({first['protocol']} piece)",
                 last["busbw_gbps"], f"{last['source']} ({last['protocol']} piece)")
    out["pieces"] = pieces
    return out


# --- derivation rules ------------------------------------------------------------------------------

# The one published sweep of small-message ring latency over GPU count (nccl-tests #123, DGX-A100):
# (GPUs, us). Fitted as fixed + per-step * ring steps; used to carry a value to another TP degree or
# from all-reduce (2(n-1) ring steps) to all-gather (n-1 steps).
_RING_POINTS = ((2, 10.0), (4, 16.9), (8, 33.7))


def ring_steps(op: str, n: int) -> int:
    """Steps of a ring algorithm: all-reduce 2(n-1) (reduce-scatter then all-gather), others n-1."""
    return 2 * (n - 1) if op == "all_reduce" else n - 1


def _fit_line(xs, ys) -> tuple[float, float]:
    """Ordinary least squares y = c0 + c1 x (pure Python: this module must not import numpy)."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    c1 = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - c1 * mx, c1


RING_C0_US, RING_C1_US = _fit_line([ring_steps("all_reduce", n) for n, _ in _RING_POINTS],
                                   [v for _, v in _RING_POINTS])
RING_RULE = (f"ring-latency shape {RING_C0_US:.2f} us + {RING_C1_US:.2f} us per ring step, least squares "
             "over the DGX-A100 2/4/8-GPU points of nccl-tests#123")


def _ring_shape(op: str, n: int) -> float:
    return RING_C0_US + RING_C1_US * ring_steps(op, n)


def _scaled(value_us: float, from_op: str, from_n: int, op: str, n: int) -> float:
    return value_us * _ring_shape(op, n) / _ring_shape(from_op, from_n)


def _fmt(v: float) -> str:
    return f"{v:.3g}"


# NVLink 4 device-side latency line: through 2x H100 under CUDA graphs (nccl#1259, 5.5-6 us, midpoint)
# and 8x H20 nccl-tests without graphs (DeepEP#303, 12.49 us; the back-to-back nccl-tests loop hides
# launch cost as a graph replay does), linear in ring steps. The eager overhead is what torch eager
# adds on 8x H100 (Triton-distributed#57, 19.2 us) over that device time.
NVL4_GRAPH_TP2_US = 5.75
NVL4_NOGRAPH_TP8_US = 12.49
NVL4_EAGER_TP8_US = 19.2
NVL_STEP_US = (NVL4_NOGRAPH_TP8_US - NVL4_GRAPH_TP2_US) / (ring_steps("all_reduce", 8) - ring_steps("all_reduce", 2))
NVL4_D0_US = NVL4_GRAPH_TP2_US - NVL_STEP_US * ring_steps("all_reduce", 2)
EAGER_OVERHEAD_US = NVL4_EAGER_TP8_US - NVL4_NOGRAPH_TP8_US
NVL_LINE_RULE = (f"NVLink device line {NVL4_D0_US:.2f} us + {NVL_STEP_US:.3f} us per ring step through "
                 f"nccl#1259 (2 GPUs, graph, {NVL4_GRAPH_TP2_US} us = midpoint of 5.5-6) and DeepEP#303 "
                 f"(8 GPUs, {NVL4_NOGRAPH_TP8_US} us without graph, taken as graph time because nccl-tests "
                 "issues ops back to back, hiding launch cost as a graph does)")
EAGER_RULE = (f"graph value + {EAGER_OVERHEAD_US:.2f} us eager overhead (Triton-distributed#57 "
              f"{NVL4_EAGER_TP8_US} us torch eager on 8x H100 minus the {NVL4_NOGRAPH_TP8_US} us device "
              "time of DeepEP#303; host-side, so taken as fabric independent)")


def _param(op, tp, mode, alpha_us, alpha_source, busbw_gbps, busbw_source) -> dict:
    factor = COLLECTIVES[op].busbw_factor(tp)
    return {
        "op": op, "tp": tp, "mode": mode,
        "alpha_us": round(float(alpha_us), 3), "alpha_source": alpha_source,
        "busbw_gbps": round(float(busbw_gbps), 3), "busbw_source": busbw_source,
        "beta_gbps": round(float(busbw_gbps) / factor, 3),
        "beta_source": (f"derived: busbw {_fmt(busbw_gbps)} GB/s / nccl-tests bus factor "
                        f"{'2(n-1)/n' if op == 'all_reduce' else '(n-1)/n'} = {factor:.4g} at n={tp} "
                        "(algbw = busbw / factor)"),
    }


def _ring_alpha(op, n, pub_op, pub_n, pub_us, pub_key, pub_text) -> tuple[float, str]:
    """``pub_us`` as published for (pub_op, pub_n); other (op, n) carried by the ring shape."""
    if (op, n) == (pub_op, pub_n):
        return pub_us, f"published: {pub_key}: {pub_text}"
    v = _scaled(pub_us, pub_op, pub_n, op, n)
    return v, (f"derived: {pub_op} {pub_n} GPUs {_fmt(pub_us)} us ({pub_key}) x shape({op}, n={n}) / "
               f"shape({pub_op}, n={pub_n}) = {_fmt(v)} us; {RING_RULE}")


def _flat_busbw(op, n, pub: dict, pub_key, pub_text, how="") -> tuple[float, str]:
    """Published busbw at the GPU counts in ``pub`` (all-reduce); elsewhere the nearest count's."""
    if op == "all_reduce" and n in pub:
        return pub[n], f"published: {pub_key}: {pub_text}"
    near = min(pub, key=lambda k: (abs(k - n), -k))
    why = how or ("busbw of the nearest published GPU count; ring busbw is close to flat in GPU count "
                  "where each GPU has its own link (H100: 365-370 GB/s for 2-8 GPUs, nccl#1455), and "
                  "all-gather moves the same bytes per link per busbw unit as all-reduce")
    return pub[near], f"derived: all_reduce {near} GPUs {_fmt(pub[near])} GB/s ({pub_key}); {why}"


# Pieces of the calibrated 8-GPU all-reduce entries, at the sizes where each log steps.
PIECES_5090X8 = fit_pieces("aikitoria-5090x8", ((0, "LL"), (4096, "LL128"), (524288, "Simple")))
PIECES_A100X8 = fit_pieces("superbench-a100", ((0, "LL"), (131072, "LL128"), (1 << 20, "Simple")))
PIECES_4090X8 = fit_pieces("chlc-4090x8", ((0, "LL"), (131072, "LL128"), (1 << 20, "Simple")))
PIECES_5090X4_NOP2P = fit_pieces("nccl-tests#287", ((0, "LL"), (2048, "LL128"), (524288, "Simple")))
PIECES_H100X8_NVLS = fit_pieces("nccl-tests#290", ((64 << 20, "NVLS"),))


# --- the profiles ----------------------------------------------------------------------------------

def _pcie4_nop2p() -> dict:
    params = []
    b5 = {8: 28.0, 4: 35.0}
    a8, a2 = log_small_us("chlc-4090x8"), log_small_us("kalavai-4090x2")
    for op in PROFILE_OPS:
        for n in PROFILE_TPS:
            if (op, n) == ("all_reduce", 2):
                a, asrc = a2, (f"calibrated: kalavai-4090x2 (2x RTX 4090), median average 8 B-4 KiB = {a2:g} us; "
                               "small messages are latency-bound, so this box's narrow link (its busbw is 2.24 "
                               "GB/s) does not set them")
            else:
                a, asrc = _ring_alpha(op, n, "all_reduce", 8, a8, "chlc-4090x8",
                                      f"8x RTX 4090, P2P off, two sockets, median average 8 B-4 KiB = {a8:g} us "
                                      "(calibrated; nccl#1530 says 42-43 us at 8 B on such a box)")
                asrc = asrc.replace("published:", "calibrated:", 1)
            if (op, n) == ("all_reduce", 8):
                bb, bsrc = 15.04, ("calibrated: chlc-4090x8 all-reduce busbw peak 15.04 GB/s at 32 MiB (8x RTX 4090, "
                                   "P2P off, two sockets); was nccl#1639's PCIe 5.0 28 GB/s x 31.5/63 = 14 GB/s")
            elif n == 8:
                bb, bsrc = 15.04, ("derived: all_reduce 8 GPUs 15.04 GB/s (chlc-4090x8, calibrated), all-gather taken "
                                   "equal to all-reduce at the same count")
            else:
                bb = b5[4] * 31.5 / 63.0
                bsrc = (f"derived: PCIe 5.0 P2P-off all-reduce busbw {_fmt(b5[4])} GB/s at 4 GPUs "
                        f"(nccl#1639) x link-ceiling ratio 31.5/63 (link-ceilings) = {_fmt(bb)} GB/s; no public "
                        "large-message busbw for a P2P-off PCIe 4.0 box of 2 or 4 GPUs on x16 links (the "
                        "2x RTX 4090 log reaches 2.24 GB/s: 7% of x16, not taken)")
            q = _param(op, n, "eager", a, asrc, bb, bsrc)
            params.append(_with_pieces(q, PIECES_4090X8) if (op, n) == ("all_reduce", 8) else q)
    return {
        "name": "pcie4-nop2p",
        "title": "8x RTX 4090 class: PCIe 4.0 x16, P2P off (stock GeForce driver), NCCL via host memory",
        "link": "PCIe 4.0 x16, 31.5 GB/s per direction; without P2P NCCL copies through host shared memory",
        "link_ceiling_gbps": 31.5,
        "params": params,
        "sources": ["chlc-4090x8", "kalavai-4090x2", "nccl#1530", "nccl#1639", "nccl-tests#123", "link-ceilings"],
        "calibrated_on": ["chlc-4090x8", "kalavai-4090x2"],
        "notes": ["8-GPU all-reduce follows LL / LL128 / Simple pieces fitted to the real 8x RTX 4090 log; the "
                  "others stay one alpha-beta line."],
    }


def _pcie4_p2p() -> dict:
    params = []
    for op in PROFILE_OPS:
        for n in PROFILE_TPS:
            a = _scaled(24.6, "all_reduce", 8, op, n)
            asrc = (f"derived: PCIe 5.0 P2P-on all-reduce 8 GPUs 24.6 us at 256 B (rtx6kpro) carried to "
                    f"({op}, n={n}) by the ring shape = {_fmt(a)} us; assumption: with P2P the "
                    "small-message time is set by NCCL's protocol and per-hop latency (0.36-0.45 us P2P "
                    "on, rtx6kpro), not by the PCIe generation; no public PCIe 4.0 P2P-on latency; "
                    + RING_RULE)
            bsrc = ("derived: all-reduce busbw 24.7 GB/s measured on 5 GPUs (tinygrad#17), the only "
                    f"published P2P-on PCIe 4.0 GPU count, used for n={n}")
            params.append(_param(op, n, "eager", a, asrc, 24.7, bsrc))
    return {
        "name": "pcie4-p2p",
        "title": "PCIe 4.0 x16 GPUs with P2P (e.g. RTX 4090 with a P2P-enabling driver)",
        "link": "PCIe 4.0 x16, 31.5 GB/s per direction, GPU-to-GPU P2P",
        "link_ceiling_gbps": 31.5,
        "params": params,
        "sources": ["tinygrad#17", "rtx6kpro", "nccl-tests#123", "link-ceilings"],
    }


def _pcie5_nop2p() -> dict:
    params = []
    for op in PROFILE_OPS:
        for n in PROFILE_TPS:
            a = _scaled(42.5, "all_reduce", 8, op, n)
            asrc = (f"derived: PCIe 4.0 P2P-off all-reduce 8 GPUs 42.5 us (nccl#1530) carried to "
                    f"({op}, n={n}) by the ring shape = {_fmt(a)} us; assumption: without P2P the small "
                    "message goes GPU -> host shared memory -> GPU, bound by host round trips rather "
                    "than by the PCIe generation; no public small-message figure for P2P-off PCIe 5.0; "
                    + RING_RULE)
            bb, bsrc = _flat_busbw(op, n, {8: 28.0, 4: 35.0}, "nccl#1639",
                                   "8x RTX 5090 all-reduce busbw 28 GB/s (8 GPUs), 35 GB/s (4 GPUs)",
                                   how="busbw of the nearest published GPU count (fewer GPUs share the "
                                       "host memory path less: 35 GB/s at 4 vs 28 at 8); all-gather taken "
                                       "equal to all-reduce at the same count")
            q = _param(op, n, "eager", a, asrc, bb, bsrc)
            params.append(_with_pieces(q, PIECES_5090X4_NOP2P) if (op, n) == ("all_reduce", 4) else q)
    return {
        "name": "pcie5-nop2p",
        "title": "8x RTX 5090 class: PCIe 5.0 x16, P2P off (stock GeForce driver), NCCL via host memory",
        "link": "PCIe 5.0 x16, 63 GB/s per direction; without P2P NCCL copies through host shared memory",
        "link_ceiling_gbps": 63.0,
        "params": params,
        "sources": ["nccl-tests#287", "nccl#1639", "nccl#1530", "nccl-tests#123", "link-ceilings"],
        "calibrated_on": ["nccl-tests#287"],
        "notes": ["4-GPU all-reduce follows LL / LL128 / Simple pieces fitted to a real 4x RTX 5090 P2P-off log "
                  "(the 2 KiB step); the others stay one alpha-beta line."],
    }


def _pcie5_p2p() -> dict:
    params = []
    for op in PROFILE_OPS:
        for n in PROFILE_TPS:
            a, asrc = _ring_alpha(op, n, "all_reduce", 8, 24.6, "rtx6kpro",
                                  "8x RTX PRO 6000, P2P on, 24.6 us at 256 B (CUDA graph use not stated; "
                                  "filed as eager)")
            bb, bsrc = _flat_busbw(op, n, {8: 37.6}, "rtx6kpro",
                                   "8x RTX PRO 6000 all-reduce busbw 37.6-41.1 GB/s, lower end used "
                                   "(reached with NCCL_MIN_NCHANNELS=8)")
            q = _param(op, n, "eager", a, asrc, bb, bsrc)
            params.append(_with_pieces(q, PIECES_5090X8) if (op, n) == ("all_reduce", 8) else q)
    return {
        "name": "pcie5-p2p",
        "title": "8x RTX PRO 6000 class: PCIe 5.0 x16 behind PCIe switches, P2P on",
        "link": "PCIe 5.0 x16, 63 GB/s per direction (P2P measured 53-56 GB/s), GPU-to-GPU P2P",
        "link_ceiling_gbps": 63.0,
        "params": params,
        "sources": ["aikitoria-5090x8", "rtx6kpro", "nccl-tests#123", "link-ceilings"],
        "calibrated_on": ["aikitoria-5090x8"],
        "notes": ["8-GPU all-reduce follows the LL / LL128 / Simple pieces of a real 8x RTX 5090 P2P log (the "
                  "4 KiB step); other (op, TP) entries stay one alpha-beta line carried from 8x RTX PRO 6000."],
    }


def _nvlink3() -> dict:
    params = []
    pub = dict(_RING_POINTS)
    a8 = log_small_us("superbench-a100")
    for op in PROFILE_OPS:
        for n in PROFILE_TPS:
            if (op, n) == ("all_reduce", 8):
                a, asrc = a8, (f"calibrated: superbench-a100 (8x A100-SXM4 on NVSwitch, NCCL's own choice of "
                               f"algorithm), median average 4 B-4 KiB = {a8:g} us; nccl-tests#123 gives 33.7 us "
                               "with NCCL forced to one ring channel")
            elif op == "all_reduce":
                a, asrc = pub[n], (f"published: nccl-tests#123: DGX-A100 ring all-reduce, one channel, "
                                   f"{n} GPUs {pub[n]} us at 8-128 B, no CUDA graph")
            else:
                a = RING_C0_US + RING_C1_US * ring_steps(op, n)
                asrc = (f"derived: {RING_RULE}, at all-gather's {ring_steps(op, n)} ring steps for n={n} "
                        f"= {_fmt(a)} us")
            bb, bsrc = _flat_busbw(op, n, {8: 235.26}, "superbench-a100",
                                   "8x A100-SXM4 all-reduce busbw 235.26 GB/s at 8 GiB (calibrated; nccl-tests#149 "
                                   "says about 230 GB/s)")
            bsrc = bsrc.replace("published:", "calibrated:", 1)
            q = _param(op, n, "eager", a, asrc, bb, bsrc)
            params.append(_with_pieces(q, PIECES_A100X8) if (op, n) == ("all_reduce", 8) else q)
    return {
        "name": "nvlink3",
        "title": "8x A100 SXM (DGX/HGX A100): NVLink 3 + NVSwitch",
        "link": "NVLink 3, 12 links, 300 GB/s per direction per GPU",
        "link_ceiling_gbps": 300.0,
        "params": params,
        "sources": ["superbench-a100", "nccl-tests#123", "nccl-tests#149", "nccl#1455", "link-ceilings"],
        "calibrated_on": ["superbench-a100"],
        "notes": ["The 2- and 4-GPU all-reduce latencies were measured with NCCL forced to one ring channel; "
                  "the 8-GPU one is calibrated on a real 8x A100 log with NCCL's own choice, as LL / LL128 / "
                  "Simple pieces fitted to that log."],
    }


def _nvl_busbw(op, n, value, key, text):
    if op == "all_reduce" and n == 8:
        return value, f"published: {key}: {text}"
    if key == "nccl-tests#212":
        if op == "all_reduce":
            return value, ("published: nccl#1455: H100 ring busbw 365-370 GB/s for 2-8 GPUs; 370 used "
                           "(nccl-tests#212)")
        if n == 8:
            return value, ("published: nccl-tests#212: about 370 GB/s is also what non-allreduce "
                           "collectives reach on 8x H100")
    return _flat_busbw(op, n, {8: value}, key, text)


def _nvls(q: dict) -> dict:
    """8-GPU all-reduce on NVLink 4: the Ring line, then from 64 MiB the NVLS piece fitted to the real
    8x H100 log (NCCL's default for large all-reduce on 8 GPUs behind NVSwitch; nccl-tests#212: about
    480 GB/s with NVLS, 370 with Ring). Other entries are returned as they are."""
    if (q["op"], q["tp"]) != ("all_reduce", 8):
        return q
    ring = {"from_bytes": 0, "protocol": "Ring", "alpha_us": q["alpha_us"], "beta_gbps": q["beta_gbps"],
            "busbw_gbps": q["busbw_gbps"], "source": q["alpha_source"]}
    return _with_pieces(q, [ring, *PIECES_H100X8_NVLS])


def _nvlink4() -> dict:
    params = []
    for op in PROFILE_OPS:
        for n in PROFILE_TPS:
            bb, bsrc = _nvl_busbw(op, n, 370.0, "nccl-tests#212", "8x H100 SXM ring all-reduce busbw about "
                                  "370 GB/s")
            g = NVL4_D0_US + NVL_STEP_US * ring_steps(op, n)
            if (op, n) == ("all_reduce", 2):
                g, gsrc = NVL4_GRAPH_TP2_US, (f"published: nccl#1259: 2x H100, CUDA graph, 5.5-6 us "
                                              f"(midpoint {NVL4_GRAPH_TP2_US})")
            elif (op, n) == ("all_reduce", 8):
                g, gsrc = NVL4_NOGRAPH_TP8_US, (f"derived: DeepEP#303 8x H20 nccl-tests time without CUDA "
                                                f"graph, {NVL4_NOGRAPH_TP8_US} us, taken as the graph time "
                                                "(the back-to-back nccl-tests loop hides launch cost)")
            else:
                gsrc = (f"derived: {NVL_LINE_RULE}; at {op}'s {ring_steps(op, n)} ring steps for n={n} "
                        f"= {_fmt(g)} us")
            params.append(_nvls(_param(op, n, "graph", g, gsrc, bb, bsrc)))
            if (op, n) == ("all_reduce", 8):
                e, esrc = NVL4_EAGER_TP8_US, ("published: Triton-distributed#57: 8x H100 SXM, torch eager "
                                              "NCCL all-reduce, 19.2 us at 128 B")
            else:
                e = g + EAGER_OVERHEAD_US
                esrc = f"derived: {EAGER_RULE} = {_fmt(g)} + {EAGER_OVERHEAD_US:.2f} = {_fmt(e)} us"
            params.append(_nvls(_param(op, n, "eager", e, esrc, bb, bsrc)))
    return {
        "name": "nvlink4",
        "title": "8x H100/H200 SXM (HGX): NVLink 4 + NVSwitch",
        "link": "NVLink 4, 18 links, 450 GB/s per direction per GPU (900 bidirectional)",
        "link_ceiling_gbps": 450.0,
        "params": params,
        "sources": ["Triton-distributed#57", "nccl#1259", "DeepEP#303", "nccl-tests#212", "nccl-tests#290",
                    "nccl#1455", "link-ceilings"],
        "calibrated_on": ["nccl-tests#290"],
        "notes": ["8-GPU all-reduce runs the Ring line up to 64 MiB, then an NVLS piece (in-switch reduction) "
                  "fitted to a real 8x H100 log; all-gather and 2/4 GPUs keep the Ring figure."],
        "checks": [  # published points not used to set parameters: the model's error shows against them
            {"op": "all_reduce", "tp": 8, "mode": "eager", "size_bytes": s, "latency_us": v,
             "source": "Triton-distributed#57"}
            for s, v in ((16 << 10, 20.7), (256 << 10, 24.8), (1 << 20, 32.4), (4 << 20, 59.4))
        ],
    }


def _nvlink5() -> dict:
    params = []
    d0 = 5.18 - NVL_STEP_US * ring_steps("all_reduce", 4)
    for op in PROFILE_OPS:
        for n in PROFILE_TPS:
            bb, bsrc = _nvl_busbw(op, n, 682.0, "ml-engineering", "8x B200 ring all-reduce busbw 682 GB/s "
                                  "(NVLS 838 GB/s is not used: decode sizes run Ring/Tree)")
            if (op, n) == ("all_reduce", 4):
                g, gsrc = 5.18, ("published: nccl-tests#333: GB200 4 GPUs, CUDA graph, NCCL symmetric-memory "
                                 "kernels, best 5.18 us (under 8 us up to 1 KB)")
            else:
                g = d0 + NVL_STEP_US * ring_steps(op, n)
                gsrc = (f"derived: nccl-tests#333 5.18 us at 4 GPUs, carried along the NVLink 4 step "
                        f"{NVL_STEP_US:.3f} us per ring step ({NVL_LINE_RULE}) to {op}'s "
                        f"{ring_steps(op, n)} steps for n={n} = {_fmt(g)} us")
            params.append(_param(op, n, "graph", g, gsrc, bb, bsrc))
            e = g + EAGER_OVERHEAD_US
            params.append(_param(op, n, "eager", e, f"derived: {EAGER_RULE} = {_fmt(g)} + "
                                 f"{EAGER_OVERHEAD_US:.2f} = {_fmt(e)} us", bb, bsrc))
    return {
        "name": "nvlink5",
        "title": "8x B200 class (HGX B200 / GB200): NVLink 5 + NVSwitch",
        "link": "NVLink 5, 18 links, 900 GB/s per direction per GPU",
        "link_ceiling_gbps": 900.0,
        "params": params,
        "sources": ["nccl-tests#333", "ml-engineering", "nccl#1455", "nccl#1259", "DeepEP#303",
                    "Triton-distributed#57", "link-ceilings"],
        "notes": ["The one published small-message point is GB200 with NCCL's symmetric-memory kernels "
                  "(NCCL 2.27+, registered buffers); stock torch.distributed calls may be slower.",
                  "No real B200 log is in the corpus and no public 2- or 4-GPU B200 busbw was found: the 8-GPU "
                  "Ring figure is carried to 2 and 4 GPUs because Ring busbw is flat in GPU count on H100 "
                  "(365-370 GB/s for 2-8 GPUs, nccl#1455); its error is unknown."],
    }


def _build() -> dict:
    out = {}
    for make in (_pcie4_nop2p, _pcie4_p2p, _pcie5_nop2p, _pcie5_p2p, _nvlink3, _nvlink4, _nvlink5):
        p = make()
        p["kind"] = "modelled"
        p["model"] = ("latency_us = alpha_us + size_bytes / (beta_gbps * 1e3); beta = busbw / nccl-tests factor; "
                      "an entry with pieces uses the piece whose from_bytes is the largest <= size_bytes")
        p["sources"] = {k: SOURCES[k] for k in p["sources"]}
        p.setdefault("notes", [])
        p.setdefault("checks", [])
        p.setdefault("calibrated_on", [])
        out[p["name"]] = p
    return out


PROFILES: dict[str, dict] = _build()


def get_profile(name: str) -> dict:
    """A copy of one profile by name (``reference:`` prefix allowed); KeyError names the known ones."""
    key = name.split(":", 1)[1] if name.startswith("reference:") else name
    if key not in PROFILES:
        raise KeyError(f"unknown reference profile '{name}' (known: {', '.join(PROFILES)})")
    return copy.deepcopy(PROFILES[key])


def list_profiles() -> list[dict]:
    """One summary per profile: name, title, link, ops, TP degrees and modes it covers."""
    return [{"name": p["name"], "title": p["title"], "link": p["link"],
             "ops": sorted({q["op"] for q in p["params"]}), "tps": sorted({q["tp"] for q in p["params"]}),
             "modes": sorted({q["mode"] for q in p["params"]})} for p in PROFILES.values()]
