"""An imported NCCL Inspector account (``commprof import nccl-inspector``): ``nccl_inspector.csv``
(one row per communicator, rank, collective, message size and timing source: calls, time
percentiles in microseconds, bandwidths) and ``nccl_inspector_comms.csv`` (one row per
communicator, with the line a person reads); the account's scalars are in meta.json."""
from __future__ import annotations

import os

from commprof.results.table import write_table

NCCL_INSPECTOR_CSV = "nccl_inspector.csv"
NCCL_INSPECTOR_COMMS_CSV = "nccl_inspector_comms.csv"


def write_inspector_tables(out_dir: str, row_columns, rows, comm_columns, comms) -> None:
    write_table(os.path.join(out_dir, NCCL_INSPECTOR_CSV), row_columns, rows)
    write_table(os.path.join(out_dir, NCCL_INSPECTOR_COMMS_CSV), comm_columns, comms)
