"""``commprof show``: any verb's results dir, rendered again from the dir alone."""
from __future__ import annotations

import os
import sys
from commprof.analysis.verdict import Item
from commprof.model import registry
from commprof.model.registry import ShowConfig
from commprof.model.spec import load_object
from commprof.views.console import frame_table, record_frame, stdout_console


def _note(line: str) -> None:
    """A line on stderr, after what is already printed on stdout (``2>&1`` keeps the order)."""
    sys.stdout.flush()
    print(line, file=sys.stderr, flush=True)


def show(res, charts: bool = True, echo=print, note=_note) -> None:
    """Print what ``res`` (:class:`commprof.results.Results`) holds and redraw its charts into its
    dir. ``echo`` takes result lines, ``note`` the lines about files. Each result kind of
    :data:`commprof.model.registry.RESULT_KINDS` with a view shows its part, in that order."""
    if getattr(res, "unfinished", None):
        note(f"commprof: warning: '{res.path}': {res.unfinished}")
    shown = False
    for kind in registry.RESULT_KINDS:       # read at each call: a kind added to the registry shows too
        if kind.view is None:
            continue
        if load_object(kind.view)(res, charts=charts, echo=echo, note=note, shown=shown):
            shown = True
    if not shown:
        stdout_console().print(f"{res.path}: a {res.verb} results dir with nothing to show")


def show_sweep(res, charts, echo, note, shown) -> bool:
    t = res.tables
    if "sweep" not in t:
        return False
    from commprof.views.sweep import charts as sweep_charts
    from commprof.views.sweep import print_table

    if t["sweep"].empty:
        note(f"commprof: {res.path} holds no rows yet")
        return True
    if not record_frame(t["sweep"], "sweep"):
        print_table(t["sweep"], res.meta)
    if charts:
        for p in sweep_charts(t["sweep"], res.meta, res.path):
            note(f"chart: {p}")
    return True


def show_trace(res, charts, echo, note, shown) -> bool:
    t = res.tables
    if "trace_summary" not in t:
        return False
    from commprof.views.trace import summary_lines, trace_charts

    record_frame(t["trace_summary"], "trace_summary")
    for line in summary_lines(t["trace_summary"]):
        echo(line)
    from commprof.views.trace import noise_lines

    for line in noise_lines(t["trace_summary"], t.get("trace_tokens")):
        echo(line)
    if charts and "trace_tokens" in t and "trace_layers" in t:
        for p in trace_charts(t["trace_tokens"], t["trace_layers"], t["trace_summary"], res.meta, res.path):
            note(f"chart: {p}")
    return True


def show_moe(res, charts, echo, note, shown) -> bool:
    t = res.tables
    if "moe_steps" not in t:
        return False
    from commprof.views.moe import charts as moe_charts
    from commprof.views.moe import print_summary

    print_summary(t["moe_steps"], echo)
    if charts and "moe_ranks" in t:
        for p in moe_charts(t["moe_steps"], t["moe_ranks"], res.meta, res.path):
            note(f"chart: {p}")
    return True


def show_p2p(res, charts, echo, note, shown) -> bool:
    if "p2p" not in res.tables:
        return False
    from commprof.views.p2p import render_p2p

    rows = res.tables["p2p"].to_dict("records")
    n = int(max([r["src_device"] for r in rows] + [r["dst_device"] for r in rows], default=-1)) + 1
    render_p2p(rows, n)
    return True


def show_check(res, charts, echo, note, shown) -> bool:
    if "check" not in res.docs:
        return False
    from commprof.views.check import render

    render([Item(**{k: str(v) for k, v in i.items() if k in Item.__dataclass_fields__})
            for i in res.docs["check"].get("items", [])])
    return True


def show_plan(res, charts, echo, note, shown) -> bool:
    if "plan" not in res.tables:
        return False
    doc = res.docs.get("plan", {})
    title = (f"commprof plan: {doc.get('model', '?')} TP={doc.get('tp', '?')} batch={doc.get('batch', '?')} "
             f"context={doc.get('context', '?')} ({doc.get('kind', 'modelled')})")
    frame_table(res.tables["plan"], title)
    for k, v in (doc.get("counts") or {}).items():
        echo(f"{k}: {v}")
    return True


