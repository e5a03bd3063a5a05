"""``commprof import nccl-tests LOG...``: nccl-tests results as a commprof sweep results dir.

Reads the text that ``all_reduce_perf``, ``all_gather_perf``, ``reduce_scatter_perf``,
``alltoall_perf`` and ``broadcast_perf`` print (old and new column layouts, ``mpirun
--tag-output`` / ``srun --label`` prefixes, ``NCCL_DEBUG`` lines interleaved, several runs in one
file) and their ``-J`` JSON files (nccl-tests 2.17+), and writes ``sweep.csv`` + ``meta.json`` in
the format of :mod:`commprof.results`, so ``show``, ``trace --predict --comm-from`` and the cost
model read an nccl-tests run like a commprof sweep.

nccl-tests reports one time per size: the average over its timed iterations (and, by default, over
ranks). It goes into every latency statistic of the row; ``meta.json`` says so. Runs with per-
iteration timing (``-I 1``) also give min/max/p99 (text) or p50/p95/p99 (JSON), and those are used.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
from dataclasses import dataclass, field

from commprof import results
from commprof.model.collectives import COLLECTIVES
from commprof.model.errors import UsageError, shown, warn
from commprof.model.fileio import open_user_file, read_user_bytes, shown_path
from commprof.ingest import ncclinfer

# nccl-tests binary (without _perf / _mpi) -> commprof op
NCCL_TESTS_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
                  "alltoall": "all_to_all", "broadcast": "broadcast"}
NCCL_TYPES = {"float": "fp32", "half": "fp16", "bfloat16": "bf16", "double": "fp64", "int8": "int8",
              "uint8": "uint8", "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
              "f8e4m3": "fp8e4m3", "f8e5m2": "fp8e5m2", "int": "int32"}

EXIT_WRONG_RESULTS = 1          # the exit code of any run whose results were checked and found wrong
EXPECTED = "not nccl-tests output (expected a data line with size, count, type, redop, root, time, algbw, busbw, #wrong, ...)"
# nccl-tests built without MPI=1 and started by mpirun/srun: every process runs its own test (each is
# "Rank 0"), and their tables land interleaved in one log (nccl-tests issues #27, #107, #182, #254)
SEPARATE_RUNS = ("the log interleaves separate runs: nccl-tests built without MPI=1 and started by mpirun "
                 "runs one independent test per process, not one run over all of them; rebuild with "
                 "'make MPI=1' (or run with -g N in one process), or give each run its own file")

_PREFIX_RE = re.compile(r"^(?:\[\d+(?:,\d+)*\]<std(?:out|err)>:|\s*\d+:\s|\[\d+\]\s)", re.ASCII)
_RANK_RE = re.compile(r"^Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                      r"\[([^\]]*)\]\s*(.*)$", re.ASCII)
_VERSION_RE = re.compile(r"nccl-tests version\s+(\S+)(?:\s+\([^)]*\))?(?:\s+nccl-headers=(\d+))?"
                         r"(?:\s+nccl-library=(\d+))?", re.ASCII)
_BINARY_RE = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoallv|alltoall|broadcast|sendrecv|"
                        r"reduce|gather|scatter|hypercube)_perf(?:_mpi)?\b")
_NCCL_LOG_RE = re.compile(r"\bNCCL (?:INFO|WARN|TRACE|ABORT)\b|^NCCL version\b")
_INT_RE = re.compile(r"^-?\d+$", re.ASCII)
_NUM_RE = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^-?(?:nan|inf)$", re.IGNORECASE | re.ASCII)
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.ASCII)
_TIME_RE = re.compile(r"^\d{2}:\d{2}:\d{2}$", re.ASCII)


@dataclass
class Section:
    """One nccl-tests run: its header facts and its data rows."""

    path: str
    start_line: int
    op_name: str = ""                 # nccl-tests name, e.g. all_reduce (from the header or a hint)
    version: str = ""
    nccl_headers: str = ""
    nccl_library: str = ""
    nthreads: int | None = None
    ngpus: int | None = None
    graph: int = 0
    iters: int = 0
    warmup: int = 0
    agg_iters: int = 1
    cputime: bool = False
    blocking: str = ""
    ranks: list = field(default_factory=list)
    fields: list | None = None        # per-placement column names from the header, e.g. time algbw busbw #wrong
    has_root: bool | None = None
    rows: list = field(default_factory=list)
    out_of_bounds: str = ""
    avg_busbw: str = ""
    fmt: str = "text"
    extra: dict = field(default_factory=dict)


def nccl_version_str(code) -> str:
    """NCCL_VERSION_CODE -> "2.29.3" (2.9+ use major*10000 + minor*100 + patch, older *1000)."""
    try:
        c = int(code)
    except (TypeError, ValueError):
        return ""
    if c <= 0:
        return ""
    if c >= 10000:
        return f"{c // 10000}.{(c % 10000) // 100}.{c % 100}"
    return f"{c // 1000}.{(c % 1000) // 100}.{c % 100}"


def _op_from_name(name: str) -> str:
    m = _BINARY_RE.search(name)
    return m.group(1) if m else ""


_FILE_HINTS = (("reduce_scatter", r"reduce[_-]?scatter"), ("all_reduce", r"all[_-]?reduce"),
               ("all_gather", r"all[_-]?gather"), ("alltoall", r"all[_-]?to[_-]?all"),
               ("broadcast", r"broadcast|bcast"))


def _op_from_filename(path: str) -> str:
    """A file name hint such as ``h100_allreduce_8gpu.log`` or ``all_gather_perf.txt``."""
    base = os.path.basename(path).lower()
    for name, pat in _FILE_HINTS:
        if re.search(pat, base):
            return name
    return ""


def _num(tok: str) -> float:
    if not _NUM_RE.match(tok):
        raise ValueError(tok)
    return float(tok)


# Bounds on figures read from nccl-tests output. Byte sizes, element counts and #wrong: up to
# 2^53 (a float still holds every whole number below it; no buffer comes near). Threads, GPUs,
# iterations, ranks, pids and devices: up to a C int, the type nccl-tests prints them from.
MAX_SIZE = 1 << 53
MAX_HEADER_INT = (1 << 31) - 1
_FIGURE_RULE = "must be a finite number >= 0, or nan (not measured)"
# Upper bounds of what a measurement can be: a bandwidth over 100,000 GB/s is ~50x NVLink 5's
# 1,800 GB/s per GPU (NVIDIA's Blackwell datasheet); one collective lasting over 1e10 us is 2.8 h.
MAX_BW_GBPS = 1e5
MAX_TIME_US = 1e10
_BOUND_WHY = {"GB/s": "50x NVLink 5's 1,800 GB/s per GPU", "us": "2.8 hours for one collective"}


class _Bad(ValueError):
    """A figure of the right shape that breaks its rule; the message names the field and the rule."""


def _whole(tok: str, field: str, hi: int) -> int:
    """An integer token (already matched as ``-?\\d+``) in 0..hi, else _Bad naming ``field``."""
    digits = tok.lstrip("-").lstrip("0")
    if tok.startswith("-") and digits:
        raise _Bad(f"{field} = {shown(tok, 20)}: must be a whole number >= 0")
    if len(digits) > len(str(hi)) or int(tok) > hi:
        raise _Bad(f"{field} = {shown(tok, 20)}: must be at most {hi:,}")
    return int(tok)


def _line_int(tok: str, label: str, lineno: int, field: str) -> int:
    """A header or rank-line integer; UsageError naming file, line and field when out of range."""
    try:
        return _whole(tok, field, MAX_HEADER_INT)
    except _Bad as e:
        raise UsageError(f"'{label}' line {lineno}: {e}") from None


def _wrong_count(v: float, field: str, tok) -> int:
    """#wrong / nwrong: a whole count of wrong elements."""
    if not math.isfinite(v) or v < 0 or v > MAX_SIZE:
        raise _Bad(f"{field} = {shown(tok, 20)}: must be a count of wrong elements, a whole number >= 0")
    return round(v)


