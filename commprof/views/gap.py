"""Views of gap's numbers: each box against its reference (table, fit, wire lines), the boxes
against each other, the gap chart (one line per box) and the wire chart. Sizes in binary units;
latency figures labelled with what they are (p50, or avg (nccl-tests) for imported logs)."""
from __future__ import annotations

from commprof.model.units import human_bytes
from commprof.views.console import Col, fit_table, stdout_console
from commprof.views.charts import save_chart, size_axes
from commprof.views.sweep import stat_of
from commprof.analysis.costmodel import wire_latency_us
from commprof.analysis.costmodel import model_latency_us

WIRE_PNG = "wire_vs_nccl.png"
GAP_PNG = "gap.png"
#: The reference curves' (colour, dash): greys and blacks, never a box's colour.
REF_STYLES = (("0.15", "--"), ("0.45", "-."), ("0.6", (0, (5, 2, 1, 2))), ("0.3", (0, (1, 1))))


def wire_chart(sweep_df, w: dict | None, out_path: str, provenance: str, custom=None) -> str:
    """NCCL's all-reduce per TP degree against the wire bound from the p2p probes (dashed) and
    commprof's one-shot kernel (dotted, ``sweep --impl custom`` rows), whichever are present."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = sweep_df[(sweep_df["op"] == "all_reduce") & (sweep_df["group"] == 0)]
    stat = stat_of(df)
    fig, ax = plt.subplots(figsize=(7, 4.6))
    for (tp, mode), g in df.groupby(["tp", "mode"]):
        g = g.sort_values("size_bytes")
        line, = ax.plot(g["size_bytes"], g["latency_us_p50"], marker="o", ms=3,
                        label=f"{g['backend'].iloc[0] if 'backend' in g else 'NCCL'} TP={tp} {mode} {stat}")
        if w is not None:
            ax.plot(g["size_bytes"], [wire_latency_us(w, int(tp), int(x)) for x in g["size_bytes"]], "--",
                    color=line.get_color(), label=f"wire bound TP={tp}")
        if custom is not None and mode == "eager":
            c = custom[(custom["op"] == "all_reduce") & (custom["group"] == 0) & (custom["tp"] == tp)]
            if not c.empty:
                c = c.sort_values("size_bytes")
                ax.plot(c["size_bytes"], c["latency_us_p50"], ":", marker="s", ms=3, color=line.get_color(),
                        label=f"custom one-shot TP={tp} p50")
    size_axes(ax, "all_reduce size per rank (binary units)", "latency (us)")
    ax.legend(fontsize=7)
    if w is not None:
        ax.set_title(f"all-reduce vs the wire (one hop {w['oneway_us']:.2f} us + reading peers at "
                     f"{w['read_gbps']:.0f} GB/s)", fontsize=9)
    else:
        ax.set_title("all-reduce: the backend's collective vs commprof's one-shot kernel", fontsize=9)
    return save_chart(fig, out_path, provenance)


def gap_chart(g, out_path: str, provenance: str) -> str:
    """all_reduce latency and busbw vs size: one line per box and TP degree (solid), each box's
    reference (dashed, modelled), its alpha-beta fit (dotted)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    k = 0
    refs: dict = {}
    for b in g.boxes:
        df = b.sweep[(b.sweep["op"] == "all_reduce") & (b.sweep["group"] == 0) & (b.sweep["tp"] > 1)]
        if df.empty:
            continue
        stat = stat_of(df)
        for (tp, mode), d in df.groupby(["tp", "mode"]):
            if str(mode).endswith("in-place"):
                continue
            d = d.sort_values("size_bytes")
            color = colors[k % len(colors)]
            k += 1
            name = f"{b.label} TP={tp} {mode}" if len(g.boxes) > 1 else f"TP={tp} {mode}"
            lat = d[d["latency_us_p50"] > 0]
            axes[0].plot(lat["size_bytes"], lat["latency_us_p50"], "-", marker="o", ms=3, color=color,
                         label=f"{name} {stat}")
            bus = d[d["busbw_gbps"] > 0]          # 0.00 as printed at tiny sizes: not a cliff on a log axis
            axes[1].plot(bus["size_bytes"], bus["busbw_gbps"], "-", marker="o", ms=3, color=color, label=name)
            sizes = [int(x) for x in d["size_bytes"] if x > 0]
            c = b.curves
            if c is not None and len(c):
                c = c[(c["op"] == "all_reduce") & (c["tp"] == tp) & (c["mode"] == mode)].sort_values("size_bytes")
            if c is not None and len(c):
                # a reference is its own curve, not the box's: grey shades and dashes per reference,
                # drawn once however many boxes are set against it
                key = (b.reference, int(c["reference_tp"].iloc[0]))
                if key not in refs:
                    refs[key] = REF_STYLES[len(refs) % len(REF_STYLES)]
                    rcolor, rdash = refs[key]
                    axes[0].plot(c["size_bytes"], c["reference_us"], linestyle=rdash, color=rcolor, lw=1.6,
                                 label=f"ref {key[0]} TP={key[1]} (modelled)")
                    axes[1].plot(c["size_bytes"], c["reference_busbw_gbps"], linestyle=rdash, color=rcolor, lw=1.6,
                                 label=f"ref {key[0]} TP={key[1]} (modelled)")
            fit = next((f for f in b.fits if f.op == "all_reduce" and f.tp == tp and f.mode == mode), None)
            if fit is not None and sizes:
                axes[0].plot(sizes, [model_latency_us(fit.alpha_us, fit.beta_gbps, s) for s in sizes], ":",
                             color=color, alpha=0.9, label=f"fit {fit.alpha_us:.1f} us + bytes / "
                             f"{'inf' if fit.beta_gbps == float('inf') else f'{fit.beta_gbps:.1f} GB/s'}")
    size_axes(axes[0], "all_reduce size per rank (binary units)", "latency (us)")
    size_axes(axes[1], "all_reduce size per rank (binary units)", "busbw (GB/s, nccl-tests definition)")
    axes[0].set_title("latency: boxes (colour, solid), references (grey, dashed, modelled), fits (dotted)",
                      fontsize=9)
    axes[1].set_title("busbw: boxes (colour, solid), references (grey, dashed, modelled)", fontsize=9)
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7.5)
    return save_chart(fig, out_path, provenance)


