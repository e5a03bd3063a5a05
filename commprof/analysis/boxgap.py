"""How far each box is from a reference of the other kind (PCIe vs NVLink), and the boxes from each
other: what ``commprof gap`` prints and ``commprof report`` shows.

Every dir holding a sweep (measured or imported) is one box (:func:`commprof.analysis.evidence.gather_boxes`).
For each box:

* latency ratio at decode sizes (<= 2 MiB): this box's latency / the reference's modelled latency;
* busbw ratio at large sizes (>= 64 MiB), when the sweep has them;
* its alpha-beta fit (latency = alpha + bytes / beta per op, TP degree and mode);
* with a trace, the per-token impact: this box's communication share and ms/token, and the same
  token with the reference's collective latencies (the trace's compute and gaps kept).

With several boxes, each later box against the first (A vs B) per op and TP degree: the latency
ratio at decode sizes and the busbw ratio at large sizes, sizes matched exactly or interpolated
log-log inside the other box's measured range (never extrapolated).

A box whose TP groups span hosts (multi-node) is compared with one node of its own GPUs (the
profile of its class at the largest TP degree the profile has): what spanning nodes costs.
This box's values are measured (or imported); the reference's are modelled from published figures
(``commprof.analysis.profiles``, every parameter with its source). Every line says which is which.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from commprof.model.errors import UsageError
from commprof.analysis.latency import PREDICT_STATS, loglog_lookup, stand_in_op
from commprof.analysis.interconnect import resolve_interconnect
from commprof.analysis.costmodel import get_profile, profile_latency_us, fit_sweep, list_profiles
from commprof.analysis.checkitems import stat_label
from commprof.model.collectives import COLLECTIVES
from commprof.analysis.evidence import gather
from commprof.analysis.interconnect import resolve_all
from commprof.model.models import DEFAULT_MODEL, get_model
from commprof.analysis.stepmodel import decode_collectives
from commprof.model.models import ModelShape
from commprof.analysis.stepmodel import chunk_candidates, favoured_chunk, prefill_comm_us
from commprof.analysis.thresholds import load_thresholds
from commprof.analysis.stepmodel import check_tp
from commprof.analysis.costmodel import wire_latency_us

DECODE_MAX_BYTES = 2 << 20
LARGE_MIN_BYTES = 64 << 20


def box_kind(ev) -> str:
    """nvlink / pcie / cpu / unknown, from the interconnect the box is judged by; ``network`` when
    its largest TP group has one GPU per host (every collective crosses the network, whatever links
    the GPUs have inside their hosts)."""
    ic = ev.interconnect or resolve_interconnect(ev)
    if ic.nodes > 1 and ev.sweep is not None and len(ev.sweep) and int(ev.sweep["tp"].max()) <= ic.nodes:
        return "network"
    fam = ic.within_node().family
    return {"mixed": "pcie"}.get(fam, fam)


def _usable(df):
    """(rows a ratio may use, notes): group 0 of TP >= 2 (one rank runs no communication, so a TP=1
    row is never set against a TP >= 2 reference) and no WRONG row (a wrong result is no speed)."""
    notes = []
    if "status" in df.columns:
        bad = df["status"].astype(str) == "WRONG"
        if bad.any():
            notes.append(f"{int(bad.sum())} rows with wrong results (status WRONG, #wrong > 0) are left out of every "
                         "ratio: a collective that returns wrong data has no speed to compare")
            df = df[~bad]
    one = df["tp"] < 2
    if one.any():
        notes.append(f"{int(one.sum())} TP=1 rows (one rank: no communication) are not compared with a TP >= 2 "
                     "reference")
        df = df[~one]
    return df, notes


def default_reference(kind: str, ic=None) -> str:
    """The other kind: a PCIe box is compared with NVLink 4, an NVLink box with PCIe 5 without P2P
    (the common 8-GPU consumer-card box); a CPU or unknown box with NVLink 4. A multi-node box
    with one node of its own class (what crossing the network costs)."""
    if ic is not None and ic.nodes > 1:
        inside = ic.within_node()
        link = inside.link or ""
        if link.startswith("nvlink") and link[:7] in ("nvlink3", "nvlink4", "nvlink5"):
            return link[:7]
        if link in ("pcie4", "pcie5"):
            return f"{link}-{'p2p' if inside.cls == 'pcie-p2p' else 'nop2p'}"
        return "nvlink4"
    return "pcie5-nop2p" if kind == "nvlink" else "nvlink4"


def _profile_tp(prof: dict, op: str, tp: int, mode: str) -> int | None:
    """The TP degree of ``prof`` that stands for ``tp``: itself, else the largest below it (one
    node of a multi-node group), else the smallest above."""
    tps = sorted({q["tp"] for q in prof["params"] if q["op"] == op})
    if not tps:
        return None
    if tp in tps:
        return tp
    below = [t for t in tps if t <= tp]
    return below[-1] if below else tps[0]


def _ref_latency(prof_name, op, tp, size, mode):
    """(modelled us, mode used, TP used) on the reference; (None, ...) when it has no such op."""
    p = get_profile(prof_name)
    m = mode if mode in {q["mode"] for q in p["params"]} else "eager"
    rtp = _profile_tp(p, op, int(tp), m)
    if rtp is None:
        return None, m, None
    try:
        return profile_latency_us(prof_name, op, rtp, size, m), m, rtp
    except (KeyError, ValueError, UsageError):
        return None, m, rtp


@dataclass
class BoxGap:
    """One box against its reference: ``table`` (op, tp, mode, size_bytes, metric, this_box,
    reference, ratio, unit, reference_mode, reference_tp, stat; metric ``latency`` in us at decode
    sizes, ``busbw`` in GB/s at large sizes), ``per_token`` (with a trace), ``fits`` (alpha-beta
    per op/tp/mode, :class:`costmodel.Fit`), ``custom`` (one-shot vs backend), ``wire`` and
    ``wire_rows`` (p2p probes), ``stat`` (what this box's latency figure is: p50 or avg
    (nccl-tests)), ``interconnect`` and ``notes``."""
    label: str
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
    stat: str = "p50"
    interconnect: object = None
    sweep: object = None
    notes: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)     # the box's sweep provenance
    curves: object = None     # the reference at every size of the box: op, tp, mode, size_bytes,
                              # reference_us, reference_busbw_gbps, reference_tp (for charts)
    ttft: dict | None = None  # the time to first token's communication here and on the reference (see _ttft)


@dataclass
class Gap:
    """Every box against its reference (``boxes``) and the boxes against each other (``pairs``:
    box_a, box_b, op, tp_a, tp_b, mode_a, mode_b, size_bytes, metric, a, b, ratio = b / a, unit,
    matched ``exact`` or ``interpolated``). The first box's fields are also reachable directly
    (``reference``, ``per_token``, ...); ``table`` holds every box's rows with a ``box`` column."""
    boxes: list
    pairs: object
    summaries: list = field(default_factory=list)    # pair_summaries(pairs)
    token_boxes: object = None      # per_token_boxes(boxes): one token's collectives per box, in ms
    apart: list = field(default_factory=list)        # box pairs with no common TP degree for an op (no ratios)

    @property
    def first(self) -> BoxGap:
        return self.boxes[0]

    @property
    def table(self):
        import pandas as pd

        frames = [b.table.assign(box=b.label) for b in self.boxes if len(b.table)]
        return pd.concat(frames, ignore_index=True) if frames else self.first.table.assign(box=[])

    # the first box's figures, as a one-box gap always had them
    reference = property(lambda self: self.first.reference)
    reference_title = property(lambda self: self.first.reference_title)
    box_kind = property(lambda self: self.first.box_kind)
    this_box = property(lambda self: self.first.this_box)
    per_token = property(lambda self: self.first.per_token)
    fits = property(lambda self: self.first.fits)
    custom = property(lambda self: self.first.custom)
    backend = property(lambda self: self.first.backend)
    wire = property(lambda self: self.first.wire)
    wire_rows = property(lambda self: self.first.wire_rows)
    stat = property(lambda self: self.first.stat)


