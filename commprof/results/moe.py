"""A moe results dir: ``moe_steps.csv`` (one row per ep, tokens, skew and placement) and
``moe_ranks.csv`` (per rank of each), written by rank 0 of ``commprof moe`` beside ``meta.json``."""
from __future__ import annotations

import csv
import os

from commprof.model.errors import UsageError, shown
from commprof.model.moeconfig import DTYPE, DTYPE_BYTES, MoeRunConfig
from commprof.results.meta import provenance, rank_fields, start
from commprof.results.table import write_table

STEPS_CSV = "moe_steps.csv"
RANKS_CSV = "moe_ranks.csv"
STEP_COLUMNS = [
    "ep", "tokens", "skew", "placement", "top_k", "experts", "hidden", "redundant_experts",
    "iters", "warmup", "backend", "clock",
    "latency_us_p50", "latency_us_p95", "latency_us_p99", "latency_us_min", "latency_us_max", "latency_us_mean",
    "imbalance", "max_rank_tokens", "mean_rank_tokens", "bytes_sent_max", "bytes_recv_max",
    "slowdown", "hot_ranks", "hot_experts", "wrong", "status",
]
RANK_COLUMNS = ["ep", "tokens", "skew", "placement", "rank", "experts_held", "load_tokens",
                "tokens_recv", "bytes_sent", "bytes_recv", "bytes_recv_expected"]


def write_moe_tables(out_dir: str, steps: list[dict], ranks: list[dict]) -> None:
    """Both tables, each written whole."""
    for name, cols, rows in ((STEPS_CSV, STEP_COLUMNS, steps), (RANKS_CSV, RANK_COLUMNS, ranks)):
        write_table(os.path.join(out_dir, name), cols, rows)


def start_moe_meta(cfg: MoeRunConfig, infos: list) -> None:
    """Rank 0's ``meta.json`` as the run starts: the ranks, the model's MoE shape, the config."""
    m = cfg.model
    start(cfg.out_dir, provenance(
        "moe", "measured", "MoE expert-parallel dispatch/combine all-to-all (commprof moe)", command=cfg.argv,
        **rank_fields(infos),
        backend=cfg.backend, backend_reason=cfg.backend_reason, launch=cfg.launch,
        model={k: m[k] for k in ("name", "hidden", "experts", "top_k", "dense_layers") if k in m},
        dtype=DTYPE, seed=cfg.seed, config=cfg.to_dict(),
        columns={
            "latency_us_*": "one dispatch + combine step (two all_to_all_single); each iteration's sample "
                            "is the max across the EP group's ranks",
            "imbalance": "max / mean tokens received per rank (dispatch)",
            "slowdown": "latency_us_p50 / the uniform-routing latency_us_p50 at the same ep, tokens, placement",
            "bytes_*": f"hidden x {DTYPE_BYTES} bytes ({DTYPE}) per (token, chosen expert), dispatch direction",
            "wrong": "ranks whose received bytes or contents differ from what the routing sent them"},
    ))


def read_moe_steps(path: str) -> list[dict]:
    """The rows of a ``commprof moe`` dir's ``moe_steps.csv`` as dicts of text (for ``predict
    --moe-skew``); UsageError when ``path`` is not such a dir."""
    f = os.path.join(path, STEPS_CSV)
    if not os.path.isfile(f):
        raise UsageError(f"--moe-skew {shown(path)}: not a commprof moe dir (no {STEPS_CSV})")
    with open(f, newline="", encoding="utf-8", errors="replace") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or "imbalance" not in rows[0]:
        raise UsageError(f"--moe-skew {shown(path)}: {STEPS_CSV} has no rows with an imbalance column")
    return rows
