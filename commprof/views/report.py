"""The one-page report: self-contained HTML (charts embedded as data, no network) and a Markdown
twin, rendered from templates (``templates/report.{html,md}.j2``, jinja2) over sections built here
from numbers the ``report`` verb computed. Nothing is measured or recomputed here."""
from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field

from commprof.model.fileio import write_atomic
from commprof.analysis.verdict import headline, verdict as _verdict
from commprof.model.units import human_bytes
from commprof.views import gap as gapviews
from commprof.views.check import counts, interconnect_line
from commprof.views.charts import save_chart, size_axes
from commprof.views.sweep import BUSBW_PNG, LATENCY_PNG, draw_lines, stat_of
from commprof.views.topo import NA, link_text

REPORT_HTML = "report.html"
REPORT_MD = "report.md"
SWEEP_CHARTS = ("latency_vs_size.png", "busbw_vs_size.png")
TRACE_CHARTS = ("trace_tokens.png", "trace_layers_heatmap.png", "trace_share_vs_tp.png")
#: the checklist a buyer scans: one line per item with its verdict, value, threshold and what to do
#: next. The evidence (what the item was judged against, its source, and the hint where it says
#: more than "what now") goes in a smaller line under the row, none of it left out.
CHECK_HEADERS = ("#", "item", "status", "value", "threshold", "what now")
#: the checklist's column widths in the HTML page: the text columns share 89% of the page by how
#: much they hold and wrap inside it (a long path or URL broken anywhere); the id and status
#: columns ("") take the rest, never narrower than their longest word (INSUFFICIENT). The six
#: columns so fit a 1280 px window, and one of 900 px.
CHECK_WIDTHS = ("", "15%", "", "24%", "21%", "29%")
#: the items not judged (SKIP), folded after the judged ones: why not (the item's value) in place of a status
SKIP_HEADERS = ("#", "item", "not judged because", "threshold", "what now")
SKIP_WIDTHS = ("", "17%", "24%", "21%", "31%")


@dataclass
class Table:
    headers: tuple
    rows: list
    status_col: int | None = None
    cls: str = ""                  # the HTML table's class (``checklist``: fixed columns that wrap)
    widths: tuple = ()             # one CSS width per column (a <colgroup>), with ``cls``
    notes: list = field(default_factory=list)   # per row: [(label, text)], a small line under the row
    fold: str = ""                 # set: the table is folded (HTML <details>, open in print) under this line
    row_cls: str = ""              # every row's class where there is no status column


@dataclass
class Section:
    title: str
    level: int = 2                                  # heading level: 2, or 3 inside a box's section
    prov: str = ""
    verdict: str = ""
    counts: str = ""
    paragraphs: list = field(default_factory=list)
    bullets: list = field(default_factory=list)
    tables: list = field(default_factory=list)
    images: list = field(default_factory=list)     # paths of PNGs
    headlines: list = field(default_factory=list)  # (box, text): one verdict line per box, first thing read
    anchor: str = ""                                # the heading's id (set by write_report, unique)


def box_headline(label: str, items, meta: dict | None = None, interconnect=None) -> str:
    """One box's verdict in a line: its status and counts, what it is (GPUs, kind, interconnect)
    and the items that did not pass, by id and name (up to three of each)."""
    meta = meta or {}
    gpus = ", ".join(dict.fromkeys(g for g in meta.get("gpus") or [] if g)) or "GPUs not named"
    ic = f", {interconnect.short()}" if interconnect else ""
    kind = f", {meta['kind']}" if meta.get("kind") else ""      # an engine's account alone has no sweep kind
    parts = [f"{label}: {headline(items)} ({counts(items)}); {gpus}{kind}{ic}"]
    for status in ("FAIL", "INSUFFICIENT", "WARN"):
        bad = [i for i in items if i.status == status]
        if bad:
            more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
            parts.append(f"{status}: " + "; ".join(f"{i.id} {i.item}" for i in bad[:3]) + more)
    return ". ".join(parts)


def headline_section(boxes, items) -> Section:
    """The page's first section: one headline per box (its own verdict, not one for all boxes)."""
    multi = len(boxes) > 1
    lines = []
    for b in boxes:
        mine = [i for i in items if i.box in ("", b.label)] if multi else items
        lines.append((b.label, box_headline(b.label, mine, b.sweep_meta or b.trace_meta or b.serve_meta,
                                            b.interconnect)))
    return Section("Headlines" if multi else "Headline", headlines=lines)


