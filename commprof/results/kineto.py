"""An imported engine's trace dir (``commprof import kineto``): the trace tables
(:mod:`commprof.results.trace`) plus ``kineto_steps.csv`` (per step and rank),
``kineto_collectives.csv`` (per collective) and ``kineto_ranks.csv`` (per rank file)."""
from __future__ import annotations

import os

from commprof.results.table import write_table
from commprof.results.trace import LAYER_COLUMNS, LAYERS_CSV, SUMMARY_COLUMNS, SUMMARY_CSV, TOKEN_COLUMNS, TOKENS_CSV

KINETO_STEPS_CSV = "kineto_steps.csv"
KINETO_COLLECTIVES_CSV = "kineto_collectives.csv"
KINETO_RANKS_CSV = "kineto_ranks.csv"
STEP_COLUMNS = ["tp", "batch", "mode", "phase", "step", "token", "rank", "step_tokens", "requests", "window_us", "compute_us", "comm_us", "comm_exposed_us",
                "comm_overlapped_us", "memory_us", "idle_us", "collectives", "transfer_us", "wait_us",
                "straggler_count"]
COLL_COLUMNS = ["tp", "batch", "mode", "step", "token", "index", "rank", "site", "op", "kernel", "size_bytes",
                "start_us", "duration_us", "transfer_us", "wait_us", "straggler"]
RANK_COLUMNS = ["tp", "batch", "mode", "rank", "file", "backend", "comm_kernels", "comm_kernel_us", "compute_kernels",
                "compute_kernel_us", "memory_events", "memory_us", "hta_overlap_pct",
                "compute_cpu_ops", "compute_cpu_us", "na_reason"]


def write_kineto_tables(out_dir, tok_rows, lay_rows, sum_rows, step_rows, coll_rows, rank_rows) -> None:
    """The three trace tables and the three Kineto tables of an imported dir, each written whole."""
    write_table(os.path.join(out_dir, TOKENS_CSV), TOKEN_COLUMNS, tok_rows)
    write_table(os.path.join(out_dir, LAYERS_CSV), LAYER_COLUMNS,
                [{k: r.get(k, "") for k in LAYER_COLUMNS} for r in lay_rows])
    write_table(os.path.join(out_dir, SUMMARY_CSV), SUMMARY_COLUMNS,
                [{k: r.get(k, "") for k in SUMMARY_COLUMNS} for r in sum_rows])
    write_table(os.path.join(out_dir, KINETO_STEPS_CSV), STEP_COLUMNS, step_rows)
    write_table(os.path.join(out_dir, KINETO_COLLECTIVES_CSV), COLL_COLUMNS, coll_rows)
    write_table(os.path.join(out_dir, KINETO_RANKS_CSV), RANK_COLUMNS, rank_rows)
