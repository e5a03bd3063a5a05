"""What a buyer does with each checklist item, and what it was judged against.

Every :class:`~commprof.analysis.verdict.Item` of ``commprof check`` leaves :func:`annotate` with

* ``basis``: the evidence the item compared the box with, named (the healthy boxes of its class,
  a published figure, a modelled reference profile, a physical bound, a proposed threshold, your
  --thresholds file). Items that compare with healthy boxes or profiles set it themselves; the
  others get their kind's default here;
* ``what_now``: one line a buyer can act on: accept, reject, ask the seller for X, or re-test this
  way. docs/check.md ("Reading your verdict") says the same at length.
"""
from __future__ import annotations

#: What each kind of item is judged against, where the item does not say it itself.
BASIS = {
    "C1": "the quote (the GPU count set in [inventory] expected_gpus)",
    "C2": "the evidence itself (GPU names against the topology) and the quote ([interconnect] expected_class)",
    "C3": "the NVLink count NVIDIA specifies for the GPU model",
    "C5": "NCCL's P2P rule (NVLink pairs must allow P2P)",
    "C6": "the GPU's own maximum PCIe link (a physical bound)",
    "C7": "a physical bound: the PCIe line rate per direction",
    "C9": "fixed proposed fractions of the link ceiling",
    "C10": "fixed proposed thresholds",
    "C9n": "your --thresholds file (the network the vendor quotes)",
    "C10n": "fixed proposed thresholds anchored on one published figure",
    "C11": "a proposed threshold (commprof's own)",
    "C11p": "a proposed threshold (commprof's own)",
    "C12": "the topology (GPU pairs across sockets)",
    "C16": "a physical bound: a collective must return exactly the right data",
    "KV": "a modelled plan (commprof plan's weights and KV-cache bytes)",
    "S1": "a proposed service target (SLO)",
    "S2": "a proposed service target (SLO)",
    "S3": "a proposed service target (jitter growth, failed requests)",
    "E1": "the count of measured items judged",
    "N0": "NCCL's own log of the engine's run (import nccl-debug)",
    "N1": "NCCL's own log of the engine's run (import nccl-debug): the transport of each rank pair, counted",
    "N2": "NCCL's own log of the engine's run (import nccl-debug): the network and the transport between nodes",
    "N3": "NCCL's own log of the engine's run (import nccl-debug): NVLS support and nvls channels",
    "N4": "the engine's own startup lines (custom all-reduce on or off, and why)",
    "N5": "the quote (--expect-gpus / --expect-nodes) against the ranks and nodes in NCCL's own log",
    "N6": "NCCL's own WARN lines in the engine's log",
    "I1": "the same box's own sweep at the engine's sizes (NCCL Inspector's in-service times set beside it)",
}
_HEALTH_BASIS = "NVIDIA's GPU memory error guide and the NVML limits of each GPU"

_RETEST = "re-test on the box with 'commprof check' after the fix (or 'commprof accept' for the whole run)"

