"""A ``commprof predict`` dir's files: ``predict.csv`` (one row per box, TP and batch) read back,
and the name and columns of ``gap_predict.csv`` (box against box per token, ``commprof gap`` over
predict dirs)."""
from __future__ import annotations

import os

from commprof.model.errors import UsageError
from commprof.results.meta import META_JSON, read_meta
from commprof.results.table import read_table_rows

PREDICT_CSV = "predict.csv"
GAP_PREDICT_CSV = "gap_predict.csv"
GAP_PREDICT_COLUMNS = ["tp", "batch", "box", "dir", "ms_per_token", "compute_ms", "comm_ms", "comm_share_pct",
                       "tokens_s_per_user", "ms_per_token_vs_first", "comm_ms_vs_first"]


def is_predict_dir(path: str) -> bool:
    """True for a dir written by ``commprof predict`` (its meta.json says so)."""
    if not os.path.isfile(os.path.join(path, META_JSON)):
        return False
    try:
        return read_meta(path).get("verb") == "predict"
    except UsageError:
        return False


def predict_rows(path: str) -> list[dict]:
    """The rows of a predict dir, numbers as floats (TP and batch as ints)."""
    _, rows = read_table_rows(os.path.join(path, PREDICT_CSV),
                                      ("box", "tp", "batch", "ms_per_token", "comm_ms", "comm_share_pct"))
    out = []
    for r in rows:
        rec = dict(r)
        for k, v in r.items():
            if k in ("tp", "batch", "context", "prompt", "kv_max_sequences", "collectives_per_step"):
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
