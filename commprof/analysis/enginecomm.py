"""The collective as a serving engine pays it inside a decode step, not as nccl-tests prints it.

A reference profile or an imported nccl-tests log prices one collective called back to back in a
loop (:mod:`commprof.analysis.commsource`). Inside an engine's step three things differ, each a
named term here:

* **custom all-reduce** (:func:`custom_ar_us`): vLLM (and SGLang, TensorRT-LLM) replace NCCL's
  all-reduce by a one-shot kernel over peer memory where the GPUs can read each other: on NVLink
  (any TP the box has) and on exactly two PCIe GPUs with P2P; not on more than two PCIe-only GPUs,
  nor without P2P (vLLM's ``CustomAllreduce`` refuses those, so such boxes decode on NCCL). Its
  latency is the published one-shot curve of 8x H100 (sgl-project/sglang #2904: 512 B 5.9 us,
  32 KB 7.8, 256 KB 16.7, 1 MB 33.8), read at the size each rank actually pulls over the link
  ((n-1)/7 of the 8-GPU case's peer bytes, scaled by the link's speed against NVLink 4's); on two
  PCIe GPUs with P2P, 7.5 us (8x RTX PRO 6000's custom one-shot at 256 B, voipmonitor/rtx6kpro
  hardware/pcie-bandwidth.md) plus the bytes at 85% of the PCIe link (P2P measured 53-56 GB/s of
  63 on PCIe 5.0, same page).
* **the engine's per-collective cost** (``coll_graph_us`` under CUDA graphs, ``coll_eager_us``
  more without): the launch, the stream wait and the wait for the slowest rank that a step pays on
  every collective and a back-to-back loop hides. Fitted on the ``fit`` figures of
  ``tests/data/published-decode/figures.csv`` (``scripts/bench_predict_figures.py --fit``).
* **rank skew of NCCL over PCIe** (``pcie_skew_frac`` in eager mode, ``pcie_skew_graph_frac`` under CUDA
  graphs): on PCIe boxes NCCL's small-message time is host round trips whose spread grows with the
  ranks; a step waits for the slowest, so the price is ``(1 + skew)`` times the loop's mean. In eager
  mode every rank's host launches each collective on its own, so their skew adds to the spread; under
  CUDA graphs the host is out of the launch. Each is fitted on the PCIe ``fit`` figures (8x L20 eager;
  2x RTX 5090, 2x RTX 4070 Ti SUPER, 2x RTX 3090 Ti under graphs); a calibration without the graph
  term uses the eager one for both.
* **a fixed in-step cost of NCCL over PCIe** (``pcie_call_us``): an additive cost per NCCL call on a
  PCIe box, the same at any TP, beside the skew that scales with the loop's time (which grows with the
  ranks). The fit figures at TP 2 and 8 decide how the in-step excess splits between the two; what
  causes the fixed part (host-memory round trips, the engine's stream wait) is not separated here.
  Fitted on the PCIe ``fit`` figures; 0 = none.

:func:`engine_price` wraps a :class:`~commprof.analysis.commsource.CommSource`'s ``price`` with
these terms; a measured dir (``commprof sweep``/``import``) keeps its own NCCL numbers and gets the
per-collective cost only; a source already priced in the engine (``predict --comm-overhead-from``:
NCCL Inspector's in-service times, ``in_engine = True``) gets none of the three, which its
measurement already holds. Standard library only.
"""
from __future__ import annotations

from commprof.analysis.latency import loglog_lookup

#: sgl-project/sglang #2904: one-shot custom all-reduce on 8x H100 SXM (NVLink 4), (bytes, us).
CUSTOM_AR_H100X8 = ((512, 5.9), (32768, 7.8), (262144, 16.7), (1048576, 33.8))
CUSTOM_AR_SOURCE = "sgl-project/sglang #2904: 8x H100 one-shot custom all-reduce 512 B 5.9 us, 32 KB 7.8, 256 KB 16.7, 1 MB 33.8"
#: voipmonitor/rtx6kpro hardware/pcie-bandwidth.md: custom one-shot all-reduce at 256 B on PCIe 5.0 with P2P.
CUSTOM_AR_PCIE_ALPHA_US = 7.5
PCIE_P2P_EFFICIENCY = 0.85
NVLINK_PER_DIRECTION_GBPS = {3: 300.0, 4: 450.0, 5: 900.0}
PCIE_PER_DIRECTION_GBPS = {4: 31.5, 5: 63.0, 6: 118.0}


