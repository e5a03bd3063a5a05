"""Which interconnect a box has, from whatever evidence there is: one rule for each question.

* :func:`classify_pairs`: the box's ``interconnect_class`` from its ``nvidia-smi topo -m`` matrix and
  P2P statuses, whether NVML answered them (:mod:`commprof.capture.nvmltopo`) or ``nvidia-smi topo`` text
  was imported (:mod:`commprof.ingest.smitopo`);
* :func:`class_from_gpu_names`: the family and link generation from GPU product names alone;
* :func:`nvlink_link_from_topo`, :func:`pcie_link_from_topo`: the link generation in a topo.json;
* :func:`parse_interconnect`: the ``--interconnect`` flag of check, gap and report;
* :func:`resolve_interconnect`: which of those decides for one box of evidence.
"""
from __future__ import annotations

import re

from commprof.model.errors import UsageError
from commprof.analysis.evidence import Evidence
from commprof.analysis.verdict import MULTINODE, Interconnect
from commprof.results.topo import NA

# Interconnect classes a box can have. ``nvswitch``/``nvlink``: GPUs talk over NVLink (all pairs);
# ``pcie-p2p``/``pcie-no-p2p``/``pcie`` (P2P not known): over PCIe; ``mixed``: some pairs NVLink
# (bridges), the rest PCIe; ``unknown``: no evidence.

# GPU product names (as nvidia-smi, NVML, torch and nccl-tests' rank lines print them) -> how the
# GPUs of such a box talk to each other and at which link generation. First match wins, so the
# PCIe / NVL variants come before the SXM names they contain. Link figures per GPU, per direction:
# half the bidirectional NVLink figure of NVIDIA's datasheets (A100 600, H100 SXM 900, H800 400,
# B200 1800 GB/s); PCIe from the PCI-SIG line rates.
# An SXM module sits on an NVLink baseboard (HGX/DGX: NVSwitch with 8 GPUs); a PCIe card talks over
# PCIe unless bridged (the name cannot tell a bridge, nor whether the driver allows P2P).
GPU_NAME_CLASSES = (
    (r"\bH100 NVL\b|\bH200 NVL\b", "pcie", "pcie5", "H100/H200 NVL: PCIe 5.0 cards (NVLink bridges join pairs only)"),
    (r"\bH100 PCIe\b|\bH800 PCIe\b|\bH100 ?PCI", "pcie", "pcie5", "H100 PCIe card: PCIe 5.0"),
    (r"\bA100[- ].*PCI|\bA100 PCIe|\bA800[- ].*PCI", "pcie", "pcie4", "A100 PCIe card: PCIe 4.0"),
    (r"\bG?B[23]00\b|\bB100\b|\bGB200\b|\bGB300\b", "nvlink", "nvlink5", "Blackwell SXM: NVLink 5 (18 links)"),
    (r"\bH800\b", "nvlink", "nvlink4-h800",
     "H800 SXM: NVLink 4 with 8 links (200 GB/s per direction, NVIDIA H800 datasheet: 400 GB/s NVLink)"),
    (r"\bH100\b|\bH200\b|\bH20\b|\bGH200\b", "nvlink", "nvlink4",
     "Hopper SXM (H100 80GB HBM3 is how nvidia-smi names H100 SXM5): NVLink 4 (18 links)"),
    (r"\bA100-SXM|\bA100 SXM|\bA800-SXM|\bA100\b", "nvlink", "nvlink3", "A100 SXM: NVLink 3 (12 links)"),
    (r"\bV100-SXM3|\bV100 SXM3", "nvlink", "nvlink2", "V100 SXM3 (DGX-2 / HGX-2): NVLink 2 through NVSwitch"),
    (r"\bV100-SXM|\bV100 SXM", "nvlink", "nvlink2",
     "V100 SXM2: NVLink 2 (6 links); 8 of them form a hybrid cube-mesh (DGX-1, AWS p3/p3dn), no NVSwitch"),
    (r"\bRTX 50\d0\b|\bRTX PRO 6000\b|\bRTX PRO \d+ Blackwell|\bB40\b", "pcie", "pcie5",
     "Blackwell PCIe card: PCIe 5.0, no NVLink"),
    (r"\bRTX 40\d0\b|\bL40S?\b|\bL4\b|\bL20\b|\bRTX 6000 Ada|\bRTX [0-9]+ Ada", "pcie", "pcie4",
     "Ada PCIe card: PCIe 4.0, no NVLink"),
    (r"\bRTX 30\d0\b|\bRTX A[0-9]+\b|\bA40\b|\bA30\b|\bA10G?\b|\bA16\b|\bA2\b", "pcie", "pcie4",
     "Ampere PCIe card: PCIe 4.0 (some take NVLink bridges for pairs)"),
    (r"\bV100\b|\bT4\b|\bP100\b|\bP40\b|\bRTX 20\d0\b|\bQuadro RTX", "pcie", "pcie3", "PCIe 3.0 card"),
)


