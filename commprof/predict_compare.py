"""Predict dirs in ``gap`` and ``report``: box against box per token, and a report section.

A ``commprof predict`` dir holds one row per box, TP and batch (``predict.csv``). ``commprof gap
PREDICT_DIR [PREDICT_DIR ...]`` sets the boxes side by side at every (TP, batch) they share: ms per
token, communication ms per token and its share, and each box's ratio to the first; ``commprof
report PREDICT_DIR ...`` gets a section with the same lines, the rows and the stacked chart. Every
figure is read back from the dirs (nothing is re-modelled); all of them are *predicted*
(compute modelled, communication of each box's own comm input, as its ``meta.json`` says).
"""
from __future__ import annotations

import os

from .errors import UsageError, shown

GAP_PREDICT_CSV = "gap_predict.csv"
GAP_PREDICT_COLUMNS = ["tp", "batch", "box", "dir", "ms_per_token", "compute_ms", "comm_ms", "comm_share_pct",
                       "tokens_s_per_user", "ms_per_token_vs_first", "comm_ms_vs_first"]


def is_predict_dir(path: str) -> bool:
    """True for a dir written by ``commprof predict`` (its meta.json says so)."""
    from . import results

    if not os.path.isfile(os.path.join(path, results.META_JSON)):
        return False
    try:
        return results.read_meta(path).get("verb") == "predict"
    except UsageError:
        return False


def predict_rows(path: str) -> list[dict]:
    """The rows of a predict dir, numbers as floats (TP and batch as ints)."""
    from . import results
    from .predict import PREDICT_CSV

    _, rows = results.read_table_rows(os.path.join(path, PREDICT_CSV),
                                      ("box", "tp", "batch", "ms_per_token", "comm_ms", "comm_share_pct"))
    out = []
    for r in rows:
        rec = dict(r)
        for k, v in r.items():
            if k in ("tp", "batch", "kv_max_sequences", "collectives_per_step"):
                rec[k] = int(float(v)) if v not in ("",) else v
            elif k not in ("box", "gpu", "comm", "comm_kind", "comm_timing", "mode", "note", "serve_match"):
                try:
                    rec[k] = float(v)
                except ValueError:
                    rec[k] = v
        rec["weights_fit"] = str(r.get("weights_fit", "True")) == "True"
        rec["dir"] = path
        out.append(rec)
    return out


def compare_boxes(dirs: list[str]) -> list[dict]:
    """One row per box at every (TP, batch) that more than one box has, the first box's figures
    as the denominator of each ratio. Boxes are (dir, box) pairs: one dir may hold several."""
    from .results.meta import shown_path

    for d in dirs:
        if not is_predict_dir(d):
            raise UsageError(f"gap: '{d}' is not a commprof predict dir: compare predict dirs with predict dirs "
                             "(per token), or sweeps and imports with each other (per collective)")
    rows = [r for d in dirs for r in predict_rows(d)]
    boxes = list(dict.fromkeys((r["dir"], r["box"]) for r in rows))
    if len(boxes) < 2:
        raise UsageError(f"gap: {shown(dirs[0])} holds one box ({boxes[0][1] if boxes else 'none'}): give a second "
                         "predict dir, or predict several boxes at once (--gpu a,b --comm x,y)")
    multi_dir = len(dirs) > 1
    out = []
    for key in sorted({(r["tp"], r["batch"]) for r in rows}):
        at = [r for r in rows if (r["tp"], r["batch"]) == key]
        if len(at) < 2:
            continue
        first = at[0]
        for r in at:
            out.append({"tp": key[0], "batch": key[1],
                        "box": f"{r['box']} ({shown_path(r['dir'])})" if multi_dir else r["box"],
                        "dir": shown_path(r["dir"]), "ms_per_token": r["ms_per_token"],
                        "compute_ms": r.get("compute_ms", ""), "comm_ms": r["comm_ms"],
                        "comm_share_pct": r["comm_share_pct"], "tokens_s_per_user": r.get("tokens_s_per_user", ""),
                        "ms_per_token_vs_first": r["ms_per_token"] / first["ms_per_token"],
                        "comm_ms_vs_first": r["comm_ms"] / first["comm_ms"] if first["comm_ms"] else ""})
    if not out:
        raise UsageError("gap: the predict dirs share no (TP, batch): predict them at the same --tp and --batch")
    return out


