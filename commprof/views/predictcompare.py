"""What a person sees of predict dirs in ``gap`` and ``report``: one line per (TP, batch) with
every box's ms/token and its communication (absolute and share), and the report's section of a
predict dir (its lines, its rows as a table, the stacked chart)."""
from __future__ import annotations

import os

from commprof import results
from commprof.analysis.predictcompare import compare_boxes
from commprof.analysis.predictserve import serve_line
from commprof.model.errors import UsageError
from commprof.results.meta import shown_path
from commprof.results.predict import predict_rows
from commprof.views.predict import predict_chart, predict_line
from commprof.views.report import Section, Table


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


def predict_section(path: str, out_dir: str, level: int = 2, tag: str = ""):
    """The report's section of one predict dir: its per-row lines (ms/token, communication ms and
    share), the rows as a table and the stacked chart, redrawn from the dir into the report's dir."""
    rows = predict_rows(path)
    meta = results.read_meta(path)
    model = (meta.get("model") or {}).get("name", "?")
    headers = ("box", "TP", "batch", "compute ms", "comm ms/token", "ms/token", "comm %", "tok/s per user")
    trows = [(r["box"], r["tp"], r["batch"], f"{r['compute_ms']:.2f}", f"{r['comm_ms']:.2f}",
              f"{r['ms_per_token']:.2f}", f"{r['comm_share_pct']:.1f}", f"{r['tokens_s_per_user']:.1f}") for r in rows]
    chart = predict_chart(rows, os.path.join(out_dir, f"predict{('_' + tag) if tag else ''}.png"), meta)
    lines = [predict_line(r) for r in rows]
    if rows and "served_tpot_ms_p50" in rows[0]:        # predicted with --serve: the measured account too
        lines += [serve_line(r) for r in rows]
    return Section(f"Predicted per token: {model} ({shown_path(path)})", level=level,
                   prov=("predicted: GPU compute modelled from published specs (calibration in meta.json), "
                         "communication from each box's comm input: "
                         + "; ".join(f"{b['box']} ({b['comm'].get('kind')})" for b in meta.get("boxes", []))),
                   paragraphs=lines, tables=[Table(headers, trows)], images=[chart])


def boxes_section(dirs: list[str]):
    """The report's box-against-box section over predict dirs (the lines ``gap`` prints): None with
    one box, or when the boxes share no (TP, batch)."""
    try:
        rows = compare_boxes(dirs)
    except UsageError:
        return None
    return Section("Box against box, per token", level=2,
                   prov="predicted: each box's figures read back from its predict dir (commprof gap over the same "
                        "dirs prints the same lines); ratios are to the first box",
                   paragraphs=compare_lines(rows))
