"""The pre-purchase checklist's items, in the buyer's acceptance order: each reads one box's
:class:`~commprof.analysis.evidence.Evidence` and the thresholds and gives PASS / WARN / FAIL / SKIP with the
measured value, the threshold, the threshold's source (or "proposed") and a hint."""
from __future__ import annotations

import math

from commprof.model.errors import UsageError
from commprof.analysis.evidence import Evidence
from commprof.analysis.expect import busbw_expectation, decode_expectation, method_of
from commprof.analysis.interconnect import gpu_names, resolve_all, resolve_interconnect, row_nodes
from commprof.analysis.verdict import DECIDING_ITEMS, MULTINODE, Interconnect, Item, latency_stat
from commprof.model.units import human_bytes, json_number as _num
from commprof.model.models import get_model
from commprof.analysis.stepmodel import build_plan
from commprof.analysis.checkitems_health import health_items
from commprof.analysis.whatnow import annotate
from commprof.analysis.checkitems_nccl import nccl_items
from commprof.analysis.checknoise import guard as noise_guard

# Per-direction link ceilings in GB/s: PCIe x16 per direction (PCI-SIG: 8/16/32/64 GT/s per lane,
# 128b/130b; Gen6 PAM4 with FLIT), NVLink per GPU per direction (NVIDIA A100/H100/B200 datasheets:
# 600/900/1800 GB/s bidirectional; V100 SXM2 300 GB/s over 6 links; H800 400 GB/s over 8 links).
LINK_CEILING_GBPS = {"pcie3": 15.75, "pcie4": 31.5, "pcie5": 63.0, "pcie6": 118.0,
                     "nvlink2": 150.0, "nvlink3": 300.0, "nvlink4": 450.0, "nvlink4-h800": 200.0,
                     "nvlink5": 900.0}
LINK_CEILING_SOURCE = ("link ceilings per direction: PCIe x16 from the PCI-SIG line rates (Gen4 16 GT/s, Gen5 32 GT/s "
                       "per lane, 128b/130b); NVLink per GPU: half the bidirectional figure of NVIDIA's A100 (600 GB/s), "
                       "H100 SXM (900 GB/s), B200 (1.8 TB/s) and V100 SXM2 (300 GB/s) datasheets; H800 400 GB/s "
                       "(NVIDIA H800 product brief); tabulated in stas00/ml-engineering network/README.md")
DECIDING_EVIDENCE = ("--interconnect CLASS, a topo.json ('commprof topo --out DIR' on the box), "
                     "'commprof import nvidia-smi-topo FILE' of the vendor's 'nvidia-smi topo -m' (and '-p2p r') "
                     "output, or nccl-tests logs whose '# Rank ... device' lines name the GPUs")


def _gpus(topo):
    return (topo or {}).get("gpus") or []


def _cpu_backend(meta) -> bool:
    return (meta or {}).get("backend") == "gloo"


def _ic(ev: Evidence) -> Interconnect:
    if ev.interconnect is None:
        ev.interconnect = resolve_interconnect(ev)
    return ev.interconnect


def _no_topo(id_, name, threshold, src, what="no topo.json") -> Item:
    return Item(id_, name, "SKIP", what, threshold, src,
                "run 'commprof topo --out DIR' on the box, or import its 'nvidia-smi topo -m' text "
                "('commprof import nvidia-smi-topo FILE')")


def item_inventory(ev, th) -> Item:
    t = th["inventory"]
    gpus = _gpus(ev.topo)
    src = t["source"]
    if ev.topo is None or all(g.get("name") in (None, "n/a") for g in gpus):
        names = sorted(set(gpu_names(ev)))
        what = "no topo.json" if ev.topo is None else f"{len(gpus)} GPUs in nvidia-smi topo text (no names)"
        if names:
            what += f"; the logs name {', '.join(names)}"
        return Item("C1", "GPU inventory", "SKIP", what, "count == expected", src,
                    "run commprof topo --out DIR on the box (needs the NVIDIA driver)")
    names = sorted({g.get("name", "?") for g in gpus})
    value = f"{len(gpus)} x {', '.join(names)}"
    exp = t["expected_gpus"]
    if exp and len(gpus) != exp:
        return Item("C1", "GPU inventory", "FAIL", value, f"{exp} GPUs", src,
                    "the box does not have the GPUs the quote promises")
    return Item("C1", "GPU inventory", "PASS", value, f"{exp} GPUs" if exp else "informational", src)


def item_interconnect(ev, th) -> Item:
    t = th["interconnect"]
    ic = _ic(ev)
    name = "interconnect class"
    multi = (f"; its largest TP group spans {ic.nodes} hosts ({', '.join(ic.hosts[:4])}): between nodes the "
             "network decides" if ic.nodes > 1 and ic.cls != MULTINODE else "")
    if ic.family == "cpu":
        return Item("C2", name, "SKIP", ic.detail, "informational", t["source"],
                    "measured on CPU ranks: run on the GPU box")
    if not ic.known:
        return Item("C2", name, "SKIP", f"unknown: {ic.detail}{multi}", "informational", t["source"],
                    f"what would decide: {DECIDING_EVIDENCE}")
    exp = t["expected_class"]
    value = ic.describe() + multi
    if ic.nodes > 1 and ev.sweep is not None and len(ev.sweep) and int(ev.sweep["tp"].max()) <= ic.nodes:
        value = (f"{MULTINODE}, network: its largest TP group has one GPU per host ({ic.ranks or '?'} ranks on "
                 f"{ic.nodes} hosts: {', '.join(ic.hosts[:4])}), so every collective crosses the network and no "
                 f"link inside a node carries any of it ({ic.intra_link or 'GPU link not known'} unused)")
    if ic.ranks == 1 and ev.topo is None:
        value += ("; it ran on one GPU (TP=1 only): no link between GPUs was used, so this is the GPU model's "
                  "link, not a measured one")
    if ic.conflict:
        return Item("C2", name, "FAIL", f"{value}; but {ic.conflict}", exp or "consistent evidence", t["source"],
                    "NVLink down or the box is not what its GPU names say: check nvidia-smi nvlink -s and "
                    "Fabric Manager")
    if exp and exp not in (ic.cls, ic.within_node().cls):
        return Item("C2", name, "FAIL", value, exp, t["source"],
                    "the topology contradicts the quote (e.g. an 'HGX' box without NVLink P2P)")
    return Item("C2", name, "PASS", value, exp or "informational", t["source"])


