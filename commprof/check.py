"""``commprof check``: the pre-purchase checklist, in the buyer's acceptance order.

Every item reads evidence from results dirs (``topo.json``, ``sweep.csv``, ``trace_summary.csv``,
``hostbw.json``) and gives PASS / WARN / FAIL / SKIP with the measured value, the threshold, the
threshold's source (or "proposed") and a hint. Thresholds live in a versioned TOML file
(``commprof/data/thresholds.toml``) that ``--thresholds FILE`` overrides key by key.
"""
from __future__ import annotations

import copy
import json
import os
import tomllib
from dataclasses import dataclass, field

from .items import Item, verdict
from .errors import CommprofError, UsageError
from .views.check import markdown, render

EXIT_CHECK_FAILED = 8
DEFAULT_THRESHOLDS = os.path.join(os.path.dirname(__file__), "data", "thresholds.toml")
# Per-direction link ceilings in GB/s, shared/FACTS.md "Link ceilings".
LINK_CEILING_GBPS = {"pcie3": 15.75, "pcie4": 31.5, "pcie5": 63.0, "pcie6": 118.0,
                     "nvlink3": 300.0, "nvlink4": 450.0, "nvlink5": 900.0}
LINK_CEILING_SOURCE = "shared/FACTS.md link ceilings (PCIe x16 per direction; NVLink 3/4/5 per GPU per direction)"


class CheckFailed(CommprofError):
    exit_code = EXIT_CHECK_FAILED


# --- thresholds ------------------------------------------------------------------------------------

def _read_toml(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise UsageError(f"thresholds file '{path}': not found") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"thresholds file '{path}': not valid TOML ({e})") from None


def load_thresholds(path: str | None = None) -> dict:
    """The default thresholds, overridden by ``path``. Unknown keys and wrong types are refused
    with one line naming the file and the key."""
    base = _read_toml(DEFAULT_THRESHOLDS)
    if not path:
        return base
    user = _read_toml(path)
    merged = copy.deepcopy(base)
    for key, val in user.items():
        if key not in base:
            raise UsageError(f"thresholds file '{path}': unknown key '{key}' (known: {', '.join(base)})")
        if not isinstance(base[key], dict):
            if type(val) is not type(base[key]):
                raise UsageError(f"thresholds file '{path}': key '{key}' must be {type(base[key]).__name__}")
            merged[key] = val
            continue
        if not isinstance(val, dict):
            raise UsageError(f"thresholds file '{path}': '{key}' must be a table ([{key}])")
        for k, v in val.items():
            if k not in base[key]:
                raise UsageError(f"thresholds file '{path}': unknown key '{key}.{k}' "
                                 f"(known: {', '.join(base[key])})")
            want = base[key][k]
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) if isinstance(want, float) else \
                type(v) is type(want)
            if not ok:
                raise UsageError(f"thresholds file '{path}': key '{key}.{k}' must be {type(want).__name__}, "
                                 f"got {type(v).__name__}")
            merged[key][k] = v
    return merged


# --- evidence --------------------------------------------------------------------------------------

@dataclass
class Evidence:
    topo: dict | None = None
    sweep: object = None          # pandas DataFrame
    sweep_meta: dict | None = None
    sweep_custom: object = None   # pandas DataFrame: the sweep's --impl custom rows (one-shot kernel)
    trace: object = None          # pandas DataFrame (trace_summary.csv)
    trace_meta: dict | None = None
    hostbw: dict | None = None
    p2p: object = None            # pandas DataFrame (p2p.csv from commprof p2p)
    moe_dir: str | None = None    # a commprof moe results dir
    dirs: tuple = ()
    metas: list = field(default_factory=list)   # each dir's provenance (results.load)


