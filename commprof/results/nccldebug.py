"""An imported NCCL_DEBUG account (``commprof import nccl-debug``): ``nccl_comms.csv`` (one row per
communicator, with the line a person reads), ``nccl_pairs.csv`` (per communicator, rank pair and
direction: the transport its channels use) and ``nccl_verdict.csv`` (the check items and what to
do next); the account's scalars (versions, overrides, network, engine lines) are in meta.json."""
from __future__ import annotations

import os

from commprof.results.table import write_table

NCCL_COMMS_CSV = "nccl_comms.csv"
NCCL_PAIRS_CSV = "nccl_pairs.csv"
NCCL_VERDICT_CSV = "nccl_verdict.csv"
VERDICT_COLUMNS = ["id", "item", "verdict", "evidence", "what_now"]


def write_nccl_tables(out_dir: str, comm_columns, comms, pair_columns, pairs, items) -> None:
    write_table(os.path.join(out_dir, NCCL_COMMS_CSV), comm_columns, comms)
    write_table(os.path.join(out_dir, NCCL_PAIRS_CSV), pair_columns, pairs)
    write_table(os.path.join(out_dir, NCCL_VERDICT_CSV), VERDICT_COLUMNS, items)
