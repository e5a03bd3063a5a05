"""The one seam between capture and everything that reads it: results directories.

* :mod:`.meta`: provenance, one ``meta.json`` writer for every verb (same base keys, ``verb``,
  schema version);
* :mod:`.table`: the crash-safe appender every table is written through;
* :mod:`.sweep`: ``sweep.csv``, its columns, writer and typed reader;
* :mod:`.load`: :func:`load` reads any verb's dir into typed tables plus provenance.
"""
from commprof.results.load import Results, load
from commprof.results.meta import (BASE_KEYS, META_JSON, RUNS_DIR, SCHEMA_VERSION, check_out_dir, default_out_dir, failing, file_sha256, finish_meta, normalize,
                   provenance, rank_fields, read_meta, stamp, start, write_meta)
from commprof.results.sweep import (COLUMN_DOCS, COLUMNS, FRAME_IMPLS, SWEEP_CSV, SweepWriter, load_frame, one_timing, open_sweep,
                    read_rows, write_sweep_table)
from commprof.results.table import TableAppender, read_table_rows, write_table

__all__ = ["BASE_KEYS", "COLUMNS", "COLUMN_DOCS", "FRAME_IMPLS", "META_JSON", "RUNS_DIR", "SCHEMA_VERSION", "SWEEP_CSV",
           "Results", "SweepWriter", "TableAppender", "check_out_dir", "default_out_dir", "failing", "file_sha256", "finish_meta", "load",
           "load_frame", "normalize", "one_timing", "open_sweep", "provenance", "rank_fields", "read_meta", "read_rows",
           "read_table_rows", "stamp", "start", "write_meta", "write_sweep_table", "write_table"]
