"""The one-page report: self-contained HTML (charts embedded as data, no network) and a Markdown
twin, rendered from templates (``templates/report.{html,md}.j2``, jinja2) over sections built here
from numbers the ``report`` verb computed. Nothing is measured or recomputed here."""
from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field

from ..units import human_bytes
from . import gap as gapviews
from .check import counts

REPORT_HTML = "report.html"
REPORT_MD = "report.md"
SWEEP_CHARTS = ("latency_vs_size.png", "busbw_vs_size.png")
TRACE_CHARTS = ("trace_tokens.png", "trace_layers_heatmap.png", "trace_share_vs_tp.png")
CHECK_HEADERS = ("#", "item", "status", "value", "threshold", "source", "hint")


@dataclass
class Table:
    headers: tuple
    rows: list
    status_col: int | None = None


@dataclass
class Section:
    title: str
    prov: str = ""
    verdict: str = ""
    counts: str = ""
    paragraphs: list = field(default_factory=list)
    bullets: list = field(default_factory=list)
    tables: list = field(default_factory=list)
    images: list = field(default_factory=list)     # paths of PNGs


def prov_line(meta: dict | None, what: str) -> str:
    if not meta:
        return f"{what}: (no meta.json)"
    return (f"{what}: {meta.get('kind', '?')} on {', '.join(meta.get('hosts') or ['?'])}, backend "
            f"{meta.get('backend', '?')}, GPUs {', '.join(meta.get('gpus') or ['?'])}, {meta.get('start_time', '?')}; "
            f"command: {' '.join(meta.get('command', [])) or '?'}")


def checklist_section(items, verdict: str) -> Section:
    rows = [(i.id, i.item, i.status, i.value, i.threshold, i.source, i.hint) for i in items]
    return Section("Checklist", verdict=verdict, counts=counts(items),
                   tables=[Table(CHECK_HEADERS, rows, status_col=2)])


def topology_section(t: dict) -> Section:
    g_rows = [(g.get("index", i), g.get("name", "?"), human_bytes(g["memory_total_bytes"])
               if isinstance(g.get("memory_total_bytes"), int) else "n/a", g.get("pci_bus_id", "n/a"),
               f"Gen{g.get('pcie_link_gen_max', '?')} x{g.get('pcie_link_width_max', '?')}",
               g.get("numa_node", "n/a"), g.get("nvlink_active_links", "n/a"))
              for i, g in enumerate(t.get("gpus", []))]
    s = Section("Topology", prov=f"{t.get('kind', 'measured')} from {t.get('source', 'NVML')} on {t.get('host', '?')}, "
                f"{t.get('collected_at', '')}; interconnect class: {t.get('interconnect_class', 'n/a')}",
                tables=[Table(("GPU", "name", "memory", "PCI bus", "PCIe max", "NUMA", "NVLinks"), g_rows)])
    mat = t.get("matrix") or []
    if mat:
        s.tables.append(Table(("",) + tuple(f"GPU{j}" for j in range(len(mat))),
                              [[f"GPU{i}"] + list(r) for i, r in enumerate(mat)]))
    return s


def sweep_section(sweep, meta: dict, sweep_dir: str, out_dir: str) -> Section:
    from .sweep import charts

    df = sweep[sweep["group"] == 0].sort_values(["op", "tp", "mode", "size_bytes"])
    rows = [(r.op, r.tp, r.mode, human_bytes(int(r.size_bytes)), f"{r.latency_us_p50:.1f}", f"{r.latency_us_p99:.1f}",
             f"{r.busbw_gbps:.3f}", r.wrong) for r in df.itertuples()]
    charts_dir = sweep_dir
    if any(not os.path.exists(os.path.join(sweep_dir, c)) for c in SWEEP_CHARTS):
        charts(sweep, meta or {}, out_dir)           # drawn beside the report: the results dir stays as written
        charts_dir = out_dir
    return Section("Collective latency (sweep)", prov=prov_line(meta, "sweep"),
                   tables=[Table(("op", "tp", "mode", "size", "p50 us", "p99 us", "busbw GB/s", "wrong"), rows)],
                   images=[p for p in (os.path.join(charts_dir, c) for c in SWEEP_CHARTS) if os.path.exists(p)])