def compare_lines(rows: list[dict]) -> list[str]:
    """One line per (TP, batch): every box's ms/token and its communication, absolute and share."""
    lines = []
    for key in dict.fromkeys((r["tp"], r["batch"]) for r in rows):
        at = [r for r in rows if (r["tp"], r["batch"]) == key]
        parts = []
        for i, r in enumerate(at):
            ratio = "" if i == 0 else (f", x{r['ms_per_token_vs_first']:.2f} the ms/token"
                                       + (f" and x{r['comm_ms_vs_first']:.2f} the communication"
                                          if r["comm_ms_vs_first"] != "" else "") + " of the first")
            parts.append(f"{r['box']} {r['ms_per_token']:.2f} ms/token, communication {r['comm_ms']:.2f} ms/token "
                         f"({r['comm_share_pct']:.1f}%){ratio}")
        lines.append(f"TP={key[0]} batch {key[1]} (predicted): " + "; ".join(parts))
    return lines


def gap_predict_command(dirs: list[str], out: str | None = None) -> int:
    """``commprof gap`` over predict dirs: print the per-token comparison (and write it into ``out``)."""
    from . import results
    from .errors import EXIT_OK

    rows = compare_boxes(dirs)
    for line in compare_lines(rows):
        print(line)
    if out:
        results.check_out_dir(out, resume=False)
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, GAP_PREDICT_CSV)
        fmt = [{k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
        results.write_table(path, GAP_PREDICT_COLUMNS, fmt)
        metas = [results.read_meta(d) for d in dirs]
        results.write_meta(out, results.provenance(
            "gap", "predicted", "box vs box per token from commprof predict dirs (commprof gap)", status="complete",
            hosts=["modelled: no box"], gpus=sorted({g for m in metas for g in m.get("gpus") or []}) or None,
            evidence_dirs=[results.meta.shown_path(d) for d in dirs],
            boxes=[b for m in metas for b in m.get("boxes", [])]))
        print(f"wrote {os.path.join(out, results.META_JSON)}, {path}")
    return EXIT_OK


def predict_section(path: str, out_dir: str, level: int = 2, tag: str = ""):
    """The report's section of one predict dir: its per-row lines (ms/token, communication ms and
    share), the rows as a table and the stacked chart, redrawn from the dir into the report's dir."""
    from . import results
    from .results.meta import shown_path
    from .views.predict import predict_chart, predict_line
    from .views.report import Section, Table

    rows = predict_rows(path)
    meta = results.read_meta(path)
    model = (meta.get("model") or {}).get("name", "?")
    headers = ("box", "TP", "batch", "compute ms", "comm ms/token", "ms/token", "comm %", "tok/s per user")
    trows = [(r["box"], r["tp"], r["batch"], f"{r['compute_ms']:.2f}", f"{r['comm_ms']:.2f}",
              f"{r['ms_per_token']:.2f}", f"{r['comm_share_pct']:.1f}", f"{r['tokens_s_per_user']:.1f}") for r in rows]
    chart = predict_chart(rows, os.path.join(out_dir, f"predict{('_' + tag) if tag else ''}.png"), meta)
    lines = [predict_line(r) for r in rows]
    if rows and "served_tpot_ms_p50" in rows[0]:        # predicted with --serve: the measured account too
        from .predict_serve import serve_line

        lines += [serve_line(r) for r in rows]
    return Section(f"Predicted per token: {model} ({shown_path(path)})", level=level,
                   prov=("predicted: GPU compute modelled from published specs (calibration in meta.json), "
                         "communication from each box's comm input: "
                         + "; ".join(f"{b['box']} ({b['comm'].get('kind')})" for b in meta.get("boxes", []))),
                   paragraphs=lines, tables=[Table(headers, trows)], images=[chart])


def predicted_report(dirs: list[str], out_dir: str) -> list[str]:
    """``commprof report`` over predict dirs only: one predict section per dir."""
    from . import results
    from .fileio import all_or_none
    from .results.meta import check_writable, shown_path
    from .views import report as views

    check_writable(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    sections = [predict_section(d, out_dir, tag=str(k) if len(dirs) > 1 else "") for k, d in enumerate(dirs, 1)]
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