_STATS = ("min", "max", "p50", "p95", "p99", "avg")


def _check_entry(entry: dict, size: int, names: dict, one_rank: bool = False) -> None:
    """The rules of one measurement (``names`` maps each key to the field named in errors).

    time, algbw, busbw and the per-iteration statistics: finite and >= 0, or nan (nccl-tests'
    "not measured"). A measurement that is kept (time > 0 and size > 0) has real bandwidths; a
    per-iteration statistic of nan or 0 counts as not reported (the average time stands in).
    On one rank (``one_rank``: the rank lines name one rank) nothing crosses a link and
    nccl-tests prints the in-place copy it skips as a huge algbw (e.g. 109655 GB/s): no bound there.
    """
    for key in ("time", "algbw", "busbw", *_STATS):
        v = entry.get(key)
        if v is not None and not math.isnan(v) and (math.isinf(v) or v < 0):
            raise _Bad(f"{names[key]} = {v:g}: {_FIGURE_RULE}")
        hi = MAX_BW_GBPS if key in ("algbw", "busbw") else MAX_TIME_US
        if v is not None and v > hi and not (one_rank and key in ("algbw", "busbw")):
            unit = "GB/s" if key in ("algbw", "busbw") else "us"
            raise _Bad(f"{names[key]} = {v:g} {unit}: not a physical figure (at most {hi:g} {unit}: "
                       f"{_BOUND_WHY[unit]})")
    if entry["time"] > 0 and size > 0:              # nan > 0 is False: a nan time is left out later
        for key in ("algbw", "busbw"):
            if math.isnan(entry[key]):
                raise _Bad(f"{names[key]} = nan though the time is {entry['time']:g}: {_FIGURE_RULE}")
    for key in _STATS:
        if key in entry and not entry[key] > 0:
            del entry[key]


# --- text ------------------------------------------------------------------------------------------

def _header_fields(tokens: list[str]) -> tuple[list[str], bool] | None:
    """Column header line (tokens after '#') -> (per-placement field names, has_root)."""
    if "size" not in tokens or "count" not in tokens:
        return None
    times = [i for i, t in enumerate(tokens) if t in ("time", "cputime")]
    if not times:
        return None
    first = times[0]
    end = times[1] if len(times) > 1 else len(tokens)
    per = [t for t in tokens[first:end] if t != "timestamp"]
    return per, "root" in tokens[:first]


def _parse_data_line(sec: Section, tokens: list[str]):
    """A data line -> row dict; ValueError when it does not have the expected shape."""
    if len(tokens) < 7 or not _INT_RE.match(tokens[0]) or not _INT_RE.match(tokens[1]):
        raise ValueError("shape")
    size, count = _whole(tokens[0], "size", MAX_SIZE), _whole(tokens[1], "count", MAX_SIZE)
    dtype = tokens[2]
    if _NUM_RE.match(dtype) or dtype == "N/A":
        raise ValueError("type")
    i = 3
    redop = ""
    if i < len(tokens) and not _NUM_RE.match(tokens[i]) and tokens[i] != "N/A":
        redop = tokens[i]
        i += 1
    vals = tokens[i:]
    if len(vals) >= 2 and _DATE_RE.match(vals[-2]) and _TIME_RE.match(vals[-1]):
        vals = vals[:-2]                               # -S timestamp
    per = sec.fields or ["time", "algbw", "busbw", "#wrong"]
    k = len(per)
    has_root = sec.has_root
    if has_root is None:                               # no header seen: root present if the count is odd
        has_root = len(vals) % 2 == 1
    root = None
    if has_root:
        if not vals or not _INT_RE.match(vals[0]):
            raise ValueError("root")
        root = int(vals[0])
        vals = vals[1:]
    if sec.fields is None and len(vals) % 2 == 0 and len(vals) >= 8:
        k = len(vals) // 2
        per = ["time", "algbw", "busbw", "#wrong"] + [f"extra{j}" for j in range(k - 4)]
    if len(vals) == 2 * k:
        blocks = {"out-of-place": vals[:k], "in-place": vals[k:]}
    elif len(vals) == k:                               # trace replay: only in-place is printed
        blocks = {"in-place": vals}
    else:
        raise ValueError("columns")
    row = {"size": size, "count": count, "type": dtype, "redop": redop, "root": root}
    for place, block in blocks.items():
        rec = dict(zip(per, block))
        tname = "time" if "time" in rec else "cputime"
        t = rec.get(tname)
        wrong_tok = rec.get("#wrong", rec.get("error", "N/A"))
        entry = {"time": _num(t), "algbw": _num(rec["algbw"]), "busbw": _num(rec["busbw"])}
        if wrong_tok == "N/A":                         # validation off (-c 0): unknown, not 0
            entry["wrong"], entry["wrong_note"] = None, "not checked (N/A: validation off)"
        elif "error" in rec and "#wrong" not in rec:   # old layout: a max deviation, judged by the footer
            _num(wrong_tok)
            entry["wrong"], entry["wrong_note"] = None, f"nccl-tests error {wrong_tok} (a deviation, not a count)"
            entry["deviation"] = True
        else:
            entry["wrong"] = _wrong_count(_num(wrong_tok), f"{place} #wrong", wrong_tok)
            entry["wrong_note"] = ""
        for key, name in (("i_min", "min"), ("i_max", "max"), ("i_p99", "p99")):
            if key in rec:
                entry[name] = _num(rec[key])
        _check_entry(entry, size, {"time": f"{place} {tname}", "algbw": f"{place} algbw", "busbw": f"{place} busbw",
                                   "min": f"{place} i_min", "max": f"{place} i_max", "p99": f"{place} i_p99"},
                     one_rank=_one_rank(sec))
        if tname == "time" and sec.agg_iters <= 1:
            why = ncclinfer.check_algbw(size, t, rec["algbw"])
            if why:
                entry["algbw_mismatch"] = f"{place} {why}"
        row[place] = entry
    return row


def _one_rank(sec: Section) -> bool:
    """The run's rank lines name one rank, rank 0, of one process with one GPU."""
    return (len(sec.ranks) == 1 and sec.ranks[0].get("rank") == 0
            and (sec.nthreads or 1) * (sec.ngpus or 1) == 1)


#: A text file is refused as not nccl-tests output when its first SNIFF_BYTES hold no nccl-tests
#: header or data line (an NCCL_DEBUG=INFO run prints a few hundred lines before the table).
SNIFF_BYTES = 4 << 20
#: The most data rows one file may hold: nccl-tests prints one row per size (8 B to 16 GiB by
#: factor 2 is 32 rows; -i 1K steps from 1 KiB to 64 MiB, 65,536). A file with more is refused at
#: the row past it, before it is read whole.
MAX_ROWS = 100_000
#: The longest line read: a nccl-tests line is under 300 characters.
MAX_LINE = 1 << 20
#: The largest ``-J`` JSON file read (it is parsed whole): one result is ~400 bytes with its
#: per-iteration block, so MAX_ROWS results are ~40 MB; a larger file is refused by its size,
#: before a byte of it is parsed (a 788 MB one took 145 s and 7.4 GB).
MAX_JSON_BYTES = 64 << 20


