"""The results directory: ``sweep.csv`` (one row per op x tp x group x size x mode), ``meta.json``
and charts. Capture writes it; every view (``show``, charts, later ``report``) reads it.

Rows are appended and flushed to disk one cell at a time, so a sweep that is killed keeps every
finished row; ``--resume`` skips the cells already there.
"""
from __future__ import annotations

import os

from commprof.model.errors import UsageError
from commprof.model.fileio import remove_quietly
from commprof.model.sweepconfig import CUSTOM, SweepRunConfig, plan_cells, row_key
from commprof.model.machine import machine, nccl_env, now_iso, run_env, versions
from commprof.results.meta import (META_JSON, check_out_dir, finish_meta, provenance, rank_fields, read_meta, require_results_dir,
                   run_state, write_meta)
from commprof.results.table import TableAppender, read_table_rows, write_table

SWEEP_CSV = "sweep.csv"

COLUMNS = [
    "op", "tp", "group", "ranks", "mode", "clock", "backend", "impl", "dtype", "size_bytes", "count",
    "batch", "site", "iters", "warmup", "concurrent", "comm", "timing", "loop",
    "latency_us_p50", "latency_us_p95", "latency_us_p99", "latency_us_min", "latency_us_max",
    "latency_us_mean", "latency_us_rankavg_p50", "latency_us_rankavg_mean", "skew_us_p50", "skew_us_p99",
    "enqueue_us_p50", "enqueue_us_p99", "host_us_p50", "host_us_p99", "spin_us", "spin_short",
    "algbw_gbps", "busbw_gbps",
    "wrong", "status", "hosts", "fallback",
    "repeats", "p50_us_repeats", "repeat_spread", "tail_ratio", "unstable",
]

#: What each column of ``sweep.csv`` means, written into every sweep's ``meta.json``.
COLUMN_DOCS = {
    "latency_us_*": "per-op latency in microseconds; each iteration's sample is the max "
                    "across the group's ranks; percentiles by linear interpolation. NCCL "
                    "(clock cuda_event_spin): the op's GPU time alone, CUDA events with the op "
                    "enqueued behind a spin kernel (graph mode: events inside the graph; clock "
                    "cuda_event_spin_outer: events outside it, after the spin and after the replay, "
                    "where events inside did not time); "
                    "gloo (clock perf_counter): host time around the call",
    "skew_us_*": "per iteration max - min over the group's ranks of their own latency: the "
                 "arrival skew the slowest rank's sample holds",
    "host_us_*": "GPU only: host time from issuing one call on an idle GPU until it is seen "
                 "complete (what an eager engine waiting on each op pays); max over ranks",
    "spin_us": "GPU only: the spin kernel's length at the end of the cell",
    "spin_short": "GPU only: timed iterations in which some rank's spin ended before the op was "
                  "enqueued (the sample may hold host time): left out of latency_us_*, "
                  "latency_us_rankavg_* and skew_us_* (kept only if every iteration was short); the "
                  "spin doubles after each",
    "comm": "collective, or 'none (1 rank)' at TP=1, where no communication happens",
    "timing": "per-call: one barrier-aligned call per sample (what a decode step pays); back-to-back: "
              "nccl-tests' method, a loop of `loop` calls timed as one on the host clock (and the GPU "
              "stream's completion) and averaged per call (what vendor logs show); rows without the "
              "column are per-call",
    "loop": "calls per timed sample (1 per-call; --loop back-to-back)",
    "latency_us_rankavg_*": "per iteration the average over the group's ranks instead of "
                            "the max (nccl-tests -a 1): the time one rank spends in the op",
    "enqueue_us_*": "GPU only: CPU time of the call that enqueues the op (eager dispatch, or "
                    "graph replay); max over ranks",
    "size_bytes": "nccl-tests size: max(send, recv) bytes of one rank "
                  "(all_gather: gathered output; reduce_scatter: scattered input)",
    "algbw_gbps": "size_bytes / latency_us_p50, GB = 1e9 bytes",
    "busbw_gbps": "algbw x nccl-tests bus factor (all_reduce 2(n-1)/n; all_gather, "
                  "reduce_scatter, all_to_all (n-1)/n; broadcast 1); latency-bound below ~1 MB",
    "wrong": "elements differing from the exact expected result in the untimed check "
             "(custom rows with --verify: also on every timed call, against torch's all_reduce)",
    "impl": "which implementation ran: the backend's own collective (nccl, gloo) or custom "
            "(commprof's one-shot all-reduce over IPC buffers, cuda_ext/; its time includes "
            "copying the input into the shared buffer)",
    "fallback": "why the custom kernel refused this cell, which was then measured with the "
                "backend's collective (empty otherwise)",
    "repeats": "times the cell was measured (--repeat; the repeats interleaved over the whole sweep); "
               "latency_us_* are over every repeat's samples",
    "p50_us_repeats": "each repeat's p50 in us, ';'-separated (empty for one repeat)",
    "repeat_spread": "max / min of the repeats' p50s (empty for one repeat)",
    "tail_ratio": "latency_us_p95 / latency_us_p50",
    "unstable": "why the cell is unstable (empty when it is not): repeats' p50s more than 2x apart, "
                "or p95 more than 3x p50 (commprof.analysis.noise)",
}

