"""``commprof gap``: this box against a reference of the other kind (PCIe vs NVLink).

* latency ratio at decode sizes (<= 2 MiB): this box's p50 / the reference's modelled latency;
* busbw ratio at large sizes (>= 64 MiB), when the sweep has them;
* with a trace, the per-token impact: this box's communication share and ms/token, and the same
  token with the reference's collective latencies (the trace's compute and gaps kept).

This box's values are measured (or imported); the reference's are modelled from published figures
(``commprof.profiles``, every parameter with its source). Every line says which is which.
"""
from __future__ import annotations

from .errors import UsageError
from .render import stdout_console

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


def compute_gap(dirs: list[str], reference: str | None = None) -> dict:
    """The gap as a table (headers, rows), text lines and a provenance line."""
    from .check import gather
    from .costmodel import get_profile

    ev = gather(dirs)
    if ev.sweep is None:
        raise UsageError("gap needs a sweep (or imported nccl-tests) results dir among the dirs")
    kind = box_kind(ev)
    ref = (reference or default_reference(kind)).removeprefix("reference:")
    try:
        prof = get_profile(ref)
    except (KeyError, UsageError):
        from .costmodel import list_profiles
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
            if size <= DECODE_MAX_BYTES:
                rows.append((op, int(tp), mode, size, "latency", f"{r.latency_us_p50:.1f} us",
                             f"{ref_us:.1f} us ({ref_mode})", f"{r.latency_us_p50 / ref_us:.2f}x"))
            if size >= LARGE_MIN_BYTES:
                from .collectives import COLLECTIVES
                _, ref_bus = COLLECTIVES[op].bandwidth_gbps(size, ref_us, int(tp))
                rows.append((op, int(tp), mode, size, "busbw", f"{r.busbw_gbps:.1f} GB/s",
                             f"{ref_bus:.1f} GB/s", f"{r.busbw_gbps / ref_bus:.2f}x"))
    if not rows:
        raise UsageError(f"gap: the reference '{ref}' covers none of the sweep's ops/TP degrees "
                         "(it has all_reduce and all_gather at TP 2/4/8)")
    lines = _per_token(ev, ref, prof)
    prov = (f"this box: {this}; reference: {ref} = {prof['title']} (modelled from published figures, "
            f"sources in commprof/profiles.py); ratio = this box / reference")
    if kind == "cpu":
        prov += "; this box ran on CPU ranks (gloo): the ratios show the pipeline, not a GPU box"
    return {"headers": ("op", "tp", "mode", "size_bytes", "metric", "this box", f"{ref} (modelled)", "ratio"),
            "rows": rows, "lines": lines, "provenance": prov, "reference": ref, "box_kind": kind}


def _per_token(ev, ref: str, prof: dict) -> list[str]:
    """With a trace: this box's share and ms/token, and the same token on the reference."""
    if ev.trace is None:
        return []
    from .models import ModelShape, get_model
    from .plan import decode_collectives

    model = (ev.trace_meta or {}).get("model") or {}
    try:
        shape = ModelShape(**{k: v for k, v in model.items() if k in ModelShape.__dataclass_fields__}) \
            if model else get_model("Qwen2.5-32B")
    except TypeError:
        return []
    tkind = (ev.trace_meta or {}).get("kind", "measured")
    out = []
    for r in ev.trace.itertuples():
        tp, batch, mode = int(r.tp), int(r.batch), str(getattr(r, "mode", "eager"))
        if tp < 2:
            continue
        ms = float(r.ms_per_token)
        comm_ms = ms * float(r.comm_share_pct) / 100.0
        ref_comm_us = 0.0
        for site in decode_collectives(shape, tp, batch, dtype=(ev.trace_meta or {}).get("config", {}).get("dtype", "bf16")):
            us, _ = _ref_latency(ref, site.op, tp, site.size_bytes, mode)
            if us is None:
                ref_comm_us = None
                break
            ref_comm_us += us
        if ref_comm_us is None:
            continue
        ref_ms = ms - comm_ms + ref_comm_us / 1e3
        scaled = ", scaled" if int(getattr(r, "scaled", 0) or 0) else ""
        out.append(f"this box ({tkind}{scaled}): TP={tp} batch={batch} communication share {r.comm_share_pct:.1f}%, "
                   f"{ms:.2f} ms/token; on {ref} (modelled, compute and gaps kept): "
                   f"{100 * ref_comm_us / 1e3 / ref_ms:.1f}%, {ref_ms:.2f} ms/token")
    return out