def prov_line(meta: dict | None, what: str) -> str:
    if not meta:
        return f"{what}: (no meta.json)"
    return (f"{what}: {meta.get('kind', '?')} on {', '.join(meta.get('hosts') or ['?'])}, backend "
            f"{meta.get('backend', '?')}, GPUs {', '.join(meta.get('gpus') or ['?'])}, {meta.get('start_time', '?')}; "
            f"command: {' '.join(meta.get('command', [])) or '?'}")


def _words(text: str) -> str:
    return " ".join("".join(c if c.isalnum() else " " for c in str(text).lower()).split())


def evidence_notes(i) -> list:
    """The line under an item's row: what it was judged against, its source, and its hint where the
    hint says more than the item's "what now" (a SKIP's what-now line is built from its hint)."""
    notes = [("against", i.basis)] if i.basis else []
    if i.source:
        notes.append(("source", i.source))
    if i.hint and _words(i.hint) not in _words(i.what_now):
        notes.append(("hint", i.hint))
    return notes


def checklist_section(items, verdict: str, interconnect=None, level: int = 2, prefix: str = "") -> Section:
    """The checklist: the judged items first, one row each with the evidence in a line under it, then
    the items not judged (SKIP) folded in one block, named in its summary line."""
    judged = [i for i in items if i.status != "SKIP"]
    skipped = [i for i in items if i.status == "SKIP"]
    paras = []
    if interconnect is not None:
        line = interconnect_line(interconnect.to_dict())
        paras.append(line[0].upper() + line[1:] + ".")
    tables = []
    if judged:
        tables.append(Table(CHECK_HEADERS, [(i.id, i.item, i.status, i.value, i.threshold, i.what_now) for i in judged],
                            status_col=2, cls="checklist", widths=CHECK_WIDTHS,
                            notes=[evidence_notes(i) for i in judged]))
    if skipped:
        fold = (f"Not judged (SKIP): {len(skipped)} item{'' if len(skipped) == 1 else 's'}: "
                + "; ".join(f"{i.id} {i.item}" for i in skipped))
        tables.append(Table(SKIP_HEADERS, [(i.id, i.item, i.value, i.threshold, i.what_now) for i in skipped],
                            cls="checklist skipped", widths=SKIP_WIDTHS, notes=[evidence_notes(i) for i in skipped],
                            fold=fold, row_cls="SKIP"))
    return Section(f"{prefix}Checklist", level=level, verdict=verdict, counts=counts(items), paragraphs=paras,
                   tables=tables)


def topology_section(t: dict, level: int = 2, prefix: str = "") -> Section:
    heads = ("GPU", "name", "memory", "PCI bus", "PCIe max", "NUMA", "NVLinks")
    g_rows = [(g.get("index", i), g.get("name", NA), human_bytes(g["memory_total_bytes"])
               if isinstance(g.get("memory_total_bytes"), int) else NA, g.get("pci_bus_id", NA),
               link_text(g.get("pcie_link_gen_max", NA), g.get("pcie_link_width_max", NA)),
               g.get("numa_node", NA), g.get("nvlink_active_links", NA))
              for i, g in enumerate(t.get("gpus", []))]
    # as on the terminal: a column with n/a for every GPU (an imported topo text) is named, not drawn
    empty = [j for j in range(1, len(heads)) if g_rows and all(str(r[j]) == NA for r in g_rows)]
    keep = [j for j in range(len(heads)) if j not in empty]
    s = Section(f"{prefix}Topology", level=level,
                prov=f"{t.get('kind', 'measured')} from {t.get('source', 'NVML')} on {t.get('host', '?')}, "
                f"{t.get('collected_at', '')}; interconnect class: {t.get('interconnect_class', 'n/a')}",
                paragraphs=[f"n/a for every GPU (no answer), not shown: {', '.join(heads[j] for j in empty)}."]
                if empty else [],
                tables=[Table(tuple(heads[j] for j in keep), [tuple(r[j] for j in keep) for r in g_rows])])
    mat = t.get("matrix") or []
    if mat:
        s.tables.append(Table(("",) + tuple(f"GPU{j}" for j in range(len(mat))),
                              [[f"GPU{i}"] + list(r) for i, r in enumerate(mat)]))
    return s