# NVLink modules whose 8-GPU boards have no NVSwitch: the GPUs link directly (V100 SXM2: the hybrid
# cube-mesh of DGX-1, NVIDIA's "DGX-1 with Tesla V100 System Architecture" white paper; the first
# NVSwitch board, DGX-2, carries V100 SXM3). Eight such GPUs are class nvlink, never nvswitch.
NO_NVSWITCH_NAMES = r"\bV100[- ]SXM2\b"


def class_from_gpu_names(names) -> dict | None:
    """How the GPUs named talk to each other, from their product names alone.

    Returns ``{"family": "nvlink"|"pcie", "link": "nvlink4"|"pcie4"|..., "detail": why}`` or None
    when no name is known (empty, "n/a", CPU ranks, an unknown product, or names of different
    families). ``GeForce``/consumer names say nothing about P2P (stock drivers disable it, patched
    ones enable it), so the family is ``pcie`` with P2P unknown.
    """
    found = []
    for raw in names or []:
        name = str(raw)
        if not name or name.lower().startswith(("n/a", "none", "unknown", "cpu")):
            continue
        for pat, family, link, detail in GPU_NAME_CLASSES:
            if re.search(pat, name, re.IGNORECASE):
                found.append((family, link, detail, name))
                break
        else:
            return None               # a GPU we do not know: no guess
    if not found or len({(f, lk) for f, lk, _, _ in found}) != 1:
        return None
    family, link, detail, _ = found[0]
    return {"family": family, "link": link, "detail": detail, "names": sorted({n for *_, n in found})}


def nvlink_link_from_topo(topo: dict) -> str:
    """nvlink3/4/5 from the NVLink version NVML reports ("" when it does not)."""
    v = str(((topo or {}).get("gpus") or [{}])[0].get("nvlink_version", ""))
    return {"2": "nvlink2", "3": "nvlink3", "4": "nvlink4", "5": "nvlink5"}.get(v[:1], "")


def pcie_link_from_topo(topo: dict) -> str:
    """pcie3..6 from the link's max generation NVML reports ("" when it does not)."""
    gen = ((topo or {}).get("gpus") or [{}])[0].get("pcie_link_gen_max")
    return f"pcie{gen}" if isinstance(gen, int) and not isinstance(gen, bool) and 1 <= gen <= 6 else ""


def classify_pairs(matrix, p2p: dict, switched: bool) -> str:
    """``interconnect_class`` from an ``nvidia-smi topo -m`` matrix and whichever P2P matrices are
    known (``read``/``write``; missing or "n/a" cells mean unknown). The one rule for NVML's answers
    and for imported ``nvidia-smi topo`` text:

    * every pair NVLink: ``nvswitch`` (``switched``: the links end at an NVSwitch) or ``nvlink``;
    * any pair whose matrix cell is unknown ("n/a": a GPU that fell off the bus, an ancestor NVML
      would not give): ``unknown``: the fabric itself is not known;
    * some pairs NVLink, the rest PCIe: ``mixed``;
    * every pair PCIe: ``pcie-p2p`` / ``pcie-no-p2p`` / ``mixed`` by the P2P read/write statuses,
      and ``pcie`` (fabric known, P2P not) when any status is unknown or none was given.
    """
    n = len(matrix)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    if not pairs:
        return "single-gpu"
    nv = [str(matrix[i][j]).startswith("NV") for i, j in pairs]
    if all(nv):
        return "nvswitch" if switched else "nvlink"
    if any(matrix[i][j] in (NA, None, "") for i, j in pairs):
        return "unknown"
    if any(nv):
        return "mixed"
    cells = [p2p[op][a][b] for op in ("read", "write") if op in p2p
             for i, j in pairs for a, b in ((i, j), (j, i))]
    known = [c for c in cells if c not in (NA, None, "")]
    if not known or len(known) < len(cells):
        return "pcie"
    if all(c == "OK" for c in known):
        return "pcie-p2p"
    if not any(c == "OK" for c in known):
        return "pcie-no-p2p"
    return "mixed"


# --interconnect values: a class, optionally with its link generation.
_FLAG_CLASSES = {"nvswitch": "nvswitch", "nvlink": "nvlink", "pcie": "pcie", "pcie-p2p": "pcie-p2p",
                 "pcie-no-p2p": "pcie-no-p2p", "pcie-nop2p": "pcie-no-p2p", "mixed": "mixed"}
INTERCONNECT_HELP = ("nvswitch, nvlink, nvlink2..nvlink5, pcie, pcie3..pcie6, each PCIe one optionally with "
                     "-p2p or -no-p2p (e.g. pcie4-no-p2p), mixed; a comma list gives one per box, in order")


