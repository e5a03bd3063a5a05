"""``commprof gap``: each box against a reference of the other kind, and the boxes against each
other (the comparison is :mod:`commprof.analysis.boxgap`), printed and (``--out``) written as ``gap.csv``,
``gap_boxes.csv``, ``gap.md`` and ``gap.png``."""
from __future__ import annotations

from commprof.model.registry import GapConfig  # noqa: F401 - the flags, declared once

import os
import sys

from commprof import results
from commprof.analysis.boxgap import Gap, compute_gap
from commprof.model.errors import UsageError
from commprof.analysis.evidence import gather_boxes
from commprof.model.fileio import all_or_none, atomic_path, write_atomic
from commprof.results import meta as results_meta
from commprof.views.gap import gap_chart, markdown, provenance_line, render_gap
from commprof.analysis.predictcompare import compare_boxes
from commprof.model.errors import EXIT_OK
from commprof.results.predict import GAP_PREDICT_COLUMNS, GAP_PREDICT_CSV, is_predict_dir
from commprof.views.predictcompare import compare_lines
from commprof.analysis.checkitems_nccl import in_engine_rows
from commprof.analysis.inengine import overhead_factor
from commprof.views.inengine import inengine_lines

def write_gap(g: Gap, out_dir: str, dirs: list[str]) -> list[str]:
    """gap.md, gap.csv (each box against its reference), gap_boxes.csv (box against box), gap.png
    and meta.json into a new ``out_dir``; returns the paths."""
    import pandas as pd

    results.check_out_dir(out_dir, resume=False)
    os.makedirs(out_dir, exist_ok=True)
    with all_or_none(*(os.path.join(out_dir, n) for n in ("gap.csv", "gap_boxes.csv", "gap.png", "gap.md",
                                                           results.META_JSON))):
        paths = []
        t = g.table
        p = os.path.join(out_dir, "gap.csv")
        with atomic_path(p) as tmp:
            t.to_csv(tmp, index=False, float_format="%.6g")
        paths.append(p)
        p = os.path.join(out_dir, "gap_boxes.csv")
        with atomic_path(p) as tmp:
            (g.pairs if len(g.pairs) else pd.DataFrame(columns=g.pairs.columns)).to_csv(tmp, index=False,
                                                                                        float_format="%.6g")
        paths.append(p)
        png = gap_chart(g, os.path.join(out_dir, "gap.png"), provenance_line(g))
        p = os.path.join(out_dir, "gap.md")
        write_atomic(p, markdown(g, chart=os.path.basename(png)))
        paths += [p, png]
        kinds = sorted({b.meta.get("kind", "measured") for b in g.boxes})
        verb = "gap" if "gap" in results_meta.VERBS else "report"
        meta = results.provenance(
            verb, kinds[0] if len(kinds) == 1 and kinds[0] in results_meta.KINDS else "measured",
            "boxes against each other and against modelled reference profiles (commprof gap)", status="complete",
            hosts=sorted({h for b in g.boxes for h in b.meta.get("hosts", [])}),
            gpus=sorted({x for b in g.boxes for x in b.meta.get("gpus", [])}),
            gap=True, evidence_dirs=[results.meta.shown_path(d) for d in dirs],
            boxes=[{"box": b.label, "interconnect": b.interconnect.to_dict() if b.interconnect else None,
                    "reference": b.reference, "latency_stat": b.stat, "ttft": b.ttft} for b in g.boxes],
            reference_kind="modelled (commprof/analysis/profiles.py, every parameter with its source)",
            files={"gap.csv": "each box against its reference: this_box (measured/imported), reference (modelled), "
                              "ratio = this box / reference",
                   "gap_boxes.csv": "box against box: a = the first box, b = the other, ratio = b / a, sizes matched "
                                    "exactly or interpolated log-log inside b's measured range"})
        results.write_meta(out_dir, meta)
        paths.append(os.path.join(out_dir, results.META_JSON))
    return paths




def run(cfg: GapConfig) -> int:
    """``commprof gap``: print the comparison (and write it into ``cfg.out``); the exit code."""
    dirs, labels = list(cfg.dirs), cfg.labels
    seen = {}
    for d in dirs:
        real = os.path.realpath(d)
        if real in seen:
            raise UsageError(f"gap: '{d}' and '{seen[real]}' are the same dir: a box compared with itself "
                             "says nothing; pass each box's dir once")
        seen[real] = d
    if any(is_predict_dir(d) for d in dirs):        # predictions compare per token, box against box
        return gap_predict_command(dirs, cfg.out)
    g = compute_gap(dirs, cfg.reference, interconnect=cfg.interconnect, labels=labels)
    render_gap(g)
    for b in gather_boxes(dirs, labels):
        ie = in_engine_rows(b)          # an Inspector dir beside the box's sweep: in-engine / sweep
        if ie:
            for line in inengine_lines(b.label, ie, overhead_factor(ie)):
                print(line)
        for note in b.notes:
            print(f"commprof: note: {note}", file=sys.stderr)
        for line in b.unfinished:
            print(f"commprof: warning: {line}", file=sys.stderr)
    if cfg.out:
        for p in write_gap(g, cfg.out, dirs):
            print(f"wrote {p}")
    return 0


def gap_predict_command(dirs: list[str], out: str | None = None) -> int:
    """``commprof gap`` over predict dirs: print the per-token comparison (and write it into ``out``)."""
    rows = compare_boxes(dirs)
    for line in compare_lines(rows):
        print(line)
    if out:
        results.check_out_dir(out, resume=False)
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, GAP_PREDICT_CSV)
        results.write_table(path, GAP_PREDICT_COLUMNS, rows)
        metas = [results.read_meta(d) for d in dirs]
        results.write_meta(out, results.provenance(
            "gap", "predicted", "box vs box per token from commprof predict dirs (commprof gap)", status="complete",
            hosts=["modelled: no box"], gpus=sorted({g for m in metas for g in m.get("gpus") or []}) or None,
            evidence_dirs=[results.meta.shown_path(d) for d in dirs],
            boxes=[b for m in metas for b in m.get("boxes", [])]))
        print(f"wrote {os.path.join(out, results.META_JSON)}, {path}")
    return EXIT_OK