def sweep_section(sweep, meta: dict, sweep_dir: str, out_dir: str, level: int = 2, prefix: str = "",
                  chart_tag: str = "") -> Section:
    from commprof.views.sweep import charts

    df = sweep[sweep["group"] == 0].sort_values(["op", "tp", "mode", "size_bytes"])
    stat = stat_of(df)
    tails = [c for c in ("latency_us_p99",) if c in df.columns and df[c].notna().any()]
    rows = []
    for r in df.itertuples():
        wrong = int(r.wrong) if r.wrong == r.wrong else 0     # NaN: not checked
        status = str(getattr(r, "status", ""))
        rows.append((r.op, r.tp, r.mode, human_bytes(int(r.size_bytes)), f"{r.latency_us_p50:.1f}",
                     *(f"{getattr(r, c):.1f}" for c in tails), f"{r.busbw_gbps:.3f}",
                     f"{wrong} WRONG" if wrong else ("n/a (not checked)" if status == "unchecked" else "0")))
    headers = ("op", "tp", "mode", "size", f"{stat} us", *(f"{c[11:]} us" for c in tails), "busbw GB/s", "wrong")
    charts_dir = sweep_dir
    if chart_tag or any(not os.path.exists(os.path.join(sweep_dir, c)) for c in SWEEP_CHARTS):
        # drawn beside the report (the results dir stays as written), one folder per box
        charts_dir = os.path.join(out_dir, chart_tag) if chart_tag else out_dir
        os.makedirs(charts_dir, exist_ok=True)
        charts(sweep, meta or {}, charts_dir)
    paras = []
    if "nccl-tests" in stat:
        paras.append(f"{stat}: nccl-tests prints one average time per size (over its timed iterations and, by "
                     "default, the ranks); no percentile band is drawn.")
    return Section(f"{prefix}Collective latency (sweep)", level=level, prov=prov_line(meta, "sweep"),
                   paragraphs=paras, tables=[Table(headers, rows)],
                   images=[p for p in (os.path.join(charts_dir, c) for c in SWEEP_CHARTS) if os.path.exists(p)])


def trace_section(res, out_dir: str, level: int = 2, prefix: str = "") -> Section:
    from commprof.views.trace import summary_lines, trace_charts

    title = f"{prefix}Per-token breakdown (trace)"
    summ = res.tables["trace_summary"]
    if summ.empty:
        return Section(title, level=level, paragraphs=["the trace results dir holds no rows: its run ended before a "
                                                       "summary was written (see its meta.json)"])
    charts_dir = res.path
    if any(not os.path.exists(os.path.join(res.path, c)) for c in TRACE_CHARTS):
        trace_charts(res.tables["trace_tokens"], res.tables["trace_layers"], summ, res.meta, out_dir)
        charts_dir = out_dir
    return Section(title, level=level, prov=f"{prov_line(res.meta, 'trace')}; {res.meta.get('scaling', '')}",
                   bullets=summary_lines(summ),
                   images=[p for p in (os.path.join(charts_dir, c) for c in TRACE_CHARTS) if os.path.exists(p)])


class _One:
    """One box of a gap, shaped like a gap (``boxes``, ``pairs``) for the chart and lines."""

    def __init__(self, b):
        import pandas as pd

        self.boxes, self.pairs, self.summaries = [b], pd.DataFrame(), []


def gap_section(g, error: str | None, out_dir: str | None = None, level: int = 2, prefix: str = "",
                chart_tag: str = "") -> Section:
    """A box against its reference: the table (binary size units), the chart and the alpha-beta fit."""
    if g is None:
        return Section(f"{prefix}Gap", level=level, paragraphs=[f"not computed: {error}" if error else
                                                                "not computed: no reference covers this box"])
    title = f"{prefix}Gap vs {g.reference} (" + ("PCIe vs NVLink" if g.box_kind in ("pcie", "nvlink") else "reference") + ")"
    tables = [Table(gapviews.HEADERS, gapviews.table_rows(g))]
    if g.fits:
        tables.append(Table(gapviews.FIT_HEADERS, gapviews.fit_rows(g.fits)))
    images = []
    if out_dir is not None:
        name = f"gap_{chart_tag}.png" if chart_tag else gapviews.GAP_PNG
        images.append(gapviews.gap_chart(_One(g), os.path.join(out_dir, name), gapviews.provenance_line(g)))
    return Section(title, level=level, prov=gapviews.provenance_line(g), tables=tables, images=images,
                   paragraphs=list(g.notes) + ["alpha-beta fit of this box (latency = alpha + bytes / beta), per op, "
                                               "TP degree and mode: the second table"] + gapviews.per_token_lines(g)
                   + gapviews.ttft_lines(g))


