"""The results directory: ``sweep.csv`` (one row per op x tp x group x size x mode), ``meta.json``
and charts. Capture writes it; every view (``show``, charts, later ``report``) reads it.

Rows are appended and flushed to disk one cell at a time, so a sweep that is killed keeps every
finished row; ``--resume`` skips the cells already there.
"""
from __future__ import annotations

import csv
import io
import json
import os
import socket
from datetime import datetime

from .errors import UsageError
from .jsonfile import read_json_object
from .runinfo import machine, nccl_env, now_iso, versions
from .sweepconfig import CUSTOM, SweepConfig, row_key

SWEEP_CSV = "sweep.csv"
META_JSON = "meta.json"

COLUMNS = [
    "op", "tp", "group", "ranks", "mode", "clock", "backend", "impl", "dtype", "size_bytes", "count",
    "batch", "site", "iters", "warmup", "concurrent", "comm",
    "latency_us_p50", "latency_us_p95", "latency_us_p99", "latency_us_min", "latency_us_max",
    "latency_us_mean", "latency_us_rankavg_p50", "latency_us_rankavg_mean", "skew_us_p50", "skew_us_p99",
    "enqueue_us_p50", "enqueue_us_p99", "host_us_p50", "host_us_p99", "spin_us", "spin_short",
    "algbw_gbps", "busbw_gbps",
    "wrong", "status", "hosts", "fallback",
]

#: ``load_frame`` selections: the backend's own collectives (every view's default), commprof's
#: one-shot kernel, or every row.
FRAME_IMPLS = ("baseline", "custom", "all")


def default_out_dir(root: str = "results") -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(root, f"{stamp}-{socket.gethostname()}")


def check_out_dir(path: str, resume: bool) -> None:
    """Refuse a directory that holds other content unless resuming a commprof results dir."""
    if not os.path.exists(path):
        if resume:
            raise UsageError(f"--resume: output dir '{path}' does not exist")
        return
    if not os.path.isdir(path):
        raise UsageError(f"output dir '{path}' is a file, not a directory")
    entries = sorted(os.listdir(path))
    if not entries:
        return
    if not resume:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise UsageError(f"output dir '{path}' already holds files ({shown}); "
                         "choose another --out, or pass --resume to continue that sweep")
    if META_JSON not in entries:
        raise UsageError(f"--resume: '{path}' is not a commprof results dir (no {META_JSON})")


def read_meta(path: str) -> dict:
    mp = os.path.join(path, META_JSON)
    if not os.path.exists(mp):
        raise UsageError(f"results dir '{path}': no {META_JSON} (not a commprof results dir)")
    return read_json_object(mp, f"results dir '{path}': {META_JSON}")


def write_meta(path: str, meta: dict) -> None:
    tmp = os.path.join(path, META_JSON + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
    os.replace(tmp, os.path.join(path, META_JSON))


def read_rows(path: str) -> list[dict]:
    """Rows of ``sweep.csv`` as dicts of strings. A truncated last line (a killed writer) is
    dropped; any other malformed line is an error naming the file and line."""
    cp = os.path.join(path, SWEEP_CSV)
    if not os.path.exists(cp):
        return []
    with open(cp, encoding="utf-8", newline="") as f:
        text = f.read()
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines = lines[:-1]
    reader = csv.reader(lines)
    try:
        header = next(reader)
    except StopIteration:
        return []
    missing = [c for c in ("op", "tp", "size_bytes", "mode", "latency_us_p50") if c not in header]
    if missing:
        raise UsageError(f"'{cp}': not a commprof sweep table (missing column {missing[0]})")
    rows = []
    for lineno, rec in enumerate(reader, start=2):
        if len(rec) != len(header):
            raise UsageError(f"'{cp}' line {lineno}: expected {len(header)} fields, found {len(rec)}")
        rows.append(dict(zip(header, rec)))
    return rows


def load_frame(path: str, impl: str = "baseline"):
    """``sweep.csv`` as a typed pandas DataFrame (numbers as numbers).

    ``impl`` picks rows: ``"baseline"`` (default) the backend's own collectives, which is what the
    cost model, check, gap and trace --predict read; ``"custom"`` the one-shot kernel's rows;
    ``"all"`` every row. Tables written before the ``impl`` column count as baseline.
    """
    import pandas as pd

    if impl not in FRAME_IMPLS:
        raise ValueError(f"impl {impl!r}: use one of {FRAME_IMPLS}")
    if not os.path.isdir(path):
        raise UsageError(f"results dir '{path}' does not exist")
    rows = read_rows(path)
    df = pd.DataFrame(rows, columns=rows[0].keys() if rows else COLUMNS)
    for c in ("impl", "fallback", "comm"):
        if c not in df.columns:
            df[c] = ""
    df["impl"] = df["impl"].fillna("").astype(str)
    df["fallback"] = df["fallback"].fillna("").astype(str)
    if impl == "baseline":
        df = df[df["impl"] != CUSTOM].reset_index(drop=True)
    elif impl == "custom":
        df = df[df["impl"] == CUSTOM].reset_index(drop=True)
    for c in df.columns:
        if c.startswith(("latency_us", "enqueue_us", "host_us", "skew_us", "spin_", "algbw", "busbw")):
            df[c] = pd.to_numeric(df[c], errors="coerce")
        elif c in ("tp", "group", "size_bytes", "count", "iters", "warmup", "wrong", "concurrent"):
            try:
                df[c] = pd.to_numeric(df[c], errors="raise").astype("int64")
            except (ValueError, TypeError):
                raise UsageError(f"'{os.path.join(path, SWEEP_CSV)}': column {c} holds a non-number") from None
    return df


class SweepWriter:
    """Rank 0's handle on the results dir of a running sweep."""

    def __init__(self, path: str, cfg: SweepConfig, meta: dict, done_keys: set):
        self.path = path
        self.cfg = cfg
        self.meta = meta
        self.done_keys = done_keys
        self._csv = os.path.join(path, SWEEP_CSV)
        new = not os.path.exists(self._csv) or os.path.getsize(self._csv) == 0
        # A resumed table keeps its own header (it may predate newer columns).
        self.columns = COLUMNS
        if not new:
            with open(self._csv, encoding="utf-8", newline="") as f:
                self.columns = next(csv.reader([f.readline()]))
        self._f = open(self._csv, "a", encoding="utf-8", newline="")
        if new:
            self._write_text(",".join(COLUMNS) + "\n")

    def _write_text(self, text: str):
        self._f.write(text)
        self._f.flush()
        os.fsync(self._f.fileno())

    def write_rows(self, rows: list[dict]):
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.columns, extrasaction="ignore", lineterminator="\n")
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
        self._write_text(buf.getvalue())

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
        if not self._f.closed:
            self._f.close()
        finish_meta(self.path, status, error)


