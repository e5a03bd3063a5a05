"""A checklist item, the interconnect a box is judged by, and the verdict over items: what
``check`` computes and every view shows."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Item:
    id: str
    item: str
    status: str               # PASS / WARN / FAIL / SKIP (INSUFFICIENT: the evidence item E1 only)
    value: str
    threshold: str
    source: str
    hint: str = ""
    box: str = ""             # which box (results dirs) the item judges; "" with one box

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Interconnect:
    """How a box's GPUs talk to each other, and which evidence said so.

    ``cls``: nvswitch, nvlink, pcie-p2p, pcie-no-p2p, pcie (P2P not known), mixed or unknown.
    ``link``: the link generation the ceilings come from (nvlink2..5, nvlink4-h800, pcie3..6; ""
    when not known). ``evidence``: what decided (the ``--interconnect`` flag, a ``topo.json`` from
    NVML or from ``nvidia-smi topo`` text, the GPU names in a log's header, a reference profile), or
    "" when nothing did. ``nodes``: hosts the largest TP group spans (> 1: multi-node).
    """
    cls: str = "unknown"
    link: str = ""
    evidence: str = ""
    detail: str = ""
    nodes: int = 1
    hosts: list = field(default_factory=list)
    conflict: str = ""        # evidence that contradicts what decided (e.g. SXM names, no NVLink in topo)

    @property
    def family(self) -> str:
        """nvlink / pcie / mixed / cpu / unknown."""
        if self.cls in ("nvswitch", "nvlink"):
            return "nvlink"
        if self.cls.startswith("pcie"):
            return "pcie"
        return self.cls if self.cls in ("mixed", "cpu") else "unknown"

    @property
    def known(self) -> bool:
        return self.family in ("nvlink", "pcie", "mixed")

    def describe(self) -> str:
        """'nvswitch (nvlink3), from GPU names in the nccl-tests header (A100-SXM4-40GB)'."""
        if not self.known:
            return "unknown (" + (self.detail or "no evidence") + ")"
        link = f" ({self.link})" if self.link else ""
        return f"{self.cls}{link}, from {self.evidence}" + (f"; {self.detail}" if self.detail else "")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["family"] = self.family
        return d


def latency_stat(df) -> str:
    """What a sweep table's ``latency_us_p50`` holds: ``p50`` (commprof's own percentiles), or
    ``avg (nccl-tests)`` for imported rows (nccl-tests prints one average per size; its ``-I``/``-J``
    per-iteration p50 says ``p50 (nccl-tests -I)``). Every view and item labels figures with it."""
    if df is None or not len(df):
        return "p50"
    if "latency_stat" in df.columns:
        labels = set(df["latency_stat"].fillna("").astype(str)) - {""}
        if len(labels) == 1:
            return labels.pop()
        if labels:
            return "p50 / avg (nccl-tests)"
    if "clock" in df.columns and df["clock"].astype(str).str.startswith("nccl-tests").all():
        return "avg (nccl-tests)"
    if "timing" in df.columns and (df["timing"].astype(str) == "back-to-back").all():
        return "p50 of back-to-back loop averages"
    return "p50"


INSUFFICIENT = "INSUFFICIENT EVIDENCE"

#: The items that measure the box (correctness, latency, bandwidth, share of a step, service
#: metrics): an overall PASS or WARN needs enough of them judged (check's E1 item says how many).
DECIDING_ITEMS = ("C16", "C10", "C9", "C10n", "C9n", "C11", "C11p", "S1", "S2", "S3")


def verdict(items: list[Item]) -> str:
    """FAIL > INSUFFICIENT EVIDENCE (an E1 item found too few measured items judged) > WARN >
    PASS; SKIP when nothing could be judged at all."""
    s = {i.status for i in items}
    if "FAIL" in s:
        return "FAIL"
    if "INSUFFICIENT" in s:
        return INSUFFICIENT
    return "WARN" if "WARN" in s else "PASS" if "PASS" in s else "SKIP"