def item_p2p(ev, th) -> Item:
    t = th["p2p"]
    if ev.topo is None or "p2p" not in ev.topo:
        return _no_topo("C5", "P2P matrix", "READ/WRITE OK for every pair", t["source"])
    mat = ev.topo.get("matrix") or []
    p2p = ev.topo["p2p"]
    ops = [k for k in ("read", "write") if k in p2p]
    n = len(mat)
    if not ops or all(str(p2p[k][i][j]) == "n/a" for k in ops for i in range(n) for j in range(n) if i != j):
        return Item("C5", "P2P matrix", "SKIP", "P2P status not given", "READ/WRITE OK for every pair", t["source"],
                    "pass 'nvidia-smi topo -p2p r' output with 'commprof import nvidia-smi-topo', or run "
                    "commprof topo on the box")
    bad_nv, bad_pcie = [], []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            ok = all(str(p2p[k][i][j]).upper() == "OK" for k in ops)
            if not ok:
                (bad_nv if str(mat[i][j]).startswith("NV") else bad_pcie).append(f"{i}->{j}")
    given = "" if ops == ["read", "write"] else f" ({'/'.join(ops)} only)"
    if bad_nv:
        return Item("C5", "P2P matrix", "FAIL", f"NVLink pairs without P2P: {', '.join(bad_nv[:6])}",
                    "READ/WRITE OK on every NVLink pair", t["source"], "check the driver and Fabric Manager")
    if bad_pcie:
        return Item("C5", "P2P matrix", "WARN", f"{len(bad_pcie)} ordered pairs without P2P{given} (e.g. {bad_pcie[0]})",
                    "READ/WRITE OK for every pair", t["source"],
                    "without P2P NCCL goes through host shared memory; check the driver, ACS and IOMMU")
    return Item("C5", "P2P matrix", "PASS", f"P2P {'/'.join(ops)} OK for all {n * (n - 1)} ordered pairs",
                "READ/WRITE OK for every pair", t["source"])


def item_pcie(ev, th) -> Item:
    t = th["pcie"]
    gpus = _gpus(ev.topo)
    if not gpus:
        return _no_topo("C6", "PCIe links trained at max", "link max == GPU max", t["source"])
    low = [str(g.get("index", i)) for i, g in enumerate(gpus) if g.get("pcie_at_max") is False]
    unknown = all(g.get("pcie_at_max") in (None, "n/a") for g in gpus)
    g0 = gpus[0]
    value = f"Gen{g0.get('pcie_link_gen_max', '?')} x{g0.get('pcie_link_width_max', '?')}"
    if unknown:
        src = "not in nvidia-smi topo text" if ev.topo.get("kind") == "imported" else "n/a from NVML"
        return Item("C6", "PCIe links trained at max", "SKIP", src, "link max == GPU max", t["source"],
                    "run commprof topo on the box (NVML reads the link generation and width)")
    if low:
        return Item("C6", "PCIe links trained at max", "FAIL", f"GPU {', '.join(low)} below the GPU's max",
                    "link max gen/width == GPU max", t["source"],
                    "reseat the card, check the slot/riser and BIOS PCIe settings")
    return Item("C6", "PCIe links trained at max", "PASS", value + " on every GPU", "link max == GPU max",
                t["source"], "current gen/width drop at idle; max values are compared")


def item_nvlink(ev, th) -> Item:
    t = th["nvlink"]
    gpus = _gpus(ev.topo)
    if not gpus:
        return _no_topo("C3", "NVLink links up", "active == expected", t["source"])
    names = " ".join(n.lower() for n in [str(g.get("name", "")) for g in gpus] + gpu_names(ev))
    exp = next((v for k, v in t.items() if k.startswith("expected_links_") and k[15:] in names), None)
    links = [_num(g.get("nvlink_active_links")) for g in gpus]
    nvlink_box = _ic(ev).within_node().family == "nvlink" or ev.topo.get("interconnect_class") in ("nvswitch", "nvlink")
    if exp is None or all(v in (None, 0) for v in links) and not nvlink_box:
        why = ("no NVLink on this GPU model" if not any(links) else f"{links[0]} links") if exp is not None or \
            any(links) else "GPU model unknown: expected link count not known"
        return Item("C3", "NVLink links up", "SKIP", why, "expected count per GPU model", t["source"])
    short = [f"GPU {i}: {v}" for i, v in enumerate(links) if v is None or v < exp]
    if short:
        return Item("C3", "NVLink links up", "FAIL", "; ".join(short[:4]), f"{exp} active links per GPU",
                    t["source"], "an inactive NVLink: check Fabric Manager, the baseboard and nvidia-smi nvlink -s")
    return Item("C3", "NVLink links up", "PASS", f"{exp} active links on every GPU", f"{exp} per GPU", t["source"])


def item_host_bw(ev, th) -> Item:
    t = th["host_gpu_bw"]
    if not ev.hostbw:
        return Item("C7", "host-GPU bandwidth", "SKIP", "not measured", f">= {t['pass_fraction']:.0%} of the "
                    "PCIe spec per direction", t["source"], "measured by commprof check on a GPU box (hostbw.json)")
    gbps = _num(ev.hostbw.get("h2d_gbps_min"))
    gen = _num(ev.hostbw.get("pcie_gen")) or _num((_gpus(ev.topo) or [{}])[0].get("pcie_link_gen_max"))
    spec = LINK_CEILING_GBPS.get(f"pcie{int(gen)}") if gen else None
    if gbps is None or spec is None:
        return Item("C7", "host-GPU bandwidth", "SKIP", "incomplete hostbw.json", "", t["source"])
    frac = gbps / spec
    status = "PASS" if frac >= t["pass_fraction"] else "WARN" if frac >= t["warn_fraction"] else "FAIL"
    return Item("C7", "host-GPU bandwidth", status, f"{gbps:.1f} GB/s ({frac:.0%} of Gen{int(gen)} x16 {spec} GB/s)",
                f"PASS >= {t['pass_fraction']:.0%}, WARN >= {t['warn_fraction']:.0%}", t["source"],
                "" if status == "PASS" else "check the slot width, risers and NUMA placement")


NO_COMM_VALUE = "only TP=1 rows: one rank runs no communication"
NO_COMM_HINT = "measure TP >= 2 (or import a vendor's multi-GPU logs)"


def stat_label(df) -> str:
    """What a sweep frame's latency_us_p50 holds (:func:`commprof.analysis.verdict.latency_stat`)."""
    return latency_stat(df)


def _scoped(ev: Evidence, multi: bool):
    """The sweep's group-0 rows of TP >= 2 inside one host (multi=False) or spanning hosts."""
    df = ev.sweep
    if df is None:
        return None
    nodes = row_nodes(df)
    sel = (df["group"] == 0) & (df["tp"] > 1)
    if nodes is not None:
        sel &= (nodes > 1) if multi else (nodes <= 1)
    elif multi:
        return df.iloc[0:0]
    return df[sel]


def _mode_phrase(mode: str, label: str) -> str:
    if mode == "graph":
        return "graph mode"
    return "eager mode, nccl-tests loop without CUDA graphs" if "nccl-tests" in label else "eager mode"


def _decode_rows(sub):
    """(TP, mode, rows) judged: the largest TP degree, its graph rows when it has any, else eager."""
    tp = int(sub["tp"].max())
    sub = sub[sub["tp"] == tp]
    mode = "graph" if "graph" in set(sub["mode"]) else "eager" if "eager" in set(sub["mode"]) else sub["mode"].iloc[0]
    return tp, mode, sub[sub["mode"] == mode]


def _latency_value(sub, t, label) -> tuple:
    tp, mode, sub = _decode_rows(sub)
    worst = float(sub["latency_us_p50"].max())
    p99 = sub["latency_us_p99"].max() if "latency_us_p99" in sub.columns else float("nan")
    tail = f" (p99 {float(p99):.1f} us)" if p99 == p99 and label == "p50" else ""
    value = f"TP={tp} {mode}: {label} up to {worst:.1f} us{tail} at <= {t['max_bytes'] // 1024} KiB"
    return tp, mode, worst, value


