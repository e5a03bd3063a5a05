"""``commprof show``: any verb's results dir, rendered again from the dir alone."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from commprof.analysis.verdict import Item
from commprof.views.console import frame_table, stdout_console


def show(res, charts: bool = True, echo=print, note=lambda line: print(line, file=sys.stderr)) -> None:
    """Print what ``res`` (:class:`commprof.results.Results`) holds and redraw its charts into its
    dir. ``echo`` takes result lines, ``note`` the lines about files."""
    verb, meta, t = res.verb, res.meta, res.tables
    shown = False
    if getattr(res, "unfinished", None):
        note(f"commprof: warning: '{res.path}': {res.unfinished}")
    if "sweep" in t:
        from commprof.views.sweep import charts as sweep_charts
        from commprof.views.sweep import print_table

        shown = True
        if t["sweep"].empty:
            note(f"commprof: {res.path} holds no rows yet")
        else:
            print_table(t["sweep"], meta)
            if charts:
                for p in sweep_charts(t["sweep"], meta, res.path):
                    note(f"chart: {p}")
    if "trace_summary" in t:
        from commprof.views.trace import summary_lines, trace_charts

        shown = True
        for line in summary_lines(t["trace_summary"]):
            echo(line)
        if charts and "trace_tokens" in t and "trace_layers" in t:
            for p in trace_charts(t["trace_tokens"], t["trace_layers"], t["trace_summary"], meta, res.path):
                note(f"chart: {p}")
    if "moe_steps" in t:
        from commprof.views.moe import charts as moe_charts
        from commprof.views.moe import summary_lines

        shown = True
        for line in summary_lines(t["moe_steps"]):
            echo(line)
        if charts and "moe_ranks" in t:
            for p in moe_charts(t["moe_steps"], t["moe_ranks"], meta, res.path):
                note(f"chart: {p}")
    if "nccl_comms" in t:
        from commprof.views.nccldebug import account_lines

        shown = True
        items = t["nccl_verdict"].astype(object).where(t["nccl_verdict"].notna(), "").to_dict("records") if "nccl_verdict" in t else []
        for line in account_lines(meta, t["nccl_comms"].astype(object).where(t["nccl_comms"].notna(), "").to_dict("records"), items):
            echo(line)
    if "p2p" in t:
        from commprof.views.p2p import render_p2p

        shown = True
        rows = t["p2p"].to_dict("records")
        n = int(max([r["src_device"] for r in rows] + [r["dst_device"] for r in rows], default=-1)) + 1
        render_p2p(rows, n)
    if "check" in res.docs:
        from commprof.views.check import render

        shown = True
        render([Item(**{k: str(v) for k, v in i.items() if k in Item.__dataclass_fields__})
                for i in res.docs["check"].get("items", [])])
    if "plan" in t:
        shown = True
        doc = res.docs.get("plan", {})
        title = (f"commprof plan: {doc.get('model', '?')} TP={doc.get('tp', '?')} batch={doc.get('batch', '?')} "
                 f"context={doc.get('context', '?')} ({doc.get('kind', 'modelled')})")
        frame_table(t["plan"], title)
        for k, v in (doc.get("counts") or {}).items():
            echo(f"{k}: {v}")
    for name, title in (("gap", "commprof gap: this box / the reference"), ("gap_boxes", "commprof gap: box / box"),
                        ("gap_predict", "commprof gap: predicted per token, box / the first box")):
        if name in t:
            shown = True
            frame_table(t[name], f"{title} ({meta.get('kind', '?')}; {res.path})")
    if "predict" in t:
        from commprof.views.predict import predict_chart, predict_line

        shown = True
        rows = t["predict"].to_dict("records")
        for r in rows:
            r["weights_fit"] = str(r.get("weights_fit")).lower() in ("true", "1", "1.0")
            if r["weights_fit"]:
                r["kv_max_sequences"] = int(r["kv_max_sequences"])
            echo(predict_line(r))
        if rows and "served_tpot_ms_p50" in rows[0]:          # predicted with --serve: the measured account
            from commprof.analysis.predictserve import serve_line

            for r in rows:
                echo(serve_line(r))
        if charts and rows:
            note(f"chart: {predict_chart(rows, os.path.join(res.path, 'predict.png'), meta)}")
    if "serve_levels" in t:
        from commprof.views.serve import render as serve_render

        shown = True
        serve_render(t["serve_levels"], meta, res.path, charts=charts, echo=echo, note=note)
    if "topo" in res.docs and (verb == "topo" or not shown):
        from commprof.views.topo import render_topology

        shown = True
        render_topology(res.docs["topo"])
    if "health" in res.docs:                                  # GPU health samples (views/health.py)
        from commprof.views.health import health_lines

        shown = True
        for line in health_lines(res.docs["health"]):
            echo(line)
    if verb == "report":
        shown = True
        for name in ("report.html", "report.md"):
            if os.path.exists(os.path.join(res.path, name)):
                echo(f"report: {os.path.join(res.path, name)}")
    if not shown:
        stdout_console().print(f"{res.path}: a {verb} results dir with nothing to show")


@dataclass
class ShowConfig:
    """``commprof show``'s argument and flag."""
    results_dir: str = "."
    charts: bool = True


def run(cfg: ShowConfig) -> int:
    """``commprof show DIR``: load any verb's results dir and show it; the exit code."""
    from commprof.results import load

    show(load(cfg.results_dir), charts=cfg.charts)
    return 0