HEADERS = ("op", "tp", "mode", "size", "metric", "this box", "reference (modelled)", "ratio")
PAIR_HEADERS = ("op", "TP", "mode", "size", "metric", "A", "B", "B / A", "matched")


def provenance_line(g) -> str:
    """What each figure is, for every box of the gap (or one :class:`BoxGap`)."""
    boxes = getattr(g, "boxes", None) or [g]
    parts = []
    for b in boxes:
        ic = b.interconnect.describe() if b.interconnect is not None else "interconnect not resolved"
        who = f"box {b.label}" if len(boxes) > 1 else "this box"
        parts.append(f"reference: {b.reference} = {b.reference_title} (modelled from published figures, sources in "
                     f"commprof/analysis/profiles.py); {who}: {b.this_box}, latency = {b.stat}, judged as {ic}")
    line = "; ".join(parts) + "; ratio = this box / reference"
    if any(b.box_kind == "cpu" for b in boxes):
        line += "; CPU ranks (gloo): the ratios show the pipeline, not a GPU box"
    return line


def table_rows(g) -> list[tuple]:
    """A box's (or the first box's) gap table as text cells (binary size units, the unit and the
    statistic beside each value)."""
    rows = []
    for r in g.table.itertuples():
        stat = f" {r.stat}" if r.metric == "latency" and getattr(r, "stat", "p50") != "p50" else ""
        ref_note = []
        if r.metric == "latency":
            ref_note.append(r.reference_mode)
        if int(getattr(r, "reference_tp", r.tp)) != int(r.tp):
            ref_note.append(f"TP={int(r.reference_tp)}")
        rows.append((r.op, r.tp, r.mode, human_bytes(int(r.size_bytes)), r.metric, f"{r.this_box:.1f} {r.unit}{stat}",
                     f"{r.reference:.1f} {r.unit}" + (f" ({', '.join(ref_note)})" if ref_note else ""),
                     f"{r.ratio:.2f}x"))
    return rows


def _stat_cell(v: float, unit: str, metric: str, stat: str) -> str:
    return f"{v:.1f} {unit}" + (f" {stat}" if metric == "latency" and stat != "p50" else "")


def pair_rows(pairs) -> list[tuple]:
    return [(r.op, r.tp_a if r.tp_a == r.tp_b else f"{r.tp_a} vs {r.tp_b}",
             r.mode_a if r.mode_a == r.mode_b else f"{r.mode_a} vs {r.mode_b}", human_bytes(int(r.size_bytes)),
             r.metric, *((_stat_cell(r.a, r.unit, r.metric, r.stat_a), _stat_cell(r.b, r.unit, r.metric, r.stat_b),
                          f"{r.ratio:.2f}x") if r.ratio == r.ratio else ("", "", "")), r.matched)
            for r in pairs.itertuples()]


