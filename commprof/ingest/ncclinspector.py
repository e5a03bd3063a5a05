"""NCCL Inspector's account of every collective an engine ran (``commprof import nccl-inspector``).

NCCL Inspector is NCCL's profiler plugin (NVIDIA/nccl ``ext-profiler/inspector`` from tag v2.28.3-1,
``plugins/profiler/inspector`` from v2.30.3-1; checked field by field against its JSON writer at
v2.28.3-1, v2.29.7-1, v2.30.7-1 and the README), loaded with ``NCCL_PROFILER_PLUGIN=.../libnccl-profiler-inspector.so``
and ``NCCL_INSPECTOR_ENABLE=1``. In its JSON mode (the default) each process writes
``<NCCL_INSPECTOR_DUMP_DIR>/<hostname>-pid<pid>.log``, one JSON object per line, one object per
completed collective per communicator, as its ``inspector_json.cc`` writes them (format "v4.0"):

- ``header``: ``id`` (the communicator's hash), ``comm_name`` (newer versions), ``rank``,
  ``n_ranks``, ``nnodes``;
- ``metadata``: ``inspector_output_format_version``, ``git_rev``, ``rec_mechanism``,
  ``dump_timestamp_us``, ``hostname``, ``pid``;
- ``coll_perf``: ``coll`` (AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, All2All,
  AllGatherV), ``coll_sn``, ``coll_msg_size_bytes`` (NCCL's count times the type size: one rank's
  buffer for AllReduce, one rank's part for AllGather and ReduceScatter), ``coll_exec_time_us``
  (whole microseconds), ``coll_timing_source`` (``kernel_gpu``: the kernels' GPU clock;
  ``kernel_cpu`` or ``collective_cpu``: host clocks; absent in the plugin's first records, read as
  ``unknown``), ``coll_algobw_gbs``, ``coll_busbw_gbs`` (nccl-tests' factors) and, with
  ``NCCL_INSPECTOR_DUMP_VERBOSE=1``, event traces (ignored here);
- or ``p2p_perf`` for sends and receives (``p2p``, ``p2p_peer``, ``p2p_msg_size_bytes``, ...; 2.30 on,
  with ``header.comm_name``).

What the writer does that a reader must know: every record carries its own ``header`` and
``metadata`` (no marker line opens a dump: no version writes one); the exec time is the longest
channel's kernel time, its GPU globaltimer nanoseconds divided down to whole microseconds, so a
kernel under 1 us reads 0 and falls back to a host clock; a 0 us record gets bandwidth 0 from the
plugin (it does not divide by zero), which is no measurement: read here as no bandwidth, the record
counted (``records_under_1us``); a NaN double is written as the string ``"nan"``; from 2.30
``NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING=1`` (the default) drops every record not ``kernel_gpu``. The
README's example says ``rec_mechanism`` ``profiler_plugin``, the writer ``nccl_profiler_interface``.
The Prometheus mode (``NCCL_INSPECTOR_PROM_DUMP=1``, ``nccl_inspector_metrics_*.prom``) writes per
size range and interval a geometric-mean bus bandwidth and a mean time: refused with one line
saying so (sizes are ranges, not the sizes a sweep ran).

The JSON records carry no algorithm or protocol (the plugin's Prometheus mode labels its gauges
with ``algo_proto`` but buckets the sizes); the ``algo`` and ``proto`` columns are filled where a
record names them (keys ``coll_algo``/``coll_proto`` or ``algo``/``proto``), else left empty.
Objects pretty-printed over several lines (as the plugin's README shows them) are read too, and
``.gz`` files.

The files are read as streams (bounded memory): the rows are aggregated per communicator, rank,
collective, size and timing source (calls, time percentiles from at most :data:`KEEP` samples
each, bandwidths); an object longer than :data:`MAX_OBJECT` characters, or a file whose first
object is not an Inspector record, is refused with one line.
"""
from __future__ import annotations

import gzip
import json
import os
import random
from dataclasses import dataclass, field

from commprof.model.errors import UsageError
from commprof import results
from commprof.model.fileio import open_user_file, shown_path
from commprof.results.ncclinspector import write_inspector_tables

#: the largest JSON object read as one record (a record is ~200-500 bytes; verbose ones a few KB)
MAX_OBJECT = 1 << 20
#: samples kept per row for its percentiles (a reservoir beyond that: bounded memory)
KEEP = 20000
#: distinct rows (communicator x rank x collective x size x timing) before the import refuses
MAX_ROWS = 200_000
SNIFF = 64 << 10