def trace_section(res, out_dir: str) -> Section:
    from .trace import summary_lines, trace_charts

    title = "Per-token breakdown (trace)"
    summ = res.tables["trace_summary"]
    if summ.empty:
        return Section(title, paragraphs=["the trace results dir holds no rows: its run ended before a summary "
                                          "was written (see its meta.json)"])
    charts_dir = res.path
    if any(not os.path.exists(os.path.join(res.path, c)) for c in TRACE_CHARTS):
        trace_charts(res.tables["trace_tokens"], res.tables["trace_layers"], summ, res.meta, out_dir)
        charts_dir = out_dir
    return Section(title, prov=f"{prov_line(res.meta, 'trace')}; {res.meta.get('scaling', '')}",
                   bullets=summary_lines(summ),
                   images=[p for p in (os.path.join(charts_dir, c) for c in TRACE_CHARTS) if os.path.exists(p)])


def gap_section(g, error: str | None) -> Section:
    if g is None:
        return Section("Gap", paragraphs=[f"not computed: {error}"])
    return Section("PCIe vs NVLink gap", prov=gapviews.provenance_line(g),
                   tables=[Table(gapviews.HEADERS, gapviews.table_rows(g))],
                   paragraphs=gapviews.fit_lines(g.fits) + gapviews.per_token_lines(g))


def wire_section(g, sweep, custom, out_dir: str) -> Section | None:
    """NCCL against the one-shot kernel (sweep --impl custom) and what the wire can do (p2p probes)."""
    if g is None:
        return None
    lines = gapviews.custom_lines(g) + gapviews.wire_lines(g)
    if not lines:
        return None
    path = gapviews.wire_chart(sweep, g.wire, os.path.join(out_dir, gapviews.WIRE_PNG),
                               "measured: NCCL and custom from the sweep" + (", wire from commprof p2p" if g.wire else "")
                               + "; see their meta.json", custom=custom)
    return Section("NCCL vs the wire" if g.wire else "NCCL vs the one-shot kernel", paragraphs=lines, images=[path])


def moe_section(res) -> Section:
    from .moe import LATENCY_PNG, LOAD_PNG, charts, summary_lines

    steps, ranks = res.tables["moe_steps"], res.tables.get("moe_ranks")
    if ranks is not None and any(not os.path.exists(os.path.join(res.path, c)) for c in (LOAD_PNG, LATENCY_PNG)):
        charts(steps, ranks, res.meta, res.path)
    return Section("MoE: expert-parallel all-to-all under skewed routing", prov=prov_line(res.meta, "moe"),
                   bullets=summary_lines(steps),
                   images=[p for p in (os.path.join(res.path, c) for c in (LOAD_PNG, LATENCY_PNG)) if os.path.exists(p)])


def _image(path: str, out_dir: str) -> dict:
    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode()
    return {"name": os.path.basename(path), "data": data, "rel": os.path.relpath(path, out_dir)}


def write_report(out_dir: str, title: str, sources: list[str], sections: list[Section]) -> list[str]:
    """Render the sections through the HTML and Markdown templates into ``out_dir``."""
    import jinja2

    env_html = jinja2.Environment(loader=jinja2.PackageLoader("commprof.views", "templates"),
                                  autoescape=True, keep_trailing_newline=True)
    env_md = jinja2.Environment(loader=jinja2.PackageLoader("commprof.views", "templates"),
                                autoescape=False, keep_trailing_newline=True)
    os.makedirs(out_dir, exist_ok=True)
    ctx = []
    for s in sections:
        d = dict(s.__dict__)
        d["images"] = [_image(p, out_dir) for p in s.images]
        ctx.append(d)
    paths = []
    for env, name, fname in ((env_html, "report.html.j2", REPORT_HTML), (env_md, "report.md.j2", REPORT_MD)):
        text = env.get_template(name).render(title=title, sources=sources, sections=ctx)
        path = os.path.join(out_dir, fname)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        paths.append(path)
    return paths