def apart_lines(g) -> list[str]:
    """The box pairs that ran an op at no common TP degree: listed apart, never set against each
    other as ratios (a TP=8 latency over a TP=2 one says nothing about either box)."""
    return [f"{x['box_b']} and {x['box_a']}, {x['op']}: no common TP degree ({x['box_a']} at TP="
            f"{', '.join(map(str, x['tps_a']))}; {x['box_b']} at TP={', '.join(map(str, x['tps_b']))}): listed apart, "
            "not compared as ratios; measure both at one TP degree to compare them"
            for x in getattr(g, "apart", None) or []]


def pair_lines(g) -> list[str]:
    """One line per (box pair, op, TP degree, metric): B against A over the sizes both cover."""
    out = []
    for s in getattr(g, "summaries", []):
        tp = f"TP={s['tp_a']}" if s["tp_a"] == s["tp_b"] else f"TP={s['tp_a']} vs TP={s['tp_b']} (no common TP degree)"
        mode = s["mode_a"] if s["mode_a"] == s["mode_b"] else f"{s['mode_a']} vs {s['mode_b']}"
        rng = f"{human_bytes(s['size_min'])}-{human_bytes(s['size_max'])}"
        interp = f", {s['interpolated']} interpolated" if s["interpolated"] else ""
        if s.get("left_empty"):
            interp += f", {s['left_empty']} left empty: wrong data"
        across = f"; across hosts: {s['across_hosts']}" if s.get("across_hosts") else ""
        if s["metric"] in ("latency", "latency-mid"):
            stats = s["stat_a"] if s["stat_a"] == s["stat_b"] else f"{s['stat_a']} vs {s['stat_b']}"
            band = "decode sizes" if s["metric"] == "latency" else "larger-batch decode sizes"
            out.append(f"{s['box_b']} vs {s['box_a']}, {s['op']} {tp} {mode}, {band} {rng} ({s['n']} sizes{interp}): "
                       f"latency ({stats}) {s['median']:.2f}x (median; {s['lo']:.2f}x to {s['hi']:.2f}x){across}")
        else:
            out.append(f"{s['box_b']} vs {s['box_a']}, {s['op']} {tp} {mode}, large sizes {rng} ({s['n']} sizes{interp}): "
                       f"busbw {s['median']:.2f}x (median; {s['lo']:.2f}x to {s['hi']:.2f}x){across}")
    return out


def fit_rows(fits) -> list[tuple]:
    return [(f.op, f.tp, f.mode, f"{f.alpha_us:.1f}",
             "inf" if f.beta_gbps in (None, float("inf")) else f"{f.beta_gbps:.2f}",
             f"{f.mean_rel_err_pct:.1f}%", f"{f.max_rel_err_pct:.1f}%",
             f"{human_bytes(f.size_min_bytes)}-{human_bytes(f.size_max_bytes)}", f.n_sizes) for f in fits]


FIT_HEADERS = ("op", "tp", "mode", "alpha us", "beta GB/s", "mean error", "max error", "sizes", "n")


def fit_lines(fits) -> list[str]:
    out = []
    for f in fits:
        beta = "inf" if f.beta_gbps in (None, float("inf")) else f"{f.beta_gbps:.2f} GB/s"
        out.append(f"fit {f.op} tp={f.tp} {f.mode}: latency = {f.alpha_us:.1f} us + bytes / {beta} "
                   f"(mean error {f.mean_rel_err_pct:.1f}%, max {f.max_rel_err_pct:.1f}%, {f.n_sizes} sizes "
                   f"{human_bytes(f.size_min_bytes)}-{human_bytes(f.size_max_bytes)})")
    return out


def custom_lines(g) -> list[str]:
    import numpy as np

    out = []
    name = g.backend
    for tp, t in g.custom.groupby("tp"):
        t = t.sort_values("size_bytes")
        r = t.iloc[0]
        out.append(f"custom one-shot vs {name} all_reduce TP={tp} (eager, same sweep): at {human_bytes(int(r.size_bytes))} "
                   f"p50 {r.custom_us:.1f} us vs {r.base_us:.1f} us ({name}/custom = {r.base_over_custom:.2f}x); median "
                   f"{np.median(t['base_over_custom']):.2f}x over {len(t)} size(s) up to "
                   f"{human_bytes(int(t['size_bytes'].max()))}")
    return out