def _this_box(ev) -> str:
    meta = ev.sweep_meta or {}
    return f"{meta.get('kind', 'measured')} on {', '.join(meta.get('hosts') or ['?'])} ({meta.get('backend', '?')})"


def _box_gap(ev, reference: str | None):
    import pandas as pd

    ic = ev.interconnect
    kind = box_kind(ev)
    ref = (reference or default_reference(kind, ic)).removeprefix("reference:")
    prof = get_profile(ref)
    df, notes = _usable(ev.sweep[ev.sweep["group"] == 0])
    stat = stat_label(df)
    rows, curves = [], []
    multi = ic is not None and ic.nodes > 1
    if multi:
        net = "one GPU per host: the network carries every collective" if kind == "network" else \
            "between hosts the network decides"
        notes.append(f"its largest TP group spans {ic.nodes} hosts ({', '.join(ic.hosts[:4])}; {net}); the "
                     f"reference '{ref}' is one node, so every ratio here is across hosts against inside one node")
    for (op, tp, mode), g in df.groupby(["op", "tp", "mode"]):
        for r in g.sort_values("size_bytes").itertuples():
            size = int(r.size_bytes)
            ref_us, ref_mode, ref_tp = _ref_latency(ref, op, int(tp), size, mode)
            if ref_us is None or size <= 0:
                continue
            curves.append({"op": op, "tp": int(tp), "mode": mode, "size_bytes": size, "reference_us": ref_us,
                           "reference_busbw_gbps": COLLECTIVES[op].bandwidth_gbps(size, ref_us, int(ref_tp))[1],
                           "reference_tp": int(ref_tp)})
            common = {"op": op, "tp": int(tp), "mode": mode, "size_bytes": size, "reference_mode": ref_mode,
                      "reference_tp": int(ref_tp), "stat": stat}
            lat = float(r.latency_us_p50)
            if size <= DECODE_MAX_BYTES and lat > 0:
                rows.append({**common, "metric": "latency", "unit": "us", "this_box": lat,
                             "reference": ref_us, "ratio": lat / ref_us})
            if size >= LARGE_MIN_BYTES and float(r.busbw_gbps) > 0:
                _, ref_bus = COLLECTIVES[op].bandwidth_gbps(size, ref_us, int(ref_tp))
                rows.append({**common, "metric": "busbw", "unit": "GB/s", "this_box": float(r.busbw_gbps),
                             "reference": ref_bus, "ratio": float(r.busbw_gbps) / ref_bus})
    cols = ["op", "tp", "mode", "size_bytes", "metric", "unit", "this_box", "reference", "ratio", "reference_mode",
            "reference_tp", "stat"]
    table = pd.DataFrame(rows, columns=cols)
    shifted = table[table["tp"] != table["reference_tp"]] if len(table) else table
    if len(shifted):
        for (tp, rtp), _ in shifted.groupby(["tp", "reference_tp"]):
            notes.append(f"TP={tp}{f' spans {ic.nodes} hosts' if multi else ''}: the reference has no TP={tp}, so it "
                         f"stands at TP={rtp}" + (" (one node): the ratio is what crossing the network costs"
                                                  if multi else ""))
    custom, backend = _custom_table(ev)
    w = wire(ev)
    return BoxGap(label=ev.label, reference=ref, reference_title=prof["title"], box_kind=kind, this_box=_this_box(ev),
                  table=table, per_token=_per_token(ev, ref), fits=fit_sweep(ev.sweep), custom=custom,
                  backend=backend, wire=w, wire_rows=_wire_rows(ev, w), stat=stat, interconnect=ic, sweep=ev.sweep,
                  notes=notes, meta=ev.sweep_meta or {}, curves=pd.DataFrame(curves), ttft=_ttft(ev, ref))