def parse_interconnect(spec: str | None) -> list[tuple[str, str]] | None:
    """``--interconnect`` -> [(class, link)] (one per box, or one for all); None when not given.
    ``nvlink4`` -> ("nvswitch", "nvlink4"); ``pcie4-no-p2p`` -> ("pcie-no-p2p", "pcie4")."""
    if spec is None:
        return None
    out = []
    for part in spec.split(","):
        tok = part.strip().lower().removeprefix("reference:")
        m = re.fullmatch(r"(nvswitch|nvlink|pcie|mixed)([2-6])?(-p2p|-no-?p2p)?", tok)
        if not m or (m.group(3) and m.group(1) != "pcie") or (m.group(2) and m.group(1) in ("nvswitch", "mixed")) \
                or (m.group(1) == "nvlink" and m.group(2) and m.group(2) not in "2345") \
                or (m.group(1) == "pcie" and m.group(2) and m.group(2) not in "3456"):
            raise UsageError(f"--interconnect '{part.strip()}': unknown; use {INTERCONNECT_HELP}")
        base, gen, p2p = m.group(1), m.group(2) or "", m.group(3) or ""
        if base == "nvlink" and gen:
            out.append(("nvswitch", f"nvlink{gen}"))
        elif base == "pcie":
            out.append((_FLAG_CLASSES["pcie" + p2p.replace("-nop2p", "-no-p2p")], f"pcie{gen}" if gen else ""))
        else:
            out.append((_FLAG_CLASSES[base], ""))
    return out


def gpu_names(ev: Evidence) -> list[str]:
    names = []
    for m in (ev.sweep_meta, ev.trace_meta):
        for g in (m or {}).get("gpus") or []:
            names.append(str(g))
    for g in (ev.topo or {}).get("gpus") or []:
        if g.get("name") not in (None, "n/a"):
            names.append(str(g["name"]))
    return [n for n in names if n and not n.lower().startswith(("unknown", "none", "n/a"))]


def row_nodes(df) -> "object":
    """Hosts each sweep row's group spans (a Series of ints; 1 where the row names no host)."""
    if df is None or "hosts" not in df.columns:
        return None
    return df["hosts"].fillna("").astype(str).map(lambda h: max(1, len({x for x in h.split(";") if x})))


def _names_source(ev: Evidence) -> str:
    kind = (ev.sweep_meta or {}).get("kind")
    if kind == "imported":
        return "the nccl-tests header"
    if ev.sweep_meta:
        return "the sweep's ranks"
    return "the trace's ranks" if ev.trace_meta else "topo.json"


def resolve_interconnect(ev: Evidence, flag: tuple[str, str] | None = None) -> Interconnect:
    """How this box's GPUs talk (:func:`_resolve_in_node`); a box whose ranks sit on more than one
    host (the sweep rows' hosts: nccl-tests' ``# Rank N ... on HOST`` lines, or commprof's ranks) is
    class ``multinode`` with link ``network``, its rank and node counts, and the link inside a node
    beside it (``intra_cls``, ``intra_link``): never ``nvlink`` for a group the network joins."""
    ic = _resolve_in_node(ev, flag)
    ranks = int(ev.sweep["tp"].max()) if ev.sweep is not None and len(ev.sweep) else 0
    ic.ranks = ranks
    if ic.nodes <= 1 or ic.family == "cpu":
        return ic
    inside_cls, inside_ev = ic.cls, ic.evidence
    if ranks and ranks <= ic.nodes:
        inside_cls = "single-gpu"
        ic.detail = "; ".join(x for x in (ic.detail, "one GPU per node: no link inside a node is used") if x)
    ic.intra_cls, ic.intra_link, ic.intra_evidence = inside_cls, ic.link, inside_ev
    ic.cls, ic.link = MULTINODE, "network"
    ic.evidence = f"the log's rank lines: {ranks or '?'} ranks on {ic.nodes} hosts ({', '.join(ic.hosts[:4])})"
    return ic