#: NCCL's collective names (``ncclFuncToString``) -> commprof's op names
OPS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "AllGatherV": "all_gather_v",
       "ReduceScatter": "reduce_scatter", "Broadcast": "broadcast", "Reduce": "reduce", "All2All": "all_to_all",
       "Send": "send", "Recv": "recv", "SendRecv": "send_recv"}
#: ops whose message size is one rank's part of a total that nccl-tests' ``size`` names
_TOTAL_IS_N_PARTS = {"all_gather", "reduce_scatter"}
GPU_TIMED = {"kernel_gpu": "yes", "kernel_cpu": "no", "collective_cpu": "no"}
FILE_SUFFIXES = (".log", ".jsonl", ".json", ".log.gz", ".jsonl.gz", ".json.gz")

ROW_COLUMNS = ["comm", "comm_name", "rank", "nranks", "nnodes", "host", "kind", "op", "coll", "peer",
               "msg_size_bytes", "size_bytes", "timing_source", "gpu_timed", "algo", "proto", "calls",
               "time_us_p50", "time_us_mean", "time_us_min", "time_us_max", "algbw_gbps_p50", "busbw_gbps_p50",
               "first_sn", "last_sn"]
COMM_COLUMNS = ["comm", "comm_name", "nranks", "nnodes", "ranks_seen", "hosts", "records", "collectives",
                "gpu_timed_pct", "summary"]


def nccl_tests_size(op: str, msg_size_bytes: int, nranks: int) -> int:
    """The record's size in nccl-tests' meaning (``model/collectives.py``): all_gather's gathered
    output and reduce_scatter's scattered input are n times the one rank's part NCCL counts."""
    return msg_size_bytes * nranks if op in _TOTAL_IS_N_PARTS and nranks else msg_size_bytes


@dataclass
class _Row:
    key: tuple
    comm_name: str = ""
    nnodes: int | None = None
    host: str = ""
    algo: str = ""
    proto: str = ""
    calls: int = 0
    total_us: float = 0.0
    min_us: float = float("inf")
    max_us: float = 0.0
    times: list = field(default_factory=list)
    algbw: list = field(default_factory=list)
    busbw: list = field(default_factory=list)
    first_sn: int | None = None
    last_sn: int | None = None


@dataclass
class Account:
    rows: dict = field(default_factory=dict)
    files: list = field(default_factory=list)
    records: int = 0
    p2p_records: int = 0
    skipped: int = 0                 # objects that are not Inspector records (after the first one)
    truncated: int = 0               # an unfinished last object (the process killed mid-write)
    versions: set = field(default_factory=set)
    mechanisms: set = field(default_factory=set)
    hosts: set = field(default_factory=set)
    timing: dict = field(default_factory=dict)
    under_1us: int = 0               # records whose exec time is 0 us (the plugin's resolution): no bandwidth
    host_ranks: dict = field(default_factory=dict)   # host -> communicator -> the ranks its records name
    host_pids: dict = field(default_factory=dict)    # host -> the pids of its records' metadata
    host_records: dict = field(default_factory=dict)  # host -> records
    rng: random.Random = field(default_factory=lambda: random.Random(0))


_PROM_WORDS = ("NCCL Inspector's Prometheus output (NCCL_INSPECTOR_PROM_DUMP=1): its sizes are ranges and its "
               "figures means over a dump interval; re-run with NCCL_INSPECTOR_PROM_DUMP=0 for one JSON record per "
               "collective")


def inspector_files(path: str) -> list[str]:
    """A file as given, or a dir's Inspector files (``*.log``, ``*.jsonl``, ``*.json``, gzipped
    too), searched below it, sorted; UsageError naming what is missing."""
    if not os.path.exists(path):
        raise UsageError(f"'{path}': no such file or directory")
    if not os.path.isdir(path):
        return [path]
    found = []
    for root, dirs, names in os.walk(path):
        dirs.sort()
        found += [os.path.join(root, n) for n in sorted(names) if n.endswith(FILE_SUFFIXES)]
    if not found:
        for root, _, names in os.walk(path):
            if any(n.endswith(".prom") for n in names):
                raise UsageError(f"'{path}': {_PROM_WORDS}")
        raise UsageError(f"'{path}': a dir with no NCCL Inspector file (<host>-pid<pid>.log, *.jsonl, *.json); "
                         "give NCCL_INSPECTOR_DUMP_DIR or the files in it")
    return found