def check_reference(reference: str | None) -> None:
    """``--reference NAME`` (or ``reference:NAME``) must name a reference profile: one line listing
    them otherwise."""
    if reference is not None:
        try:
            get_profile(reference.removeprefix("reference:"))
        except (KeyError, UsageError):
            raise UsageError(f"--reference '{reference.removeprefix('reference:')}': unknown; use one of "
                             f"{', '.join(p['name'] for p in list_profiles())}") from None


def compute_gap(dirs: list[str], reference: str | None = None, ev=None, interconnect=None, labels=None) -> Gap:
    """The gap of every box the dirs describe against ``reference`` (default: the other kind of
    each box), and of the boxes against each other."""
    check_reference(reference)
    ev = ev if ev is not None else gather(dirs, labels)
    boxes = [b for b in resolve_all(ev, interconnect) if b.sweep is not None]
    if not boxes:
        raise UsageError("gap needs a sweep (or imported nccl-tests) results dir among the dirs")
    gaps = [_box_gap(b, reference) for b in boxes]
    apart: list = []
    pairs = box_pairs(boxes, apart)
    if all(not len(g.table) for g in gaps) and not len(pairs):
        if all(int(b.sweep["tp"].max()) < 2 for b in boxes if len(b.sweep)):
            raise UsageError("gap: the sweep holds only TP=1 rows: one rank runs no communication, so there is "
                             "nothing to set against a TP >= 2 reference; measure TP >= 2 (or import a multi-GPU log)")
        raise UsageError(f"gap: the reference '{gaps[0].reference}' covers none of the sweep's ops "
                         "(it has all_reduce and all_gather at TP 2/4/8)")
    return Gap(boxes=gaps, pairs=pairs, summaries=pair_summaries(pairs), token_boxes=per_token_boxes(gaps),
               apart=apart)