#: ``sweep_repeats.csv`` (``sweep --repeat N`` with N > 1): one row per repeat of each cell.
SWEEP_REPEATS_CSV = "sweep_repeats.csv"
REPEAT_COLUMNS = ["op", "tp", "group", "ranks", "mode", "impl", "size_bytes", "batch", "repeat", "start_s", "iters",
                  "latency_us_p50", "latency_us_p95", "latency_us_p99", "latency_us_min", "latency_us_max",
                  "latency_us_mean"]
REPEAT_COLUMN_DOCS = {
    "repeat": "which repeat of the cell (1 to --repeat); the repeats are interleaved: every cell's repeat 1, "
              "then every cell's repeat 2, ...",
    "start_s": "when the repeat started, seconds since the group's first rank began walking the cells",
    "latency_us_*": "that repeat's own percentiles over its --iters samples (sweep.csv's are over every repeat)",
}


#: ``load_frame`` selections: the backend's own collectives (every view's default), commprof's
#: one-shot kernel, or every row.
FRAME_IMPLS = ("baseline", "custom", "all")


def one_timing(df):
    """(timing, rows of it, mixed?) of a sweep frame: the per-call rows (what a decode step pays:
    one collective at a time) when it has any, else the one method it holds (e.g. the back-to-back
    averages of imported nccl-tests logs). Every reader that models or judges a box uses one method,
    never the two mixed; tables from before the ``timing`` column read as per-call."""
    if "timing" not in df.columns:
        return "per-call", df, False
    timings = set(df["timing"])
    timing = "per-call" if "per-call" in timings or not timings else sorted(timings)[0]
    return timing, df[df["timing"] == timing], len(timings) > 1


def read_rows(path: str) -> list[dict]:
    """Rows of ``sweep.csv`` as dicts of strings. A truncated last line (a killed writer) is
    dropped; any other malformed line is an error naming the file and line."""
    cp = os.path.join(path, SWEEP_CSV)
    if not os.path.exists(cp):
        return []
    return read_table_rows(cp, required=("op", "tp", "size_bytes", "mode", "latency_us_p50"))[1]


def cells_done(rows: list[dict]) -> int:
    """How many cells ``rows`` (of ``sweep.csv``, as read) answer: the keys of their group-0 rows."""
    keys = set()
    for r in rows:
        try:
            if str(r.get("group", "0")) in ("0", "0.0"):
                keys.add(row_key(r))
        except (KeyError, TypeError, ValueError):
            continue
    return len(keys)


