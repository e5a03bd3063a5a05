"""``commprof gap``: this box against a reference of the other kind (PCIe vs NVLink).

* latency ratio at decode sizes (<= 2 MiB): this box's p50 / the reference's modelled latency;
* busbw ratio at large sizes (>= 64 MiB), when the sweep has them;
* with a trace, the per-token impact: this box's communication share and ms/token, and the same
  token with the reference's collective latencies (the trace's compute and gaps kept).

This box's values are measured (or imported); the reference's are modelled from published figures
(``commprof.profiles``, every parameter with its source). Every line says which is which.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError

DECODE_MAX_BYTES = 2 << 20
LARGE_MIN_BYTES = 64 << 20


def box_kind(ev) -> str:
    """nvlink / pcie / cpu / unknown, from topo.json or the run's backend."""
    cls = (ev.topo or {}).get("interconnect_class", "")
    if cls in ("nvswitch", "nvlink"):
        return "nvlink"
    if cls.startswith("pcie"):
        return "pcie"
    meta = ev.sweep_meta or ev.trace_meta or {}
    if meta.get("backend") == "gloo":
        return "cpu"
    if meta.get("backend") == "model":
        return "nvlink" if "nvlink" in str(meta.get("hosts", "")) else "pcie"
    return "unknown"


def default_reference(kind: str) -> str:
    """The other kind: a PCIe box is compared with NVLink 4, an NVLink box with PCIe 5 (P2P off,
    the common 8-GPU consumer-card box); a CPU or unknown box with NVLink 4."""
    return "pcie5-nop2p" if kind == "nvlink" else "nvlink4"


def _ref_latency(prof, op, tp, size, mode):
    from .costmodel import get_profile, profile_latency_us

    p = get_profile(prof)
    m = mode if mode in {q["mode"] for q in p["params"]} else "eager"
    try:
        return profile_latency_us(prof, op, tp, size, m), m
    except (KeyError, ValueError, UsageError):
        return None, m


@dataclass
class Gap:
    """This box against a reference profile, and what else the dirs say about its all-reduce.

    Numbers only: ``table`` (op, tp, mode, size_bytes, metric, this_box, reference, ratio, unit,
    reference_mode; metric ``latency`` in us at decode sizes, ``busbw`` in GB/s at large sizes),
    ``per_token`` (with a trace: tp, batch, mode, kind, scaled, comm_share_pct, ms_per_token and the
    same token on the reference), ``fits`` (alpha-beta per op/tp/mode, :class:`costmodel.Fit`),
    ``custom`` (one-shot vs backend, per tp and size), ``wire`` (p2p probe medians) and
    ``wire_rows`` (all-reduce p50 against the wire bound)."""
    reference: str
    reference_title: str
    box_kind: str
    this_box: str
    table: object
    per_token: object
    fits: list
    custom: object
    backend: str
    wire: dict | None
    wire_rows: object


def compute_gap(dirs: list[str], reference: str | None = None, ev=None) -> Gap:
    """The gap of the box the dirs describe against ``reference`` (default: the other kind)."""
    import pandas as pd

    from .check import gather
    from .collectives import COLLECTIVES
    from .costmodel import fit_sweep, get_profile, list_profiles

    ev = ev if ev is not None else gather(dirs)
    if ev.sweep is None:
        raise UsageError("gap needs a sweep (or imported nccl-tests) results dir among the dirs")
    kind = box_kind(ev)
    ref = (reference or default_reference(kind)).removeprefix("reference:")
    try:
        prof = get_profile(ref)
    except (KeyError, UsageError):
        raise UsageError(f"--reference '{ref}': unknown; use one of "
                         f"{', '.join(p['name'] for p in list_profiles())}") from None
    meta = ev.sweep_meta or {}
    this = f"{meta.get('kind', 'measured')} on {', '.join(meta.get('hosts', ['?']))} ({meta.get('backend', '?')})"
    df = ev.sweep[ev.sweep["group"] == 0]
    rows = []
    for (op, tp, mode), g in df.groupby(["op", "tp", "mode"]):
        for r in g.sort_values("size_bytes").itertuples():
            size = int(r.size_bytes)
            ref_us, ref_mode = _ref_latency(ref, op, int(tp), size, mode)
            if ref_us is None:
                continue
            common = {"op": op, "tp": int(tp), "mode": mode, "size_bytes": size, "reference_mode": ref_mode}
            if size <= DECODE_MAX_BYTES:
                rows.append({**common, "metric": "latency", "unit": "us", "this_box": float(r.latency_us_p50),
                             "reference": ref_us, "ratio": float(r.latency_us_p50) / ref_us})
            if size >= LARGE_MIN_BYTES:
                _, ref_bus = COLLECTIVES[op].bandwidth_gbps(size, ref_us, int(tp))
                rows.append({**common, "metric": "busbw", "unit": "GB/s", "this_box": float(r.busbw_gbps),
                             "reference": ref_bus, "ratio": float(r.busbw_gbps) / ref_bus})
    if not rows:
        raise UsageError(f"gap: the reference '{ref}' covers none of the sweep's ops/TP degrees "
                         "(it has all_reduce and all_gather at TP 2/4/8)")
    custom, backend = _custom_table(ev)
    w = wire(ev)
    return Gap(reference=ref, reference_title=prof["title"], box_kind=kind, this_box=this,
               table=pd.DataFrame(rows), per_token=_per_token(ev, ref), fits=fit_sweep(ev.sweep),
               custom=custom, backend=backend, wire=w, wire_rows=_wire_rows(ev, w))