def _resolve_in_node(ev: Evidence, flag: tuple[str, str] | None = None) -> Interconnect:
    """How this box's GPUs talk inside a node, and which evidence decided: the ``--interconnect`` flag, else
    ``topo.json`` (NVML, or imported ``nvidia-smi topo`` text), else a reference profile's own
    class, else the GPU names in its logs (:func:`class_from_gpu_names`). Nothing
    known: ``unknown``, never PCIe by default. Also how many hosts its TP groups span."""
    nodes, hosts = 1, []
    if ev.sweep is not None and len(ev.sweep):
        n = row_nodes(ev.sweep)
        if n is not None:
            nodes = int(n.max())
        if "hosts" in ev.sweep.columns:
            hosts = sorted({h for hs in ev.sweep["hosts"].fillna("").astype(str) for h in hs.split(";") if h})
    names = gpu_names(ev)
    by_name = class_from_gpu_names(names)
    ic = Interconnect(nodes=nodes, hosts=hosts)
    meta = ev.sweep_meta or ev.trace_meta or {}
    topo_cls = (ev.topo or {}).get("interconnect_class", "")
    if flag is not None:
        cls, link = flag
        if not link and by_name and by_name["family"] == ("nvlink" if cls in ("nvswitch", "nvlink") else "pcie"):
            link = by_name["link"]
        if not link and ev.topo:
            link = nvlink_link_from_topo(ev.topo) if cls in ("nvswitch", "nvlink") else pcie_link_from_topo(ev.topo)
        ic.cls, ic.link, ic.evidence = cls, link, "the --interconnect flag"
        if topo_cls and topo_cls not in (cls, "unknown", "single-gpu"):
            ic.detail = f"topo.json says {topo_cls}; the flag overrides it"
        return ic
    if topo_cls in ("nvswitch", "nvlink", "pcie-p2p", "pcie-no-p2p", "pcie", "mixed"):
        imported = (ev.topo or {}).get("kind") == "imported"
        src = ("topo.json (nvidia-smi topo text, imported)" if imported else
               f"topo.json (NVML on {(ev.topo or {}).get('host', '?')})")
        ic.cls, ic.evidence = topo_cls, src
        if topo_cls in ("nvswitch", "nvlink"):
            ic.link = nvlink_link_from_topo(ev.topo)
            if not ic.link and by_name and by_name["family"] == "nvlink":
                ic.link, ic.evidence = by_name["link"], src + f" + GPU names in {_names_source(ev)}"
        else:
            ic.link = pcie_link_from_topo(ev.topo)
            if not ic.link and by_name and by_name["family"] == "pcie":
                ic.link, ic.evidence = by_name["link"], src + f" + GPU names in {_names_source(ev)}"
        if by_name and by_name["family"] == "nvlink" and topo_cls not in ("nvswitch", "nvlink"):
            ic.conflict = (f"the GPU names ({', '.join(by_name['names'])}) are NVLink modules, but the topology "
                           f"shows {topo_cls}")
        elif by_name and by_name["family"] == "pcie" and topo_cls in ("nvswitch", "nvlink"):
            ic.conflict = f"the GPU names ({', '.join(by_name['names'])}) are PCIe cards, but the topology shows NVLink"
        return ic
    if meta.get("backend") == "model" and meta.get("profile"):
        prof = str(meta["profile"])
        if prof.startswith("nvlink"):
            ic.cls, ic.link = "nvswitch", prof
        else:
            ic.link = prof.split("-")[0]
            ic.cls = "pcie-no-p2p" if "nop2p" in prof else "pcie-p2p"
        ic.evidence = f"reference profile '{prof}' (modelled)"
        return ic
    if meta.get("backend") == "gloo":
        ic.cls, ic.detail = "cpu", "CPU ranks (gloo): no GPU interconnect"
        return ic
    if by_name:
        gpus_seen = int(ev.sweep["tp"].max()) if ev.sweep is not None and len(ev.sweep) else 0
        if by_name["family"] == "nvlink":
            direct = any(re.search(NO_NVSWITCH_NAMES, n, re.IGNORECASE) for n in by_name["names"])
            ic.cls = "nvswitch" if gpus_seen // max(nodes, 1) >= 8 and not direct else "nvlink"
        else:
            ic.cls = "pcie"
        ic.link = by_name["link"]
        ic.evidence = f"GPU names in {_names_source(ev)} ({', '.join(by_name['names'])})"
        ic.detail = by_name["detail"] + ("; P2P not known from the names" if ic.cls == "pcie" else "")
        return ic
    ic.detail = (("topo.json does not tell the interconnect" if ev.topo else "no topo.json")
                 + ", no --interconnect, and no GPU name commprof knows"
                 + (f" ({', '.join(sorted(set(names)))})" if names else ""))
    return ic


def resolve_all(ev: Evidence, interconnect: str | list | None = None) -> list[Evidence]:
    """Every box of ``ev`` with its interconnect resolved (``interconnect``: the flag's text or
    its parsed list: one value for all boxes, or one per box)."""
    boxes = ev.all_boxes()
    flags = parse_interconnect(interconnect) if isinstance(interconnect, str) else interconnect
    if flags is not None and len(flags) not in (1, len(boxes)):
        raise UsageError(f"--interconnect: {len(flags)} values for {len(boxes)} boxes; give one for all or one per box")
    for i, b in enumerate(boxes):
        flag = None if flags is None else flags[0] if len(flags) == 1 else flags[i]
        b.interconnect = resolve_interconnect(b, flag)
    return boxes
