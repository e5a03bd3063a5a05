"""Predict dirs side by side (``commprof gap PREDICT_DIR PREDICT_DIR``): box against box per token.

Every figure is read back from the dirs (nothing is re-modelled); all of them are *predicted*
(compute modelled, communication of each box's own comm input, as its ``meta.json`` says).
"""
from __future__ import annotations

from commprof.model.errors import UsageError, shown
from commprof.results.meta import shown_path
from commprof.results.predict import is_predict_dir, predict_rows


def compare_boxes(dirs: list[str]) -> list[dict]:
    """One row per box at every (TP, batch) that more than one box has, the first box's figures
    as the denominator of each ratio. Boxes are (dir, box) pairs: one dir may hold several."""
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