def render_gap(g: dict, console=None) -> None:
    from rich.table import Table

    from .units import human_bytes

    console = console or stdout_console(160)
    t = Table(title=f"commprof gap vs {g['reference']}", title_justify="left")
    for h in g["headers"]:
        t.add_column(h)
    for r in g["rows"]:
        t.add_row(*(human_bytes(c) if i == 3 else str(c) for i, c in enumerate(r)))
    console.print(t)
    console.print(g["provenance"], style="dim")
    for line in g["lines"]:
        console.print(line)


def fits_lines(df) -> list[str]:
    """alpha-beta fits of this box's sweep, with their error (for gap and report)."""
    from .costmodel import fit_sweep

    out = []
    for f in fit_sweep(df):
        beta = "inf" if f.beta_gbps in (None, float("inf")) else f"{f.beta_gbps:.2f} GB/s"
        out.append(f"fit {f.op} tp={f.tp} {f.mode}: latency = {f.alpha_us:.1f} us + bytes / {beta} "
                   f"(mean error {f.mean_rel_err_pct:.1f}%, max {f.max_rel_err_pct:.1f}%, {f.n_sizes} sizes)")
    return out


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


def wire_latency_us(w: dict, tp: int, size_bytes: int) -> float:
    """Bound for a one-shot all-reduce on this wire: a flag hop plus reading the tp-1 peers' buffers."""
    return w["oneway_us"] + (tp - 1) * size_bytes / (w["read_gbps"] * 1e3)


def wire_lines(ev) -> list[str]:
    w = wire(ev)
    if w is None or ev.sweep is None:
        return []
    out = [f"wire (measured by commprof p2p over {w['scope']}): one-way latency {w['oneway_us']:.2f} us, "
           f"SM read {w['read_gbps']:.1f} GB/s"]
    df = ev.sweep[(ev.sweep["op"] == "all_reduce") & (ev.sweep["group"] == 0)]
    for (tp, mode), g in df.groupby(["tp", "mode"]):
        r = g.sort_values("size_bytes").iloc[0]
        bound = wire_latency_us(w, int(tp), int(r.size_bytes))
        out.append(f"NCCL all_reduce TP={tp} {mode} at {int(r.size_bytes)} B: p50 {r.latency_us_p50:.1f} us = "
                   f"{r.latency_us_p50 / bound:.1f}x the wire bound {bound:.1f} us (one hop + reading {int(tp) - 1} "
                   "peers' buffers)")
    cu = _custom_frame(ev)
    if cu is not None:
        for tp, g in cu.groupby("tp"):
            r = g.sort_values("size_bytes").iloc[0]
            bound = wire_latency_us(w, int(tp), int(r.size_bytes))
            out.append(f"custom one-shot all_reduce TP={tp} at {int(r.size_bytes)} B: p50 {r.latency_us_p50:.1f} us = "
                       f"{r.latency_us_p50 / bound:.1f}x the wire bound {bound:.1f} us")
    return out


def _custom_frame(ev):
    cu = getattr(ev, "sweep_custom", None)
    if cu is None or cu.empty:
        return None
    cu = cu[(cu["op"] == "all_reduce") & (cu["group"] == 0)]
    return None if cu.empty else cu


def custom_lines(ev) -> list[str]:
    """commprof's one-shot all-reduce (``sweep --impl custom``) against the backend's eager all_reduce,
    measured side by side in the same sweep: the ratio at the smallest size and its median."""
    import numpy as np

    cu = _custom_frame(ev)
    if cu is None or ev.sweep is None:
        return []
    base = ev.sweep[(ev.sweep["op"] == "all_reduce") & (ev.sweep["group"] == 0) & (ev.sweep["mode"] == "eager")]
    name = str(base["backend"].iloc[0]) if not base.empty else "backend"
    out = []
    for tp, g in cu.groupby("tp"):
        b = base[base["tp"] == tp].set_index("size_bytes")["latency_us_p50"]
        c = g.set_index("size_bytes")["latency_us_p50"]
        common = sorted(set(b.index) & set(c.index))
        if not common:
            continue
        ratios = [float(b[s] / c[s]) for s in common if c[s] > 0]
        s0 = common[0]
        out.append(f"custom one-shot vs {name} all_reduce TP={tp} (eager, same sweep): at {s0} B p50 "
                   f"{c[s0]:.1f} us vs {b[s0]:.1f} us ({name}/custom = {b[s0] / c[s0]:.2f}x); median "
                   f"{np.median(ratios):.2f}x over {len(common)} size(s) up to {common[-1]} B")
    return out


def run_gap(dirs: list[str], reference: str | None = None) -> int:
    from .check import gather

    g = compute_gap(dirs, reference)
    ev = gather(dirs)
    g["lines"] = fits_lines(ev.sweep) + custom_lines(ev) + wire_lines(ev) + g["lines"]
    render_gap(g)
    return 0