def load_frame(path: str, impl: str = "baseline"):
    """``sweep.csv`` as a typed pandas DataFrame (numbers as numbers).

    ``impl`` picks rows: ``"baseline"`` (default) the backend's own collectives, which is what the
    cost model, check, gap and trace --predict read; ``"custom"`` the one-shot kernel's rows;
    ``"all"`` every row. Tables written before the ``impl`` column count as baseline.
    """
    import pandas as pd

    if impl not in FRAME_IMPLS:
        raise ValueError(f"impl {impl!r}: use one of {FRAME_IMPLS}")
    require_results_dir(path)
    rows = read_rows(path)
    df = pd.DataFrame(rows, columns=rows[0].keys() if rows else COLUMNS)
    for c in ("impl", "fallback", "comm"):
        if c not in df.columns:
            df[c] = ""
    if "timing" not in df.columns:          # tables written before --timing: per-call samples
        df["timing"] = "per-call"
    df["timing"] = df["timing"].replace("", "per-call").fillna("per-call")
    df["impl"] = df["impl"].fillna("").astype(str)
    df["fallback"] = df["fallback"].fillna("").astype(str)
    if "latency_us_avg" in df.columns:      # imported nccl-tests rows: the average, not a percentile
        avg = pd.to_numeric(df["latency_us_avg"], errors="coerce")
        for c in ("latency_us_p50", "latency_us_rankavg_p50"):
            if c in df.columns:         # readers of the p50 columns get the average, labelled by latency_stat
                cur = pd.to_numeric(df[c], errors="coerce")
                df[c] = cur.where(cur.notna(), avg)
    if impl == "baseline":
        df = df[df["impl"] != CUSTOM].reset_index(drop=True)
    elif impl == "custom":
        df = df[df["impl"] == CUSTOM].reset_index(drop=True)
    for c in df.columns:
        if c.startswith(("latency_us", "enqueue_us", "host_us", "skew_us", "spin_", "algbw", "busbw")):
            df[c] = pd.to_numeric(df[c], errors="coerce")
        elif c in ("loop", "repeats", "repeat_spread", "tail_ratio"):
            df[c] = pd.to_numeric(df[c], errors="coerce")
        elif c in ("unstable", "p50_us_repeats"):
            df[c] = df[c].fillna("").astype(str)
        elif c == "wrong":              # empty = not checked (imported with validation off): NaN, never 0
            raw = df[c].fillna("").astype(str).str.strip()
            num = pd.to_numeric(raw.where(raw != "", None), errors="coerce")
            bad = (num.isna() & (raw != "")) | ~(num.isna() | ((num >= 0) & (num <= 2 ** 53) & (num % 1 == 0)))
            if bad.any():               # also inf, a negative or a fraction: no count of wrong elements
                raise UsageError(f"'{os.path.join(path, SWEEP_CSV)}': column wrong holds a non-number or a value "
                                 "that is no count (inf, negative, a fraction)")
            df[c] = num.astype("int64") if not num.isna().any() else num
        elif c in ("tp", "group", "size_bytes", "count", "iters", "warmup", "concurrent"):
            try:
                df[c] = pd.to_numeric(df[c], errors="raise").astype("int64")
            except (ValueError, TypeError, OverflowError):      # OverflowError: a number past int64
                raise UsageError(f"'{os.path.join(path, SWEEP_CSV)}': column {c} holds a non-number or a "
                                 "whole number past 2^63") from None
    return df


class SweepWriter:
    """Rank 0's handle on the results dir of a running sweep."""

    def __init__(self, path: str, cfg: SweepRunConfig, meta: dict, done_keys: set):
        self.path = path
        self.cfg = cfg
        self.meta = meta
        self.done_keys = done_keys
        self._table = TableAppender(os.path.join(path, SWEEP_CSV), COLUMNS)
        self.columns = self._table.columns
        self._repeats = None        # sweep_repeats.csv, opened at its first row

    def write_rows(self, rows: list[dict]):
        self._table.write(rows)

    def write_repeats(self, rows: list[dict]):
        """Rows of ``sweep_repeats.csv`` (each repeat of a cell, with ``--repeat`` above 1)."""
        if not rows:
            return
        if self._repeats is None:
            self._repeats = TableAppender(os.path.join(self.path, SWEEP_REPEATS_CSV), REPEAT_COLUMNS)
        self._repeats.write(rows)

    def note_refused(self, refused: list[dict]):
        """Record the custom cells the one-shot kernel refused (and why) in ``meta.json``."""
        if not refused:
            return
        try:
            meta = read_meta(self.path)
        except UsageError:
            return
        have = {(r.get("tp"), r.get("size_bytes")) for r in meta.get("custom_refused", [])}
        meta.setdefault("custom_refused", []).extend(
            r for r in refused if (r.get("tp"), r.get("size_bytes")) not in have)
        write_meta(self.path, meta)

    def close(self, status: str = "complete", error: str | None = None):
        self._table.close()
        if self._repeats is not None:
            self._repeats.close()
        finish_meta(self.path, status, error)