def _lines(path: str):
    """The file's lines as text (gzip by its magic bytes), each cut at :data:`MAX_OBJECT`;
    UsageError for a binary file."""
    # a FIFO or a device is refused before it is opened (opening a FIFO waits for a writer)
    raw = open_user_file(path, f"'{path}'", ": is a directory")
    with raw:
        magic = raw.read(2)
        raw.seek(0)
        f = gzip.GzipFile(fileobj=raw) if magic == b"\x1f\x8b" else raw
        try:
            head = f.read(SNIFF)
            if b"\x00" in head:
                raise UsageError(f"'{path}': a binary file, not NCCL Inspector JSON (text)")
            f.seek(0)
            while True:
                line = f.readline(MAX_OBJECT + 1)
                if not line:
                    return
                if len(line) > MAX_OBJECT:
                    raise UsageError(f"'{path}': a line longer than {MAX_OBJECT >> 20} MiB where NCCL Inspector "
                                     "writes one short record per line: another tool's JSON?")
                yield line.decode("utf-8", errors="replace")
        except (OSError, EOFError) as e:
            raise UsageError(f"'{path}': a damaged gzip file ({e})") from None


def _objects(path: str):
    """Each JSON value in the file in turn: one per line as the plugin writes them, or pretty-printed
    over many lines (an object opened by ``{`` and closed by ``}`` at the line's start); ``None``
    for an unfinished object (a process killed mid-write) that the next record or the end cuts."""
    pending, lines = [], 0
    for n, line in enumerate(_lines(path), 1):
        text = line.strip()
        if not text:
            continue
        if not pending:
            try:
                yield json.loads(text)
                continue
            except json.JSONDecodeError:
                if text.startswith(("nccl_", "# HELP nccl_", "# TYPE nccl_")):
                    raise UsageError(f"'{path}' line {n}: {_PROM_WORDS}") from None
                if not text.startswith("{"):
                    raise UsageError(f"'{path}' line {n}: not JSON ('{text[:60]}'); NCCL Inspector writes one "
                                     "JSON record per line") from None
                pending, lines = [line], len(line)
                continue
        if line.startswith("{"):              # the pending object never closed: a new record begins
            yield None
            pending, lines = [], 0
            try:
                yield json.loads(text)
            except json.JSONDecodeError:
                pending, lines = [line], len(line)
            continue
        pending.append(line)
        lines += len(line)
        if lines > MAX_OBJECT:
            raise UsageError(f"'{path}': a JSON value longer than {MAX_OBJECT >> 20} MiB where NCCL Inspector "
                             "writes one short record per line: another tool's JSON?")
        if line.startswith("}"):
            try:
                obj = json.loads("".join(pending))
            except json.JSONDecodeError as e:
                raise UsageError(f"'{path}' line {n}: not JSON ({e.msg})") from None
            pending, lines = [], 0
            yield obj
    if pending:
        yield None


def _is_record(obj) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("header"), dict) and (
        isinstance(obj.get("coll_perf"), dict) or isinstance(obj.get("p2p_perf"), dict))


def _num(v, what: str, path: str):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise UsageError(f"'{path}': record field {what} is {v!r}, not a number")
    return v


def _keep(row: _Row, rng, t, a, b) -> None:
    if len(row.times) < KEEP:
        row.times.append(t), row.algbw.append(a), row.busbw.append(b)
        return
    j = rng.randrange(row.calls)
    if j < KEEP:
        row.times[j], row.algbw[j], row.busbw[j] = t, a, b