DERIVED_NOTE = ("; derived from other boxes: no real box of this class at this TP degree behind it, so FAIL only "
                "beyond the wider fail_ratio_derived")
_NETWORK = Interconnect(cls="multi-node", link="network")   # the class of TP groups that span hosts
MULTINODE_MAX_NODES = 2         # the [multinode] latency anchor: 2 nodes x 8 H20 (NVIDIA/nccl#1244)
FIXED_MAX_TP = 8                # the fixed C10 thresholds' anchors are 8-GPU boxes (H100 TP8, 8x RTX 4090)
_FIXED_LATENCY = ("nvlink_pass_us", "nvlink_warn_us", "pcie_pass_us", "pcie_warn_us")
_FIXED_BUSBW = ("pass_fraction", "warn_fraction")


def _user_fixed(th, table: str, keys) -> bool:
    """True when the user's --thresholds file set one of the fixed thresholds: they override the
    healthy-box expectation for every box."""
    return any(f"{table}.{k}" in th.get("_user", ()) for k in keys)


def _size_text(n: int) -> str:
    return human_bytes(int(n))


def _refs_prefix(exp) -> str:
    """The source column's first words: what the figures compared with are (real logs of healthy
    boxes, or only published figures of them, or a modelled profile)."""
    if exp.kind != "healthy boxes":
        return "modelled: no healthy box of the class measured this way"
    if not any(r.get("kind") == "log" for r in exp.refs):
        n = len(exp.refs)
        return (f"published figure{'s' if n != 1 else ''} of healthy boxes of the class, no real log "
                "(commprof/data/healthy_boxes.toml)")
    return "healthy boxes of the class (commprof/data/healthy_boxes.toml)"


def evidence_phrase(exp, one: bool = False) -> str:
    """What a comparison stood on, named: 'the healthy boxes of its class (2 real logs)', 'a
    published figure of its class', 'the modelled reference profile nvlink4 (no healthy box of its
    class measured this way)'. ``one``: the singular form ('the slowest healthy box ...')."""
    if exp.kind != "healthy boxes":
        names = "/".join(str(r.get("name", "")).removeprefix("reference profile ") for r in exp.refs) or "?"
        return (f"modelled value of the reference profile {names} (no healthy box of its class measured this way)"
                if one else f"modelled reference profile {names} (no healthy box of its class measured this way)")
    n_log = sum(1 for r in exp.refs if r.get("kind") == "log")
    n_pub = len(exp.refs) - n_log
    if not n_log:
        return ("published figure of its class" if one or n_pub == 1 else f"{n_pub} published figures of its class")
    if not n_pub:
        return ("healthy box of its class (a real log)" if n_log == 1 else
                f"healthy box{'' if one else 'es'} of its class ({n_log} real logs)")
    return f"healthy box{'' if one else 'es'} of its class ({n_log} real log{'s' if n_log != 1 else ''}, {n_pub} " \
           f"published figure{'s' if n_pub != 1 else ''})"


def _judge_ratio(ratio: float, pr: float, fr: float) -> str:
    """PASS within pass_ratio of the healthy bound, WARN within fail_ratio, FAIL beyond."""
    return "PASS" if ratio <= pr else "WARN" if ratio <= fr else "FAIL"


FAIL_MIN_HEALTHY = 2    # a FAIL from a comparison stands on this many healthy boxes of the class, or a physical bound


def _fail_needs_evidence(status: str, exp, bound: str = "") -> tuple[str, str]:
    """Issue 33: a FAIL needs at least two healthy boxes of the class (real logs or published
    figures) or a physical bound (``bound``: the sentence naming it, empty where there is none);
    short of both it is a WARN. Returns the status and the words the threshold gets (empty when
    nothing changed)."""
    if status != "FAIL":
        return status, ""
    if bound:
        return status, bound
    n = len(exp.refs) if exp.kind == "healthy boxes" else 0
    if n >= FAIL_MIN_HEALTHY:
        return status, ""
    behind = ("a modelled reference profile, no healthy box" if not n else
              f"one {'published figure' if exp.refs[0].get('kind') != 'log' else 'healthy box (a real log)'}")
    return "WARN", (f"; FAIL needs {FAIL_MIN_HEALTHY} healthy boxes of the class or a physical bound, and {behind} "
                    "stands behind this one: WARN")


def _latency_vs_healthy(ev, t, sub, label, ic) -> Item | None:
    """C10 against the healthy boxes (or reference profile) of the box's class, TP and method;
    None when there is neither (the fixed thresholds judge then)."""
    tp, mode, rows = _decode_rows(sub)
    method = method_of(rows)
    exp = decode_expectation(ic.cls, ic.link, tp, method, t["max_bytes"], int(rows["size_bytes"].min()))
    if exp is None:
        return None
    judged = rows[rows["size_bytes"] <= exp.max_bytes]
    if judged.empty:
        return None
    worst = float(judged["latency_us_p50"].max())
    at = judged.loc[judged["latency_us_p50"].idxmax(), "size_bytes"]
    stat = label[:-1] + f", {mode})" if label.endswith(")") else f"{label} ({method})"
    pr = t["pass_ratio"] if len(exp.refs) > 1 else t["pass_ratio_one_box"]
    fr = t["fail_ratio_derived"] if exp.derived else t["fail_ratio"]
    ratio = worst / exp.hi
    status = _judge_ratio(ratio, pr, fr)
    capped = ""
    if ic is not _NETWORK:              # C10n says it itself (MULTINODE_FAIL_MIN_BOXES)
        status, capped = _fail_needs_evidence(status, exp)
    value = (f"{worst:.1f} us {stat} at TP={tp}, sizes <= {_size_text(exp.max_bytes)} (worst at {_size_text(at)}): "
             f"{ratio:.2f}x the slowest {evidence_phrase(exp, one=True)}")
    threshold = (f"vs {exp.span('us')} for {exp.what} ({exp.logs()}{DERIVED_NOTE if exp.derived else ''}): "
                 f"PASS <= {exp.hi * pr:.1f} us ({pr:g}x), WARN <= {exp.hi * fr:.1f} us ({fr:g}x), FAIL above{capped}")
    refs = "; ".join(f"{r['name']}: {r['source']}" if r.get("source") else r["name"] for r in exp.refs)
    hint = ""
    if status != "PASS":
        hint = (f"{ratio:.1f}x slower than the slowest {evidence_phrase(exp, one=True)}: check NCCL_P2P_LEVEL, NCCL_ALGO/"
                "NCCL_PROTO overrides, the NCCL version and the topology; a custom one-shot all-reduce cuts "
                "small-message latency")
    if mode != "graph":
        hint = ("; ".join(x for x in (hint, "measured without CUDA graphs; serving engines replay decode in graphs "
                                      "(nccl-tests -G, or commprof sweep --modes graph on the box)") if x))
    return noise_guard(Item("C10", f"all-reduce latency at decode sizes ({_mode_phrase(mode, label)})", status, value,
                            threshold, f"{_refs_prefix(exp)}: {refs}", hint, basis=evidence_phrase(exp)),
                       judged, figure=worst, fail_bound=exp.hi * fr)