def _no_second_process(sec: Section, mr, label: str, lineno: int) -> None:
    """UsageError when a rank index (in its group) is printed again by another process or host: each
    process believed it was that rank, i.e. ran a test of its own (:data:`SEPARATE_RUNS`)."""
    rank, group, pid, host = int(mr.group(1)), int(mr.group(2) or 0), int(mr.group(3)), mr.group(4)
    for r in sec.ranks:
        if (r["rank"], r["group"]) == (rank, group) and (r["pid"], r["host"]) != (pid, host):
            raise UsageError(f"'{label}' line {lineno}: Rank {rank} is printed by two processes (pid {r['pid']} "
                             f"on {r['host']}, pid {pid} on {host}): {SEPARATE_RUNS}")


def _new_section(sections: list, path: str, lineno: int) -> Section:
    sec = Section(path=path, start_line=lineno)
    sections.append(sec)
    return sec


def parse_text(path: str, text) -> list[Section]:
    """Every run in one nccl-tests text log (its text, or an iterable of its lines, read as they
    come); UsageError naming the file and line on a bad data line, on a file whose first
    SNIFF_BYTES hold nothing of nccl-tests, and past MAX_ROWS data rows."""
    label = os.path.basename(path)
    sections: list[Section] = []
    sec: Section | None = None
    first_foreign = None
    hints = []
    seen_bytes, seen_ours, nrows = 0, False, 0
    lines = text.splitlines() if isinstance(text, str) else text
    for lineno, raw in enumerate(lines, start=1):
        if not seen_ours:
            seen_bytes += len(raw)
            if seen_bytes > SNIFF_BYTES:
                raise UsageError(f"'{label}' line {first_foreign or 1}: {EXPECTED} (nothing in its first "
                                 f"{SNIFF_BYTES >> 20} MiB is a nccl-tests header or data line)")
        line = _PREFIX_RE.sub("", raw.rstrip("\r\n"), count=1).strip()
        if not line:
            continue
        if line.startswith("#"):
            body = line.lstrip("#").strip()
            toks = body.split()
            m = _VERSION_RE.search(body)
            if m:
                if sec is None or sec.rows or sec.version:
                    sec = _new_section(sections, path, lineno)
                sec.version, sec.nccl_headers, sec.nccl_library = m.group(1), m.group(2) or "", m.group(3) or ""
                continue
            if body.startswith("Collective test starting:"):
                if sec is None or sec.rows or sec.op_name:
                    sec = _new_section(sections, path, lineno)
                sec.op_name = _op_from_name(body) or body.split(":", 1)[1].strip()
                continue
            if body.startswith("nThread"):
                if sec is None or sec.rows or sec.nthreads is not None:
                    sec = _new_section(sections, path, lineno)
                for key, attr in (("nThread", "nthreads"), ("nGpus", "ngpus")):
                    mm = re.search(rf"\b{key}\s+(\d+)", body, re.ASCII)
                    if mm:
                        setattr(sec, attr, _line_int(mm.group(1), label, lineno, key))
                for pat, attr in ((r"\bgraph:\s*(\d+)", "graph"), (r"(?<!warmup )\biters:\s*(\d+)", "iters"),
                                  (r"warmup iters:\s*(\d+)", "warmup"), (r"agg iters:\s*(\d+)", "agg_iters")):
                    mm = re.search(pat, body, re.ASCII)
                    if mm:
                        setattr(sec, attr, _line_int(mm.group(1), label, lineno, attr))
                continue
            if sec is None:
                sec = _new_section(sections, path, lineno)
            mr = _RANK_RE.match(body)
            if mr:
                seen_ours = True
                _no_second_process(sec, mr, label, lineno)
                sec.ranks.append({"rank": _line_int(mr.group(1), label, lineno, "Rank"),
                                  "group": _line_int(mr.group(2) or "0", label, lineno, "Group"),
                                  "pid": _line_int(mr.group(3), label, lineno, "Pid"), "host": mr.group(4),
                                  "device": _line_int(mr.group(5), label, lineno, "device"),
                                  "bus_id": mr.group(6), "gpu": mr.group(7).strip()})
                continue
            hf = _header_fields(toks)
            if hf:
                seen_ours = True
                if sec.avg_busbw:             # a column header after a run's footer: the next run (its
                    sec = _new_section(sections, path, lineno)   # nThread line left out of the paste)
                sec.fields, sec.has_root = hf
                sec.cputime = "cputime" in toks
                continue
            if body.startswith("Blocking Enabled"):
                sec.blocking = body
            elif body.startswith("Out of bounds values"):
                sec.out_of_bounds = body.partition(":")[2].strip()
            elif body.startswith("Avg bus bandwidth"):
                if sec.avg_busbw and sec.rows:
                    raise UsageError(f"'{label}' line {lineno}: a second '# Avg bus bandwidth' footer in one "
                                     f"table (the first on line {sec.extra['footer_line']}): {SEPARATE_RUNS}")
                sec.avg_busbw = body.partition(":")[2].strip()
                sec.extra["footer_line"] = lineno
            elif body.startswith("Collective test concluded"):
                sec = None
            else:
                name = _op_from_name(body)
                if name:
                    hints.append(name)
            continue
        if _NCCL_LOG_RE.search(line):
            continue
        toks = line.split()
        # a data line: size and count first; or, after a column header, a line of a data line's
        # shape whose size or count is corrupt (reported, never dropped silently)
        looks_data = sec is not None and sec.fields is not None and len(toks) >= 7 and \
            (_INT_RE.match(toks[0]) or _INT_RE.match(toks[1])) and _NUM_RE.match(toks[-1] if toks[-1] != "N/A" else "0")
        if (_INT_RE.match(toks[0]) and len(toks) > 1 and _INT_RE.match(toks[1])) or looks_data:
            if sec is None:
                sec = _new_section(sections, path, lineno)
            if sec.avg_busbw:
                raise UsageError(f"'{label}' line {lineno}: a data line after the table's '# Avg bus bandwidth' "
                                 f"footer (line {sec.extra['footer_line']}) with no header of its own: {SEPARATE_RUNS}")
            try:
                row = _parse_data_line(sec, toks)
            except _Bad as e:
                raise UsageError(f"'{label}' line {lineno}: {e}") from None
            except (ValueError, KeyError, TypeError):
                raise UsageError(f"'{label}' line {lineno}: {EXPECTED}") from None
            row["line"] = lineno
            sec.rows.append(row)
            seen_ours = True
            nrows += 1
            if nrows > MAX_ROWS:
                raise UsageError(f"'{label}' line {lineno}: more than {MAX_ROWS:,} data rows in one file; nccl-tests "
                                 "prints one row per size (8 B to 16 GiB by factor 2 is 32 rows): not a log "
                                 "commprof imports whole; split it or keep the sizes you need")
            continue
        name = _op_from_name(line)
        if name:
            hints.append(name)
        elif first_foreign is None:
            first_foreign = lineno
    sections = [s for s in sections if s.rows]
    if not sections:
        raise UsageError(f"'{label}' line {first_foreign or 1}: {EXPECTED}")
    for s in sections:
        _resolve_collective(s, hints[0] if hints else "", _op_from_filename(path))
    return sections


def _table_ranks(sec: Section) -> int | None:
    """The rank count the rank lines give (the highest index + 1 where only some are printed)."""
    if not sec.ranks or sec.fmt == "json":
        return len(sec.ranks) * (sec.nthreads or 1) * (sec.ngpus or 1) if sec.ranks else None
    return max(len({r["rank"] for r in sec.ranks}), max(r["rank"] for r in sec.ranks) + 1)