def wire_section(g, sweep, custom, out_dir: str, level: int = 2, prefix: str = "", chart_tag: str = "") -> Section | None:
    """NCCL against the one-shot kernel (sweep --impl custom) and what the wire can do (p2p probes)."""
    if g is None:
        return None
    lines = gapviews.custom_lines(g) + gapviews.wire_lines(g)
    if not lines:
        return None
    name = f"wire_vs_nccl_{chart_tag}.png" if chart_tag else gapviews.WIRE_PNG
    path = gapviews.wire_chart(sweep, g.wire, os.path.join(out_dir, name),
                               "measured: NCCL and custom from the sweep" + (", wire from commprof p2p" if g.wire else "")
                               + "; see their meta.json", custom=custom)
    return Section(f"{prefix}" + ("NCCL vs the wire" if g.wire else "NCCL vs the one-shot kernel"), level=level,
                   paragraphs=lines, images=[path])


SERVE_CHARTS = ("serve_latency.png", "serve_throughput.png")
SERVE_HEADERS = ("mode", "concurrency", "ok / requests", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms",
                 "output tokens/s", "requests/s", "TPOT p99/p50", "meets SLO")


def _ms(v) -> str:
    return "n/a" if v is None or v != v else f"{float(v):,.1f}"


def serve_tie_lines(levels, trace_summary, trace_kind: str = "measured") -> list[str]:
    """The served token time beside the per-token breakdown: the measured TPOT p50 at the first
    closed-loop level next to the trace's batch-1 decode time per token and its communication share."""
    closed = levels[(levels["mode"] == "closed") & (levels["ok"] > 0)].sort_values("concurrency")
    if closed.empty or trace_summary is None or trace_summary.empty:
        return []
    first = closed.iloc[0]
    tpot = float(first["tpot_ms_p50"])
    rows = trace_summary
    if "phase" in rows.columns:
        rows = rows[rows["phase"].astype(str).isin(["decode", "nan", ""])]
    rows = rows[rows["batch"].astype(str) == "1"]
    lines = []
    for r in rows.sort_values("tp").to_dict("records"):
        ms, share = float(r["ms_per_token"]), float(r["comm_share_pct"])
        if not (tpot == tpot and tpot > 0):
            continue
        part = 100 * ms * share / 100 / tpot
        lines.append(f"served TPOT p50 at concurrency {int(first['concurrency'])}: {_ms(tpot)} ms; the {trace_kind} "
                     f"trace at TP={int(r['tp'])}, batch 1: {ms:,.2f} ms per token, {share:.1f}% in collectives "
                     f"({ms * share / 100:,.2f} ms, {part:.0f}% of the served token time"
                     + ("; more than all of it: the trace is not of this server's model or box)" if part > 100 else ")"))
    return [x for x in lines if x]


def sweep_tie_lines(levels, comm: dict) -> list[str]:
    """The served token time beside one token's collectives priced by the box's sweep."""
    if "error" in comm:
        return [f"tie-back to the sweep not made: {comm['error']}"]
    closed = levels[(levels["mode"] == "closed") & (levels["ok"] > 0)].sort_values("concurrency")
    if closed.empty:
        return []
    first = closed.iloc[0]
    tpot = float(first["tpot_ms_p50"])
    if not (tpot == tpot and tpot > 0):
        return []
    part = 100 * comm["comm_ms"] / tpot
    return [f"served TPOT p50 at concurrency {int(first['concurrency'])}: {_ms(tpot)} ms; {comm['model']} at "
            f"TP={comm['tp']}, batch 1, priced by this box's sweep ({comm['timing']} rows): {comm['collectives']} "
            f"collectives per token = {comm['comm_ms']:,.2f} ms ({part:.0f}% of the served token time"
            + ("; more than all of it: the sweep is not of this server's box or model)" if part > 100 else ")")]