#: (item id, status) -> the line; status "*" for any status not listed.
WHAT_NOW = {
    ("C1", "FAIL"): "Reject as quoted: the box does not hold the GPUs the quote promises. Ask the seller for the "
                    "GPUs quoted ('nvidia-smi -L' of the delivered box) or a price for what is there.",
    ("C2", "FAIL"): "Do not accept yet: the topology contradicts the quote or the GPU names. Ask the seller for "
                    "'nvidia-smi topo -m', 'nvidia-smi nvlink -s' and the Fabric Manager status; "
                    "re-test with 'commprof topo --out DIR' on the box.",
    ("C3", "FAIL"): "Do not accept: an NVLink is down. Ask the seller to repair or replace the baseboard "
                    "('nvidia-smi nvlink -s' shows each link) and send the new output; " + _RETEST + ".",
    ("C5", "FAIL"): "Do not accept: NVLink pairs without P2P mean NCCL goes through host memory. Ask the seller for "
                    "a driver and Fabric Manager that enable P2P, and 'nvidia-smi topo -p2p r' afterwards.",
    ("C5", "WARN"): "Ask the seller whether P2P over PCIe is off by design (stock GeForce drivers disable it) or by "
                    "ACS/IOMMU settings; price the box as PCIe without P2P unless they enable it.",
    ("C6", "FAIL"): "Do not accept: a GPU's PCIe link trained below its maximum (a bad slot, riser or card). Ask the "
                    "seller to reseat or replace it and send 'nvidia-smi -q -d PCIE' under load; " + _RETEST + ".",
    ("C7", "*"): "Ask the seller for the slot layout (x16 per GPU, which CPU socket) and the BIOS PCIe settings; "
                 "re-test with 'commprof check' on the box.",
    ("C9", "FAIL"): "Do not accept at this price: large-message bandwidth is far below what it was compared with. "
                    "Ask the seller for their own 'all_reduce_perf -b 64M -e 8G' log on this box, the NCCL version "
                    "and any NCCL_* settings; re-test with 'commprof sweep --sizes pow2:64M-1G'.",
    ("C9", "WARN"): "Ask the seller for their 'all_reduce_perf -b 64M -e 8G' log and NCCL version; re-test once. "
                    "Acceptable for decode-bound serving if it stays here; not for training or prefill-heavy loads.",
    ("C10", "FAIL"): "Do not accept for latency-bound serving: decode-size all-reduce is far slower than what it was "
                     "compared with. Ask the seller for 'all_reduce_perf -b 8 -e 64K -G 1' (graphs) with the NCCL "
                     "version and NCCL_* settings; re-test with 'commprof sweep --modes graph' on the box.",
    ("C10", "WARN"): "Re-test in graph mode ('commprof sweep --modes graph', or nccl-tests -G 1) before deciding; "
                     "ask the seller for their NCCL version and NCCL_* settings.",
    ("C9n", "*"): "Ask the seller which network joins the nodes (NICs per GPU, line rate, RoCE or InfiniBand, "
                  "GPUDirect RDMA on) and their two-node nccl-tests log; set the quoted figure in a --thresholds file "
                  "and re-test with both nodes.",
    ("C10n", "FAIL"): "Do not accept for tensor parallelism across nodes: ask the seller for their two-node "
                      "nccl-tests log and the network (NICs, line rate, GPUDirect RDMA); keep TP groups inside a "
                      "node for decode; re-test with both nodes.",
    ("C10n", "WARN"): "Not a reason to reject by itself: only one published multi-node figure (another box, another "
                      "network) or a proposed threshold stands behind it. Ask the seller for the network's quoted "
                      "latency and their two-node nccl-tests log; keep decode TP groups inside a node.",
    ("C11", "*"): "A workload question, not a fault: serve at a lower TP degree, or buy a faster link for decode; "
                  "re-test with 'commprof trace' at the TP degree you will serve.",
    ("C11p", "*"): "A workload question, not a fault: a larger prefill chunk, a lower TP degree for prefill, or a "
                   "faster link; re-test with 'commprof trace --phase prefill' at your prompt length.",
    ("C12", "WARN"): "Ask the seller for the GPU-to-socket map ('nvidia-smi topo -m' CPU affinity); place each TP "
                     "group on one socket.",
    ("C16", "FAIL"): "Reject until fixed: a collective returned wrong data. Ask the seller to fix it (driver, P2P "
                     "path, risers) and send a clean nccl-tests run with -c 1; re-test with NCCL_P2P_DISABLE=1 to "
                     "see whether the P2P path corrupts it.",
    ("KV", "*"): "A sizing question, not a fault of the box: more GPUs, GPUs with more memory, or quantized "
                 "weights/KV cache for this model and context.",
    ("S1", "*"): "Re-test at the concurrency you will serve and tune the engine (batching, chunked prefill) before "
                 "blaming the box; ask the seller for the engine version and flags they quote figures with.",
    ("S2", "*"): "Re-test at the concurrency you will serve; if the per-token time stays high, compare with "
                 "'commprof trace' (the communication share) before blaming the GPUs.",
    ("S3", "*"): "Look at the failed requests (serve_requests.csv) and re-test; ask the seller for the engine "
                 "version and flags.",
    ("I1", "WARN"): "Not a fault of the box by itself: the engine pays more per collective in service than the "
                    "benchmark shows. Price the box with this factor ('commprof gap' shows it per size, 'commprof "
                    "predict --comm-overhead-from' takes it); ask the seller whether the engine runs CUDA graphs and "
                    "its custom all-reduce, and re-test under the same load.",
    ("E1", "INSUFFICIENT"): "Not a verdict: ask the seller for the evidence named in the hint (their nccl-tests logs, "
                            "'nvidia-smi topo -m', 'nvidia-smi -q'), or re-test on the box with 'commprof accept'.",
}

_HEALTH = {"FAIL": "Reject the GPU named, or ask the seller to replace it (RMA) and send 'nvidia-smi -q' after a "
                   "reset and a new load test.",
           "WARN": "Ask the seller for 'nvidia-smi -q' after a load test and the box's kernel log (XID errors); "
                   "re-test with 'commprof accept' before accepting."}


def what_now_for(item_id: str, status: str, hint: str = "") -> str:
    """The line for one item: its own entry, else by status (PASS: accept; SKIP: what would judge it)."""
    line = WHAT_NOW.get((item_id, status)) or (WHAT_NOW.get((item_id, "*")) if status in ("FAIL", "WARN") else None)
    if line:
        return line
    if item_id.startswith("H") and status in _HEALTH:
        return _HEALTH[status]
    if status == "PASS":
        return "Accept on this item; keep check.json with the purchase record."
    if status == "SKIP":
        return ("Not judged: " + (f"to judge it, {hint[0].lower() + hint[1:]}" if hint else
                                  "ask the seller for the evidence this item reads, or re-test on the box") + ".")
    if status == "INSUFFICIENT":
        return WHAT_NOW[("E1", "INSUFFICIENT")]
    return "Ask the seller about it and " + _RETEST + "."


def basis_for(item_id: str) -> str:
    return BASIS.get(item_id) or (_HEALTH_BASIS if item_id.startswith("H") else "")


def annotate(items: list) -> list:
    """Fill every item's ``basis`` and ``what_now`` where the item did not set them (a health item's
    hint that starts 'what now:' becomes its what_now line); returns the items."""
    for i in items:
        if i.hint.startswith("what now: "):
            line = i.hint[len("what now: "):]
            i.what_now, i.hint = i.what_now or line[:1].upper() + line[1:], ""
        if not i.basis:
            i.basis = basis_for(i.id)
        if not i.what_now:
            i.what_now = what_now_for(i.id, i.status, i.hint)
    return items