#: Batches at which gap prices one token's collectives box by box.
TOKEN_BATCHES = (1, 8)


def per_token_boxes(gaps: list, batches=TOKEN_BATCHES):
    """One decode token's collectives (the 2L+2 of ``commprof plan``) priced by each box's own sweep
    (:func:`sweep_price`), box by box: box, kind, model, tp, batch, mode, collectives,
    comm_ms_per_token. The model is the sweep's (``sweep --model``), else the default; a (TP, batch)
    whose sizes a box's sweep does not reach is left out for that box."""
    import pandas as pd

    cols = ["box", "kind", "model", "tp", "batch", "mode", "collectives", "comm_ms_per_token", "note"]
    out = []
    for b in gaps:
        if b.sweep is None or not len(b.sweep):
            continue
        shape = _shape_of(b.meta) or get_model(DEFAULT_MODEL)
        dtype = (b.meta.get("config") or {}).get("dtype") or "bf16"
        for tp in sorted({int(t) for t in b.sweep["tp"]}):
            if tp < 2 or shape.q_heads % tp:
                continue
            modes = set(b.sweep[b.sweep["tp"] == tp]["mode"])
            mode = _pick_mode(modes)
            price = sweep_price(b.sweep, tp, mode)
            for batch in batches:
                try:
                    sites = decode_collectives(shape, tp, batch, dtype=dtype)
                except UsageError:
                    continue
                have = {(o, tp) for o in price.max_bytes}
                us = [price(stand_in_op(s.op, tp, have)[0], s.size_bytes) for s in sites]
                if any(u is None for u in us):
                    continue
                out.append({"box": b.label, "kind": b.meta.get("kind", "measured"), "model": shape.name, "tp": tp,
                            "batch": batch, "mode": mode, "collectives": len(sites),
                            "comm_ms_per_token": sum(us) / 1e3,
                            "note": stand_in_op("all_gather", tp, {(o, tp) for o in price.max_bytes})[1] or ""})
    return pd.DataFrame(out, columns=cols)