def serve_section(res, out_dir: str, trace_res=None, level: int = 2, prefix: str = "", tp: int | None = None,
                  sweep_comm: dict | None = None) -> Section:
    """``commprof serve``: the level table, the knee, the charts, and (with a trace in the same
    box) the served token time beside the traced per-token time and its communication share."""
    from commprof.views.serve import serve_charts, summary_lines

    levels, meta = res.tables["serve_levels"], res.meta
    title = f"{prefix}Service under load (serve)"
    if levels.empty:
        return Section(title, level=level, paragraphs=["the serve results dir holds no level yet (see its meta.json)"])
    charts_dir = res.path
    if any(not os.path.exists(os.path.join(res.path, c)) for c in SERVE_CHARTS):
        os.makedirs(out_dir, exist_ok=True)
        serve_charts(levels, meta, out_dir)
        charts_dir = out_dir
    rows = [(r["mode"], int(r["concurrency"]), f"{int(r['ok'])} / {int(r['requests'])}", _ms(r["ttft_ms_p50"]),
             _ms(r["ttft_ms_p99"]), _ms(r["tpot_ms_p50"]), _ms(r["tpot_ms_p99"]), _ms(r["output_tokens_per_s"]),
             _ms(r["requests_per_s"]), _ms(r["jitter_tpot_p99_p50"]), r.get("meets_slo", ""))
            for r in levels.to_dict("records")]
    headers = list(SERVE_HEADERS)
    from commprof.views.serve import burst_cells, has_queue_p99, queue_ms_text

    if has_queue_p99(levels):   # the server reports it (a value, or the bucket bound it lies under)
        headers.insert(-1, "queue p99 ms")
        rows = [(*row[:-1], queue_ms_text(r, "queue_ms_p99"), row[-1])
                for row, r in zip(rows, levels.to_dict("records"))]
    bursts = burst_cells(levels) if "burst_requests" in levels.columns else []
    if any(bursts):             # a level whose tokens came in one burst, marked in its own row
        headers.append("burst")
        rows = [(*row, b) for row, b in zip(rows, bursts)]
    tie = []
    if trace_res is not None and "trace_summary" in trace_res.tables:
        summ = trace_res.tables["trace_summary"]
        if tp is not None and "tp" in summ.columns:
            summ = summ[summ["tp"] == tp]
        tie = serve_tie_lines(levels, summ, trace_res.meta.get("kind", "measured"))
    elif sweep_comm is not None:
        tie = sweep_tie_lines(levels, sweep_comm)
    prov = (f"serve: {meta.get('kind', '?')} from {', '.join(meta.get('hosts') or ['?'])}, {meta.get('model', '?')} at "
            f"{meta.get('url', '?')}, workload {meta.get('workload', '?')}, {meta.get('start_time', '?')}"
            + (f"; {meta['label']}" if meta.get("label") else "")
            + f"; command: {' '.join(meta.get('command', [])) or '?'}")
    return Section(title, level=level, prov=prov, bullets=summary_lines(levels, meta)[1:] + tie,
                   tables=[Table(headers, rows)],
                   images=[p for p in (os.path.join(charts_dir, c) for c in SERVE_CHARTS) if os.path.exists(p)])


def moe_section(res, level: int = 2, prefix: str = "") -> Section:
    from commprof.views.moe import LATENCY_PNG as MOE_LATENCY_PNG, LOAD_PNG, charts, noise_note, summary_table

    steps, ranks = res.tables["moe_steps"], res.tables.get("moe_ranks")
    table = summary_table(steps)
    if ranks is not None and any(not os.path.exists(os.path.join(res.path, c)) for c in (LOAD_PNG, MOE_LATENCY_PNG)):
        charts(steps, ranks, res.meta, res.path)
    return Section(f"{prefix}MoE: expert-parallel all-to-all under skewed routing", level=level,
                   prov=prov_line(res.meta, "moe"), bullets=noise_note(steps),
                   tables=[Table(tuple(table.columns), [tuple(r) for r in table.itertuples(index=False)])],
                   images=[p for p in (os.path.join(res.path, c) for c in (LOAD_PNG, MOE_LATENCY_PNG))
                           if os.path.exists(p)])