def _add(acc: Account, obj: dict, path: str) -> None:
    h, meta = obj["header"], obj.get("metadata") or {}
    p2p = "coll_perf" not in obj
    perf = obj["p2p_perf"] if p2p else obj["coll_perf"]
    pre = "p2p" if p2p else "coll"
    coll = str(perf.get(pre, "?"))
    op = OPS.get(coll, coll.lower())
    comm = str(h.get("id", "?"))
    rank = int(_num(h.get("rank", -1), "header.rank", path))
    nranks = int(_num(h.get("n_ranks", 0), "header.n_ranks", path))
    msg = int(_num(perf.get(f"{pre}_msg_size_bytes", 0), f"{pre}_msg_size_bytes", path))
    t = float(_num(perf.get(f"{pre}_exec_time_us", 0), f"{pre}_exec_time_us", path))
    src = str(perf.get(f"{pre}_timing_source", "unknown"))
    peer = perf.get("p2p_peer", "") if p2p else ""
    key = (comm, rank, nranks, "p2p" if p2p else "coll", op, coll, peer, msg, src)
    row = acc.rows.get(key)
    if row is None:
        if len(acc.rows) >= MAX_ROWS:
            raise UsageError(f"'{path}': more than {MAX_ROWS:,} distinct (communicator, rank, collective, size) "
                             "rows: not an engine's Inspector dump")
        row = acc.rows[key] = _Row(key)
    row.comm_name = str(h.get("comm_name", row.comm_name) or "")
    if isinstance(h.get("nnodes"), int):
        row.nnodes = h["nnodes"]
    row.host = str(meta.get("hostname", row.host) or "")
    row.algo = str(perf.get(f"{pre}_algo", perf.get("algo", row.algo)) or "")
    row.proto = str(perf.get(f"{pre}_proto", perf.get("proto", row.proto)) or "")
    row.calls += 1
    row.total_us += t
    row.min_us, row.max_us = min(row.min_us, t), max(row.max_us, t)
    a = perf.get(f"{pre}_algobw_gbs")
    b = perf.get(f"{pre}_busbw_gbs")
    if t == 0:                       # the plugin writes bandwidth 0 where the time rounds to 0 us: not a figure
        a = b = None
        acc.under_1us += 1
    _keep(row, acc.rng, t, float(a) if isinstance(a, (int, float)) else float("nan"),
          float(b) if isinstance(b, (int, float)) else float("nan"))
    sn = perf.get(f"{pre}_sn")
    if isinstance(sn, int):
        row.first_sn = sn if row.first_sn is None else min(row.first_sn, sn)
        row.last_sn = sn if row.last_sn is None else max(row.last_sn, sn)
    acc.records += 1
    acc.p2p_records += p2p
    acc.timing[src] = acc.timing.get(src, 0) + 1
    if meta.get("inspector_output_format_version"):
        acc.versions.add(str(meta["inspector_output_format_version"]))
    if meta.get("rec_mechanism"):
        acc.mechanisms.add(str(meta["rec_mechanism"]))
    if row.host:
        acc.hosts.add(row.host)
        acc.host_ranks.setdefault(row.host, {}).setdefault(comm, set()).add(rank)
        acc.host_records[row.host] = acc.host_records.get(row.host, 0) + 1
        if meta.get("pid") is not None:
            acc.host_pids.setdefault(row.host, set()).add(str(meta["pid"]))


def box_identity(acc: Account) -> dict:
    """What identifies the machine(s) the records came from, as ``check`` and ``report`` match them
    to a box: the records' ``metadata.hostname``, most records first, and per host the GPUs the
    engine ran there (the most ranks one communicator has on it: one rank per GPU), with its pids."""
    hosts = sorted(acc.host_records, key=lambda h: (-acc.host_records[h], h))
    gpus = {h: max((len(r) for r in acc.host_ranks.get(h, {}).values()), default=0) for h in hosts}
    return {"hosts": hosts, "gpus_per_host": gpus, "gpus_from": {h: "ranks of one communicator" for h in hosts},
            "pids_per_host": {h: len(acc.host_pids.get(h, ())) for h in hosts},
            "nranks_max": max((k[2] for k in acc.rows), default=None),
            "from": "NCCL Inspector records' metadata.hostname, metadata.pid and header.rank"}


def read_inspector(paths: list[str]) -> Account:
    """Every record of every file (a dir: its Inspector files) into one account. A file whose first
    JSON value is not an Inspector record is refused (another tool's JSON); later non-records are
    counted and skipped."""
    acc = Account()
    files = [f for p in paths for f in inspector_files(p)]
    for path in files:
        acc.files.append(path)
        first = True
        for obj in _objects(path):
            if obj is None:
                acc.truncated += 1
                continue
            if not _is_record(obj):
                if first:
                    keys = ", ".join(list(obj)[:5]) if isinstance(obj, dict) else type(obj).__name__
                    raise UsageError(f"'{path}': JSON, but not NCCL Inspector records (no header with coll_perf or "
                                     f"p2p_perf; it starts with {keys or 'an empty object'})")
                acc.skipped += 1
                continue
            first = False
            _add(acc, obj, path)
    return acc