# --- box against box -------------------------------------------------------------------------------

_MODE_ORDER = ("graph", "eager")


def _pick_mode(modes: set) -> str:
    for m in _MODE_ORDER:
        if m in modes:
            return m
    return sorted(modes)[0]


def _measured_at(xs, ys, x: float):
    """y at x by :func:`commprof.analysis.latency.loglog_lookup`, measured or interpolated only: None beyond
    the measured sizes (gap compares what both boxes ran, never an extrapolation)."""
    y, how = loglog_lookup(xs, ys, x)
    return y if how in ("exact", "interpolated", "single point") and len(xs) and xs[0] <= x <= xs[-1] else None


def _curve(df, op, tp, mode, col):
    g = df[(df["op"] == op) & (df["tp"] == tp) & (df["mode"] == mode) & (df["group"] == 0)]
    g = g[g[col] > 0].sort_values("size_bytes")
    return [float(x) for x in g["size_bytes"]], [float(y) for y in g[col]]


def _wrong_sizes(ev, op, tp, mode) -> set:
    """The sizes at which a box's group-0 rows of (op, tp, mode) returned wrong data (#wrong > 0)."""
    df = ev.sweep
    if df is None or "status" not in df.columns:
        return set()
    bad = df[(df["op"] == op) & (df["tp"] == tp) & (df["mode"] == mode) & (df["group"] == 0)
             & (df["status"].astype(str) == "WRONG")]
    return {float(x) for x in bad["size_bytes"]}


def box_pairs(boxes, apart: list | None = None) -> "object":
    """Each later box against the first, per op at the TP degrees both have, in the preferred common
    mode (graph, else eager). A size where either box returned wrong data (#wrong > 0) is a row
    left empty (``matched`` says why), never filled by interpolation from its neighbours. An op
    the two boxes ran at no common TP degree gives no ratio: it is appended to ``apart`` (box_a,
    box_b, op, tps_a, tps_b) to be listed apart."""
    import pandas as pd

    cols = ["box_a", "box_b", "op", "tp_a", "tp_b", "mode_a", "mode_b", "size_bytes", "metric", "unit", "a", "b",
            "ratio", "matched", "stat_a", "stat_b", "across_hosts"]
    out = []
    if len(boxes) < 2:
        return pd.DataFrame(columns=cols)

    a = boxes[0]
    da, _ = _usable(a.sweep[a.sweep["group"] == 0])
    for b in boxes[1:]:
        db, _ = _usable(b.sweep[b.sweep["group"] == 0])
        across = "; ".join(f"{x.label}'s TP group spans {x.interconnect.nodes} hosts (the network between them decides)"
                           for x in (a, b) if x.interconnect is not None and x.interconnect.nodes > 1)
        for op in sorted(set(da["op"]) & set(db["op"])):
            ta, tb = set(da[da["op"] == op]["tp"]), set(db[db["op"] == op]["tp"])
            tps = [(t, t) for t in sorted(ta & tb)]
            if not tps:
                if apart is not None:
                    apart.append({"box_a": a.label, "box_b": b.label, "op": op, "tps_a": sorted(int(t) for t in ta),
                                  "tps_b": sorted(int(t) for t in tb)})
                continue
            for tp_a, tp_b in tps:
                ma = set(da[(da["op"] == op) & (da["tp"] == tp_a)]["mode"])
                mb = set(db[(db["op"] == op) & (db["tp"] == tp_b)]["mode"])
                common = ma & mb
                mode_a = mode_b = _pick_mode(common) if common else None
                if mode_a is None:
                    mode_a, mode_b = _pick_mode(ma), _pick_mode(mb)
                for metric, col, unit, keep in (("latency", "latency_us_p50", "us", lambda s: s <= DECODE_MAX_BYTES),
                                                ("busbw", "busbw_gbps", "GB/s", lambda s: s >= LARGE_MIN_BYTES)):
                    xa, ya = _curve(da, op, tp_a, mode_a, col)
                    xb, yb = _curve(db, op, tp_b, mode_b, col)
                    wrong_a, wrong_b = _wrong_sizes(a, op, tp_a, mode_a), _wrong_sizes(b, op, tp_b, mode_b)
                    for x in sorted(wrong_a | wrong_b):
                        if not keep(x) or not (xa and xa[0] <= x <= xa[-1] or x in wrong_a) \
                                or not (xb and xb[0] <= x <= xb[-1] or x in wrong_b):
                            continue
                        who = " and ".join(n.label for n, w in ((a, wrong_a), (b, wrong_b)) if x in w)
                        out.append({"box_a": a.label, "box_b": b.label, "op": op, "tp_a": int(tp_a), "tp_b": int(tp_b),
                                    "mode_a": mode_a, "mode_b": mode_b, "size_bytes": int(x), "metric": metric,
                                    "unit": unit, "a": math.nan, "b": math.nan, "ratio": math.nan,
                                    "matched": f"left empty: {who} returned wrong data at this size",
                                    "stat_a": stat_label(da), "stat_b": stat_label(db), "across_hosts": across})
                    for x, y in zip(xa, ya):
                        if not keep(x) or x in wrong_b:
                            continue
                        v = _measured_at(xb, yb, x)
                        if v is None:
                            continue
                        out.append({"box_a": a.label, "box_b": b.label, "op": op, "tp_a": int(tp_a), "tp_b": int(tp_b),
                                    "mode_a": mode_a, "mode_b": mode_b, "size_bytes": int(x), "metric": metric,
                                    "unit": unit, "a": y, "b": v, "ratio": v / y,
                                    "matched": "exact" if x in xb else "interpolated",
                                    "stat_a": stat_label(da), "stat_b": stat_label(db), "across_hosts": across})
    return pd.DataFrame(out, columns=cols)