def wire_lines(g) -> list[str]:
    w = g.wire
    if w is None:
        return []
    out = [f"wire (measured by commprof p2p over {w['scope']}): one-way latency {w['oneway_us']:.2f} us, "
           f"SM read {w['read_gbps']:.1f} GB/s"]
    for r in g.wire_rows.itertuples():
        size = human_bytes(int(r.size_bytes))
        if r.impl == "custom":
            out.append(f"custom one-shot all_reduce TP={r.tp} at {size}: p50 {r.latency_us_p50:.1f} us = "
                       f"{r.latency_us_p50 / r.bound_us:.1f}x the wire bound {r.bound_us:.1f} us")
        else:
            out.append(f"NCCL all_reduce TP={r.tp} {r.mode} at {size}: {g.stat} {r.latency_us_p50:.1f} us = "
                       f"{r.latency_us_p50 / r.bound_us:.1f}x the wire bound {r.bound_us:.1f} us (one hop + reading "
                       f"{r.tp - 1} peers' buffers)")
    return out


def per_token_lines(g) -> list[str]:
    return [f"this box ({r.kind}{', scaled' if r.scaled else ''}): TP={r.tp} batch={r.batch} communication share "
            f"{r.comm_share_pct:.1f}% ({r.ms_per_token * r.comm_share_pct / 100:.2f} ms), {r.ms_per_token:.2f} ms/token; "
            f"on {g.reference} (modelled, compute and gaps kept): {r.ref_comm_share_pct:.1f}% "
            f"({r.ref_ms_per_token * r.ref_comm_share_pct / 100:.2f} ms), {r.ref_ms_per_token:.2f} ms/token"
            for r in g.per_token.itertuples()]


def token_box_lines(g) -> list[str]:
    """Box vs box per token: one decode token's collectives priced by each box's own sweep. A note
    that holds for more than one box (the all-gather priced as an all-reduce) is said once, after the
    lines, and named where it applies."""
    tb = getattr(g, "token_boxes", None)
    if tb is None or not len(tb):
        return []
    notes = [n for n in tb["note"] if n]
    shared = list(dict.fromkeys(n for n in notes if notes.count(n) > 1))
    everywhere = [n for n in shared if notes.count(n) == len(tb)]
    named = {n: f"note {k}" for k, n in enumerate((n for n in shared if n not in everywhere), start=1)}
    out = []
    for (model, tp, batch), sub in tb.groupby(["model", "tp", "batch"], sort=True):
        first = sub.iloc[0]
        parts = [f"{r.box} ({r.kind}, {r.mode}) {r.comm_ms_per_token:.2f} ms" +
                 (f" ({r.comm_ms_per_token / first.comm_ms_per_token:.2f}x)" if i else "") +
                 (f" ({named[r.note]})" if r.note in named else
                  f" ({r.note})" if r.note and r.note not in everywhere else "")
                 for i, r in enumerate(sub.itertuples())]
        out.append(f"per token, {model} TP={tp} batch {batch} ({first.collectives} collectives, each box's own "
                   f"sweep): communication " + "; ".join(parts))
    out += [f"per token, every box in each line above: {n}" for n in everywhere]
    out += [f"per token, {k}: {n}" for n, k in named.items()]
    return out


def _fav(f) -> str:
    if not f:
        return "n/a"
    if f["favoured_chunk"] == f["least_chunk"]:
        return f"{f['favoured_chunk']} tokens ({f['favoured_comm_us'] / 1e3:.1f} ms)"
    return (f"{f['favoured_chunk']} tokens ({f['favoured_comm_us'] / 1e3:.1f} ms, within {f['within_pct']:g}% of "
            f"the least, {f['least_comm_us'] / 1e3:.1f} ms at {f['least_chunk']})")


def ttft_lines(g) -> list[str]:
    """The time to first token's communication beside the per-token decode impact: this box's
    (trace, or modelled from its sweep) and the reference's, and the chunk size each favours."""
    t = getattr(g, "ttft", None)
    if not t:
        return []
    ref = t["reference"]
    chunking = "in one step" if t["chunk"] >= t["prompt"] else f"in chunks of {t['chunk']}"
    mixed = f" (mixed steps with {t['decode_tokens']} decode tokens)" if t.get("decode_tokens") else ""
    head = f"TTFT ({t['model']}, TP={t['tp']}, a {t['prompt']:,}-token prompt {chunking}{mixed}): "
    if t.get("this_comm_ms") is not None:
        this = f"on this box it spends {t['this_comm_ms']:.1f} ms in collectives ({t['this_source']})"
        if t.get("this_ttft_ms"):
            this += f" of {t['this_ttft_ms']:.1f} ms TTFT"
    else:
        top = t.get("sweep_max_all_reduce_bytes")
        this = ("this box: not known (no prefill trace, and its sweep's all_reduce stops at "
                f"{human_bytes(int(top)) if top else 'no size'}; run commprof sweep --sizes prefill --prompt "
                f"{t['prompt']} or commprof trace --phase prefill --prompt {t['prompt']})")
    refl = f"on {ref} (modelled), {t['ref_comm_ms']:.1f} ms"
    if t.get("ref_ttft_ms") is not None:
        refl += f" of {t['ref_ttft_ms']:.1f} ms TTFT (the trace's compute and gaps kept)"
    out = [head + this + "; " + refl]
    favs = []
    f = t.get("favoured_this")
    if f:
        chunks = [r["chunk"] for r in f["rows"]]
        scope = "" if f.get("covered", True) else f" (among chunks {min(chunks)}-{max(chunks)} only: its sweep's range)"
        favs.append(f"this box{scope} {_fav(f)}")
    favs.append(f"{ref} {_fav(t['favoured_ref'])}")
    out.append("chunk size favoured for TTFT communication (the smallest within 5% of the least; with an "
               "alpha-beta cost the least is always the whole prompt): " + "; ".join(favs))
    return out