def item_allreduce_latency(ev, th) -> Item:
    t = th["allreduce_latency"]
    df = ev.sweep
    base = "all-reduce latency at decode sizes"
    if df is None:
        return Item("C10", base, "SKIP", "no sweep.csv", "", t["source"], "run commprof sweep --out DIR")
    sub = _scoped(ev, multi=False)
    sub = sub[(sub["op"] == "all_reduce") & (sub["size_bytes"] <= t["max_bytes"])]
    allar = df[(df["op"] == "all_reduce") & (df["group"] == 0) & (df["size_bytes"] <= t["max_bytes"])]
    if allar.empty:
        return Item("C10", base, "SKIP", f"no all_reduce rows <= {t['max_bytes']} B", "", t["source"],
                    "measure all_reduce at decode sizes (<= 64 KiB) at TP >= 2")
    if sub.empty:
        if (allar["tp"] > 1).any():
            return Item("C10", base, "SKIP", "no TP group inside one host (every group spans hosts: see C10n)",
                        "TP >= 2 inside one host", t["source"], "measure TP <= GPUs per host too")
        return Item("C10", base, "SKIP", NO_COMM_VALUE, "TP >= 2", t["source"], NO_COMM_HINT)
    label = stat_label(sub)
    tp, mode, worst, value = _latency_value(sub, t, label)
    name = f"{base} ({_mode_phrase(mode, label)})"
    if _cpu_backend(ev.sweep_meta):
        return Item("C10", name, "SKIP", value + " on CPU ranks (gloo)", "GPU thresholds", t["source"],
                    "measured on CPU: thresholds are for GPU boxes")
    ic = _ic(ev).within_node()
    if not ic.known:
        return Item("C10", name, "SKIP", value + "; interconnect unknown", "NVLink or PCIe thresholds",
                    t["source"], f"not judged on a guessed fabric; what would decide: {DECIDING_EVIDENCE}")
    if not _user_fixed(th, "allreduce_latency", _FIXED_LATENCY) and ic.family != "mixed":
        item = _latency_vs_healthy(ev, t, sub, label, ic)
        if item is not None:
            return item
        if tp > FIXED_MAX_TP:
            return Item("C10", name, "SKIP", value + f"; no healthy box or reference profile of {ic.cls} "
                        f"{ic.link or '(generation unknown)'} at TP={tp}", f"healthy boxes at TP={tp}", t["source"],
                        f"the fixed thresholds were set for groups of up to {FIXED_MAX_TP} GPUs, so they do not judge "
                        f"TP={tp}; give the vendor's figure in a --thresholds file ([allreduce_latency] nvlink_pass_us "
                        "/ nvlink_warn_us or pcie_*)")
    nv = ic.family == "nvlink"
    p, w = (t["nvlink_pass_us"], t["nvlink_warn_us"]) if nv else (t["pcie_pass_us"], t["pcie_warn_us"])
    status = "PASS" if worst <= p else "WARN" if worst <= w else "FAIL"
    fabric = "NVLink" if nv else "PCIe" + (" (mixed: the TP group crosses PCIe)" if ic.family == "mixed" else "")
    user = _user_fixed(th, "allreduce_latency", _FIXED_LATENCY)
    why = ("your --thresholds file" if user else
           f"fixed, proposed: no healthy box or reference profile of {ic.cls} {ic.link or '(generation unknown)'} "
           f"at TP={tp}")
    capped = ""
    if status == "FAIL" and not user:   # issue 33: proposed thresholds are neither healthy boxes nor a physical bound
        status, capped = "WARN", (f"; FAIL needs {FAIL_MIN_HEALTHY} healthy boxes of the class, a physical bound or "
                                  "your --thresholds file, and only these proposed thresholds stand behind this one: WARN")
    hint = ""
    if mode != "graph":
        hint = ("measured without CUDA graphs; serving engines replay decode in graphs (nccl-tests -G, or "
                "commprof sweep --modes graph on the box); ")
    if status != "PASS":
        hint += "a custom one-shot all-reduce or NVLink cuts small-message latency"
    return noise_guard(Item("C10", name, status, value, f"{fabric}: PASS <= {p} us, WARN <= {w} us ({why}){capped}",
                            t["source"], hint.rstrip("; "), basis=why), _decode_rows(sub)[2], figure=worst, fail_bound=w)


