"""``commprof report``: one self-contained HTML page (charts embedded) and a Markdown twin with
the checklist, topology, sweep, trace breakdown, gap and MoE sections, from results dirs alone
(nothing measured); with several boxes, the boxes side by side and one section per box. The
numbers come from ``check`` and ``gap``; ``commprof.views.report`` renders."""
from __future__ import annotations

from commprof.model.registry import ReportConfig  # noqa: F401 - the flags, declared once


import os
import sys

from commprof import results
from commprof.analysis.checkitems import run_items
from commprof.analysis.evidence import gather, unfinished_lines
from commprof.analysis.thresholds import load_thresholds
from commprof.analysis.verdict import verdict
from commprof.model.errors import UsageError
from commprof.model.fileio import all_or_none
from commprof.results.meta import check_writable, shown_path
from commprof.analysis.boxgap import check_reference, compute_gap
from commprof.views import report as views
from commprof.analysis.interconnect import parse_interconnect
from commprof.model.models import get_model
from commprof.analysis.stepmodel import decode_collectives
from commprof.analysis.latency import CommTable
from commprof.model.errors import EXIT_CHECK_FAILED
from commprof.results.predict import is_predict_dir
from commprof.views.predictcompare import boxes_section, predict_section
from commprof.analysis.checkitems_nccl import in_engine_rows
from commprof.analysis.inengine import overhead_factor



def build(dirs: list[str], out_dir: str, thresholds: str | None = None, model: str | None = None,
          reference: str | None = None, interconnect: str | None = None, tp: int | None = None,
          labels: str | None = None) -> list[str]:
    """Write report.html and report.md into ``out_dir``; returns their paths.

    One box: its checklist, topology, sweep, trace, gap (table, chart, alpha-beta fit), wire and
    MoE sections. Several boxes (every dir with a sweep is one): the boxes side by side first
    (verdicts, interconnects, box-against-box ratios, charts with one line per box), then one
    section per box."""
    check_reference(reference)
    flags = parse_interconnect(interconnect)
    predicted = [d for d in dirs if is_predict_dir(d)]     # per-token predictions: their own sections
    if predicted and len(predicted) == len(dirs):
        return predicted_report(predicted, out_dir)
    dirs = [d for d in dirs if d not in predicted]
    for d in dirs:                  # every dir readable before anything is written
        results.load(d)
    check_writable(out_dir)         # a file in the way or a read-only dir: one line, not an OSError
    os.makedirs(out_dir, exist_ok=True)
    ev = gather(dirs, labels)
    items = run_items(ev, load_thresholds(thresholds), model, flags)
    boxes = ev.all_boxes()
    gap, gap_error = None, None
    if any(b.sweep is not None for b in boxes):
        try:
            gap = compute_gap(dirs, reference, ev=ev, interconnect=flags)
        except UsageError as e:
            gap_error = str(e)
    multi = len(boxes) > 1
    sections = [views.headline_section(boxes, items)]
    partial = unfinished_lines(ev)
    if partial:
        sections.append(views.Section("Unfinished runs: the figures below are partial", paragraphs=partial))
    if multi:
        sections.append(views.side_by_side_section(boxes, items, gap, gap_error, out_dir))
    for k, b in enumerate(boxes, start=1):
        mine = [i for i in items if i.box == b.label] if multi else items
        level = 3 if multi else 2
        prefix = f"{b.label}: " if multi else ""
        if multi:
            meta = b.sweep_meta or b.trace_meta or b.serve_meta
            sections.append(views.Section(f"Box {k}: {b.label}", level=2,
                                          headlines=[(b.label, views.box_headline(b.label, mine, meta, b.interconnect))],
                                          paragraphs=[f"dirs: {', '.join(shown_path(d) for d in b.dirs)}",
                                                      *b.notes]))
        sections.append(views.checklist_section(mine, verdict(mine), b.interconnect, level=level, prefix=prefix))
        if b.topo:
            sections.append(views.topology_section(b.topo, level=level, prefix=prefix))
        if b.nccl_debug is not None:             # NCCL's own account (import nccl-debug)
            sections.append(views.nccl_debug_section(b.nccl_debug, mine, level=level, prefix=prefix))
        ie = in_engine_rows(b)                   # NCCL Inspector beside the box's sweep
        if ie:
            sections.append(views.in_engine_section(ie, overhead_factor(ie), results.read_meta(b.inspector_dir),
                                                    level=level, prefix=prefix))
        if b.sweep is not None:
            sections.append(views.sweep_section(b.sweep, b.sweep_meta, b.sweep_dir, out_dir, level=level, prefix=prefix,
                                                chart_tag=f"box{k}" if multi else ""))
        trace_res = next((r for r in b.loaded if "trace_summary" in r.tables), None)
        if trace_res is not None:
            sections.append(views.trace_section(trace_res, out_dir, level=level, prefix=prefix))
        if b.sweep is not None:
            bg = next((x for x in (gap.boxes if gap else []) if x.label == b.label), None)
            sections.append(views.gap_section(bg, gap_error, out_dir, level=level, prefix=prefix,
                                              chart_tag=f"box{k}" if multi else ""))
            wire = views.wire_section(bg, b.sweep, b.sweep_custom, out_dir, level=level, prefix=prefix,
                                      chart_tag=f"box{k}" if multi else "")
            if wire is not None:
                sections.append(wire)
        moe_res = next((r for r in b.loaded if "moe_steps" in r.tables), None)
        if moe_res is not None:
            sections.append(views.moe_section(moe_res, level=level, prefix=prefix))
        serve_res = next((r for r in b.loaded if "serve_levels" in r.tables), None)
        if serve_res is not None:
            comm = served_comm(b, model, tp) if trace_res is None else None
            sections.append(views.serve_section(serve_res, out_dir, trace_res=trace_res, level=level, prefix=prefix,
                                                tp=tp, sweep_comm=comm))
    sections += [predict_section(d, out_dir, tag=str(k) if len(predicted) > 1 else "")
                 for k, d in enumerate(predicted, 1)]
    if multi:
        title = f"commprof report: {' vs '.join(b.label for b in boxes)}"
    else:
        hosts = sorted({h for m in (ev.sweep_meta, ev.trace_meta) if m for h in m.get("hosts", [])}) or \
            ([ev.topo.get("host", "?")] if ev.topo else ["?"])
        title = f"commprof report: {', '.join(hosts)}"
    with all_or_none(*(os.path.join(out_dir, n) for n in (views.REPORT_HTML, views.REPORT_MD, results.META_JSON))):
        paths = views.write_report(out_dir, title, [shown_path(d) for d in dirs], sections)
        metas = [m for b in boxes for m in b.metas]
        results.stamp(out_dir, results.provenance(
            "report", "checklist", "one-page report over results dirs (commprof report)", status="complete",
            hosts=sorted({h for m in metas for h in m.get("hosts", [])}) or ["?"],
            gpus=sorted({g for m in metas for g in m.get("gpus", [])}) or None,
            evidence_dirs=[shown_path(d) for d in dirs], verdict=verdict(items),
            boxes=[{"box": b.label, "verdict": verdict([i for i in items if i.box in ("", b.label)]),
                    "interconnect": b.interconnect.to_dict() if b.interconnect else None} for b in boxes]))
    return paths




