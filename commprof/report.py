"""``commprof report``: one self-contained HTML page (charts embedded) and a Markdown twin with
the checklist, topology, sweep, trace breakdown, gap and MoE sections, from results dirs alone
(nothing measured). The numbers come from ``check`` and ``gap``; ``commprof.views.report`` renders."""
from __future__ import annotations

import os

from . import results
from .check import gather, load_thresholds, run_items
from .items import verdict
from .errors import UsageError
from .gap import compute_gap
from .views import report as views


def build(dirs: list[str], out_dir: str, thresholds: str | None = None, model: str | None = None,
          reference: str | None = None) -> list[str]:
    """Write report.html and report.md into ``out_dir``; returns their paths."""
    from .costmodel import get_profile, list_profiles

    if reference is not None:
        try:
            get_profile(reference.removeprefix("reference:"))
        except (KeyError, UsageError):
            raise UsageError(f"--reference '{reference}': unknown; use one of "
                             f"{', '.join(p['name'] for p in list_profiles())}") from None
    loaded = [results.load(d) for d in dirs]
    os.makedirs(out_dir, exist_ok=True)
    ev = gather(dirs)
    items = run_items(ev, load_thresholds(thresholds), model)
    gap, gap_error = None, None
    if ev.sweep is not None:
        try:
            gap = compute_gap(dirs, reference, ev=ev)
        except UsageError as e:
            gap_error = str(e)
    hosts = sorted({h for m in (ev.sweep_meta, ev.trace_meta) if m for h in m.get("hosts", [])}) or \
        ([ev.topo.get("host", "?")] if ev.topo else ["?"])

    sections = [views.checklist_section(items, verdict(items))]     # first: what a buyer hands a vendor
    if ev.topo:
        sections.append(views.topology_section(ev.topo))
    sweep_res = next((r for r in loaded if "sweep" in r.tables), None)
    if ev.sweep is not None and sweep_res is not None:
        sections.append(views.sweep_section(ev.sweep, ev.sweep_meta, sweep_res.path, out_dir))
    trace_res = next((r for r in loaded if "trace_summary" in r.tables), None)
    if trace_res is not None:
        sections.append(views.trace_section(trace_res, out_dir))
    if ev.sweep is not None:
        sections.append(views.gap_section(gap, gap_error))
        wire = views.wire_section(gap, ev.sweep, ev.sweep_custom, out_dir)
        if wire is not None:
            sections.append(wire)
    moe_res = next((r for r in loaded if "moe_steps" in r.tables), None)
    if moe_res is not None:
        sections.append(views.moe_section(moe_res))
    paths = views.write_report(out_dir, f"commprof report: {', '.join(hosts)}",
                               [os.path.abspath(d) for d in dirs], sections)
    results.stamp(out_dir, results.provenance(
        "report", "checklist", "one-page report over results dirs (commprof report)", status="complete",
        hosts=hosts, gpus=sorted({g for m in ev.metas for g in m.get("gpus", [])}) or None,
        evidence_dirs=[os.path.abspath(d) for d in dirs], verdict=verdict(items)))
    return paths


def run_report(dirs: list[str], out: str | None = None, thresholds: str | None = None,
               model: str | None = None, reference: str | None = None) -> int:
    if not dirs:
        raise UsageError("report needs at least one results dir (from commprof sweep, trace or topo)")
    paths = build(dirs, out or dirs[0], thresholds, model, reference)
    for p in paths:
        print(f"wrote {p}")
    return 0