def item_busbw(ev, th) -> Item:
    t = th["busbw"]
    name = "large-message busbw vs link ceiling"
    df = ev.sweep
    if df is None:
        return Item("C9", name, "SKIP", "no sweep.csv", "", t["source"], "run commprof sweep --sizes pow2:64M-1G")
    allar = df[(df["op"] == "all_reduce") & (df["group"] == 0) & (df["size_bytes"] >= t["min_bytes"])]
    if allar.empty:
        return Item("C9", name, "SKIP", f"no all_reduce rows >= {t['min_bytes'] >> 20} MiB", "", t["source"],
                    "run commprof sweep --ops all_reduce --sizes pow2:64M-1G")
    sub = _scoped(ev, multi=False)
    sub = sub[(sub["op"] == "all_reduce") & (sub["size_bytes"] >= t["min_bytes"])]
    if sub.empty:
        if (allar["tp"] > 1).any():
            return Item("C9", name, "SKIP", "no TP group inside one host (every group spans hosts: see C9n)",
                        "TP >= 2 inside one host", t["source"])
        return Item("C9", name, "SKIP", NO_COMM_VALUE, "TP >= 2", t["source"], NO_COMM_HINT)
    best = float(sub["busbw_gbps"].max())
    tp = int(sub.loc[sub["busbw_gbps"].idxmax(), "tp"])
    top = sub[sub["tp"] == int(sub["tp"].max())]        # the healthy boxes are compared at the largest TP
    if not _cpu_backend(ev.sweep_meta) and _ic(ev).within_node().known:
        best, tp = float(top["busbw_gbps"].max()), int(top["tp"].max())
    if _cpu_backend(ev.sweep_meta):
        return Item("C9", name, "SKIP", f"{best:.2f} GB/s on CPU ranks (gloo)", "GPU link ceilings", t["source"])
    ic = _ic(ev).within_node()
    if not ic.known:
        return Item("C9", name, "SKIP", f"{best:.1f} GB/s at TP={tp}; interconnect unknown", "fraction of the link "
                    "ceiling", t["source"], f"what would decide: {DECIDING_EVIDENCE}")
    ceiling = LINK_CEILING_GBPS.get(ic.link)
    if not ceiling:
        return Item("C9", name, "SKIP", f"{best:.1f} GB/s at TP={tp}; {ic.cls} but its link generation is not known",
                    "fraction of the link ceiling", t["source"],
                    "give --interconnect with the generation (e.g. pcie4, nvlink4), or logs/topo.json naming the GPUs")
    frac = best / ceiling
    nvls = best > ceiling and ic.family == "nvlink"
    above = (f"; above the {ic.link} per-direction ceiling of {ceiling:g} GB/s ({frac:.0%}): in-switch reduction "
             "(NVLS / SHARP), not a link figure" if nvls else "")
    fixed = _user_fixed(th, "busbw", _FIXED_BUSBW)
    if not fixed and ic.family != "mixed":
        method = method_of(top)
        largest = int(top["size_bytes"].max())
        exp = busbw_expectation(ic.cls, ic.link, tp, method, largest, nvls)
        if exp is not None:
            pr, fr = t["pass_ratio"], t["fail_ratio_derived"] if exp.derived else t["fail_ratio"]
            ratio = exp.lo / best if best > 0 else math.inf
            status = _judge_ratio(ratio, pr, fr)
            bound = (f"; {frac:.0%} of the {ic.link} per-direction ceiling of {ceiling:g} GB/s, below the "
                     f"{t['warn_fraction']:.0%} of it the fixed thresholds FAIL at (a physical bound)"
                     if frac < t["warn_fraction"] else "")
            status, capped = _fail_needs_evidence(status, exp, bound)
            refs = "; ".join(f"{r['name']}: {r['source']}" if r.get("source") else r["name"] for r in exp.refs)
            return noise_guard(Item("C9", name, status,
                        f"TP={tp}: {best:.1f} GB/s busbw ({method}, sizes up to {_size_text(largest)}) = "
                        f"{best / exp.lo:.2f}x the lowest {evidence_phrase(exp, one=True)}"
                        f"{above}{capped if status == 'FAIL' else ''}",
                        f"vs {exp.span('GB/s')} for {exp.what} ({exp.logs()}{DERIVED_NOTE if exp.derived else ''}): "
                        f"PASS >= {exp.lo / pr:.1f} GB/s "
                        f"(1/{pr:g}), WARN >= {exp.lo / fr:.1f} GB/s (1/{fr:g}), FAIL below{capped}",
                        f"{_refs_prefix(exp)}: {refs}",
                        "" if status == "PASS" else f"{ratio:.1f}x below the lowest {evidence_phrase(exp, one=True)}: check "
                        "NCCL_P2P_LEVEL, ACS/IOMMU, link training (C6) and NCCL_ALGO overrides",
                        basis=evidence_phrase(exp) + (f" and a physical bound: the {ic.link} per-direction link "
                                                      "ceiling" if status == "FAIL" and capped else "")),
                top, figure=best, fail_bound=exp.lo / fr, higher_is_better=True)
        if nvls:
            return Item("C9", name, "PASS", f"TP={tp}: {best:.1f} GB/s{above}",
                        f"no NVLS-capable healthy {ic.link} box at TP={tp} to compare with; above the link ceiling "
                        "cannot come from a slow link", f"{t['source']}; {LINK_CEILING_SOURCE}",
                        basis=f"a physical bound: the {ic.link} per-direction link ceiling")
    status = "PASS" if frac >= t["pass_fraction"] else "WARN" if frac >= t["warn_fraction"] else "FAIL"
    why = "your --thresholds file" if fixed else "fixed, proposed: no healthy box or reference profile of the class"
    judged = top if _ic(ev).within_node().known else sub
    return noise_guard(Item("C9", name, status, f"TP={tp}: {best:.1f} GB/s = {frac:.0%} of {ic.link} {ceiling:g} GB/s{above}",
                f"PASS >= {t['pass_fraction']:.0%}, WARN >= {t['warn_fraction']:.0%} of the ceiling ({why})",
                f"{t['source']}; {LINK_CEILING_SOURCE}",
                "" if status == "PASS" else "check NCCL_P2P_LEVEL, ACS/IOMMU and link training",
                basis=f"{why}: a fraction of the {ic.link} per-direction ceiling (a physical bound)"),
        judged, figure=best, fail_bound=t["warn_fraction"] * ceiling, higher_is_better=True)


MULTINODE_FAIL_MIN_BOXES = 2    # C10n FAILs only against this many healthy multi-node boxes (or a physical bound)


def _multinode_refs(tl, rows) -> int:
    """How many healthy multi-node boxes (real logs or published figures) stand behind C10n at the
    rows' TP degree and method."""
    tp, _, judged = _decode_rows(rows)
    exp = decode_expectation(_NETWORK.cls, _NETWORK.link, tp, method_of(judged), tl["max_bytes"],
                             int(judged["size_bytes"].min()))
    return len(exp.refs) if exp is not None and exp.kind == "healthy boxes" else 0


def _multinode_items(ev, th) -> list[Item]:
    """C10n and C9n: the TP groups that span hosts, judged by the network between nodes."""
    sub = _scoped(ev, multi=True)
    if sub is None or sub.empty:
        return []
    t, tl = th["multinode"], th["allreduce_latency"]
    nodes = int(row_nodes(sub).max())
    out = []
    small = sub[(sub["op"] == "all_reduce") & (sub["size_bytes"] <= tl["max_bytes"])]
    base = f"all-reduce latency between nodes ({nodes} hosts)"
    if small.empty:
        out.append(Item("C10n", base, "SKIP", f"no all_reduce rows <= {tl['max_bytes'] // 1024} KiB", "", t["source"]))
    else:
        label = stat_label(small)
        tp, mode, worst, value = _latency_value(small, tl, label)
        p, w = t["latency_pass_us"], t["latency_warn_us"]
        status = "PASS" if worst <= p else "WARN" if worst <= w else "FAIL"
        user = _user_fixed(th, "multinode", ("latency_pass_us", "latency_warn_us"))
        healthy = None if user else _latency_vs_healthy(ev, tl, small, label, _NETWORK)
        if healthy is not None:
            healthy.id, healthy.item = "C10n", f"{base} ({_mode_phrase(mode, label)})"
            healthy.basis = healthy.basis.replace("of its class", "of multi-node boxes (TP groups across hosts)")
            if healthy.status != "INSUFFICIENT":        # unstable cells keep their rerun hint (checknoise)
                healthy.hint = "" if healthy.status == "PASS" else ("keep TP groups inside a node; decode across "
                                                                     "nodes pays the network's latency on every collective")
            refs = _multinode_refs(tl, small)
            if healthy.status == "FAIL" and refs < MULTINODE_FAIL_MIN_BOXES:
                healthy.status = "WARN"
                healthy.threshold += (f"; FAIL needs {MULTINODE_FAIL_MIN_BOXES} healthy multi-node boxes at this TP "
                                      f"degree or a physical bound, and {refs} stand{'s' if refs == 1 else ''} behind "
                                      "this one (the networks between nodes differ: RoCE, InfiniBand, TCP): WARN")
                healthy.hint = ("slower than the one published multi-node figure, which is another box on another "
                                "network, so no FAIL; " + healthy.hint)
            out.append(healthy)
            status = None
        elif nodes > MULTINODE_MAX_NODES and not user:
            out.append(Item("C10n", f"{base} ({_mode_phrase(mode, label)})", "SKIP", value,
                            f"network: thresholds set for {MULTINODE_MAX_NODES} hosts", t["source"],
                            f"the [multinode] latency thresholds were anchored on {MULTINODE_MAX_NODES} nodes "
                            f"(NVIDIA/nccl#1244); a group over {nodes} hosts pays more steps or tree levels: give the "
                            "vendor's figure in a --thresholds file ([multinode] latency_pass_us / latency_warn_us)"))
            status = None
        capped = ""
        if status == "FAIL" and not user:
            status, capped = "WARN", ("; FAIL only by your --thresholds file: these fixed thresholds stand on one "
                                      "published figure (2 nodes x 8 H20), not on two healthy boxes or a physical bound")
        if status is not None:
            out.append(noise_guard(Item("C10n", f"{base} ({_mode_phrase(mode, label)})", status, value,
                            f"network: PASS <= {p} us, WARN <= {w} us{capped}", t["source"],
                            basis="your --thresholds file" if user else
                            "fixed proposed thresholds anchored on one published figure (2 nodes x 8 H20)",
                            hint="" if status == "PASS" else "keep TP groups inside a node; decode across nodes pays the "
                            "network's latency on every collective"), _decode_rows(small)[2], figure=worst,
                            fail_bound=w))
    big = sub[(sub["op"] == "all_reduce") & (sub["size_bytes"] >= th["busbw"]["min_bytes"])]
    name = f"large-message busbw between nodes ({nodes} hosts)"
    if big.empty:
        out.append(Item("C9n", name, "SKIP", f"no all_reduce rows >= {th['busbw']['min_bytes'] >> 20} MiB", "",
                        t["source"]))
    else:
        best = float(big["busbw_gbps"].max())
        p, w = t["busbw_pass_gbps"], t["busbw_warn_gbps"]
        if not p:
            out.append(Item("C9n", name, "SKIP", f"{best:.1f} GB/s; the network between the nodes is not known "
                            "from the logs", "[multinode] busbw_pass_gbps (not set)", t["source"],
                            "set [multinode] busbw_pass_gbps / busbw_warn_gbps in a --thresholds file to what the "
                            "vendor quotes for the network (e.g. one 400 Gb/s NDR NIC per GPU is about 50 GB/s, "
                            "DeepEP README)"))
        else:
            status = "PASS" if best >= p else "WARN" if best >= w else "FAIL"
            out.append(noise_guard(Item("C9n", name, status, f"{best:.1f} GB/s", f"PASS >= {p} GB/s, WARN >= {w} GB/s",
                            t["source"] + " (busbw thresholds from your --thresholds file)"), big, figure=best,
                            fail_bound=w, higher_is_better=True))
    return out