def resume_state(path: str, backend: str, dtype: str, impls=(), timing: str = "per-call") -> tuple[dict, set]:
    """What ``--resume`` continues in ``path``: its ``meta.json`` and the keys of the cells already
    measured. Every reason to refuse (no or a corrupt ``meta.json``, another verb's dir, another
    backend or dtype, a ``sweep.csv`` that is binary, malformed, lacks a column or holds a
    non-number where a key needs a number) is one UsageError; nothing is written, so a refusal
    leaves the dir exactly as it was. ``sweep`` calls it before any rank starts, rank 0 again
    when it opens the dir."""
    meta = read_meta(path)
    if meta.get("status") == "running" and run_state(path, meta)[0] == "running" and \
            meta.get("writer", {}).get("pid") != os.getpid():
        w = meta.get("writer", {})
        raise UsageError(f"--resume: '{path}' is still being written (pid {w.get('pid')} on host {w.get('host')} "
                         "is alive); wait for it to end, or use another --out")
    verb = meta.get("verb")
    if verb not in (None, "sweep"):
        raise UsageError(f"--resume: '{path}' holds a commprof {verb} run, not a sweep; use a new --out")
    old = meta.get("config", {})
    for field, kind in (("config", dict), ("runs", list)):
        if not isinstance(meta.get(field, kind()), kind):
            raise UsageError(f"--resume: '{os.path.join(path, META_JSON)}': field {field} is not "
                             f"{'an object' if kind is dict else 'a list'}; not a sweep's meta.json")
    for k, want in (("backend", backend), ("dtype", dtype), ("timing", timing)):
        # a table never mixes two timing methods; dirs from before --timing were per-call
        if old.get(k, "per-call" if k == "timing" else None) != want:
            raise UsageError(f"--resume: '{path}' was measured with {k}={old.get(k)}, this run asks "
                             f"{k}={want}; use a new --out")
    cp = os.path.join(path, SWEEP_CSV)
    if not os.path.exists(cp) or os.path.getsize(cp) == 0:
        return meta, set()          # killed before its first row: nothing done yet
    header, rows = read_table_rows(cp, required=("op", "tp", "size_bytes", "mode", "latency_us_p50"))
    if CUSTOM in impls and "impl" not in header:
        raise UsageError(f"--resume: '{cp}' predates the impl column, so custom rows "
                         "could not be told apart; use a new --out for --impl custom")
    done = set()
    for lineno, r in enumerate(rows, start=2):
        for col in ("tp", "size_bytes"):
            v = r.get(col, "")
            if not (v.isascii() and v.strip().isdigit()):
                raise UsageError(f"--resume: '{cp}' line {lineno}: column {col} holds {v[:40]!r}, "
                                 "not a whole number; the table is corrupt, use a new --out")
        if str(r.get("group", "0")) == "0":
            done.add(row_key(r))
    return meta, done


def open_sweep(cfg: SweepRunConfig, rank_infos: list[dict]) -> SweepWriter:
    """Create or resume the results dir; write ``meta.json`` with the run's provenance."""
    path = cfg.out_dir
    check_out_dir(path, cfg.resume)
    run = {"start_time": now_iso(), "command": cfg.argv, "status": "running"}
    done = set()
    if cfg.resume:
        meta, done = resume_state(path, cfg.backend, cfg.dtype, cfg.impls, cfg.timing)
        meta.setdefault("runs", []).append(run)
        meta["status"] = "running"
    else:
        meta = provenance("sweep", "measured", "collective latency sweep (commprof sweep)", command=cfg.argv,
                          runs=[run])
        meta["start_time"] = run["start_time"]
    os.makedirs(path, exist_ok=True)
    meta.setdefault("schema_version", 1)
    meta.setdefault("verb", "sweep")
    meta.update(rank_fields(rank_infos))
    meta.update(backend=cfg.backend, backend_reason=cfg.backend_reason, launch=cfg.launch,
                machine=machine(), versions=versions(), nccl_env=nccl_env(), env=run_env(), config=cfg.to_dict(),
                columns=COLUMN_DOCS, cells_planned=len(plan_cells(cfg)))
    if getattr(cfg, "repeat", 1) > 1:
        meta["repeat_columns"] = REPEAT_COLUMN_DOCS
    write_meta(path, meta)
    return SweepWriter(path, cfg, meta, done)


def write_sweep_table(out_dir: str, columns: list[str], rows: list[dict], meta: dict) -> str:
    """A sweep dir written whole (an import, a reference profile): ``sweep.csv`` through
    :func:`~commprof.results.table.write_table`, then its ``meta.json``. A ``meta.json`` that cannot
    be written (a full disk) takes the table with it: no table is left without the file that says
    what it holds. Returns ``out_dir``."""
    path = os.path.join(out_dir, SWEEP_CSV)
    write_table(path, columns, rows)
    try:
        write_meta(out_dir, meta)
    except UsageError:
        remove_quietly(path)
        raise
    return out_dir
