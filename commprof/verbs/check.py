"""``commprof check``: the pre-purchase checklist, in the buyer's acceptance order.

Every item reads evidence from results dirs (``topo.json``, ``sweep.csv``, ``trace_summary.csv``,
``hostbw.json``) and gives PASS / WARN / FAIL / SKIP with the measured value, the threshold, the
threshold's source (or "proposed") and a hint. Thresholds live in a versioned TOML file
(``commprof/data/thresholds.toml``) that ``--thresholds FILE`` overrides key by key.

Dirs describe boxes: every dir holding a sweep (measured, imported or a reference profile) is one
box; a dir without one (trace, topo, p2p, hostbw) joins the box whose hosts it shares, else the box
before it on the command line (:mod:`commprof.analysis.evidence`). Each box is judged by its own interconnect
(:func:`commprof.analysis.interconnect.resolve_interconnect`):
the ``--interconnect`` flag, else its ``topo.json`` (NVML, or ``nvidia-smi topo`` text imported), else
the GPU names its logs carry; unknown stays unknown (its link items SKIP and say what would decide).

The items are :mod:`commprof.analysis.checkitems`, the thresholds :mod:`commprof.analysis.thresholds`; this module
wires them: flags -> evidence (or, with no dir, a measuring run: :func:`measure`) -> items ->
``check.json`` + ``check.md`` -> the table.
"""
from __future__ import annotations

from commprof.model.registry import CheckConfig  # noqa: F401 - the flags, declared once

import os
import sys

from commprof import results
from commprof.analysis.checkitems import run_items
from commprof.model.errors import EXIT_CHECK_FAILED, EXIT_INSUFFICIENT_EVIDENCE, UsageError
from commprof.analysis.evidence import Evidence, gather, unfinished_lines
from commprof.model.fileio import all_or_none, write_atomic, write_json
from commprof.analysis.interconnect import parse_interconnect, resolve_interconnect
from commprof.analysis.verdict import INSUFFICIENT, Item, headline, scope, verdict
from commprof.results.meta import check_writable, shown_path
from commprof.analysis.thresholds import load_thresholds
from commprof.views.check import markdown, render
from commprof.model.machine import now_iso
from commprof.capture.checkmeasure import measure


def write_check(items: list[Item], th: dict, ev: Evidence, out_dir: str, could_not=()) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    boxes = ev.all_boxes()
    per_box = []
    for b in boxes:
        mine = [i for i in items if i.box in ("", b.label)] if len(boxes) > 1 else items
        ic = b.interconnect or resolve_interconnect(b)
        per_box.append({"box": b.label, "dirs": [shown_path(d) for d in b.dirs],
                        "interconnect": ic.to_dict(), "interconnect_evidence": ic.evidence or "none",
                        "verdict": verdict(mine), "headline": headline(mine), "scope": scope(mine),
                        "items": [i.to_dict() for i in mine]})
    data = {"kind": "checklist", "created": now_iso(), "thresholds_version": th.get("version"),
            "evidence_dirs": [shown_path(d) for b in boxes for d in b.dirs],
            "items": [i.to_dict() for i in items], "verdict": verdict(items), "headline": headline(items),
            "scope": scope(items), "could_not": list(could_not), "boxes": per_box,
            "unfinished_dirs": [u for b in boxes for u in b.unfinished]}
    if len(boxes) == 1:
        data["interconnect"] = per_box[0]["interconnect"]
    jp = os.path.join(out_dir, "check.json")
    mp = os.path.join(out_dir, "check.md")
    with all_or_none(jp, mp, os.path.join(out_dir, results.META_JSON)):
        write_json(jp, data)
        metas = [m for b in boxes for m in b.metas]
        results.stamp(out_dir, results.provenance(
            "check", "checklist", "pre-purchase checklist over results dirs (commprof check)", status="complete",
            hosts=sorted({h for d in metas for h in d.get("hosts", [])}) or None,
            gpus=sorted({g for d in metas for g in d.get("gpus", [])}) or None,
            evidence_dirs=data["evidence_dirs"], verdict=data["verdict"],
            boxes=[{"box": p["box"], "verdict": p["verdict"], "interconnect": p["interconnect"]["cls"],
                    "interconnect_evidence": p["interconnect_evidence"]} for p in per_box]))
        write_atomic(mp, markdown(items, data))
    return [jp, mp]


def run(cfg: CheckConfig, console=None) -> int:
    """``commprof check``: the exit code (EXIT_CHECK_FAILED on any FAIL, of any box). Where
    check.json goes (``out``, else the first dir) is checked writable before anything is read;
    with no dir, what the checklist needs is measured on this machine first (:func:`measure`)."""
    # its own dir (never into an input dir): --out, else a new results/runs/<stamp>-<host>-check/
    target = cfg.out or results.default_out_dir().rstrip("/") + "-check"
    try:
        check_writable(target)
    except UsageError as e:
        raise UsageError(f"{'--out' if cfg.out else 'the default check dir (pass --out DIR)'}: {e}") from None
    dirs, out, model = list(cfg.dirs), target, cfg.model
    th = load_thresholds(cfg.thresholds)
    flags = parse_interconnect(cfg.interconnect)
    if cfg.budget_s is not None and not (cfg.budget_s > 0 and cfg.budget_s == cfg.budget_s):
        raise UsageError(f"--budget {cfg.budget_s:g}: give the measuring run's time in seconds (> 0)")
    could_not: list[str] = []
    if not dirs:
        root = out or results.default_out_dir().rstrip("/") + "-check"
        dirs, could_not = measure(root, model or "Qwen2.5-32B", cfg.budget_s)
        out = root
    ev = gather(dirs)
    items = run_items(ev, th, model, flags)
    render(items, console, boxes=[(b.label, b.interconnect) for b in ev.all_boxes()])
    for b in ev.all_boxes():
        for note in b.notes:
            print(f"commprof: note: {note}", file=sys.stderr)
    partial = unfinished_lines(ev)
    for line in could_not:
        print(f"commprof check: could not: {line}", file=sys.stderr)
    for p in write_check(items, th, ev, out or dirs[0], could_not):
        print(f"wrote {p}")
    v = verdict(items)
    if v == INSUFFICIENT:
        for i in items:
            if i.status == "INSUFFICIENT":
                print(f"commprof check: INSUFFICIENT EVIDENCE{f' for box {i.box!r}' if i.box else ''}: {i.value}; "
                      f"{i.hint}", file=sys.stderr)
    if partial and v not in ("FAIL", INSUFFICIENT):
        print("commprof: error: the checklist judged an unfinished run's partial figures; it is no pass "
              "(finish the run, e.g. sweep --resume, and check again)", file=sys.stderr)
        return EXIT_CHECK_FAILED
    return EXIT_CHECK_FAILED if v == "FAIL" else EXIT_INSUFFICIENT_EVIDENCE if v == INSUFFICIENT else 0