def item_correctness(ev, th) -> Item:
    """C16: no collective may return wrong data, measured (commprof's exact check) or imported
    (nccl-tests' #wrong, out-of-place and in-place)."""
    t = th["correctness"]
    name = "collective correctness (#wrong)"
    frames = [f for f in (ev.sweep, ev.sweep_custom) if f is not None and len(f)]
    if not frames:
        return Item("C16", name, "SKIP", "no sweep.csv", "0 wrong elements on every row", t["source"],
                    "run commprof sweep, or import nccl-tests logs (their #wrong columns)")
    import pandas as pd

    df = pd.concat(frames, ignore_index=True)
    wrong = df[df["wrong"] > 0]
    status = df["status"].astype(str) if "status" in df.columns else pd.Series([""] * len(df))
    unchecked = int((status == "unchecked").sum())
    checked = len(df) - unchecked
    cpu = " on CPU ranks (gloo)" if _cpu_backend(ev.sweep_meta) else ""
    if not wrong.empty:
        r = wrong.iloc[0]

        return Item("C16", name, "FAIL", f"{len(wrong)} of {len(df)} rows WRONG{cpu} (e.g. {r['op']} TP={int(r['tp'])} "
                    f"{human_bytes(int(r['size_bytes']))} {r['mode']}: {int(r['wrong'])} wrong elements)",
                    "0 wrong elements on every row", t["source"],
                    "wrong data from a collective: never acceptable; retest with P2P off (NCCL_P2P_DISABLE=1) "
                    "to see whether the P2P path (driver, ACS, risers) corrupts it")
    deviation = int((ev.sweep_meta or {}).get("unchecked_deviation_rows") or 0)
    if not checked and deviation >= len(df):
        return Item("C16", name, "SKIP", f"not known: an old-layout 'error' column (a deviation, not a count) and "
                    f"no '# Out of bounds values' footer in the log on all {len(df)} rows",
                    "0 wrong elements on every row", t["source"],
                    "ask for the whole log (its footer judges the deviations), or rerun a current nccl-tests (#wrong)")
    if not checked:
        return Item("C16", name, "SKIP", f"not checked: #wrong N/A (validation off) on all {len(df)} rows",
                    "0 wrong elements on every row", t["source"],
                    "rerun nccl-tests with validation on (-c 1, its default), or commprof sweep (always checks)")
    more = f"; {unchecked} rows not checked (N/A)" if unchecked else ""
    return Item("C16", name, "PASS", f"0 wrong elements in {checked} checked rows{cpu}{more}",
                "0 wrong elements on every row", t["source"])


def item_comm_share(ev, th) -> Item:
    t = th["comm_share"]
    name = f"communication share of per-token latency at TP={t['tp']}"
    df = ev.trace
    if df is None:
        return Item("C11", name, "SKIP", "no trace_summary.csv", "", t["source"], "run commprof trace --out DIR")
    if df.empty:
        return Item("C11", name, "SKIP", "trace_summary.csv holds no rows (its run ended before a summary was "
                    "written)", "", t["source"], "rerun commprof trace; its meta.json says why the run ended")
    sub = df[df["tp"] == t["tp"]]
    tp = t["tp"]
    if sub.empty:
        tp = int(df["tp"].max())
        sub = df[df["tp"] == tp]
    if tp == 1:
        return Item("C11", name, "SKIP", NO_COMM_VALUE, f"TP={t['tp']}", t["source"], NO_COMM_HINT)
    if "phase" in sub.columns:            # prefill and mixed rows are judged by C11p
        sub = sub[[not (isinstance(p, str) and p in ("prefill", "mixed")) for p in sub["phase"]]]
        if sub.empty:
            return Item("C11", name, "SKIP", "the trace holds prefill/mixed runs only (see C11p)", "",
                        t["source"], "run commprof trace (decode) --out DIR")
    sub = sub[sub["batch"] == sub["batch"].min()]
    row = sub.iloc[0]
    kind = (ev.trace_meta or {}).get("kind", "measured")
    mode = str(row.get("mode", "")) if "mode" in sub.columns else ""
    value = (f"TP={tp} batch={int(row['batch'])}{' ' + mode if mode else ''}: {row['comm_share_pct']:.1f}% of "
             f"{row['ms_per_token']:.2f} ms/token ({kind}{', scaled' if int(row.get('scaled', 0)) else ''})")
    if _cpu_backend(ev.trace_meta):
        return Item("C11", name, "SKIP", value + " on CPU ranks (gloo)", "GPU thresholds", t["source"])
    share = float(row["comm_share_pct"])
    status = "PASS" if share < t["pass_pct"] else "WARN" if share <= t["warn_pct"] else "FAIL"
    return noise_guard(Item("C11", name, status, value, f"PASS < {t['pass_pct']}%, WARN <= {t['warn_pct']}%",
                            t["source"], "" if status == "PASS" else "a lower TP degree, NVLink, or a faster "
                            "small-message all-reduce"), sub.iloc[:1], figure=share, fail_bound=t["warn_pct"], verb="trace")


