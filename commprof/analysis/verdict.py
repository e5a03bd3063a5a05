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
    basis: str = ""           # what the box was compared with, named (analysis/whatnow.py fills the defaults)
    what_now: str = ""        # what a buyer does next: accept, reject, ask the seller for X, re-test this way

    def to_dict(self) -> dict:
        return asdict(self)


MULTINODE = "multinode"      # the class of a box whose ranks sit on more than one host


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
    # A box whose ranks sit on more than one host is class ``multinode`` (link ``network``: the network
    # between the nodes decides); the link inside each node stays beside it in ``intra_*``.
    ranks: int = 0            # ranks of its largest group (0: not known)
    intra_cls: str = ""
    intra_link: str = ""
    intra_evidence: str = ""

    def within_node(self) -> "Interconnect":
        """The link inside one node (itself for a one-node box): what the intra-node items judge."""
        if self.cls != MULTINODE:
            return self
        return Interconnect(cls=self.intra_cls or "unknown", link=self.intra_link, evidence=self.intra_evidence,
                            detail=self.detail, nodes=1, hosts=self.hosts, conflict=self.conflict, ranks=self.ranks)

    @property
    def family(self) -> str:
        """nvlink / pcie / mixed / cpu / unknown."""
        if self.cls in ("nvswitch", "nvlink"):
            return "nvlink"
        if self.cls.startswith("pcie"):
            return "pcie"
        return self.cls if self.cls in ("mixed", "cpu", MULTINODE) else "unknown"

    @property
    def known(self) -> bool:
        return self.family in ("nvlink", "pcie", "mixed", MULTINODE)

    def describe(self) -> str:
        """'nvswitch (nvlink3), from GPU names in the nccl-tests header (A100-SXM4-40GB)'."""
        if self.cls == "single-gpu":
            return "one GPU per node (no link inside a node carries the collectives)"
        if not self.known:
            return "unknown (" + (self.detail or "no evidence") + ")"
        if self.cls == MULTINODE:
            inside = self.within_node()
            return (f"{MULTINODE}: {self.ranks or '?'} ranks on {self.nodes} nodes, from {self.evidence}; the network "
                    f"between the nodes decides; inside a node: {inside.describe()}")
        link = f" ({self.link})" if self.link else ""
        return f"{self.cls}{link}, from {self.evidence}" + (f"; {self.detail}" if self.detail else "")

    def short(self) -> str:
        """'nvswitch (nvlink3)'; 'multinode, 16 ranks on 2 nodes (inside a node: nvswitch (nvlink4))'."""
        if self.cls == MULTINODE:
            inside = self.within_node()
            return (f"{MULTINODE}, {self.ranks or '?'} ranks on {self.nodes} nodes (inside a node: {inside.cls}"
                    f"{f' ({inside.link})' if inside.link else ''})")
        return f"{self.cls}{f' ({self.link})' if self.link else ''}"

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


#: What a checklist can judge, by area, and the items that judge each (C11p and S1-S3 are listed
#: only with a prefill trace or a serve dir: an area without items is "not judged" all the same).
SCOPE_AREAS = (
    ("interconnect", ("C2", "C3", "C5", "C6", "C7", "C9", "C10", "C9n", "C10n", "C12", "C16")),
    ("GPU inventory", ("C1",)),
    ("GPU health", ("H1", "H2", "H3", "H4", "H5", "H6", "H7", "H8")),
    ("decode communication share", ("C11",)),
    ("TTFT", ("C11p",)),
    ("serving SLOs", ("S1", "S2", "S3")),
    ("KV-cache headroom", ("KV",)),
    ("the engine's own account", ("N1", "N2", "N3", "N4", "N5", "N6", "I1")),    # import nccl-debug / nccl-inspector
)


def scope(items: list[Item]) -> dict:
    """How much of the checklist the verdict stands on: items judged (PASS/WARN/FAIL) of those
    listed (E1 aside), the areas judged and those not judged."""
    listed = [i for i in items if i.id != "E1"]
    judged = [i for i in listed if i.status in ("PASS", "WARN", "FAIL")]
    ids = {i.id for i in judged}
    areas = [a for a, members in SCOPE_AREAS if ids & set(members)]
    return {"judged": len(judged), "items": len(listed), "areas": areas,
            "not_judged": [a for a, _ in SCOPE_AREAS if a not in areas]}


def headline(items: list[Item]) -> str:
    """'PASS on 3 of 15 items (interconnect only; not judged: GPU health, TTFT, ...)': the verdict
    with the scope it stands on."""
    v, sc = verdict(items), scope(items)
    areas = (f"{sc['areas'][0]} only" if len(sc["areas"]) == 1 else ", ".join(sc["areas"])) if sc["areas"] else \
        "nothing judged"
    rest = f"; not judged: {', '.join(sc['not_judged'])}" if sc["not_judged"] else ""
    return f"{v} on {sc['judged']} of {sc['items']} items ({areas}{rest})"