SMALL_MAX_BYTES = 64 << 10      # the decode sizes check's C10 judges; above it up to 2 MiB, bigger batches


def pair_summaries(pairs) -> list[dict]:
    """Per (box_a, box_b, op, tp, band): sizes, median / min / max ratio (b / a), and how many sizes
    were left empty (wrong data). Bands: latency at <= 64 KiB (batch-1 decode payloads), latency
    above 64 KiB up to 2 MiB (larger batches), busbw at >= 64 MiB."""
    out = []
    if pairs is None or not len(pairs):
        return out
    pairs = pairs.assign(band=[("latency" if m == "latency" and s <= SMALL_MAX_BYTES else
                                "latency-mid" if m == "latency" else m)
                               for m, s in zip(pairs["metric"], pairs["size_bytes"])])
    keys = ["box_a", "box_b", "op", "tp_a", "tp_b", "mode_a", "mode_b", "band"]
    for key, g in pairs.groupby(keys, sort=False):
        empty, g = g[g["ratio"].isna()], g[g["ratio"].notna()]
        if not len(g):
            continue
        r = g["ratio"]
        out.append(dict(zip(keys[:-1] + ["metric"], key),
                        n=len(g), median=float(r.median()), lo=float(r.min()), hi=float(r.max()),
                        size_min=int(g["size_bytes"].min()), size_max=int(g["size_bytes"].max()),
                        interpolated=int((g["matched"] == "interpolated").sum()), left_empty=len(empty),
                        stat_a=g["stat_a"].iloc[0], stat_b=g["stat_b"].iloc[0],
                        across_hosts=g["across_hosts"].iloc[0] if "across_hosts" in g.columns else ""))
    return out


# --- per token, the wire, the one-shot kernel ------------------------------------------------------