def show_gap(res, charts, echo, note, shown) -> bool:
    found = False
    for name, title in (("gap", "commprof gap: this box / the reference"), ("gap_boxes", "commprof gap: box / box"),
                        ("gap_predict", "commprof gap: predicted per token, box / the first box")):
        if name in res.tables:
            found = True
            if res.tables[name].empty:      # e.g. box / box of a gap over one box: no rows, no empty table
                continue
            frame_table(res.tables[name], f"{title} ({res.meta.get('kind', '?')}; {res.path})")
    return found


def show_predict(res, charts, echo, note, shown) -> bool:
    if "predict" not in res.tables:
        return False
    from commprof.views.predict import predict_chart, predict_line, render_predict

    rows = res.tables["predict"].to_dict("records")
    for r in rows:
        r["weights_fit"] = str(r.get("weights_fit")).lower() in ("true", "1", "1.0")
        if r["weights_fit"]:
            r["kv_max_sequences"] = int(r["kv_max_sequences"])
    if record_frame(res.tables["predict"], "predict"):      # --format: the rows themselves, the lines on stderr
        for r in rows:
            echo(predict_line(r))
    else:                                                   # the table predict printed, then its lines and notes
        notes = [n for n in res.meta.get("notes") or [] if isinstance(n, str)]
        render_predict(rows, notes, (res.meta.get("model") or {}).get("name", "?"))
    if rows and "served_tpot_ms_p50" in rows[0]:          # predicted with --serve: the measured account
        from commprof.analysis.predictserve import serve_line

        for r in rows:
            echo(serve_line(r))
    if charts and rows:
        note(f"chart: {predict_chart(rows, os.path.join(res.path, 'predict.png'), res.meta)}")
    return True


def show_serve(res, charts, echo, note, shown) -> bool:
    if "serve_levels" not in res.tables:
        return False
    from commprof.views.serve import render as serve_render

    serve_render(res.tables["serve_levels"], res.meta, res.path, charts=charts, echo=echo, note=note)
    return True


def show_topo(res, charts, echo, note, shown) -> bool:
    """The topology, where the dir is a topo dir or shows nothing else."""
    if "topo" not in res.docs or (res.verb != "topo" and shown):
        return False
    from commprof.views.topo import render_topology

    render_topology(res.docs["topo"])
    return True


def show_report(res, charts, echo, note, shown) -> bool:
    if res.verb != "report":
        return False
    for name in ("report.html", "report.md"):
        if os.path.exists(os.path.join(res.path, name)):
            echo(f"report: {os.path.join(res.path, name)}")
    return True


def run(cfg: ShowConfig) -> int:
    """``commprof show DIR``: load any verb's results dir and show it; the exit code."""
    from commprof.results import load

    show(load(cfg.results_dir), charts=cfg.charts)
    return 0


def _records(df) -> list[dict]:
    """A table's rows as dicts, an empty cell as "" (what the account views print)."""
    return df.astype(object).where(df.notna(), "").to_dict("records")


def show_nccl_debug(res, charts, echo, note, shown) -> bool:
    """NCCL's own account of a box (``import nccl-debug``): its communicators, overrides and items."""
    if "nccl_comms" not in res.tables:
        return False
    from commprof.views.nccldebug import account_lines

    items = _records(res.tables["nccl_verdict"]) if "nccl_verdict" in res.tables else []
    for line in account_lines(res.meta, _records(res.tables["nccl_comms"]), items):
        echo(line)
    return True


def show_health(res, charts, echo, note, shown) -> bool:
    """GPU health samples (``topo``, ``sweep``, ``import nvidia-smi-q``)."""
    if "health" not in res.docs:
        return False
    from commprof.views.health import health_lines

    for line in health_lines(res.docs["health"]):
        echo(line)
    return True


def show_nccl_inspector(res, charts, echo, note, shown) -> bool:
    """The engine's collectives as NCCL Inspector recorded them (``import nccl-inspector``)."""
    if "nccl_inspector" not in res.tables:
        return False
    from commprof.views.ncclinspector import inspector_lines

    comms = _records(res.tables["nccl_inspector_comms"]) if "nccl_inspector_comms" in res.tables else []
    for line in inspector_lines(res.meta, comms, _records(res.tables["nccl_inspector"])):
        echo(line)
    return True