def gather(dirs: list[str]) -> Evidence:
    """Read what each results dir holds (``results.load``); a corrupt file is an error naming it."""
    from . import results

    ev = Evidence(dirs=tuple(dirs))
    for d in dirs:
        r = results.load(d)
        ev.metas.append(r.meta)
        found = False
        if "topo" in r.docs:
            ev.topo, found = r.docs["topo"], True
        if "hostbw" in r.docs:
            ev.hostbw, found = r.docs["hostbw"], True
        if "sweep" in r.tables:
            df = r.tables["sweep"]
            ev.sweep = df[df["impl"] != "custom"].reset_index(drop=True)
            custom = df[df["impl"] == "custom"].reset_index(drop=True)
            ev.sweep_custom = custom if not custom.empty else None
            ev.sweep_meta = r.meta
            found = True
        if "trace_summary" in r.tables:
            ev.trace, ev.trace_meta, found = r.tables["trace_summary"], r.meta, True
        if "p2p" in r.tables:
            ev.p2p, found = r.tables["p2p"], True
        if "moe_steps" in r.tables:
            ev.moe_dir, found = d, True
        if not found:
            raise UsageError(f"results dir '{d}': holds no topo.json, sweep.csv, trace_summary.csv, p2p.csv "
                             "or moe_steps.csv")
    return ev


# --- the items -------------------------------------------------------------------------------------

def _gpus(topo):
    return (topo or {}).get("gpus") or []


def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _cpu_backend(meta) -> bool:
    return (meta or {}).get("backend") == "gloo"


def _link_kind(ev: Evidence) -> str:
    """nvlink3/4/5 or pcie3..6 from the topology; "" when unknown."""
    cls = (ev.topo or {}).get("interconnect_class", "")
    gpus = _gpus(ev.topo)
    if cls in ("nvswitch", "nvlink") and gpus:
        v = str(gpus[0].get("nvlink_version", ""))
        for n in ("5", "4", "3"):
            if v.startswith(n) or v.startswith(f"{n}.") or v == n:
                return f"nvlink{n}"
        return "nvlink4"
    if gpus:
        gen = _num(gpus[0].get("pcie_link_gen_max"))
        if gen:
            return f"pcie{int(gen)}"
    return ""