def _pct(xs, q):
    v = sorted(x for x in xs if x == x)
    if not v:
        return None
    k = (len(v) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def rows(acc: Account) -> list[dict]:
    """One row per communicator, rank, collective, message size and timing source."""
    out = []
    for key in sorted(acc.rows, key=lambda k: (k[0], k[1], k[3], k[4], k[7], str(k[6]), k[8])):
        r = acc.rows[key]
        comm, rank, nranks, kind, op, coll, peer, msg, src = key
        out.append({"comm": comm, "comm_name": r.comm_name, "rank": rank, "nranks": nranks, "nnodes": r.nnodes,
                    "host": r.host, "kind": kind, "op": op, "coll": coll, "peer": peer, "msg_size_bytes": msg,
                    "size_bytes": nccl_tests_size(op, msg, nranks), "timing_source": src,
                    "gpu_timed": GPU_TIMED.get(src, "unknown"), "algo": r.algo, "proto": r.proto, "calls": r.calls,
                    "time_us_p50": _pct(r.times, 0.5), "time_us_mean": r.total_us / r.calls,
                    "time_us_min": r.min_us, "time_us_max": r.max_us, "algbw_gbps_p50": _pct(r.algbw, 0.5),
                    "busbw_gbps_p50": _pct(r.busbw, 0.5), "first_sn": r.first_sn, "last_sn": r.last_sn})
    return out


def comm_rows(table: list[dict]) -> list[dict]:
    """One row per communicator: its ranks seen, hosts, records and a line a person reads."""
    by = {}
    for r in table:
        c = by.setdefault(r["comm"], {"comm": r["comm"], "comm_name": r["comm_name"], "nranks": r["nranks"],
                                      "nnodes": r["nnodes"], "ranks": set(), "hosts": set(), "records": 0,
                                      "ops": {}, "gpu": 0})
        c["ranks"].add(r["rank"])
        if r["host"]:
            c["hosts"].add(r["host"])
        c["records"] += r["calls"]
        c["gpu"] += r["calls"] if r["gpu_timed"] == "yes" else 0
        if r["kind"] == "coll":
            c["ops"][r["op"]] = c["ops"].get(r["op"], 0) + r["calls"]
    out = []
    for c in by.values():
        nodes = c["nnodes"]
        name = f" '{c['comm_name']}'" if c["comm_name"] and c["comm_name"] != "unknown" else ""
        ops = ", ".join(f"{n:,} {o}" for o, n in sorted(c["ops"].items(), key=lambda kv: -kv[1]))
        pct = 100.0 * c["gpu"] / c["records"] if c["records"] else 0.0
        summary = (f"communicator {c['comm']}{name} of {c['nranks']} rank(s)"
                   + (f" on {nodes} node(s)" if nodes else "")
                   + f": {len(c['ranks'])} rank(s) dumped, {ops or 'no collective'}; "
                   f"{c['gpu']:,} of {c['records']:,} record(s) GPU-timed")
        out.append({"comm": c["comm"], "comm_name": c["comm_name"], "nranks": c["nranks"], "nnodes": nodes,
                    "ranks_seen": len(c["ranks"]), "hosts": len(c["hosts"]), "records": c["records"],
                    "collectives": sum(c["ops"].values()), "gpu_timed_pct": round(pct, 1), "summary": summary})
    return out


def summary(acc: Account) -> dict:
    return {"files": len(acc.files), "records": acc.records, "p2p_records": acc.p2p_records,
            "skipped_objects": acc.skipped, "truncated_records": acc.truncated,
            "format_versions": sorted(acc.versions), "rec_mechanisms": sorted(acc.mechanisms),
            "timing_sources": dict(sorted(acc.timing.items())), "hosts": sorted(acc.hosts),
            "time_resolution_us": 1, "records_under_1us": acc.under_1us,
            "note": "coll_exec_time_us is whole microseconds; messages under NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES "
                    "(default 8192) are not recorded"}


def import_nccl_inspector(paths: list[str], out_dir: str, command=None) -> dict:
    """Read ``paths`` (files or dirs), write ``nccl_inspector.csv``, ``nccl_inspector_comms.csv``
    and meta.json into ``out_dir``; the meta. UsageError, nothing written, for input that is not
    Inspector JSON; files with no record are written (``records`` 0) for the caller to report."""
    import sys

    if not paths:
        raise UsageError("import nccl-inspector: give a file or NCCL_INSPECTOR_DUMP_DIR")
    acc = read_inspector(list(paths))
    table = rows(acc)
    comms = comm_rows(table)
    info = summary(acc)
    os.makedirs(out_dir, exist_ok=True)
    write_inspector_tables(out_dir, ROW_COLUMNS, table, COMM_COLUMNS, comms)
    meta = results.provenance(
        "import", "imported", "NCCL Inspector JSON read as the engine's own account of every collective it ran "
        "(commprof import nccl-inspector)", status="complete",
        command=list(command) if command is not None else list(sys.argv), hosts=info["hosts"], gpus=[],
        source_files=[{"path": shown_path(p), "sha256": results.file_sha256(p)} for p in acc.files],
        import_kind="nccl-inspector", nccl_inspector=info, box_identity=box_identity(acc))
    results.write_meta(out_dir, meta)
    return meta