def lines(g) -> list[str]:
    """Everything gap says beside a box's table: notes, fits, custom vs backend, the wire, the
    per-token impact and the TTFT impact."""
    return (list(getattr(g, "notes", [])) + fit_lines(g.fits) + custom_lines(g) + wire_lines(g) + per_token_lines(g)
            + ttft_lines(g))


def _box_title(b, n: int) -> str:
    who = f"box '{b.label}'" if n > 1 else "this box"
    return f"commprof gap: {who} vs {b.reference}"


def render_gap(g, console=None) -> None:
    console = console or stdout_console(160)
    boxes = getattr(g, "boxes", [g])
    keep = {"metric": None, "this box": None, "reference (modelled)": None, "ratio": None, "size": None, "op": None}
    for b in boxes:
        fit_table(_box_title(b, len(boxes)), [Col(h, "left", keep.get(h, 1), "ref" if h.startswith("ref") else None)
                                              for h in HEADERS], table_rows(b), console=console)
        console.print(provenance_line(b), style="dim")
        for line in lines(b):
            console.print(line)
    pairs = getattr(g, "pairs", None)
    if pairs is not None and len(pairs):
        a = boxes[0].label
        prow = [[box_b, *r] for box_b, sub in pairs.groupby("box_b", sort=False) for r in pair_rows(sub)]
        pkeep = {"B": None, "op": None, "size": None, "metric": None, "A": None, "B / A": None}
        fit_table(f"commprof gap: boxes side by side (A = {a}; B = each other box; ratio = B / A)",
                  [Col(h, "left", pkeep.get(h, 1)) for h in ("B",) + PAIR_HEADERS], prow, console=console)
        for line in pair_lines(g):
            console.print(line)
    for line in apart_lines(g):
        console.print(line)
    for line in token_box_lines(g):
        console.print(line)


def _md_table(headers, rows) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c).replace("|", "/") for c in r) + " |" for r in rows]
    return out


def markdown(g, chart: str | None = None) -> str:
    """gap.md: the boxes side by side first, then each box against its reference and its fit."""
    boxes = g.boxes
    lines_ = [f"# commprof gap: {' vs '.join(b.label for b in boxes)}", "", provenance_line(g), ""]
    if len(g.pairs):
        lines_ += [f"## Boxes side by side (A = {boxes[0].label}, ratio = B / A)", ""]
        lines_ += [f"- {x}" for x in pair_lines(g) + token_box_lines(g)] + [""]
        for box_b, sub in g.pairs.groupby("box_b", sort=False):
            lines_ += [f"B = {box_b}:", ""] + _md_table(PAIR_HEADERS, pair_rows(sub)) + [""]
    if apart_lines(g):
        lines_ += ["## Boxes listed apart (no common TP degree)", ""] + [f"- {x}" for x in apart_lines(g)] + [""]
    if chart:
        lines_ += [f"![gap]({chart})", ""]
    for b in boxes:
        lines_ += [f"## {b.label} vs {b.reference} (modelled)", "", provenance_line(b), ""]
        lines_ += [f"- {x}" for x in list(b.notes) + per_token_lines(b) + ttft_lines(b) + custom_lines(b)
                   + wire_lines(b)]
        lines_ += [""] + _md_table(HEADERS, table_rows(b)) + [""]
        if b.fits:
            lines_ += ["Alpha-beta fit of this box (latency = alpha + bytes / beta):", ""]
            lines_ += _md_table(FIT_HEADERS, fit_rows(b.fits)) + [""]
    return "\n".join(lines_)
