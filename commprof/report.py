"""``commprof report``: one self-contained HTML page (charts embedded) and a Markdown twin with
topology, sweep, trace breakdown, gap and checklist, from results dirs alone (nothing measured)."""
from __future__ import annotations

import base64
import html
import os

from .errors import UsageError

REPORT_HTML = "report.html"
REPORT_MD = "report.md"
SWEEP_CHARTS = ("latency_vs_size.png", "busbw_vs_size.png")
TRACE_CHARTS = ("trace_tokens.png", "trace_layers_heatmap.png", "trace_share_vs_tp.png")
_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:0.6em 0;font-size:0.9em}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f2f2f2}.PASS{background:#d9f2d9}.WARN{background:#fff2cc}.FAIL{background:#f8d0d0}
.SKIP{color:#777}.prov{color:#555;font-size:0.85em}img{max-width:100%;border:1px solid #eee;margin:0.4em 0}
"""
# Marks the page once every chart has decoded, so a headless browser (and a reader) can tell.
_SCRIPT = """
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute('data-charts-loaded', ok + '/' + imgs.length);
});
"""


def _img(path: str) -> str:
    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode()
    return f'<img alt="{html.escape(os.path.basename(path))}" src="data:image/png;base64,{data}">'


def _table(headers, rows, row_class=None) -> str:
    out = ["<table><tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in headers) + "</tr>"]
    for r in rows:
        cls = f' class="{row_class(r)}"' if row_class else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>")
    return "\n".join(out) + "</table>"


def _md_table(headers, rows) -> str:
    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _prov(meta: dict | None, what: str) -> str:
    if not meta:
        return f"{what}: (no meta.json)"
    return (f"{what}: {meta.get('kind', '?')} on {', '.join(meta.get('hosts', ['?']))}, backend "
            f"{meta.get('backend', '?')}, GPUs {', '.join(meta.get('gpus', ['?']))}, {meta.get('start_time', '?')}; "
            f"command: {' '.join(meta.get('command', [])) or '?'}")


def build(dirs: list[str], out_dir: str, thresholds: str | None = None, model: str | None = None,
          reference: str | None = None) -> list[str]:
    """Write report.html and report.md into ``out_dir``; returns their paths."""
    from . import check as checkmod
    from . import render
    from .units import human_bytes

    ev = checkmod.gather(dirs)
    th = checkmod.load_thresholds(thresholds)
    items = checkmod.run_items(ev, th, model)
    os.makedirs(out_dir, exist_ok=True)
    hosts = sorted({h for m in (ev.sweep_meta, ev.trace_meta) if m for h in m.get("hosts", [])}) or \
        ([ev.topo.get("host", "?")] if ev.topo else ["?"])
    title = f"commprof report: {', '.join(hosts)}"
    H = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
         f"<style>{_CSS}</style><script>{_SCRIPT}</script></head><body>",
         f"<h1>{html.escape(title)}</h1>"]
    M = [f"# {title}", ""]
    H.append(f"<p class='prov'>Every figure below says how it was obtained. Sources: "
             f"{html.escape('; '.join(os.path.abspath(d) for d in dirs))}</p>")
    M += [f"Sources: {'; '.join(os.path.abspath(d) for d in dirs)}", ""]

    # checklist first: it is what a buyer hands a vendor
    verdict = checkmod.verdict(items)
    H.append(f"<h2>Checklist: <span class='{verdict}'>{verdict}</span> ({checkmod.counts(items)})</h2>")
    rows = [(i.id, i.item, i.status, i.value, i.threshold, i.source, i.hint) for i in items]
    heads = ("#", "item", "status", "value", "threshold", "source", "hint")
    H.append(_table(heads, rows, row_class=lambda r: r[2]))
    M += [f"## Checklist: {verdict} ({checkmod.counts(items)})", "", _md_table(heads, rows), ""]

    if ev.topo:
        t = ev.topo
        H.append("<h2>Topology</h2>")
        H.append(f"<p class='prov'>{html.escape(t.get('kind', 'measured'))} from {html.escape(str(t.get('source', 'NVML')))}"
                 f" on {html.escape(str(t.get('host', '?')))}, {html.escape(str(t.get('collected_at', '')))}; "
                 f"interconnect class: <b>{html.escape(str(t.get('interconnect_class', 'n/a')))}</b></p>")
        g_rows = [(g.get("index", i), g.get("name", "?"), human_bytes(g["memory_total_bytes"])
                   if isinstance(g.get("memory_total_bytes"), int) else "n/a", g.get("pci_bus_id", "n/a"),
                   f"Gen{g.get('pcie_link_gen_max', '?')} x{g.get('pcie_link_width_max', '?')}",
                   g.get("numa_node", "n/a"), g.get("nvlink_active_links", "n/a"))
                  for i, g in enumerate(t.get("gpus", []))]
        g_heads = ("GPU", "name", "memory", "PCI bus", "PCIe max", "NUMA", "NVLinks")
        H.append(_table(g_heads, g_rows))
        mat = t.get("matrix") or []
        if mat:
            m_heads = [""] + [f"GPU{j}" for j in range(len(mat))]
            m_rows = [[f"GPU{i}"] + list(r) for i, r in enumerate(mat)]
            H.append(_table(m_heads, m_rows))
        M += ["## Topology", "", f"{t.get('kind', 'measured')} from {t.get('source', 'NVML')}; interconnect class: "
              f"{t.get('interconnect_class', 'n/a')}", "", _md_table(g_heads, g_rows), ""]

    if ev.sweep is not None:
        df = ev.sweep[ev.sweep["group"] == 0].sort_values(["op", "tp", "mode", "size_bytes"])
        H.append("<h2>Collective latency (sweep)</h2>")
        H.append(f"<p class='prov'>{html.escape(_prov(ev.sweep_meta, 'sweep'))}</p>")
        s_heads = ("op", "tp", "mode", "size", "p50 us", "p99 us", "busbw GB/s", "wrong")
        s_rows = [(r.op, r.tp, r.mode, human_bytes(int(r.size_bytes)), f"{r.latency_us_p50:.1f}",
                   f"{r.latency_us_p99:.1f}", f"{r.busbw_gbps:.3f}", r.wrong) for r in df.itertuples()]
        H.append(_table(s_heads, s_rows))
        sdir = next(d for d in dirs if os.path.exists(os.path.join(d, "sweep.csv")))
        missing = [c for c in SWEEP_CHARTS if not os.path.exists(os.path.join(sdir, c))]
        if missing:
            render.charts(ev.sweep, ev.sweep_meta or {}, out_dir)
        for c in SWEEP_CHARTS:
            p = os.path.join(sdir if not missing else out_dir, c)
            if os.path.exists(p):
                H.append(_img(p))
        M += ["## Collective latency (sweep)", "", _prov(ev.sweep_meta, "sweep"), "", _md_table(s_heads, s_rows), ""]
        M += [f"![{c}]({os.path.relpath(os.path.join(sdir if not missing else out_dir, c), out_dir)})"
              for c in SWEEP_CHARTS]
        M.append("")

    if ev.trace is not None and ev.trace.empty:
        note = "the trace results dir holds no rows: its run ended before a summary was written (see its meta.json)"
        H += ["<h2>Per-token breakdown (trace)</h2>", f"<p>{html.escape(note)}</p>"]
        M += ["## Per-token breakdown (trace)", "", note, ""]
    elif ev.trace is not None:
        from . import trace as tracemod

        tdir = next(d for d in dirs if os.path.exists(os.path.join(d, "trace_summary.csv")))
        H.append("<h2>Per-token breakdown (trace)</h2>")
        H.append(f"<p class='prov'>{html.escape(_prov(ev.trace_meta, 'trace'))}; "
                 f"{html.escape(str((ev.trace_meta or {}).get('scaling', '')))}</p>")
        lines = tracemod.summary_lines(tdir)
        H.append("<ul>" + "".join(f"<li>{html.escape(l)}</li>" for l in lines) + "</ul>")
        missing = [c for c in TRACE_CHARTS if not os.path.exists(os.path.join(tdir, c))]
        if missing:          # drawn beside the report: the results dir stays as it was written
            render.trace_charts(tdir, ev.trace_meta or {}, dest=out_dir)
            tdir_charts = out_dir
        else:
            tdir_charts = tdir
        for c in TRACE_CHARTS:
            H.append(_img(os.path.join(tdir_charts, c)))
        M += ["## Per-token breakdown (trace)", "", _prov(ev.trace_meta, "trace"), ""] + [f"- {l}" for l in lines]
        M += [""] + [f"![{c}]({os.path.relpath(os.path.join(tdir_charts, c), out_dir)})" for c in TRACE_CHARTS] + [""]

    gap_html, gap_md = _gap_section(dirs, reference)
    H += gap_html
    M += gap_md
    wh, wm = _wire_section(ev, out_dir)
    H += wh
    M += wm
    mh, mm = _moe_section(ev, out_dir)
    H += mh
    M += mm
    H.append("</body></html>")
    hp, mp = os.path.join(out_dir, REPORT_HTML), os.path.join(out_dir, REPORT_MD)
    with open(hp, "w", encoding="utf-8") as f:
        f.write("\n".join(H))
    with open(mp, "w", encoding="utf-8") as f:
        f.write("\n".join(M) + "\n")
    return [hp, mp]


def _gap_section(dirs, reference):
    """The PCIe-vs-NVLink gap, when the gap module can compute one for these dirs."""
    try:
        from .gap import compute_gap
    except ImportError:
        return [], []
    try:
        g = compute_gap(dirs, reference)
    except UsageError as e:
        return [f"<h2>Gap</h2><p class='prov'>not computed: {html.escape(str(e))}</p>"], \
            ["## Gap", "", f"not computed: {e}", ""]
    heads, rows = g["headers"], g["rows"]
    h = ["<h2>PCIe vs NVLink gap</h2>", f"<p class='prov'>{html.escape(g['provenance'])}</p>", _table(heads, rows)]
    h += [f"<p>{html.escape(l)}</p>" for l in g.get("lines", [])]
    m = ["## PCIe vs NVLink gap", "", g["provenance"], "", _md_table(heads, rows), ""] + g.get("lines", []) + [""]
    return h, m


def _wire_section(ev, out_dir):
    """NCCL against the one-shot kernel (sweep --impl custom) and what the wire can do (p2p probes),
    when either is among the dirs."""
    from . import render
    from .gap import custom_lines, wire, wire_lines

    w = wire(ev)
    lines = custom_lines(ev) + wire_lines(ev)
    if ev.sweep is None or not lines:
        return [], []
    path = render.wire_chart(ev.sweep, w, os.path.join(out_dir, render.WIRE_PNG),
                             "measured: NCCL and custom from the sweep" + (", wire from commprof p2p" if w else "")
                             + "; see their meta.json", custom=ev.sweep_custom)
    title = "NCCL vs the wire" if w else "NCCL vs the one-shot kernel"
    h = [f"<h2>{title}</h2>"] + [f"<p>{html.escape(l)}</p>" for l in lines] + [_img(path)]
    m = [f"## {title}", ""] + lines + ["", f"![wire]({os.path.basename(path)})", ""]
    return h, m


def _moe_section(ev, out_dir):
    """Expert-parallel all-to-all under skew, when a commprof moe dir is among the dirs."""
    if ev.moe_dir is None:
        return [], []
    from . import moe
    from .results import read_meta

    d = ev.moe_dir
    meta = read_meta(d)
    for c in (moe.LOAD_PNG, moe.LATENCY_PNG):
        if not os.path.exists(os.path.join(d, c)):
            moe.charts(d, meta)
            break
    lines = moe.summary_lines(d)
    prov = _prov(meta, "moe")
    h = ["<h2>MoE: expert-parallel all-to-all under skewed routing</h2>", f"<p class='prov'>{html.escape(prov)}</p>",
         "<ul>" + "".join(f"<li>{html.escape(l)}</li>" for l in lines) + "</ul>"]
    h += [_img(os.path.join(d, c)) for c in (moe.LOAD_PNG, moe.LATENCY_PNG)]
    m = ["## MoE: expert-parallel all-to-all under skewed routing", "", prov, ""] + [f"- {l}" for l in lines]
    m += [""] + [f"![{c}]({os.path.relpath(os.path.join(d, c), out_dir)})" for c in (moe.LOAD_PNG, moe.LATENCY_PNG)]
    return h, m + [""]


def run_report(dirs: list[str], out: str | None = None, thresholds: str | None = None,
               model: str | None = None, reference: str | None = None) -> int:
    if not dirs:
        raise UsageError("report needs at least one results dir (from commprof sweep, trace or topo)")
    paths = build(dirs, out or dirs[0], thresholds, model, reference)
    for p in paths:
        print(f"wrote {p}")
    return 0