def _resolve_collective(sec: Section, in_log: str, in_name: str) -> None:
    """The run's collective: the banner ('# Collective test starting'), else a binary name in the
    log, else the table itself (:func:`ncclinfer.infer_collective`), else the file name. The table
    is read in every case: a banner or binary name it contradicts is refused. ``collective_from``
    in the run's info says which."""
    label = f"'{os.path.basename(sec.path)}' line {sec.start_line}"
    has_redop = any(r.get("redop") for r in sec.rows)
    has_root = bool(sec.has_root) or sec.fmt == "json" or any(r.get("root") is not None for r in sec.rows)
    table, why = ncclinfer.infer_collective(sec.rows, has_redop, has_root, _table_ranks(sec))
    named, source = (sec.op_name, "the banner '# Collective test starting'" if sec.fmt == "text"
                     else "the command line (args[0])") if sec.op_name else \
        (in_log, "a binary name in the log") if in_log else ("", "")
    if named:
        if table and table != named and named in NCCL_TESTS_OPS and "taken as" not in why:
            raise UsageError(f"{label}: {source} says {named}_perf but the table is {table} ({why}); "
                             "fix the file or give each run its own file")
        sec.op_name = named
        sec.extra["collective_from"] = source + (f"; the table agrees ({why.removeprefix('from the table: ')})"
                                                 if table == named else "")
    elif table and "taken as" in why and in_name and in_name != table and in_name in why:
        sec.op_name = in_name                 # the table leaves two open; the file name picks one of them
        sec.extra["collective_from"] = f"the file name, between the two the table allows ({why})"
    elif table:
        sec.op_name = table
        sec.extra["collective_from"] = why
        if in_name and in_name != table:
            warn(f"{label}: the file name suggests {in_name} but the table is {table} ({why}); imported as {table}")
    elif in_name:
        sec.op_name = in_name
        sec.extra["collective_from"] = f"the file name ({why})"
    else:
        sec.extra["collective_unknown"] = why


# --- JSON (-J, nccl-tests 2.17+) -------------------------------------------------------------------

def _jnum(v, field: str) -> float:
    """A JSON time or bandwidth: a number; nccl-tests writes NaN as the string "nan"."""
    if isinstance(v, str) and v.strip().lower() == "nan":
        return float("nan")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _Bad(f"{field} = {shown(v)}: must be a number")
    try:
        return float(v)
    except OverflowError:                           # an integer too large for a float
        raise _Bad(f"{field} = {shown(v)}: {_FIGURE_RULE}") from None


def _jwhole(v, field: str, lo: int = 0, hi: int = MAX_SIZE) -> int:
    """A JSON whole number (``1024`` or ``1024.0``) in lo..hi."""
    if isinstance(v, float) and v.is_integer():     # never true of inf or nan
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _Bad(f"{field} = {shown(v)}: must be a whole number from {lo} to {hi:,}")
    return v


def _jstr(v, field: str) -> str:
    """A JSON string; absent or null is ""."""
    if v is None:
        return ""
    if not isinstance(v, str):
        raise _Bad(f"{field} = {shown(v)}: must be a string")
    return v


def _jfirst(d: dict, *names):
    """The first of ``names`` that ``d`` holds (its value may be null), or None."""
    return next((n for n in names if n in d), None)


def parse_json(path: str, text: str) -> list[Section]:
    """One ``-J`` JSON document (schema of nccl-tests src/util.cu, JSON_FILE_VERSION 1-3).

    Every field commprof reads is checked against the schema's type and range; a breach is a
    UsageError of one line naming the file and the field (e.g. ``results[3].out_of_place.time``).
    """
    label = os.path.basename(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"'{label}' line {e.lineno}: not valid JSON ({e.msg}); nccl-tests writes -J "
                         "output only when the run finishes") from None
    except ValueError:                              # json's int() of a number over 4,300 digits
        raise UsageError(f"'{label}': not nccl-tests -J output (a number has more than 4,300 digits)") from None
    except RecursionError:
        raise UsageError(f"'{label}': not nccl-tests -J output (arrays or objects nested too deep)") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise UsageError(f"'{label}' line 1: not nccl-tests -J output (expected a JSON object with a "
                         "'results' list of {size, count, type, out_of_place: {time, alg_bw, bus_bw, nwrong}})")
    try:
        sec = _json_section(path, doc)
    except _Bad as e:
        raise UsageError(f"'{label}': field {e}") from None
    if not sec.rows:
        raise UsageError(f"'{label}': nccl-tests -J output with no results")
    _resolve_collective(sec, "", _op_from_filename(path))
    return [sec]