def _per_token(ev, ref: str):
    """With a trace: this box's share and ms/token, and the same token on the reference."""
    import pandas as pd

    cols = ["tp", "batch", "mode", "kind", "scaled", "comm_share_pct", "ms_per_token", "ref_comm_share_pct",
            "ref_ms_per_token"]
    if ev.trace is None:
        return pd.DataFrame(columns=cols)
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
        if is_prefill_row(r):
            continue                       # prefill and mixed rows: the TTFT account (_ttft)
        tp, batch, mode = int(r.tp), int(r.batch), str(getattr(r, "mode", "eager"))
        if tp < 2:
            continue
        ms = float(r.ms_per_token)
        comm_ms = ms * float(r.comm_share_pct) / 100.0
        ref_comm_us = 0.0
        for site in decode_collectives(shape, tp, batch, dtype=dtype):
            us, _, _ = _ref_latency(ref, site.op, tp, site.size_bytes, mode)
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


def is_prefill_row(r) -> bool:
    """A trace summary row of a prefill or mixed run (rows written before phases existed are decode)."""
    phase = r.get("phase") if isinstance(r, dict) else getattr(r, "phase", "decode")
    return isinstance(phase, str) and phase in ("prefill", "mixed")


def _shape_of(meta: dict | None):
    model = (meta or {}).get("model") or ((meta or {}).get("config") or {}).get("model") or {}
    if not isinstance(model, dict) or not model:
        return None
    try:
        return ModelShape(**{k: v for k, v in model.items() if k in ModelShape.__dataclass_fields__})
    except TypeError:
        return None


def sweep_price(sweep, tp: int, mode: str = "eager"):
    """``price(op, size_bytes) -> us`` from a box's own sweep rows at ``tp``: the mean latency the
    average rank spends (as ``trace --predict`` uses), interpolated log-log in size inside the
    measured range only (None outside it: a decode-size sweep does not say what 40 MiB costs).
    Per-call rows are preferred; prefill runs eager, so eager rows are preferred."""

    df = sweep[(sweep["group"] == 0) & (sweep["tp"] == tp)]
    if "impl" in df.columns:
        df = df[df["impl"] != "custom"]
    if "timing" in df.columns and "per-call" in set(df["timing"]):
        df = df[df["timing"] == "per-call"]
    stat = next((c for c in PREDICT_STATS + ("latency_us_p50",) if c in df.columns and df[c].notna().any()),
                "latency_us_p50")
    curves = {}
    for op, g in df.groupby("op"):
        modes = set(g["mode"])
        g = g[g["mode"] == (mode if mode in modes else _pick_mode(modes))]
        g = g.groupby("size_bytes", as_index=False)[stat].median().sort_values("size_bytes")
        curves[op] = ([float(x) for x in g["size_bytes"]], [float(y) for y in g[stat]])

    def price(op: str, size_bytes: int):
        xs, ys = curves.get(op, ([], []))
        return _measured_at(xs, ys, float(size_bytes))
    price.stat = stat
    price.max_bytes = {op: (xs[-1] if xs else 0) for op, (xs, _) in curves.items()}
    return price


def _priced(fn):
    """Wrap a price that may answer None into one that raises LookupError (to skip a chunk size)."""
    def price(op, size):
        v = fn(op, size)
        if v is None:
            raise LookupError(op, size)
        return v
    return price


def _favoured(shape, tp, prompt, price, dtype):
    """:func:`stepmodel.favoured_chunk` over the chunk sizes ``price`` covers; None if none."""
    ok = []
    for c in chunk_candidates(prompt):
        try:
            prefill_comm_us(shape, tp, prompt, c, _priced(price), dtype=dtype)
            ok.append(c)
        except LookupError:
            continue
    if not ok or ok[-1] != prompt:
        return None          # without the whole prompt's size the least cannot be told
    fav = favoured_chunk(shape, tp, prompt, _priced(price), dtype, candidates=ok)
    fav["covered"] = len(ok) == len(chunk_candidates(prompt))      # False: only the chunks the sweep reaches
    return fav