def boxes_charts(boxes, out_dir: str) -> list[str]:
    """Latency and busbw vs size with one line per box (and TP degree, mode): what a buyer lays
    side by side. Imported averages are labelled so; no zero busbw on the log axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    with_sweep = [b for b in boxes if b.sweep is not None]
    if not with_sweep:
        return written
    ops = sorted({op for b in with_sweep for op in b.sweep["op"]}, key=lambda o: (o != "all_reduce", o))
    for fname, ycol, ylabel in (("boxes_" + LATENCY_PNG, "latency_us_p50", "latency (us)"),
                                ("boxes_" + BUSBW_PNG, "busbw_gbps", "busbw (GB/s, nccl-tests definition)")):
        fig, axes = plt.subplots(1, len(ops), figsize=(6.5 * len(ops), 4.8), squeeze=False)
        for ax, op in zip(axes[0], ops):
            for b in with_sweep:
                d0 = b.sweep[(b.sweep["group"] == 0) & (b.sweep["op"] == op) & (b.sweep["tp"] > 1)]
                d0 = d0[~d0["mode"].astype(str).str.endswith("in-place")]
                if len(d0):
                    draw_lines(ax, d0, ycol, prefix=f"{b.label} ", band=False)
            size_axes(ax, f"{op} size (binary units)", ylabel, op)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        fig.suptitle(f"boxes side by side: {ylabel.split(' (')[0]} vs message size", fontsize=11)
        prov = "; ".join(f"{b.label}: {prov_line(b.sweep_meta, 'sweep')}" for b in with_sweep)
        written.append(save_chart(fig, os.path.join(out_dir, fname), prov, top=0.95))
    return written


def side_by_side_section(boxes, items, gap, gap_error, out_dir: str) -> Section:
    """The boxes next to each other: verdicts and interconnects, box-against-box ratios, one line per
    box in each chart."""
    rows = []
    for b in boxes:
        mine = [i for i in items if i.box == b.label]
        meta = b.sweep_meta or b.trace_meta or (b.metas[0] if b.metas else {})   # an engine account's own box: its import
        ic = b.interconnect
        rows.append((b.label, ", ".join(meta.get("gpus") or ["?"]), ", ".join(meta.get("hosts") or ["?"]),
                     meta.get("kind", "?"), ic.short() if ic else "?",
                     (ic.evidence or ic.detail or "none") if ic else "?", _verdict(mine), counts(mine)))
    tables = [Table(("box", "GPUs", "hosts", "kind", "interconnect", "decided by", "verdict", "items"), rows,
                    status_col=6)]
    paras = []
    images = boxes_charts(boxes, out_dir)
    if gap is not None and len(gap.pairs):
        paras += gapviews.pair_lines(gap) + gapviews.apart_lines(gap) + gapviews.token_box_lines(gap)
        for box_b, sub in gap.pairs.groupby("box_b", sort=False):
            tables.append(Table(("B",) + gapviews.PAIR_HEADERS, [(box_b, *r) for r in gapviews.pair_rows(sub)]))
        images.append(gapviews.gap_chart(gap, os.path.join(out_dir, gapviews.GAP_PNG), gapviews.provenance_line(gap)))
    elif gap is not None and gapviews.apart_lines(gap):
        paras += gapviews.apart_lines(gap)
    elif gap_error:
        paras.append(f"gap not computed: {gap_error}")
    else:
        paras.append("no size and TP degree in common between the boxes' sweeps: nothing to set side by side")
    # no verdict over all boxes: each box has its own headline
    return Section(f"Boxes side by side (A = {boxes[0].label}; ratio = B / A)", prov=(gapviews.provenance_line(gap)
                                                                                      if gap is not None else ""),
                   paragraphs=paras, tables=tables, images=images)


def _image(path: str, out_dir: str) -> dict:
    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode()
    return {"name": os.path.basename(path), "data": data, "rel": os.path.relpath(path, out_dir)}


def anchors(titles: list[str]) -> list[str]:
    """A unique, URL-safe id per heading (``box-1-a100-checklist``), for the table of contents."""
    import re

    seen, out = set(), []
    for t in titles:
        base = re.sub(r"[^a-z0-9]+", "-", str(t).lower()).strip("-")[:60].strip("-") or "section"
        a, k = base, 2
        while a in seen:
            a, k = f"{base}-{k}", k + 1
        seen.add(a)
        out.append(a)
    return out


def write_report(out_dir: str, title: str, sources: list[str], sections: list[Section]) -> list[str]:
    """Render the sections through the HTML and Markdown templates into ``out_dir``."""
    import jinja2

    env_html = jinja2.Environment(loader=jinja2.PackageLoader("commprof.views", "templates"),
                                  autoescape=True, keep_trailing_newline=True)
    env_md = jinja2.Environment(loader=jinja2.PackageLoader("commprof.views", "templates"),
                                autoescape=False, keep_trailing_newline=True)
    os.makedirs(out_dir, exist_ok=True)
    ctx = []
    for s, anchor in zip(sections, anchors([s.title for s in sections])):
        s.anchor = anchor
        d = dict(s.__dict__)
        d["images"] = [_image(p, out_dir) for p in s.images]
        ctx.append(d)
    paths = []
    for env, name, fname in ((env_html, "report.html.j2", REPORT_HTML), (env_md, "report.md.j2", REPORT_MD)):
        text = env.get_template(name).render(title=title, sources=sources, sections=ctx)
        path = os.path.join(out_dir, fname)
        write_atomic(path, text)
        paths.append(path)
    return paths


def nccl_debug_section(res, items, level: int = 2, prefix: str = "") -> Section:
    """NCCL's own account of the box (an ``import nccl-debug`` dir): one line per communicator (its
    transports at a glance), the network, versions, overrides and engine lines, then its check
    items (N0-N7) with what a buyer does next."""
    info = res.meta.get("nccl_debug", {})
    from commprof.analysis.checkitems_nccl import records

    rows = [tuple("" if c.get(k) is None else c[k] for k in ("comm", "nranks", "nnodes", "transports", "summary"))
            for c in records(res.tables["nccl_comms"])]
    files = ", ".join(f.get("path", "?") for f in res.meta.get("source_files", [])) or "?"
    paras = []
    if info.get("nccl_version"):
        paras.append("NCCL " + ", ".join(info["nccl_version"])
                     + (f" (CUDA {', '.join(info['cuda_version'])})" if info.get("cuda_version") else "") + ".")
    if info.get("networks"):
        nets = [f"{k} (in the lines of {len(v)} host{'' if len(v) == 1 else 's'})" for k, v in info["networks"].items()]
        paras.append("Network: " + ", ".join(nets) + ".")
    if info.get("env_overrides"):
        paras.append("Set by environment: " + ", ".join(f"{k}={'|'.join(v)}" for k, v in info["env_overrides"].items())
                     + ".")
    eng = info.get("engine") or {}
    if eng:
        paras.append("Engine: " + "; ".join(f"{k}={'/'.join(v) if isinstance(v, list) else v}"
                                             for k, v in eng.items()) + ".")
    if not info.get("nccl_lines"):
        paras.append("The log holds no NCCL INFO line: NCCL_DEBUG=INFO was not set for this run.")
    mine = [i for i in items if i.id.startswith("N")]
    tables = [Table(("communicator", "ranks", "nodes", "transports", "at a glance"), rows)]
    if mine:
        tables.append(Table(("#", "item", "status", "evidence", "what now"),
                            [(i.id, i.item, i.status, i.value, i.hint) for i in mine], status_col=2))
    return Section(f"{prefix}NCCL's own account (transports)", level=level,
                   prov=f"imported from NCCL_DEBUG=INFO log(s) {files} (commprof import nccl-debug)",
                   paragraphs=paras, tables=tables)


def in_engine_section(rows, factor, inspector_meta: dict | None, level: int = 2, prefix: str = "") -> Section:
    """The engine's collectives in service (NCCL Inspector) beside the box's sweep."""
    src = (inspector_meta or {}).get("source_files", [])
    files = ", ".join(f.get("path", "?") for f in src[:3]) + (f" (+{len(src) - 3} more)" if len(src) > 3 else "")
    t = [(r["op"], r["tp"], human_bytes(int(r["size_bytes"])), f"{r['calls']:,}", r["timing"],
          f"{r['in_engine_us_mean']:.1f}", "" if r["back_to_back_us"] is None else f"{r['back_to_back_us']:.1f}",
          r["how"], "" if r["ratio"] is None else f"{r['ratio']:.2f}x") for r in rows]
    paras = [f"In-engine / sweep, calls-weighted: {factor:.2f}x: the factor `predict --comm-overhead-from` "
             "multiplies the collectives' price by."] if factor is not None else []
    return Section(f"{prefix}The engine's collectives in service", level=level,
                   prov=f"imported from NCCL Inspector JSON {files or '?'} (commprof import nccl-inspector); "
                        "the sweep's figure at the same op, TP degree and size (log-log, never extrapolated)",
                   paragraphs=paras,
                   tables=[Table(("op", "TP", "size", "calls", "timing", "in-engine us (mean)", "sweep us", "how",
                                  "ratio"), t)])