def _json_section(path: str, doc: dict) -> Section:
    """The run in one -J document; _Bad naming the field on a value of the wrong type or range."""
    cfg = {} if doc.get("config") is None else doc["config"]
    if not isinstance(cfg, dict):
        raise _Bad(f"config = {shown(cfg)}: must be an object {{nthreads, ngpus, devices, ...}}")
    args = [] if doc.get("args") is None else doc["args"]
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise _Bad(f"args = {shown(args)}: must be a list of strings (the command line)")
    sec = Section(path=path, start_line=1, fmt="json")
    sec.op_name = _op_from_name(args[0]) if args else ""
    version = doc.get("version")
    sec.extra["json_version"] = None if version is None else _jwhole(version, "version", 0, 1000)
    sec.version = _jstr(doc.get("nccl_tests_version"), "nccl_tests_version")
    nv = doc.get("nccl_version")
    sec.nccl_library = nv if isinstance(nv, str) else "" if nv is None else str(_jwhole(nv, "nccl_version"))

    def opt(d: dict, key: str, field: str, default, lo: int = 0):
        return default if d.get(key) is None else _jwhole(d[key], field, lo, MAX_HEADER_INT)

    sec.nthreads = opt(cfg, "nthreads", "config.nthreads", None, 1)
    sec.ngpus = opt(cfg, "ngpus", "config.ngpus", None, 1)
    sec.graph = opt(cfg, "graph", "config.graph", 0)
    sec.iters = opt(cfg, "iterations", "config.iterations", 0)
    sec.warmup = opt(cfg, "warmup_iters", "config.warmup_iters", 0)
    sec.agg_iters = opt(cfg, "aggregated_iterations", "config.aggregated_iterations", 1) or 1
    devices = [] if cfg.get("devices") is None else cfg["devices"]
    if not isinstance(devices, list):
        raise _Bad(f"config.devices = {shown(devices)}: must be a list of objects, one per process")
    for i, d in enumerate(devices):
        f = f"config.devices[{i}]"
        if not isinstance(d, dict):
            raise _Bad(f"{f} = {shown(d)}: must be an object {{rank, hostname, device, device_info, ...}}")
        sec.ranks.append({"rank": opt(d, "rank", f + ".rank", None), "group": opt(d, "group", f + ".group", 0),
                          "pid": opt(d, "pid", f + ".pid", None), "host": _jstr(d.get("hostname"), f + ".hostname"),
                          "device": opt(d, "device", f + ".device", None),
                          "bus_id": _jstr(d.get("device_hex"), f + ".device_hex"),
                          "gpu": _jstr(d.get("device_info"), f + ".device_info").strip()})
    if len(doc["results"]) > MAX_ROWS:
        raise _Bad(f"results: {len(doc['results']):,} entries, more than the {MAX_ROWS:,} commprof imports from one "
                   "file (nccl-tests writes one per size); split it or keep the sizes you need")
    for idx, r in enumerate(doc["results"]):
        f = f"results[{idx}]"
        if not isinstance(r, dict):
            raise _Bad(f"{f} = {shown(r)}: must be an object {{size, count, type, out_of_place, in_place}}")
        for key in ("size", "count", "type"):
            if key not in r:
                raise _Bad(f"{f}.{key} is missing: a result has size, count, type and out_of_place/in_place")
        size = _jwhole(r["size"], f + ".size")
        dtype = _jstr(r["type"], f + ".type").strip()
        if not dtype:
            raise _Bad(f"{f}.type = {shown(r['type'])}: must name the data type, e.g. \"float\"")
        root = r.get("root", "-1")
        root_text = str(root).strip() if isinstance(root, (str, int)) and not isinstance(root, bool) else None
        if root_text is not None and not root_text:
            root_text = "-1"
        if root_text is None or not re.fullmatch(r"-?\d{1,10}", root_text):
            raise _Bad(f"{f}.root = {shown(root)}: must be a rank number (or -1)")
        row = {"size": size, "count": _jwhole(r["count"], f + ".count"), "type": dtype,
               "redop": _jstr(r.get("redop"), f + ".redop").strip(), "root": int(root_text), "line": idx}
        for key, place in (("out_of_place", "out-of-place"), ("in_place", "in-place")):
            e = r.get(key)
            if e is None:
                continue
            fe = f"{f}.{key}"
            if not isinstance(e, dict):
                raise _Bad(f"{fe} = {shown(e)}: must be an object {{time, alg_bw, bus_bw, nwrong}}")
            tkey, akey, bkey = (_jfirst(e, "time", "cpu_time", "time_us"), _jfirst(e, "alg_bw", "algbw"),
                                _jfirst(e, "bus_bw", "busbw"))
            for k, shown_name in ((tkey, "time"), (akey, "alg_bw"), (bkey, "bus_bw")):
                if k is None:
                    raise _Bad(f"{fe}.{shown_name} is missing: a measurement has time, alg_bw and bus_bw")
            if tkey == "cpu_time":
                sec.cputime = True
            wkey = _jfirst(e, "nwrong", "wrong", "#wrong")
            wrong = None if wkey is None else e[wkey]
            entry = {"time": _jnum(e[tkey], f"{fe}.{tkey}"), "algbw": _jnum(e[akey], f"{fe}.{akey}"),
                     "busbw": _jnum(e[bkey], f"{fe}.{bkey}"),
                     "wrong": None if wrong is None else _wrong_count(_jnum(wrong, f"{fe}.{wkey}"), f"{fe}.{wkey}",
                                                                      wrong),
                     "wrong_note": "not checked (null: validation off)" if wrong is None else ""}
            names = {"time": f"{fe}.{tkey}", "algbw": f"{fe}.{akey}", "busbw": f"{fe}.{bkey}"}
            pi = r.get(f"{key}_per_iter")
            if pi is not None and not isinstance(pi, dict):
                raise _Bad(f"{f}.{key}_per_iter = {shown(pi)}: must be an object {{min_us, max_us, p50_us, ...}}")
            for k2, name in (("min_us", "min"), ("max_us", "max"), ("p50_us", "p50"),
                             ("p95_us", "p95"), ("p99_us", "p99"), ("avg_us", "avg")):
                names[name] = f"{f}.{key}_per_iter.{k2}"
                if pi and pi.get(k2) is not None:
                    entry[name] = _jnum(pi[k2], names[name])
            _check_entry(entry, size, names, one_rank=_one_rank(sec))
            if tkey == "time" and sec.agg_iters <= 1:
                why = ncclinfer.check_algbw_float(size, entry["time"], entry["algbw"])
                if why:
                    entry["algbw_mismatch"] = f"{place} {why}"
            row[place] = entry
        if "out-of-place" in row or "in-place" in row:
            sec.rows.append(row)
    return sec


# --- sections -> rows ------------------------------------------------------------------------------

def _ranks_from_ratio(op: str, rows: list[dict]) -> int | None:
    """Number of ranks implied by busbw/algbw (the nccl-tests bus factor): the one whole rank count
    whose factor lies within the ratio's bounds at every row, given that nccl-tests prints both
    figures to two decimals (+-0.005). None where no count or more than one fits: near 2 (all_reduce)
    or 1 (a count per rank) the factor changes little from one count to the next, so 2.15/1.08 fits
    anything from 88 ranks up (nccl-tests#176, 128 GPUs), never "216"."""
    if op == "all_reduce":
        top = 2.0
    elif op in ("all_gather", "reduce_scatter", "all_to_all"):
        top = 1.0
    else:
        return None
    lo, hi, seen = 0.0, math.inf, False
    for r in rows:
        for place in ("out-of-place", "in-place"):
            e = r.get(place)
            if not e or not e["algbw"] > 0.005 or not e["busbw"] > 0.005:
                continue
            lo = max(lo, (e["busbw"] - 0.005) / (e["algbw"] + 0.005))
            hi = min(hi, (e["busbw"] + 0.005) / (e["algbw"] - 0.005))
            seen = True
    if not seen or hi < lo or lo >= top:
        return None
    k_lo = max(2, math.ceil(top / (top - lo) - 1e-9))          # factor(k) = top (1 - 1/k), increasing in k
    if hi >= top:
        return None
    k_hi = math.floor(top / (top - hi) + 1e-9)
    if k_lo != k_hi or abs(COLLECTIVES[op].busbw_factor(k_lo) - (lo + hi) / 2) > (hi - lo) / 2 + 1e-9:
        return None
    return k_lo


def _section_ranks(sec: Section, op: str) -> tuple[int, str]:
    """The number of ranks from every signal the log gives: the rank lines (how many, and the
    highest rank index + 1: a log may print only some, e.g. a rack log shows only its last rank),
    the busbw/algbw ratio (nccl-tests' bus factor) and nThread x nGpus (ranks per process: the total
    is a multiple of it; with one process and every rank line, equal). Signals that disagree are
    refused with one line naming them."""
    label = f"'{os.path.basename(sec.path)}' line {sec.start_line}"
    ratio = _ranks_from_ratio(op, sec.rows)
    per_proc = (sec.nthreads or 1) * (sec.ngpus or 1) if (sec.nthreads or sec.ngpus) else None
    if sec.ranks:
        if sec.fmt == "json":
            n = len(sec.ranks) * (sec.nthreads or 1) * (sec.ngpus or 1)
            how = "config.devices (one entry per process) x nthreads x ngpus"
        else:
            per_group: dict = {}
            for r in sec.ranks:
                per_group.setdefault(r["group"], set()).add(r["rank"])
            lines = max(len(v) for v in per_group.values())
            highest = max(max(v) for v in per_group.values()) + 1
            n = max(lines, highest)
            how = "rank lines" + (" (ranks per group)" if len(per_group) > 1 else "")
            if highest > lines:
                how = (f"highest rank index + 1 (the log prints {lines} of its {highest} rank lines"
                       + (", ranks per group" if len(per_group) > 1 else "") + ")")
        if ratio and ratio != n:
            raise UsageError(f"{label}: the rank count is ambiguous: the {how.split(' (')[0]} say {n} ranks, busbw/algbw "
                             f"says {ratio}; give a log with every '# Rank' line (or fix the file)")
        if per_proc and n % per_proc:
            raise UsageError(f"{label}: the rank count is ambiguous: the {how.split(' (')[0]} say {n} ranks, not a "
                             f"multiple of nThread x nGpus = {per_proc} ranks per process")
        return n, how + ("; busbw/algbw agrees" if ratio else "")
    # all_gather, reduce_scatter and alltoall print the count per rank: size = count x type size x ranks,
    # exact at every size (busbw/algbw is 0.00/0.00 at decode sizes, and nThread x nGpus counts one process)
    counted = ncclinfer.count_ratio(sec.rows) if op in ("all_gather", "reduce_scatter", "all_to_all") else None
    counted = counted if counted and counted > 1 else None
    if ratio and counted and ratio != counted:
        raise UsageError(f"{label}: the rank count is ambiguous: busbw/algbw says {ratio} ranks, size / (count x "
                         f"type size) says {counted}; give a log with every '# Rank' line (or fix the file)")
    ratio, how = (ratio, "busbw/algbw ratio (no rank lines in the log)") if ratio else \
        (counted, "size / (count x type size): a count per rank (no rank lines in the log)")
    if ratio:
        if per_proc and ratio % per_proc:
            raise UsageError(f"{label}: the rank count is ambiguous: {how.split(' (')[0].split(':')[0]} says {ratio} "
                             f"ranks, not a multiple of nThread x nGpus = {per_proc} ranks per process")
        return ratio, how + ("; size / count agrees" if counted and how.startswith("busbw") else "")
    if sec.nthreads and sec.ngpus:
        return sec.nthreads * sec.ngpus, "nThread x nGpus (no rank lines; assumes one process)"
    raise UsageError(f"'{os.path.basename(sec.path)}' line {sec.start_line}: cannot tell the number of ranks "
                     "(no '# Rank ...' lines, no nThread/nGpus header, and busbw/algbw does not determine it)")