def _per_token(ev, ref: str):
    """With a trace: this box's share and ms/token, and the same token on the reference."""
    import pandas as pd

    cols = ["tp", "batch", "mode", "kind", "scaled", "comm_share_pct", "ms_per_token", "ref_comm_share_pct",
            "ref_ms_per_token"]
    if ev.trace is None:
        return pd.DataFrame(columns=cols)
    from .models import ModelShape, get_model
    from .planner import decode_collectives

    model = (ev.trace_meta or {}).get("model") or {}
    try:
        shape = ModelShape(**{k: v for k, v in model.items() if k in ModelShape.__dataclass_fields__}) \
            if model else get_model("Qwen2.5-32B")
    except TypeError:
        return pd.DataFrame(columns=cols)
    tkind = (ev.trace_meta or {}).get("kind", "measured")
    dtype = (ev.trace_meta or {}).get("config", {}).get("dtype", "bf16")
    out = []
    for r in ev.trace.itertuples():
        tp, batch, mode = int(r.tp), int(r.batch), str(getattr(r, "mode", "eager"))
        if tp < 2:
            continue
        ms = float(r.ms_per_token)
        comm_ms = ms * float(r.comm_share_pct) / 100.0
        ref_comm_us = 0.0
        for site in decode_collectives(shape, tp, batch, dtype=dtype):
            us, _ = _ref_latency(ref, site.op, tp, site.size_bytes, mode)
            if us is None:
                ref_comm_us = None
                break
            ref_comm_us += us
        if ref_comm_us is None:
            continue
        ref_ms = ms - comm_ms + ref_comm_us / 1e3
        out.append({"tp": tp, "batch": batch, "mode": mode, "kind": tkind,
                    "scaled": bool(int(getattr(r, "scaled", 0) or 0)), "comm_share_pct": float(r.comm_share_pct),
                    "ms_per_token": ms, "ref_comm_share_pct": 100 * ref_comm_us / 1e3 / ref_ms,
                    "ref_ms_per_token": ref_ms})
    return pd.DataFrame(out, columns=cols)


def wire(ev) -> dict | None:
    """What the wire itself can do, from ``commprof p2p`` probes (P2P on): the median one-way flag
    latency and SM read bandwidth over GPU pairs (same-GPU probes when only one GPU was probed)."""
    import numpy as np

    df = ev.p2p
    if df is None or df.empty:
        return None
    on = df[df["p2p"] == "on"] if "p2p" in df.columns else df
    pairs = on[on["src_device"] != on["dst_device"]]
    scope = "GPU pairs"
    if pairs.empty:
        pairs, scope = on, "one GPU (same-GPU probes)"
    lat = pairs[pairs["probe"] == "pingpong"]["oneway_us"].dropna()
    bw = pairs[(pairs["probe"] == "sm_copy")]["gbps"].dropna()
    if lat.empty or bw.empty:
        return None
    return {"oneway_us": float(np.median(lat)), "read_gbps": float(np.median(bw)), "scope": scope}


def _wire_rows(ev, w):
    """The smallest all-reduce per (impl, tp, mode) against the wire bound."""
    import pandas as pd

    from .costmodel import wire_latency_us

    cols = ["impl", "tp", "mode", "size_bytes", "latency_us_p50", "bound_us"]
    if w is None or ev.sweep is None:
        return pd.DataFrame(columns=cols)
    out = []
    frames = [("nccl", ev.sweep[(ev.sweep["op"] == "all_reduce") & (ev.sweep["group"] == 0)])]
    cu = _custom_frame(ev)
    if cu is not None:
        frames.append(("custom", cu))
    for impl, df in frames:
        for (tp, mode), g in df.groupby(["tp", "mode"]):
            r = g.sort_values("size_bytes").iloc[0]
            out.append({"impl": impl, "tp": int(tp), "mode": mode, "size_bytes": int(r.size_bytes),
                        "latency_us_p50": float(r.latency_us_p50),
                        "bound_us": wire_latency_us(w, int(tp), int(r.size_bytes))})
    return pd.DataFrame(out, columns=cols)


def _custom_frame(ev):
    cu = getattr(ev, "sweep_custom", None)
    if cu is None or cu.empty:
        return None
    cu = cu[(cu["op"] == "all_reduce") & (cu["group"] == 0)]
    return None if cu.empty else cu


def _custom_table(ev):
    """commprof's one-shot all-reduce (``sweep --impl custom``) beside the backend's eager
    all_reduce of the same sizes, measured side by side in the same sweep."""
    import pandas as pd

    cols = ["tp", "size_bytes", "custom_us", "base_us", "base_over_custom"]
    cu = _custom_frame(ev)
    if cu is None or ev.sweep is None:
        return pd.DataFrame(columns=cols), "backend"
    base = ev.sweep[(ev.sweep["op"] == "all_reduce") & (ev.sweep["group"] == 0) & (ev.sweep["mode"] == "eager")]
    name = str(base["backend"].iloc[0]) if not base.empty else "backend"
    out = []
    for tp, g in cu.groupby("tp"):
        b = base[base["tp"] == tp].set_index("size_bytes")["latency_us_p50"]
        c = g.set_index("size_bytes")["latency_us_p50"]
        for s in sorted(set(b.index) & set(c.index)):
            if c[s] > 0:
                out.append({"tp": int(tp), "size_bytes": int(s), "custom_us": float(c[s]), "base_us": float(b[s]),
                            "base_over_custom": float(b[s] / c[s])})
    return pd.DataFrame(out, columns=cols), name


def run_gap(dirs: list[str], reference: str | None = None) -> int:
    from .views.gap import render_gap

    render_gap(compute_gap(dirs, reference))
    return 0