def served_comm(box, model: str | None, tp: int | None) -> dict | None:
    """A serve dir's tie-back without a trace: one decode token's collectives (``plan`` of
    ``model`` at ``tp``, batch 1) priced by the box's own sweep (per-call rows, log-log in size),
    as ``trace --predict`` prices them. None without a sweep, a model or a TP degree."""
    if box.sweep_dir is None or not model or not tp or tp < 2:
        return None

    table = CommTable(box.sweep_dir, flag="")
    try:
        us = sum(table.latency_us(s.op, tp, "graph", s.size_bytes) for s in decode_collectives(get_model(model), tp, 1))
    except UsageError as e:
        return {"error": str(e)}
    return {"comm_ms": us / 1e3, "tp": tp, "model": model, "collectives": len(table.lookups),
            "sweep": box.sweep_dir, "timing": table.timing}


def verdict_lines(out_dir: str) -> list[str]:
    """What the page concludes, for the terminal: the checklist's verdict, per box when there are
    several (from the report's own meta.json); none for a report of predictions only."""
    try:
        meta = results.read_meta(out_dir)
    except UsageError:
        return []
    if not meta.get("verdict"):
        return []
    boxes = meta.get("boxes") or []
    lines = [f"commprof report: checklist verdict {meta['verdict']}" + (f" over {len(boxes)} boxes" if len(boxes) > 1 else "")]
    if len(boxes) > 1:
        lines += [f"  {b.get('box', '?')}: {b.get('verdict', '?')}" for b in boxes]
    return lines


def run(cfg: ReportConfig) -> int:
    """``commprof report``: the page and its Markdown twin into ``out`` (else the first dir,
    checked writable before anything is read); the exit code."""
    dirs, out = list(cfg.dirs), cfg.out
    thresholds, model, reference, interconnect = cfg.thresholds, cfg.model, cfg.reference, cfg.interconnect
    target = out or (dirs[0] if dirs and os.path.isdir(dirs[0]) else None)
    if target is not None:
        try:
            check_writable(target)
        except UsageError as e:
            raise UsageError(f"{'--out' if out else 'the first results dir (pass --out DIR)'}: {e}") from None
    if not dirs:
        raise UsageError("report needs at least one results dir (from commprof sweep, trace or topo)")
    if cfg.tp is not None and not 1 <= cfg.tp <= 65536:
        raise UsageError(f"--tp {cfg.tp}: expected a whole number from 1 to 65,536")
    paths = build(dirs, out or dirs[0], thresholds, model, reference, interconnect, cfg.tp, labels=cfg.labels)
    for line in verdict_lines(out or dirs[0]):
        print(line)
    for p in paths:
        print(f"wrote {p}")
    if any(results.load(d).unfinished for d in dirs if not is_predict_dir(d)):
        print("commprof: error: the report holds an unfinished run's partial figures (see its first section)",
              file=sys.stderr)
        return EXIT_CHECK_FAILED
    return 0


def predicted_report(dirs: list[str], out_dir: str) -> list[str]:
    """``commprof report`` over predict dirs only: the boxes against each other per token (where they
    share a TP and batch), then one predict section per dir."""
    check_writable(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    sections = [predict_section(d, out_dir, tag=str(k) if len(dirs) > 1 else "") for k, d in enumerate(dirs, 1)]
    both = boxes_section(dirs)
    if both is not None:
        sections.insert(0, both)
    metas = [results.read_meta(d) for d in dirs]
    title = "commprof report: predicted per token (" + ", ".join(
        dict.fromkeys(b["box"] for m in metas for b in m.get("boxes", []))) + ")"
    with all_or_none(*(os.path.join(out_dir, n) for n in (views.REPORT_HTML, views.REPORT_MD, results.META_JSON))):
        paths = views.write_report(out_dir, title, [shown_path(d) for d in dirs], sections)
        results.stamp(out_dir, results.provenance(
            "report", "predicted", "one-page report over commprof predict dirs (commprof report)", status="complete",
            hosts=["modelled: no box"], gpus=sorted({g for m in metas for g in m.get("gpus") or []}) or None,
            evidence_dirs=[shown_path(d) for d in dirs]))
    return paths