def _section_rows(sec: Section, in_place: bool) -> tuple[list[dict], dict]:
    label = os.path.basename(sec.path)
    if not sec.op_name:
        raise UsageError(f"'{label}' line {sec.start_line}: cannot tell which collective this is: "
                         f"{sec.extra.get('collective_unknown') or 'no table'}, and no "
                         "'# Collective test starting: ..._perf' line or binary name in the log or the "
                         "file name; rename the file to include e.g. all_reduce_perf")
    if sec.op_name not in NCCL_TESTS_OPS:
        raise UsageError(f"'{label}' line {sec.start_line}: nccl-tests {sec.op_name}_perf is not imported "
                         f"(commprof knows {', '.join(n + '_perf' for n in NCCL_TESTS_OPS)})")
    op = NCCL_TESTS_OPS[sec.op_name]
    tp, tp_from = _section_ranks(sec, op)
    mode = "graph" if sec.graph > 0 else "eager"
    hosts = sorted({r["host"] for r in sec.ranks if r.get("host")})
    clock = "nccl-tests cputime" if sec.cputime else "nccl-tests"
    out = []
    wrong_rows: list[str] = []
    skipped = 0
    footer_ok = sec.out_of_bounds.split()[:2] == ["0", "OK"] if sec.out_of_bounds else False
    for r in sec.rows:
        counts = {}
        for place in ("out-of-place", "in-place"):
            e = r.get(place)
            if e is None:
                continue
            if e.get("deviation") and footer_ok:    # old layout: the footer's "0 OK" covers every row
                e["wrong"], e["wrong_note"] = 0, e["wrong_note"] + "; footer 'Out of bounds values : 0 OK'"
            counts[place] = e["wrong"]
        for place in ("out-of-place", "in-place"):
            e = r.get(place)
            if e is None or (place == "in-place" and not in_place):
                continue
            t = e["time"]
            if t is None or not math.isfinite(t) or t <= 0 or r["size"] <= 0:
                skipped += 1
                continue
            # nccl-tests prints one average per size; only -I 1 (text: i_min/i_max/i_p99) or -J
            # (p50/p95/p99/min/max) gives more. A statistic not reported stays empty: never a fake band.
            stat = "p50 (nccl-tests -I)" if "p50" in e else "avg (nccl-tests)"
            # The out-of-place row carries both placements' #wrong (the log checks both); an in-place
            # row its own. None = not checked (N/A): unknown, never 0.
            mine = [counts.get(q) for q in (("out-of-place", "in-place") if place == "out-of-place" else ("in-place",))]
            known = [c for c in mine if c is not None]
            wrong = sum(known) if known else ""             # empty: not checked (unknown, never 0)
            status = "WRONG" if wrong else ("ok" if e["wrong"] is not None else "unchecked")
            site = place + (f"; wrong: {e['wrong_note']}" if e.get("wrong_note") else "") + \
                (f"; {e['algbw_mismatch']}" if e.get("algbw_mismatch") else "")
            out.append({
                "op": op, "tp": tp, "group": 0, "ranks": f"0-{tp - 1}",
                "mode": mode if place == "out-of-place" else f"{mode}-in-place",
                "clock": clock, "backend": "nccl", "impl": "nccl", "dtype": NCCL_TYPES.get(r["type"], r["type"]),
                "size_bytes": r["size"], "count": r["count"], "batch": "", "site": site,
                "iters": sec.iters, "warmup": sec.warmup, "concurrent": 0,
                # nccl-tests times a loop of back-to-back calls and prints the average per call
                "timing": "back-to-back", "loop": sec.iters if isinstance(sec.iters, int) else "",
                # nccl-tests' average goes in latency_us_avg (and _mean): never in a p50 column. Readers
                # of latency_us_p50 get it through results.load, labelled by latency_stat.
                "latency_us_p50": e.get("p50", ""), "latency_us_p95": e.get("p95", ""),
                "latency_us_p99": e.get("p99", ""), "latency_us_min": e.get("min", ""),
                "latency_us_max": e.get("max", ""), "latency_us_mean": e.get("avg", t),
                "latency_us_rankavg_p50": "", "latency_us_rankavg_mean": t, "latency_us_avg": t,
                "enqueue_us_p50": "", "enqueue_us_p99": "",
                "algbw_gbps": e["algbw"], "busbw_gbps": e["busbw"], "wrong": wrong,
                "status": status, "hosts": ";".join(hosts),
                "latency_stat": stat,
                "wrong_out_of_place": "" if counts.get("out-of-place") is None else counts["out-of-place"],
                "wrong_in_place": "" if counts.get("in-place") is None else counts["in-place"],
            })
            if wrong and place == "out-of-place" or (wrong and place == "in-place" and "out-of-place" not in r):
                where = f"line {r['line']}" if sec.fmt == "text" else f"results[{r['line']}]"
                bad = ", ".join(f"{q} #wrong = {c}" for q, c in counts.items() if c)
                wrong_rows.append(f"'{label}' {where}: {bad} at {r['size']} B")
    info = {
        "file": shown_path(sec.path), "format": sec.fmt, "first_line": sec.start_line,
        "nccl_tests_binary": f"{sec.op_name}_perf", "op": op, "tp": tp, "tp_from": tp_from, "mode": mode,
        "graph_launches": sec.graph, "iters": sec.iters, "warmup_iters": sec.warmup, "agg_iters": sec.agg_iters,
        "nccl_tests_version": sec.version or None,
        "nccl_version": nccl_version_str(sec.nccl_library) or None,
        "nccl_headers_version": nccl_version_str(sec.nccl_headers) or None,
        "ranks": sec.ranks, "rows": len(sec.rows), "reported_out_of_bounds": sec.out_of_bounds or None,
        "reported_avg_busbw": sec.avg_busbw or None,
        **sec.extra,
    }
    info["wrong_rows"] = wrong_rows
    where_of = (lambda r: f"line {r['line']}") if sec.fmt == "text" else (lambda r: f"results[{r['line']}]")
    info["algbw_mismatch_rows"] = [f"'{label}' {where_of(r)}: {r[p]['algbw_mismatch']}" for r in sec.rows
                                   for p in ("out-of-place", "in-place") if r.get(p, {}).get("algbw_mismatch")]
    if tp == 1:
        info["one_rank"] = ("one rank: nothing crosses a link (busbw 0; the in-place algbw is a copy nccl-tests "
                            "skips); nothing to compare")
    info["unchecked_rows"] = sum(1 for row in out if row["status"] == "unchecked")
    # of them, old-layout rows whose 'error' column (a deviation) no '# Out of bounds values' footer judges:
    # validation was on, the verdict is just not in the file
    info["unchecked_deviation_rows"] = sum(1 for row in out if row["status"] == "unchecked"
                                           and "nccl-tests error " in row["site"])
    oob = sec.out_of_bounds.split()
    if oob and oob[0].isdigit() and int(oob[0]) > 0:
        wrong_rows.append(f"'{label}' line {sec.start_line}: footer 'Out of bounds values : {sec.out_of_bounds}'")
    if skipped:
        info["skipped_rows"] = (f"{skipped} measurement(s) with size 0 or without a positive "
                               "time (nan or 0) were left out")
    notes = []
    if sec.agg_iters > 1:
        notes.append(f"agg iters {sec.agg_iters}: several ops were grouped per iteration, so time is not "
                     "the latency of one isolated op")
    if sec.cputime:
        notes.append("reported cputime (-C 1): CPU launch time, not the op's latency")
    if sec.blocking:
        notes.append(sec.blocking)
    if notes:
        info["notes"] = notes
    return out, info