def finish_meta(path: str, status: str, error: str | None = None):
    """Mark the latest run in ``meta.json`` as complete or failed (keeps every row)."""
    try:
        meta = read_meta(path)
    except UsageError:
        return
    meta["status"] = status
    meta["end_time"] = now_iso()
    if error:
        meta["error"] = error
    elif "error" in meta:
        del meta["error"]
    if meta.get("runs"):
        meta["runs"][-1].update(end_time=meta["end_time"], status=status, **({"error": error} if error else {}))
    write_meta(path, meta)


def open_sweep(cfg: SweepConfig, rank_infos: list[dict]) -> SweepWriter:
    """Create or resume the results dir; write ``meta.json`` with the run's provenance."""
    path = cfg.out_dir
    check_out_dir(path, cfg.resume)
    os.makedirs(path, exist_ok=True)
    run = {"start_time": now_iso(), "command": cfg.argv, "status": "running"}
    done = set()
    if cfg.resume:
        meta = read_meta(path)
        old = meta.get("config", {})
        for k in ("backend", "dtype"):
            if old.get(k) != getattr(cfg, k):
                raise UsageError(f"--resume: '{path}' was measured with {k}={old.get(k)}, this run asks "
                                 f"{k}={getattr(cfg, k)}; use a new --out")
        if CUSTOM in cfg.impls and os.path.exists(os.path.join(path, SWEEP_CSV)):
            with open(os.path.join(path, SWEEP_CSV), encoding="utf-8", newline="") as f:
                header = next(csv.reader([f.readline()]), [])
            if header and "impl" not in header:
                raise UsageError(f"--resume: '{path}/{SWEEP_CSV}' predates the impl column, so custom rows "
                                 "could not be told apart; use a new --out for --impl custom")
        for r in read_rows(path):
            if str(r.get("group", "0")) == "0":
                done.add(row_key(r))
        meta.setdefault("runs", []).append(run)
        meta["status"] = "running"
    else:
        meta = {
            "kind": "measured",
            "what": "collective latency sweep (commprof sweep)",
            "status": "running",
            "start_time": run["start_time"],
            "command": cfg.argv,
            "runs": [run],
        }
    gpus = sorted({i["gpu"] for i in rank_infos if i.get("gpu") not in (None, "n/a")})
    meta.update(
        backend=cfg.backend,
        backend_reason=cfg.backend_reason,
        launch=cfg.launch,
        world_size=len(rank_infos),
        hosts=sorted({i["host"] for i in rank_infos}),
        machine=machine(),
        gpus=gpus or ["none (CPU ranks)"],
        ranks=rank_infos,
        versions=versions(),
        nccl_env=nccl_env(),
        config=cfg.to_dict(),
        columns={"latency_us_*": "per-op latency in microseconds; each iteration's sample is the max "
                                 "across the group's ranks; percentiles by linear interpolation. NCCL "
                                 "(clock cuda_event_spin): the op's GPU time alone, CUDA events with the op "
                                 "enqueued behind a spin kernel (graph mode: events inside the graph); "
                                 "gloo (clock perf_counter): host time around the call",
                 "skew_us_*": "per iteration max - min over the group's ranks of their own latency: the "
                              "arrival skew the slowest rank's sample holds",
                 "host_us_*": "GPU only: host time from issuing one call on an idle GPU until it is seen "
                              "complete (what an eager engine waiting on each op pays); max over ranks",
                 "spin_us": "GPU only: the spin kernel's length at the end of the cell",
                 "spin_short": "GPU only: timed samples (summed over ranks) whose spin ended before the op "
                               "was enqueued (the sample may hold host time); the spin doubles after each",
                 "comm": "collective, or 'none (1 rank)' at TP=1, where no communication happens",
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
                             "backend's collective (empty otherwise)"},
    )
    write_meta(path, meta)
    save_topology(path)
    return SweepWriter(path, cfg, meta, done)


def save_topology(path: str) -> bool:
    """Write ``topo.json`` beside the results whenever NVML answers (no GPU: nothing, silently)."""
    from .topo import try_collect_topology, write_topology

    topo = try_collect_topology()
    if topo is None:
        return False
    write_topology(topo, os.path.join(path, "topo.json"))
    return True