def _ttft(ev, ref: str) -> dict | None:
    """The time to first token's communication: this box's (a prefill or mixed trace, measured or
    predicted; else its sweep, when the sweep reaches the prefill's sizes) beside the reference's
    (the same collectives priced by the profile), and the chunk size each favours. The prompt is
    the trace's, else ``[ttft_comm] prompt`` of the thresholds file; the model the trace's or the
    sweep's. None when neither names a model."""
    th = load_thresholds()["ttft_comm"]
    rows = [] if ev.trace is None else [r for r in ev.trace.to_dict("records") if is_prefill_row(r)
                                        and int(r["tp"]) > 1]
    shape = _shape_of(ev.trace_meta) if rows or ev.trace is not None else None
    shape = shape or _shape_of(ev.sweep_meta)
    if shape is None:
        return None
    dtype = ((ev.trace_meta or {}).get("config") or {}).get("dtype") or \
        ((ev.sweep_meta or {}).get("config") or {}).get("dtype") or "bf16"
    out = {"model": shape.name, "layers": shape.layers, "reference": ref, "dtype": dtype}
    if rows:
        r = max(rows, key=lambda x: int(x["tp"]))
        tp, prompt, chunk = int(r["tp"]), int(r["prompt"]), int(r["chunk"])
        decode = int(r["batch"]) if r["phase"] == "mixed" else 0
        kind = (ev.trace_meta or {}).get("kind", "measured")
        out.update(tp=tp, prompt=prompt, chunk=chunk, decode_tokens=decode, phase=r["phase"],
                   this_source=f"trace ({kind}{', scaled' if int(r.get('scaled') or 0) else ''})",
                   this_comm_ms=float(r["ttft_comm_ms"]), this_ttft_ms=float(r["ttft_ms"]))
    else:
        tps = sorted(int(t) for t in set(ev.sweep["tp"]) if int(t) > 1) if ev.sweep is not None else []
        if not tps:
            return None
        tp, prompt = tps[-1], int(th["prompt"])
        chunk = int(th["chunk"]) or prompt
        decode = 0
        out.update(tp=tp, prompt=prompt, chunk=chunk, decode_tokens=0, phase="prefill", this_source=None,
                   this_comm_ms=None, this_ttft_ms=None)
    try:
        check_tp(shape, tp)
    except UsageError:
        return None

    def ref_price(op, size):
        return _ref_latency(ref, op, tp, size, "eager")[0]

    try:
        out["ref_comm_ms"] = prefill_comm_us(shape, tp, prompt, chunk, _priced(ref_price), decode, dtype) / 1e3
    except LookupError:
        return None
    if out["this_ttft_ms"] is not None:
        out["ref_ttft_ms"] = out["this_ttft_ms"] - out["this_comm_ms"] + out["ref_comm_ms"]
    out["favoured_ref"] = _favoured(shape, tp, prompt, ref_price, dtype)
    out["favoured_this"] = None
    out["sweep_comm_ms"] = None
    if ev.sweep is not None and tp in set(int(t) for t in ev.sweep["tp"]):
        price = sweep_price(ev.sweep, tp)
        out["sweep_stat"] = price.stat
        try:
            out["sweep_comm_ms"] = prefill_comm_us(shape, tp, prompt, chunk, _priced(price), decode, dtype) / 1e3
        except LookupError:
            pass
        out["favoured_this"] = _favoured(shape, tp, prompt, price, dtype)
        out["sweep_max_all_reduce_bytes"] = price.max_bytes.get("all_reduce", 0)
    if out["this_comm_ms"] is None and out["sweep_comm_ms"] is not None:
        out["this_comm_ms"], out["this_source"] = out["sweep_comm_ms"], "modelled from this box's sweep"
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


def _wire_rows(ev, w):
    """The smallest all-reduce per (impl, tp, mode) against the wire bound."""
    import pandas as pd

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