def link_class(comm, gpu) -> str:
    """``nvlink``, ``pcie-p2p``, ``pcie-nop2p`` or ``measured`` (a results dir: its own numbers)."""
    spec = str(getattr(comm, "label", comm)).lower()
    if not spec.startswith("reference:"):
        return "measured"
    if "nvlink" in spec:
        return "nvlink"
    return "pcie-nop2p" if "nop2p" in spec else "pcie-p2p"


def uses_custom_ar(cls: str, tp: int) -> bool:
    """vLLM's rule: custom all-reduce on NVLink, and on exactly two PCIe GPUs with P2P."""
    return tp > 1 and (cls == "nvlink" or (cls == "pcie-p2p" and tp == 2))


def custom_ar_us(size_bytes: int, tp: int, cls: str, nvlink_gen: int = 4, pcie_gen: int = 5) -> float:
    """One-shot custom all-reduce of ``size_bytes`` (the buffer) on ``tp`` GPUs, modelled (us)."""
    if cls == "nvlink":
        link = NVLINK_PER_DIRECTION_GBPS.get(nvlink_gen, 450.0)
        eff = max(1.0, size_bytes * (tp - 1) / 7.0 * 450.0 / link)   # bytes as the 8x H100 curve saw them
        xs, ys = zip(*CUSTOM_AR_H100X8)
        return max(ys[0], loglog_lookup(list(xs), list(ys), max(eff, xs[0]))[0])
    link = PCIE_PER_DIRECTION_GBPS.get(pcie_gen, 31.5) * PCIE_P2P_EFFICIENCY
    return CUSTOM_AR_PCIE_ALPHA_US + size_bytes * (tp - 1) / (link * 1e3)


def pcie_skew(cal: dict, mode: str) -> float:
    """The skew fraction of NCCL over PCIe in this mode: ``pcie_skew_frac`` in eager mode,
    ``pcie_skew_graph_frac`` under CUDA graphs (``pcie_skew_frac`` where a calibration has no graph term)."""
    eager = float(cal.get("pcie_skew_frac", 0.0))
    if mode == "eager":
        return eager
    return float(cal.get("pcie_skew_graph_frac", eager))


def engine_price(comm, gpu, tp: int, mode: str, cal: dict):
    """``price(op, size_bytes) -> us`` of one collective inside a decode step on this box."""
    base = comm.price(tp, mode)
    if getattr(comm, "in_engine", False):      # the engine's own in-service times: nothing to add
        return base
    cls = link_class(comm, gpu)
    car = uses_custom_ar(cls, tp)
    per_call = float(cal.get("coll_graph_us", 0.0)) + (float(cal.get("coll_eager_us", 0.0)) if mode == "eager" else 0.0)
    on_pcie = cls.startswith("pcie")
    skew = 1.0 + (pcie_skew(cal, mode) if on_pcie else 0.0)
    pcie_call = float(cal.get("pcie_call_us", 0.0)) if on_pcie else 0.0
    nvl, pcie = int(getattr(gpu, "nvlink_gen", 4) or 4), int(getattr(gpu, "pcie_gen", 5) or 5)

    memo: dict = {}

    def price(op: str, size_bytes: int) -> float:
        key = (op, size_bytes)
        if key not in memo:         # a step repeats the same few sizes 2L+2 times
            if op == "all_reduce" and car:
                memo[key] = custom_ar_us(size_bytes, tp, cls, nvl, pcie) + per_call
            else:
                memo[key] = base(op, size_bytes) * skew + pcie_call + per_call
        return memo[key]
    return price