def item_ttft_comm(ev, th) -> Item | None:
    """C11p: the share of the time to first token spent in collectives, from a prefill or mixed
    trace at the thresholds' prompt length (the nearest prompt the trace has, said so). None when
    the box has no prefill trace: the item is listed only with that evidence."""
    t = th["ttft_comm"]
    df = ev.trace
    if df is None or df.empty or "phase" not in df.columns:
        return None
    rows = [{**r, "_pos": n} for n, r in enumerate(df.to_dict("records"))
            if isinstance(r.get("phase"), str) and r["phase"] in ("prefill", "mixed")]
    if not rows:
        return None
    name = f"communication share of TTFT ({t['prompt']}-token prompt) at TP={t['tp']}"
    at_tp = [r for r in rows if int(r["tp"]) == t["tp"]] or \
        [r for r in rows if int(r["tp"]) == max(int(x["tp"]) for x in rows)]
    row = min(at_tp, key=lambda r: (abs(int(r["prompt"]) - t["prompt"]), r["phase"] != "prefill"))
    tp = int(row["tp"])
    threshold = f"PASS < {t['pass_pct']}%, WARN <= {t['warn_pct']}%"
    if tp == 1:
        return Item("C11p", name, "SKIP", NO_COMM_VALUE, f"TP={t['tp']}", t["source"], NO_COMM_HINT)
    kind = (ev.trace_meta or {}).get("kind", "measured")
    other = "" if int(row["prompt"]) == t["prompt"] else f" (the trace's prompt, not {t['prompt']})"
    mixed = f" + {int(row['batch'])} decode tokens" if row["phase"] == "mixed" else ""
    value = (f"TP={tp} {row['phase']} prompt {int(row['prompt'])}{other}, chunk {int(row['chunk'])}{mixed}: "
             f"{float(row['ttft_comm_ms']):.2f} of {float(row['ttft_ms']):.2f} ms TTFT in collectives "
             f"({float(row['ttft_comm_share_pct']):.1f}%) ({kind}{', scaled' if int(row.get('scaled') or 0) else ''})")
    if _cpu_backend(ev.trace_meta):
        return Item("C11p", name, "SKIP", value + " on CPU ranks (gloo)", "GPU thresholds", t["source"])
    share = float(row["ttft_comm_share_pct"])
    status = "PASS" if share < t["pass_pct"] else "WARN" if share <= t["warn_pct"] else "FAIL"
    return noise_guard(Item("C11p", name, status, value, threshold, t["source"],
                            "" if status == "PASS" else "a larger prefill chunk (fewer collectives), NVLink, or a lower "
                            "TP degree for prefill"), df.iloc[[row["_pos"]]], figure=share, fail_bound=t["warn_pct"],
                       verb="trace")


def _serve_row(ev, t):
    """The serve level judged: closed loop at the thresholds' concurrency, else the dir's nearest
    closed-loop level (said so in the value); None without one."""
    df = ev.serve
    if df is None or df.empty:
        return None, ""
    rows = [r for r in df.to_dict("records") if r.get("mode") == "closed" and (r.get("ok") or 0) > 0]
    if not rows:
        return None, ""
    target = t["concurrency"]
    row = min(rows, key=lambda r: (abs(math.log2(int(r["concurrency"]) / target)), -int(r["concurrency"])))
    note = "" if int(row["concurrency"]) == target else f" (the dir's nearest level, not {target})"
    return row, note


def _serve_kind(ev) -> str:
    meta = ev.serve_meta or {}
    label = f"; {meta['label']}" if meta.get("label") else ""
    return f"{meta.get('kind', 'measured')}, {meta.get('model', '?')}, workload {meta.get('workload', '?')}{label}"


_SERVE_HINTS = {"ttft": "fewer requests in flight per replica (queueing), chunked prefill, or more replicas",
                "tpot": "fewer requests in flight per replica, more replicas, or a faster interconnect or GPU for "
                        "decode (commprof trace shows the per-token communication share)"}


def serve_items(ev, th) -> list[Item]:
    """S1-S3: the buyer's service metrics from a ``commprof serve`` dir at the thresholds'
    concurrency: TTFT p99, TPOT p99, and sustained output tokens/s with jitter growth (TPOT
    p99/p50 against concurrency 1's) and errors. Empty without a serve dir."""
    t = th["serve"]
    row, note = _serve_row(ev, t)
    if row is None:
        if ev.serve is None:
            return []
        return [Item("S1", f"serve at concurrency {t['concurrency']}", "SKIP", "no closed-loop level with a "
                     "finished request", "", t["source"], "run commprof serve against a live server")]
    c = int(row["concurrency"])
    kind = _serve_kind(ev)
    items = []
    for sid, metric, name in (("S1", "ttft", "time to first token (p99)"), ("S2", "tpot", "time per output token (p99)")):
        p99, p50 = float(row[f"{metric}_ms_p99"]), float(row[f"{metric}_ms_p50"])
        pass_ms, warn_ms = t[f"{metric}_p99_pass_ms"], t[f"{metric}_p99_warn_ms"]
        status = "PASS" if p99 <= pass_ms else "WARN" if p99 <= warn_ms else "FAIL"
        items.append(Item(sid, f"{name} at concurrency {c}", status,
                          f"{p99:.1f} ms at concurrency {c}{note} (p50 {p50:.1f} ms) ({kind})",
                          f"PASS <= {pass_ms:g} ms, WARN <= {warn_ms:g} ms", t["source"],
                          "" if status == "PASS" else _SERVE_HINTS[metric]))
    growth = row.get("jitter_growth")
    growth = float(growth) if growth is not None and growth == growth else math.nan
    errors, requests = int(row.get("errors") or 0), int(row.get("requests") or 0)
    value = (f"{float(row['output_tokens_per_s']):.1f} output tokens/s, {float(row['requests_per_s']):.2f} requests/s "
             f"at concurrency {c}{note}; TPOT p99/p50 {float(row['jitter_tpot_p99_p50']):.2f}, "
             f"{'n/a' if growth != growth else f'{growth:.2f}x'} concurrency 1's; {errors} of {requests} requests "
             f"failed ({kind})")
    status = "SKIP" if growth != growth else "PASS" if growth <= t["jitter_growth_pass"] else \
        "WARN" if growth <= t["jitter_growth_warn"] else "FAIL"
    if errors and status in ("PASS", "SKIP"):
        status = "WARN"
    bursts = int(row.get("burst_requests") or 0) if row.get("burst_requests") == row.get("burst_requests") else 0
    if bursts:
        value += f"; {row.get('burst_note')}"
        status = "WARN" if status in ("PASS", "SKIP") else status
    items.append(Item("S3", f"sustained output rate and jitter at concurrency {c}", status, value,
                      f"jitter growth PASS <= {t['jitter_growth_pass']:g}x, WARN <= {t['jitter_growth_warn']:g}x; "
                      "any failed request WARN", t["source"],
                      "" if status == "PASS" else "look at the failed requests (serve_requests.csv) and at queueing: "
                      "fewer requests in flight per replica"))
    return items