def item_inventory(ev, th) -> Item:
    t = th["inventory"]
    gpus = _gpus(ev.topo)
    src = t["source"]
    if ev.topo is None:
        return Item("C1", "GPU inventory", "SKIP", "no topo.json", "count == expected", src,
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
    if ev.topo is None:
        return Item("C2", "interconnect class", "SKIP", "no topo.json", "informational", t["source"],
                    "run commprof topo --out DIR")
    cls = ev.topo.get("interconnect_class", "n/a")
    exp = t["expected_class"]
    if exp and cls != exp:
        return Item("C2", "interconnect class", "FAIL", cls, exp, t["source"],
                    "the topology contradicts the quote (e.g. an 'HGX' box without NVLink P2P)")
    return Item("C2", "interconnect class", "PASS", cls, exp or "informational", t["source"])


def item_p2p(ev, th) -> Item:
    t = th["p2p"]
    if ev.topo is None or "p2p" not in ev.topo:
        return Item("C5", "P2P matrix", "SKIP", "no topo.json", "READ/WRITE OK for every pair", t["source"],
                    "run commprof topo --out DIR")
    mat = ev.topo.get("matrix") or []
    p2p = ev.topo["p2p"]
    bad_nv, bad_pcie = [], []
    n = len(mat)
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            ok = all(str(p2p.get(k, [[]])[i][j]).upper() == "OK" for k in ("read", "write") if k in p2p)
            if not ok:
                (bad_nv if str(mat[i][j]).startswith("NV") else bad_pcie).append(f"{i}->{j}")
    if bad_nv:
        return Item("C5", "P2P matrix", "FAIL", f"NVLink pairs without P2P: {', '.join(bad_nv[:6])}",
                    "READ/WRITE OK on every NVLink pair", t["source"], "check the driver and Fabric Manager")
    if bad_pcie:
        return Item("C5", "P2P matrix", "WARN", f"{len(bad_pcie)} ordered pairs without P2P (e.g. {bad_pcie[0]})",
                    "READ/WRITE OK for every pair", t["source"],
                    "without P2P NCCL goes through host shared memory; check the driver, ACS and IOMMU")
    return Item("C5", "P2P matrix", "PASS", f"P2P read/write OK for all {n * (n - 1)} ordered pairs",
                "READ/WRITE OK for every pair", t["source"])


def item_pcie(ev, th) -> Item:
    t = th["pcie"]
    gpus = _gpus(ev.topo)
    if not gpus:
        return Item("C6", "PCIe links trained at max", "SKIP", "no topo.json", "link max == GPU max",
                    t["source"], "run commprof topo --out DIR")
    low = [str(g.get("index", i)) for i, g in enumerate(gpus) if g.get("pcie_at_max") is False]
    unknown = all(g.get("pcie_at_max") in (None, "n/a") for g in gpus)
    g0 = gpus[0]
    value = f"Gen{g0.get('pcie_link_gen_max', '?')} x{g0.get('pcie_link_width_max', '?')}"
    if unknown:
        return Item("C6", "PCIe links trained at max", "SKIP", "n/a from NVML", "link max == GPU max", t["source"])
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
        return Item("C3", "NVLink links up", "SKIP", "no topo.json", "active == expected", t["source"],
                    "run commprof topo --out DIR")
    name = str(gpus[0].get("name", "")).lower()
    exp = next((v for k, v in t.items() if k.startswith("expected_links_") and k[15:] in name), None)
    links = [_num(g.get("nvlink_active_links")) for g in gpus]
    if exp is None or all(v in (None, 0) for v in links) and (ev.topo.get("interconnect_class") not in
                                                             ("nvswitch", "nvlink")):
        return Item("C3", "NVLink links up", "SKIP", "no NVLink on this GPU model" if not any(links) else
                    f"{links[0]} links", "expected count per GPU model", t["source"])
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


def _largest_tp(df):
    return int(df["tp"].max()) if df is not None and len(df) else None


def item_allreduce_latency(ev, th) -> Item:
    t = th["allreduce_latency"]
    df = ev.sweep
    name = "all-reduce latency at decode sizes (graph mode)"
    if df is None:
        return Item("C10", name, "SKIP", "no sweep.csv", "", t["source"], "run commprof sweep --out DIR")
    sub = df[(df["op"] == "all_reduce") & (df["group"] == 0) & (df["size_bytes"] <= t["max_bytes"])]
    if sub.empty:
        return Item("C10", name, "SKIP", f"no all_reduce rows <= {t['max_bytes']} B", "", t["source"])
    sub = sub[sub["tp"] > 1]
    if sub.empty:
        return Item("C10", name, "SKIP", NO_COMM_VALUE, "TP >= 2", t["source"], NO_COMM_HINT)
    tp = int(sub["tp"].max())
    sub = sub[sub["tp"] == tp]
    mode = "graph" if "graph" in set(sub["mode"]) else "eager"
    sub = sub[sub["mode"] == mode]
    worst = float(sub["latency_us_p50"].max())
    p99 = float(sub["latency_us_p99"].max())
    value = f"TP={tp} {mode}: p50 up to {worst:.1f} us (p99 {p99:.1f} us) at <= {t['max_bytes'] // 1024} KiB"
    if _cpu_backend(ev.sweep_meta):
        return Item("C10", name, "SKIP", value + " on CPU ranks (gloo)", "GPU thresholds", t["source"],
                    "measured on CPU: thresholds are for GPU boxes")
    nv = _link_kind(ev).startswith("nvlink")
    p, w = (t["nvlink_pass_us"], t["nvlink_warn_us"]) if nv else (t["pcie_pass_us"], t["pcie_warn_us"])
    status = "PASS" if worst <= p else "WARN" if worst <= w else "FAIL"
    hint = "" if status == "PASS" and mode == "graph" else \
        ("eager mode only: rerun the sweep on NCCL for graph mode; " if mode != "graph" else "") + \
        ("a custom one-shot all-reduce or NVLink cuts small-message latency" if status != "PASS" else "")
    return Item("C10", name, status, value, f"{'NVLink' if nv else 'PCIe'}: PASS <= {p} us, WARN <= {w} us",
                t["source"], hint)


def item_busbw(ev, th) -> Item:
    t = th["busbw"]
    name = "large-message busbw vs link ceiling"
    df = ev.sweep
    if df is None:
        return Item("C9", name, "SKIP", "no sweep.csv", "", t["source"], "run commprof sweep --sizes pow2:64M-1G")
    sub = df[(df["op"] == "all_reduce") & (df["group"] == 0) & (df["size_bytes"] >= t["min_bytes"])]
    if sub.empty:
        return Item("C9", name, "SKIP", f"no all_reduce rows >= {t['min_bytes'] >> 20} MiB", "", t["source"],
                    "run commprof sweep --ops all_reduce --sizes pow2:64M-1G")
    sub = sub[sub["tp"] > 1]
    if sub.empty:
        return Item("C9", name, "SKIP", NO_COMM_VALUE, "TP >= 2", t["source"], NO_COMM_HINT)
    best = float(sub["busbw_gbps"].max())
    if _cpu_backend(ev.sweep_meta):
        return Item("C9", name, "SKIP", f"{best:.2f} GB/s on CPU ranks (gloo)", "GPU link ceilings", t["source"])
    kind = _link_kind(ev)
    ceiling = LINK_CEILING_GBPS.get(kind)
    if not ceiling:
        return Item("C9", name, "SKIP", f"{best:.1f} GB/s; link unknown (no topo.json)", "", t["source"])
    frac = best / ceiling
    status = "PASS" if frac >= t["pass_fraction"] else "WARN" if frac >= t["warn_fraction"] else "FAIL"
    return Item("C9", name, status, f"{best:.1f} GB/s = {frac:.0%} of {kind} {ceiling:.0f} GB/s",
                f"PASS >= {t['pass_fraction']:.0%}, WARN >= {t['warn_fraction']:.0%}",
                f"{t['source']}; {LINK_CEILING_SOURCE}",
                "" if status == "PASS" else "check NCCL_P2P_LEVEL, ACS/IOMMU and link training")


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
    sub = sub[sub["batch"] == sub["batch"].min()]
    row = sub.iloc[0]
    kind = (ev.trace_meta or {}).get("kind", "measured")
    value = (f"TP={tp} batch={int(row['batch'])}: {row['comm_share_pct']:.1f}% of {row['ms_per_token']:.2f} ms/token "
             f"({kind}{', scaled' if int(row.get('scaled', 0)) else ''})")
    if _cpu_backend(ev.trace_meta):
        return Item("C11", name, "SKIP", value + " on CPU ranks (gloo)", "GPU thresholds", t["source"])
    share = float(row["comm_share_pct"])
    status = "PASS" if share < t["pass_pct"] else "WARN" if share <= t["warn_pct"] else "FAIL"
    return Item("C11", name, status, value, f"PASS < {t['pass_pct']}%, WARN <= {t['warn_pct']}%", t["source"],
                "" if status == "PASS" else "a lower TP degree, NVLink, or a faster small-message all-reduce")


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
    from .models import get_model
    from .planner import build_plan

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
    if cross and _link_kind(ev).startswith("pcie"):
        return Item("C12", name, "WARN", f"{len(cross)} GPU pairs cross sockets (SYS), e.g. {cross[0]}",
                    "no SYS pair inside a TP group", t["source"],
                    "keep a PCIe TP group on one socket, or expect host-memory hops between sockets")
    return Item("C12", name, "PASS", "no SYS pair inside a TP group" if not cross else
                f"{len(cross)} SYS pairs, but GPU traffic rides NVLink", "no SYS pair inside a TP group", t["source"])


ORDER = ("inventory", "interconnect", "p2p", "pcie", "nvlink", "host_bw", "allreduce_latency", "busbw",
         "comm_share", "kv", "numa")


def run_items(ev: Evidence, th: dict, model: str | None = None) -> list[Item]:
    """The checklist in the buyer's acceptance order."""
    return [item_inventory(ev, th), item_interconnect(ev, th), item_p2p(ev, th), item_pcie(ev, th),
            item_nvlink(ev, th), item_host_bw(ev, th), item_allreduce_latency(ev, th), item_busbw(ev, th),
            item_comm_share(ev, th), item_kv(ev, th, model), item_numa(ev, th)]


def write_check(items: list[Item], th: dict, ev: Evidence, out_dir: str) -> list[str]:
    from .runinfo import now_iso

    os.makedirs(out_dir, exist_ok=True)
    data = {"kind": "checklist", "created": now_iso(), "thresholds_version": th.get("version"),
            "evidence_dirs": [os.path.abspath(d) for d in ev.dirs], "items": [i.to_dict() for i in items],
            "verdict": verdict(items)}
    jp = os.path.join(out_dir, "check.json")
    with open(jp, "w") as f:
        json.dump(data, f, indent=2)
    from . import results

    results.stamp(out_dir, results.provenance(
        "check", "checklist", "pre-purchase checklist over results dirs (commprof check)", status="complete",
        hosts=sorted({h for d in ev.metas for h in d.get("hosts", [])}) or None,
        gpus=sorted({g for d in ev.metas for g in d.get("gpus", [])}) or None,
        evidence_dirs=data["evidence_dirs"], verdict=data["verdict"]))
    mp = os.path.join(out_dir, "check.md")
    with open(mp, "w") as f:
        f.write(markdown(items, data))
    return [jp, mp]


# --- measuring what the checklist needs -------------------------------------------------------------

def measure_host_bw(size_bytes: int = 256 << 20, repeats: int = 5) -> dict | None:
    """Pinned host-to-device and device-to-host copy bandwidth of every GPU, one at a time
    (GB/s, best of ``repeats``, CUDA events). None without CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    out = {"kind": "measured", "what": "pinned H2D/D2H copy bandwidth, one GPU at a time, best of "
           f"{repeats} copies of {size_bytes >> 20} MiB", "gpus": []}
    host = torch.empty(size_bytes, dtype=torch.uint8, pin_memory=True)
    for i in range(torch.cuda.device_count()):
        dev = torch.empty(size_bytes, dtype=torch.uint8, device=f"cuda:{i}")
        res = {}
        for name, dst, src in (("h2d_gbps", dev, host), ("d2h_gbps", host, dev)):
            best = 0.0
            with torch.cuda.device(i):
                for _ in range(repeats):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    dst.copy_(src, non_blocking=True)
                    b.record()
                    b.synchronize()
                    best = max(best, size_bytes / (a.elapsed_time(b) * 1e-3) / 1e9)
            res[name] = best
        out["gpus"].append({"index": i, **res})
        del dev
    out["h2d_gbps_min"] = min(g["h2d_gbps"] for g in out["gpus"])
    out["d2h_gbps_min"] = min(g["d2h_gbps"] for g in out["gpus"])
    return out


def measure(root: str, model: str) -> list[str]:
    """Run what the checklist needs on this machine: topology, a decode-size sweep, a short
    scaled trace, host-GPU bandwidth. Each step is the CLI in a subprocess; returns the dirs."""
    import subprocess
    import sys

    from . import results
    from .launch import cuda_device_count
    from .topo import try_collect_topology, write_topology

    results.check_out_dir(root, resume=False)
    os.makedirs(root, exist_ok=True)
    gpus = cuda_device_count()
    tps = [t for t in (2, 4, 8) if t <= gpus] if gpus >= 2 else [2, 4, 8]
    sweep_dir, trace_dir = os.path.join(root, "sweep"), os.path.join(root, "trace")
    for args in (["sweep", "--tp", ",".join(map(str, tps)), "--model", model, "--out", sweep_dir],
                 ["trace", "--model", model, "--tp", str(max(tps)), "--batch", "1", "--tokens", "8",
                  "--layers", "2", "--out", trace_dir]):
        print(f"commprof check: running commprof {' '.join(args)}", file=sys.stderr)
        res = subprocess.run([sys.executable, "-m", "commprof", *args, "--no-charts"])
        if res.returncode not in (0, 1):
            raise CommprofError(f"check: 'commprof {args[0]}' failed (exit {res.returncode}); "
                                f"partial results kept in {root}", res.returncode)
    topo = try_collect_topology()
    if topo is not None:
        write_topology(topo, os.path.join(sweep_dir, "topo.json"))
    bw = measure_host_bw()
    if bw is not None:
        with open(os.path.join(sweep_dir, "hostbw.json"), "w") as f:
            json.dump(bw, f, indent=2)
    return [sweep_dir, trace_dir]


def run_check(dirs: list[str], thresholds: str | None = None, model: str | None = None,
              out: str | None = None, console=None) -> int:
    """The whole command: returns the exit code (EXIT_CHECK_FAILED on any FAIL)."""
    th = load_thresholds(thresholds)
    if not dirs:
        from . import results

        root = out or results.default_out_dir().rstrip("/") + "-check"
        dirs = measure(root, model or "Qwen2.5-32B")
        out = root
    ev = gather(dirs)
    items = run_items(ev, th, model)
    render(items, console)
    for p in write_check(items, th, ev, out or dirs[0]):
        print(f"wrote {p}")
    return EXIT_CHECK_FAILED if verdict(items) == "FAIL" else 0