def _decode(label: str, data: bytes) -> str:
    """A log's bytes as text: UTF-8 (a BOM is dropped) or UTF-16 with a BOM (PowerShell's ``>``).

    A file with NUL bytes that is not UTF-16 is binary: UsageError. Other bytes that are not UTF-8
    (a Latin-1 host name in an NCCL line) read as U+FFFD, with a warning naming the first.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as e:
            raise UsageError(f"'{label}': starts as UTF-16 text but byte {e.start} is not UTF-16; pass "
                             "nccl-tests' output as it was written") from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = f"byte {e.start} (0x{data[e.start]:02x})"
        if b"\x00" in data:
            raise UsageError(f"'{label}': not a text file ({bad} is not UTF-8 and it holds NUL bytes); pass "
                             "nccl-tests' text output or its -J JSON file") from None
        warn(f"'{label}': {bad} and any others that are not UTF-8 are read as U+FFFD")
        return data.decode("utf-8", errors="replace")


def _stream_lines(f, label: str):
    """A text log's lines as they are read, decoded as :func:`_decode` decodes a whole file; a
    line over MAX_LINE characters is refused (nccl-tests' lines are short)."""
    import codecs

    head = f.read(3)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        dec = codecs.getincrementaldecoder("utf-16")()
        f.seek(0)
        rest = ""
        while True:
            chunk = f.read(1 << 16)
            try:
                rest += dec.decode(chunk, final=not chunk)
            except UnicodeDecodeError:
                raise UsageError(f"'{label}': starts as UTF-16 text but is not UTF-16 throughout; pass "
                                 "nccl-tests' output as it was written") from None
            *done, rest = rest.split("\n")
            yield from done
            if len(rest) > MAX_LINE:
                raise UsageError(f"'{label}': a line longer than {MAX_LINE:,} characters: {EXPECTED}")
            if not chunk:
                if rest:
                    yield rest
                return
    if head != b"\xef\xbb\xbf":
        f.seek(0)
    offset, warned = 0, False
    while True:
        raw = f.readline(MAX_LINE + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
            raise UsageError(f"'{label}': a line longer than {MAX_LINE:,} bytes at byte {offset}: {EXPECTED}")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad = f"byte {offset + e.start} (0x{raw[e.start]:02x})"
            if b"\x00" in raw:
                raise UsageError(f"'{label}': not a text file ({bad} is not UTF-8 and it holds NUL bytes); pass "
                                 "nccl-tests' text output or its -J JSON file") from None
            if not warned:
                warn(f"'{label}': {bad} and any others that are not UTF-8 are read as U+FFFD")
                warned = True
            line = raw.decode("utf-8", errors="replace")
        offset += len(raw)
        yield line.rstrip("\n")


def read_nccl_tests(path: str) -> list[Section]:
    """Parse one nccl-tests output file (text or ``-J`` JSON) into its runs. A text log is read
    line by line (bounded memory: its rows, at most MAX_ROWS of them); a JSON file whole."""
    label = os.path.basename(path)
    where = f"'{path}'"
    hint = " is a directory; pass the nccl-tests output files"
    with open_user_file(path, where, hint) as f:
        head = f.read(1 << 16)
        if head.startswith((b"\xff\xfe", b"\xfe\xff")):
            first = head[:4096].decode("utf-16", errors="ignore").lstrip("\ufeff \t\r\n")[:1]
        else:
            first = head.removeprefix(b"\xef\xbb\xbf").lstrip()[:1].decode("latin-1")
        if first == "{":
            size = os.fstat(f.fileno()).st_size
            if size > MAX_JSON_BYTES:
                raise UsageError(f"'{label}': a JSON file of {size / (1 << 20):,.0f} MiB, over the {MAX_JSON_BYTES >> 20} "
                                 f"MiB commprof reads of nccl-tests -J output ({MAX_ROWS:,} results are ~40 MB); "
                                 "split it or keep the sizes you need")
            data = read_user_bytes(path, where, hint, limit=MAX_JSON_BYTES)
            return parse_json(path, _decode(label, data))
        f.seek(0)
        if not head.removeprefix(b"\xef\xbb\xbf").strip():
            raise UsageError(f"'{label}' line 1: {EXPECTED} (the file is empty)")
        return parse_text(path, _stream_lines(f, label))


def _box_of(sec: Section) -> tuple[tuple, tuple]:
    """(hosts, GPU names) a run's rank lines name; empty tuples when it has no rank lines."""
    return (tuple(sorted({r["host"] for r in sec.ranks if r.get("host")})),
            tuple(sorted({r["gpu"] for r in sec.ranks if r.get("gpu")})))


def box_label(sec: Section) -> str:
    """'8x NVIDIA GeForce RTX 4090 on host' from a run's rank lines."""
    hosts, gpus = _box_of(sec)
    n = len(sec.ranks)
    return f"{n}x {' + '.join(gpus) or '?'} on {', '.join(hosts) or '?'}"


def check_one_box(sections: list[Section]) -> None:
    """One results dir holds one box: runs whose rank lines name different hosts or GPUs are
    refused (one line naming the boxes); so are two files measuring the same collective at the
    same rank count, mode and type on one box (e.g. with and without P2P: two boxes for ``gap``).
    Runs without rank lines cannot be told apart and pass."""
    boxes: dict = {}
    for s in sections:
        key = _box_of(s)
        if key != ((), ()):
            boxes.setdefault(key, []).append(s)
    if len(boxes) > 1:
        named = "; ".join(f"{box_label(ss[0])} ('{os.path.basename(ss[0].path)}')" for ss in boxes.values())
        raise UsageError(f"import nccl-tests: these logs come from {len(boxes)} different boxes (hosts or GPUs "
                         f"in their headers differ): {named}; import each box into its own dir and compare "
                         "them with 'commprof gap DIR_A DIR_B'")
    seen: dict = {}
    for s in sections:
        op = NCCL_TESTS_OPS.get(s.op_name)
        if op is None or not s.ranks:
            continue
        for dtype in sorted({r["type"] for r in s.rows}):
            key = (op, len(s.ranks), s.graph > 0, dtype)
            first = seen.setdefault(key, s)
            if first is not s and first.path != s.path:
                raise UsageError(f"import nccl-tests: '{os.path.basename(first.path)}' and '{os.path.basename(s.path)}' "
                                 f"both measure {op} on {len(s.ranks)} ranks ({dtype}, "
                                 f"{'graph' if s.graph > 0 else 'eager'}) of the same box "
                                 f"({box_label(s)}); one dir holds one box's different collectives, so import "
                                 "each run into its own dir (e.g. with and without P2P) and compare them with gap")


#: Columns an import writes beyond the sweep's: how each latency figure was reported, and each
#: placement's ``#wrong`` (empty = not checked, nccl-tests printed N/A).
IMPORT_COLUMNS = ["latency_stat", "wrong_out_of_place", "wrong_in_place", "latency_us_avg"]


def import_nccl_tests(paths: list[str], out_dir: str, in_place: bool = False, command=None) -> str:
    """Import nccl-tests outputs into a new results dir; returns its path.

    One row per op x size x placement: out-of-place rows have mode ``eager`` (``graph`` for a ``-G``
    run); with ``in_place=True`` in-place rows are added with mode ``eager-in-place`` /
    ``graph-in-place`` (their own mode, so lookups by mode never mix the two) and site ``in-place``.
    Logs of different boxes are refused (:func:`check_one_box`). Rows whose ``#wrong`` is not 0 are
    kept with status ``WRONG`` and listed under ``wrong_rows`` in ``meta.json`` (``run_import``
    then exits 1); ``N/A`` (validation off) is status ``unchecked``, its counts empty.
    """
    if not paths:
        raise UsageError("import nccl-tests: no input files given")
    results.check_out_dir(out_dir, resume=False)
    sections = []
    files = []
    total = 0
    for p in paths:
        secs = read_nccl_tests(p)
        total += sum(len(s.rows) for s in secs)
        if total > MAX_ROWS:                        # each file is bounded; so are all of them together
            raise UsageError(f"import nccl-tests: more than {MAX_ROWS:,} data rows in these files (the limit is "
                             f"reached in '{os.path.basename(p)}'); import them in smaller groups")
        sections.extend(secs)
        files.append({"path": shown_path(p), "sha256": results.file_sha256(p), "format": secs[0].fmt,
                      "runs": len(secs)})
    check_one_box(sections)
    rows, infos = [], []
    for s in sections:
        r, info = _section_rows(s, in_place)
        rows.extend(r)
        infos.append(info)
    os.makedirs(out_dir, exist_ok=True)
    all_ranks = [r for s in sections for r in s.ranks]
    hosts = sorted({r["host"] for r in all_ranks if r.get("host")})
    gpus = sorted({r["gpu"] for r in all_ranks if r.get("gpu")})
    versions = sorted({i["nccl_tests_version"] for i in infos if i["nccl_tests_version"]})
    nccl = sorted({i["nccl_version"] for i in infos if i["nccl_version"]})
    wrong = [w for i in infos for w in i["wrong_rows"]]
    mismatch = [w for i in infos for w in i["algbw_mismatch_rows"]]
    if mismatch:
        warn(f"{len(mismatch)} measurement(s) whose algbw is not size / time ({mismatch[0]}"
             f"{'; ...' if len(mismatch) > 1 else ''}): kept, listed in meta.json algbw_mismatch_rows")
    if any(i.get("one_rank") for i in infos):
        warn("one rank in this log: nothing crosses a link, nothing to compare; imported as TP=1")
    meta = results.provenance(
        "import", "imported", "nccl-tests output imported as a sweep (commprof import nccl-tests)",
        status="complete", command=list(command) if command is not None else list(sys.argv),
        hosts=hosts,
        gpus=gpus or ["unknown (no rank lines in the input)"])
    meta.update({
        "backend": "nccl",
        "nccl_tests_version": versions[0] if len(versions) == 1 else (versions or None),
        "nccl_version": nccl[0] if len(nccl) == 1 else (nccl or None),
        "source_files": files,
        "runs": infos,
        "in_place_rows": bool(in_place),
        "latency_stat": "avg (nccl-tests)" if all(r["latency_stat"] == "avg (nccl-tests)" for r in rows)
        else "mixed: see the latency_stat column",
        "wrong_rows": wrong,
        "algbw_mismatch_rows": mismatch,
        "collective_from": sorted({f"{i['nccl_tests_binary']}: {i.get('collective_from', '')}" for i in infos}),
        "unchecked_rows": sum(i["unchecked_rows"] for i in infos),
        "unchecked_deviation_rows": sum(i["unchecked_deviation_rows"] for i in infos),
        "columns": {
            "latency_us_*": "nccl-tests reports one time per size: the average over its timed iterations "
                            "(by default also averaged over ranks, -a 1). latency_us_avg and latency_us_mean hold "
                            "that average; it is not a percentile, so latency_us_p50 is empty unless the run "
                            "reported per-iteration figures (-I 1: i_min, i_max, i_p99; -J: p50/p95/p99/min/max, "
                            "then latency_stat is 'p50 (nccl-tests -I)'). commprof's readers (results.load) take "
                            "latency_us_avg where latency_us_p50 is empty and label it by latency_stat",
            "latency_us_avg": "nccl-tests' reported average time per call of its back-to-back loop",
            "latency_stat": "the statistic readers take as the row's latency: 'avg (nccl-tests)' "
                            "(latency_us_avg) or 'p50 (nccl-tests -I)' (latency_us_p50)",
            "latency_us_rankavg_*": "the reported average time (rankavg_p50 empty: not a percentile)",
            "mode": "eager: no CUDA graph; graph: a -G run; *-in-place: the in-place measurement",
            "site": "placement (out-of-place / in-place) and how #wrong was reported",
            "size_bytes": "nccl-tests size column, the same convention as commprof sweep",
            "algbw_gbps": "as reported by nccl-tests", "busbw_gbps": "as reported by nccl-tests",
            "wrong": "#wrong as reported: an out-of-place row sums its size's out-of-place and in-place "
                     "counts, an in-place row its own; counts not checked (N/A) add nothing; empty when "
                     "neither placement was checked (validation off): unknown, never 0",
            "wrong_out_of_place": "the out-of-place #wrong; empty where nccl-tests printed N/A (validation "
                                  "off): unknown, not 0",
            "wrong_in_place": "the in-place #wrong; empty where not checked",
            "status": "WRONG (a #wrong is not 0), ok (checked, 0 wrong) or unchecked (validation off)",
            "clock": "nccl-tests: its own timer (host steady clock around the iterations, or CUDA events "
                     "with -I)",
        },
    })
    return results.write_sweep_table(out_dir, results.COLUMNS + IMPORT_COLUMNS, rows, meta)


def wrong_summary(out_dir: str) -> str:
    """One line naming the rows an import marked WRONG ("" when none): import exits 1 on them."""
    wrong = results.read_meta(out_dir).get("wrong_rows") or []
    if not wrong:
        return ""
    return (f"wrong results: {len(wrong)} measurement(s) with #wrong > 0 ({wrong[0]}"
            f"{'; ...' if len(wrong) > 1 else ''}); rows kept in {out_dir} with status WRONG")