def item_kv(ev, th, model: str | None) -> Item:
    t = th["kv_headroom"]
    name = f"KV-cache headroom at {t['context']} tokens"
    gpus = _gpus(ev.topo)
    mem = _num(gpus[0].get("memory_total_bytes")) if gpus else None
    model = model or ((ev.trace_meta or {}).get("model") or {}).get("name") or \
        ((ev.sweep_meta or {}).get("config", {}).get("model") or {}).get("name")
    if not mem or not model:
        return Item("KV", name, "SKIP", "GPU memory or model unknown", f">= {t['min_sequences']} sequences",
                    t["source"], "give --model and a topo.json from the box")

    try:
        plan = build_plan(get_model(model), t["tp"], 1, t["context"], gpu_mem_bytes=mem, mem_util=t["mem_util"])
    except UsageError as e:
        return Item("KV", name, "SKIP", str(e), "", t["source"])
    seqs = plan.max_sequences
    status = "PASS" if seqs >= t["min_sequences"] else "WARN" if seqs >= 1 else "FAIL"
    return Item("KV", name, status, f"{model} at TP={t['tp']}: {seqs} sequences fit (modelled)",
                f"PASS >= {t['min_sequences']}, FAIL 0", t["source"],
                "" if status == "PASS" else "quantized weights/KV, a higher TP degree or GPUs with more memory")


def item_numa(ev, th) -> Item:
    t = th["numa"]
    name = "NUMA crossing inside TP groups"
    mat = (ev.topo or {}).get("matrix")
    if not mat:
        return Item("C12", name, "SKIP", "no topo.json", "no SYS pair inside a TP group", t["source"])
    tp = th["comm_share"]["tp"]
    n = len(mat)
    cross = [f"{i}-{j}" for g in range(0, n, min(tp, n)) for i in range(g, min(g + tp, n))
             for j in range(i + 1, min(g + tp, n)) if str(mat[i][j]) == "SYS"]
    if cross and _ic(ev).within_node().family in ("pcie", "mixed"):
        return Item("C12", name, "WARN", f"{len(cross)} GPU pairs cross sockets (SYS), e.g. {cross[0]}",
                    "no SYS pair inside a TP group", t["source"],
                    "keep a PCIe TP group on one socket, or expect host-memory hops between sockets")
    if cross and _ic(ev).within_node().family != "nvlink":
        # the fabric is not known (e.g. 'nvidia-smi topo -mp', PCIe paths only): NVLink may or may not carry them
        return Item("C12", name, "SKIP", f"{len(cross)} GPU pairs cross sockets (SYS), e.g. {cross[0]}; whether "
                    "NVLink carries them is not known (interconnect unknown)", "no SYS pair inside a TP group",
                    t["source"], "pass 'nvidia-smi topo -m' output (the NVLink matrix)")
    return Item("C12", name, "PASS", "no SYS pair inside a TP group" if not cross else
                f"{len(cross)} SYS pairs, but GPU traffic rides NVLink", "no SYS pair inside a TP group", t["source"])


_ADD = {"C16": "results checked for correctness (nccl-tests with validation on, -c 1, its default; commprof sweep "
               "always checks)",
        "C10": "a sweep at TP >= 2 with all_reduce sizes <= 64 KiB (commprof sweep on the box, or its nccl-tests logs)",
        "C9": "all_reduce sizes >= 64 MiB at TP >= 2 (nccl-tests -e 1G, or commprof sweep --sizes pow2:64M-1G)",
        "C11": "a decode trace (commprof trace --out DIR)"}


def item_evidence(items: list[Item], th) -> Item:
    """E1: an overall verdict needs the measured items that decide it (:data:`DECIDING_ITEMS`); with
    fewer than ``[evidence] min_judged`` of them judged the box is INSUFFICIENT EVIDENCE (exit 9),
    naming what to add. A FAIL stands on its own."""
    t = th["evidence"]
    judged = [i.id for i in items if i.id in DECIDING_ITEMS and i.status in ("PASS", "WARN", "FAIL")]
    need = int(t["min_judged"])
    name = "evidence for a verdict"
    threshold = f">= {need} measured items judged ({', '.join(DECIDING_ITEMS)})"
    fails = [i.id for i in items if i.status == "FAIL"]
    if len(judged) >= need or fails:
        alone = ("" if len(judged) >= need else
                 f"; fewer than {need}, but a FAIL ({', '.join(fails)}) stands on its own: the verdict is that FAIL")
        return Item("E1", name, "PASS", f"{len(judged)} measured item{'s' if len(judged) != 1 else ''} judged "
                    f"({', '.join(judged) or 'none'}){alone}", threshold, t["source"])
    skipped = {i.id: i for i in items if i.id in DECIDING_ITEMS and i.status == "SKIP"}
    add = []
    unknown = any("interconnect unknown" in i.value for i in skipped.values())
    if unknown:
        add.append("what decides the interconnect: a topo (commprof topo --out DIR on the box, or 'commprof import "
                   "nvidia-smi-topo' of its 'nvidia-smi topo -m' text) or --interconnect CLASS")
    for k in ("C10", "C9", "C16", "C11"):
        if k in skipped and not (unknown and k in ("C9", "C10")):
            add.append(_ADD[k])
    noisy = [i.id for i in items if i.id in DECIDING_ITEMS and i.status == "INSUFFICIENT"]
    if noisy:       # judged on unstable cells (analysis/checknoise.py): steady figures decide them
        add.append(f"steady figures for {', '.join(noisy)} (rerun with commprof sweep --repeat 5, or trace "
                   "--repeat 5, on a quiet machine)")
    if "C10" not in skipped and "C10" not in judged and "C10" not in noisy:
        add.append(_ADD["C10"])
    return Item("E1", name, "INSUFFICIENT", f"{len(judged)} measured item{'s' if len(judged) != 1 else ''} judged "
                f"({', '.join(judged) or 'none'}): not enough for an overall verdict", threshold, t["source"],
                "add " + "; ".join(dict.fromkeys(add)))


def box_items(ev: Evidence, th: dict, model: str | None = None) -> list[Item]:
    """One box's checklist in the buyer's acceptance order (wrong results before any speed), then
    E1: whether the measured items judged are enough for a verdict."""
    items = [item_inventory(ev, th), item_interconnect(ev, th), item_p2p(ev, th), item_pcie(ev, th),
            item_nvlink(ev, th), item_host_bw(ev, th), item_correctness(ev, th), item_allreduce_latency(ev, th),
            item_busbw(ev, th), *_multinode_items(ev, th), item_comm_share(ev, th),
            *[i for i in (item_ttft_comm(ev, th),) if i is not None], *serve_items(ev, th), item_kv(ev, th, model),
            item_numa(ev, th), *health_items(ev, th), *nccl_items(ev, th)]
    return items + [item_evidence(items, th)]


def run_items(ev: Evidence, th: dict, model: str | None = None, interconnect=None) -> list[Item]:
    """The checklist of every box ``ev`` holds (each item's ``box`` names it when there are several)."""
    boxes = resolve_all(ev, interconnect)
    items = []
    for b in boxes:
        for i in box_items(b, th, model):
            if len(boxes) > 1:
                i.box = b.label
            items.append(i)
    return annotate(items)
