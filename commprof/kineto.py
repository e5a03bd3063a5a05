"""``commprof import kineto``: a serving engine's PyTorch-profiler (Kineto) traces as a trace results dir.

Reads Chrome-trace JSON (``.json`` or ``.json.gz``) as torch.profiler, vLLM
(``VLLM_TORCH_PROFILER_DIR`` / ``--profiler-config``) and SGLang (``/start_profile``) write it,
one file per rank, or one file holding several ranks (``commprof trace``'s own ``trace.json``:
one process per rank). The file is streamed event by event and only the events the attribution
needs are kept, so a trace far larger than memory is read or refused with its size, never an
out-of-memory crash.

Per step and rank (steps from ``ProfilerStep#N``, vLLM's ``gpu_model_runner: forward``, or
``--step-marker``; else one step per ``plan`` count of collectives; else the whole capture):

* compute: time some compute kernel runs (union of intervals);
* communication, exposed: a collective runs and no compute kernel does;
* communication, overlapped: a collective runs beside compute (counted in compute, as HTA does);
* memory: only a memcpy/memset runs; idle: nothing runs.

The same collective is aligned across ranks by its order in the step; its transfer is the
shortest rank's duration, the rest of each rank's duration is wait (arrival skew), and the rank
with the shortest duration arrived last (the straggler). The exposed communication of a rank is
split into transfer and wait in the proportion of its collectives' own transfer and wait.

On CPU-only traces (gloo) the collectives are CPU ops and the compute is the other CPU ops.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import zlib
import math
import os
import re
import sys
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from . import results
from .errors import UsageError, shown
from .results.table import write_table

#: Events a file may keep (kernels, collectives, steps, CPU ops) before it is refused: about 0.2 KB
#: each in memory. A monkeypatchable module value: tests lower it.
MAX_KEPT_EVENTS = 5_000_000
#: The latest event start a trace may hold (us since the epoch or the capture's base: year 2286), and
#: the longest an event or a whole capture may last (us): a profiler captures seconds to minutes.
MAX_TS_US = 1e16
MAX_SPAN_US = 24 * 3600 * 1e6
#: The largest TP degree ``--tp`` or a run label may name.
MAX_TP = 4096
#: The longest single JSON value (one event, or a header entry) read whole.
MAX_VALUE_CHARS = 64 << 20
_CHUNK_CHARS = 4 << 20

#: Communication kernels by name: NCCL/RCCL, vLLM's custom all-reduce, FlashInfer/TRT-LLM fusions,
#: symmetric-memory and one/two-shot kernels (the kernel names in NCCL's src/device and PyTorch's SymmetricMemory sources).
COMM_KERNEL_RE = re.compile(r"nccl|rccl|cross_device_reduce|allreduce_fusion|one_shot_all_reduce|two_shot_all_reduce|"
                            r"multimem|pcie_ipc|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all", re.IGNORECASE)
#: CPU-side collectives on CPU-only traces: c10d ops and the backends' annotations (gloo), and
#: vLLM's CPU shared-memory collectives (``torch.ops._C.shm_allreduce`` / ``shm_all_gather`` /
#: ``shm_gather`` in vllm/distributed/device_communicators/cpu_communicator.py, vLLM v0.32.0).
CPU_COMM_RE = re.compile(r"^(?:gloo:|c10d::|nccl:|_C::shm_(?:all_?reduce|all_?gather|gather))(?!.*barrier)",
                         re.IGNORECASE)
_SHM_RE = re.compile(r"^_C::shm_", re.IGNORECASE)
#: vLLM's per-iteration mark (vllm/v1/worker/gpu_worker.py, ``annotate_profile``; the CPU worker
#: inherits it): ``execute_context_N(T)_generation_M(K)``: N requests in their context (prefill)
#: phase with T tokens scheduled, M in generation (decode) with K tokens; with
#: ``detailed_trace_annotation`` ``execute_TOTAL_context_N(sqT sk.. ..)_generation_M(sqK ..)``.
VLLM_STEP_RE = re.compile(r"^execute_(?:\d+_)?context_(\d+)\((?:sq)?(\d+)[^)]*\)_generation_(\d+)\((?:sq)?(\d+)[^)]*\)$")
STEP_RES = ((re.compile(r"^ProfilerStep#(\d+)$"), "ProfilerStep#N (torch.profiler schedule steps)"),
            (VLLM_STEP_RE, "vLLM 'execute_context_N(T)_generation_M(K)' iteration marks"),
            (re.compile(r"^gpu_model_runner: forward$"), "vLLM 'gpu_model_runner: forward'"))


def vllm_step(name: str) -> dict | None:
    """What a vLLM iteration mark says: requests and tokens in prefill (context) and decode
    (generation), the step's phase (prefill, decode or mixed; empty when nothing was scheduled)."""
    m = VLLM_STEP_RE.match(name)
    if not m:
        return None
    cr, ct, gr, gt = map(int, m.groups())
    phase = "mixed" if cr and gr else "prefill" if cr else "decode" if gr else "empty"
    return {"prefill_requests": cr, "prefill_tokens": ct, "decode_requests": gr, "decode_tokens": gt,
            "step_tokens": ct + gt, "phase": phase}
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_COMM_KEYS = ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "size_bytes", "Group size")
_CPU_CATS = {"cpu_op", "user_annotation", "python_function"}
_DTYPE_BYTES = {"float": 4, "double": 8, "half": 2, "bfloat16": 2, "int": 4, "long": 8, "char": 1, "byte": 1,
                "bool": 1, "short": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "float32": 4, "float16": 2,
                "int8": 1, "uint8": 1, "int32": 4, "int64": 8}
_OPS = (("all_reduce", r"all_?reduce"), ("all_gather", r"all_?gather"), ("reduce_scatter", r"reduce_?scatter"),
        ("all_to_all", r"all_?to_?all"), ("broadcast", r"broadcast"), ("sendrecv", r"send_?recv|send|recv"),
        ("all_reduce", r"cross_device_reduce|one_shot|two_shot"))
_RANK_FILE_RE = re.compile(r"(?:^|[^a-z])(?:rank|tp)[-_]?(\d+)(?!\d)", re.IGNORECASE)
_WS = re.compile(r"[ \t\n\r]*")
_DEC = json.JSONDecoder()


def op_of(text: str) -> str:
    """The collective of a kernel or ``Collective name``: all_reduce, all_gather, ... or 'collective'."""
    for op, pat in _OPS:
        if re.search(pat, text, re.IGNORECASE):
            return op
    return "collective"


# --- streaming reader ------------------------------------------------------------------------------

class _Reader:
    """A JSON document read in chunks; values decoded one at a time (never the whole text)."""

    def __init__(self, f, label: str):
        self.f, self.label = f, label
        self.buf, self.pos, self.eof = "", 0, False

    def _more(self) -> bool:
        if self.eof:
            return False
        try:
            chunk = self.f.read(_CHUNK_CHARS)
        except (OSError, EOFError, zlib.error) as e:          # gzip: bad header, CRC, a cut or corrupt stream
            raise UsageError(f"{self.label}: cannot read it ({e}); not a complete .json or .json.gz file") from None
        except UnicodeDecodeError as e:
            raise UsageError(f"{self.label}: not JSON (not UTF-8 text: {e.reason})") from None
        if not chunk:
            self.eof = True
            return False
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0
        return True

    def peek(self) -> str:
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return ""

    def expect(self, ch: str, what: str) -> None:
        c = self.peek()
        if c != ch:
            raise UsageError(f"{self.label}: {what} (expected '{ch}', found {repr(c) if c else 'the end of the file'})")
        self.pos += 1

    def value(self):
        self.peek()
        while True:
            try:
                v, end = _DEC.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                if len(self.buf) - self.pos > MAX_VALUE_CHARS:
                    raise UsageError(f"{self.label}: not valid JSON, or one value longer than "
                                     f"{MAX_VALUE_CHARS >> 20} MiB ({e.msg})") from None
                if not self._more():
                    raise UsageError(f"{self.label}: not valid JSON ({e.msg}; the file may be cut short)") from None
                continue
            except RecursionError:
                raise UsageError(f"{self.label}: not valid JSON for commprof (nested too deep)") from None
            except ValueError as e:             # e.g. an integer over Python's 4,300-digit limit
                raise UsageError(f"{self.label}: not valid JSON for commprof ({str(e).split(';')[0]})") from None
            if end == len(self.buf) and not self.eof and self._more():
                continue                        # a number cut at the chunk's end: decode it again whole
            self.pos = end
            return v


def _open_text(path: str, label: str):
    from .fileio import check_regular

    check_regular(path, label, ": is a directory; pass the trace files (e.g. DIR/*.json.gz)")   # a FIFO would block
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
    except FileNotFoundError:
        raise UsageError(f"{label}: file not found") from None
    except IsADirectoryError:
        raise UsageError(f"{label}: is a directory; pass the trace files (e.g. DIR/*.json.gz)") from None
    except OSError as e:
        raise UsageError(f"{label}: cannot read ({e.strerror or e})") from None
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8-sig")
    return open(path, encoding="utf-8-sig")



# --- one file's events ---------------------------------------------------------------------------------

@dataclass
class Coll:
    """One collective call on one rank: a kernel (GPU) or a CPU op (gloo)."""
    ts: float
    dur: float
    name: str
    op: str
    size_bytes: int | None
    dtype: str | None
    anchor: float          # the time that places it in a step: its launch on the CPU, else its start


@dataclass
class RankTrace:
    """What one rank's trace holds, reduced to what the attribution needs (times in us)."""
    rank: int
    world: int | None
    path: str
    run: str = ""                 # a run label ("tp=2 batch=1 mode=eager") for files holding several runs
    backend: str | None = None
    gpus: list = field(default_factory=list)
    compute: list = field(default_factory=list)     # (ts, dur, anchor)
    memory: list = field(default_factory=list)      # (ts, dur, anchor)
    colls: list = field(default_factory=list)       # Coll
    cpu_ops: list = field(default_factory=list)     # (ts, dur) of CPU ops (compute on CPU-only traces)
    marks: list = field(default_factory=list)       # (name, ts, dur, on_gpu)
    graph: bool = False
    span: tuple = (math.inf, -math.inf)
    kernels: int = 0
    producer: dict = field(default_factory=dict)    # commprof trace.json's own header: model, layers run


class _Collector:
    """Keeps, per process id, the events the attribution needs; the rest is dropped on the fly."""

    def __init__(self, label: str):
        self.label = label
        self.kept = 0
        self.by_pid: dict = {}
        self.pid_names: dict = {}
        self.pid_labels: dict = {}
        self.launch: dict = {}          # correlation id -> (CPU launch ts, graph launch?)
        self.rpc: list = []             # record_param_comms: (pid, ts, end, op, size_bytes, dtype)
        self.gpu_events: list = []      # (pid, class, name, ts, dur, correlation, collective args)
        self.cpu_comm: list = []        # (pid, name, ts, dur, args)
        self.span = (math.inf, -math.inf)
        self.step_re = None             # --step-marker, compiled

    def _keep(self):
        self.kept += 1
        if self.kept > MAX_KEPT_EVENTS:
            raise UsageError(f"{self.label}: more than {MAX_KEPT_EVENTS:,} kernels, collectives and CPU ops to keep "
                             f"({_size_text(self.label)}); capture fewer steps (torch.profiler schedule active=N, "
                             "SGLang num_steps) and import that")

    def event(self, ev) -> None:
        if not isinstance(ev, dict):
            return
        ph = ev.get("ph")
        if ph == "M":
            name, args, mpid = ev.get("name"), ev.get("args") or {}, ev.get("pid")
            if not isinstance(mpid, (int, str)) or isinstance(mpid, bool):
                mpid = str(mpid)
            if name == "process_name" and isinstance(args, dict):
                self.pid_names[mpid] = str(args.get("name", ""))
            elif name == "process_labels" and isinstance(args, dict):
                self.pid_labels[mpid] = str(args.get("labels", ""))
            return
        if ph != "X":
            return
        try:
            ts, dur = float(ev.get("ts")), float(ev.get("dur", 0) or 0)
        except (TypeError, ValueError):
            return
        except OverflowError:           # an integer of hundreds of digits: no time, and no event to drop silently
            raise UsageError(f"{self.label}: an event ({shown(ev.get('name'), 40)}) has ts {shown(ev.get('ts'))} and "
                             f"dur {shown(ev.get('dur'))}: not a time a profiler records; the trace is corrupt") from None
        if not (math.isfinite(ts) and math.isfinite(dur)) or dur < 0:
            return
        if not 0 <= ts <= MAX_TS_US or dur > MAX_SPAN_US:
            raise UsageError(f"{self.label}: an event ({shown(ev.get('name'), 40)}) at ts {ts:g} us lasting "
                             f"{dur:g} us: not a time a profiler records (ts from 0 to {MAX_TS_US:g} us, at most "
                             f"{MAX_SPAN_US / 3.6e9:g} h long); the trace is corrupt")
        cat, name, pid = str(ev.get("cat", "")), str(ev.get("name", "")), ev.get("pid")
        if not isinstance(pid, (int, str)) or isinstance(pid, bool):
            pid = str(pid)                      # a process id is a number or a name; anything else keyed as text
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        if "correlation" in args and not _is_key(args["correlation"]):
            args = {**args, "correlation": None}        # a list or a dict cannot link a launch to its kernel
        self.span = (min(self.span[0], ts), max(self.span[1], ts + dur))
        if cat in _GPU_CATS:
            self._keep()
            # kept small: a class, and for collectives their name and size arguments only
            if cat != "kernel" or name.startswith(("Memcpy", "Memset")):
                self.gpu_events.append((pid, "memory", None, ts, dur, args.get("correlation"), None))
            elif COMM_KERNEL_RE.search(name) or "Collective name" in args:
                self.gpu_events.append((pid, "comm", name, ts, dur, args.get("correlation"),
                                        {k: args[k] for k in _COMM_KEYS if k in args}))
            else:
                self.gpu_events.append((pid, "compute", None, ts, dur, args.get("correlation"), None))
        elif cat in ("cuda_runtime", "cuda_driver"):
            corr = args.get("correlation")
            if corr is not None and ("Launch" in name or "launch" in name):
                self._keep()
                self.launch[corr] = (ts, "Graph" in name)
        elif cat == "gpu_user_annotation":
            if any(r.match(name) for r, _ in STEP_RES) or (self.step_re and self.step_re.search(name)):
                self._keep()
                self.by_pid.setdefault(pid, {"marks": [], "cpu": []})["marks"].append((name, ts, dur, True))
        elif cat in _CPU_CATS:
            if name == "record_param_comms":
                self._keep()
                self.rpc.append((pid, ts, ts + dur, {k: args[k] for k in _COMM_KEYS if k in args}))
                return
            if any(r.match(name) for r, _ in STEP_RES) or (self.step_re and self.step_re.search(name)):
                self._keep()
                self.by_pid.setdefault(pid, {"marks": [], "cpu": []})["marks"].append((name, ts, dur, False))
                return
            if CPU_COMM_RE.match(name) or "Collective name" in args:
                self._keep()
                self.cpu_comm.append((pid, name, ts, dur, {k: args[k] for k in _COMM_KEYS if k in args}))
                return
            if cat == "cpu_op":
                self._keep()
                self.by_pid.setdefault(pid, {"marks": [], "cpu": []})["cpu"].append((ts, dur))


def _is_key(v) -> bool:
    """A usable correlation id: a whole number or a short string (not a list, dict, float or bool)."""
    return (isinstance(v, int) and not isinstance(v, bool) and abs(v) < 1 << 63) or (isinstance(v, str) and len(v) < 64)


def _size_text(label: str) -> str:
    path = label.strip("'")
    try:
        return f"file {os.path.getsize(path) / 1e9:.2f} GB on disk"
    except OSError:
        return "size unknown"


def _msg_bytes(args: dict) -> tuple[int | None, str | None]:
    """Bytes of a collective in nccl-tests' meaning (the larger of in and out) from Kineto's args."""
    dtype = str(args.get("dtype", "") or "").lower() or None
    per = _DTYPE_BYTES.get(dtype or "", None)
    def count(x):                       # a finite whole number >= 0 (2^53 at most), else not a size
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            return None
        ok = (0 <= x <= 2 ** 53) if isinstance(x, int) else (math.isfinite(x) and 0 <= x <= 2 ** 53)
        return int(x) if ok else None

    n = [c for c in (count(args.get("In msg nelems")), count(args.get("Out msg nelems"))) if c is not None]
    if count(args.get("size_bytes")) is not None:
        return count(args["size_bytes"]), dtype
    if not n or per is None:
        return None, dtype
    return max(n) * per, dtype


def read_file(path: str, step_marker: str | None = None) -> list[RankTrace]:
    """One trace file as the ranks it holds (one for a Kineto file; one per process named
    ``rank N`` for commprof's ``trace.json``). Raises UsageError with one line on bad input."""
    label = f"'{path}'"
    col = _Collector(label)
    if step_marker:
        col.step_re = re.compile(step_marker)
    header = {}
    with _open_text(path, label) as f:
        rd = _Reader(f, label)
        c = rd.peek()
        if c not in ("{", "["):
            raise UsageError(f"{label}: not JSON (it starts with {repr(c) if c else 'nothing: the file is empty'}); "
                             "expected a PyTorch profiler trace (.json or .json.gz)")
        if c == "[":                       # the Trace Event format's bare array form
            _events(rd, col)
        else:
            rd.pos += 1
            has_events = False
            while True:
                c = rd.peek()
                if c == "}":
                    rd.pos += 1
                    break
                if c == ",":
                    rd.pos += 1
                    continue
                if c != '"':
                    raise UsageError(f"{label}: not valid JSON (expected a key, found "
                                     f"{repr(c) if c else 'the end of the file'}; the file may be cut short)")
                key = rd.value()
                rd.expect(":", "not valid JSON")
                if key == "traceEvents":
                    has_events = True
                    if rd.peek() != "[":
                        raise UsageError(f"{label}: not a Kineto trace ('traceEvents' is not a list)")
                    _events(rd, col)
                else:
                    header[key] = rd.value()
            if not has_events:
                raise UsageError(f"{label}: not a Kineto trace (no 'traceEvents' list: is it a PyTorch profiler "
                                 "trace, e.g. from prof.export_chrome_trace?)")
    return _split_ranks(path, header, col)


def _events(rd: _Reader, col: _Collector) -> None:
    rd.expect("[", "not a Kineto trace")
    while True:
        c = rd.peek()
        if c == "]":
            rd.pos += 1
            return
        if c == ",":
            rd.pos += 1
            continue
        if c == "":
            raise UsageError(f"{rd.label}: not valid JSON (the event list ends early; the file is cut short)")
        col.event(rd.value())


def _split_ranks(path: str, header: dict, col: _Collector) -> list[RankTrace]:
    label = f"'{path}'"
    info = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
    props = header.get("deviceProperties")
    gpus = [shown(d.get("name"), 80).strip("'\"") if not isinstance(d.get("name"), str) else d["name"][:120]
            for d in (props if isinstance(props, list) else []) if isinstance(d, dict) and d.get("name")]
    base_us = 0.0
    base = header.get("baseTimeNanoseconds")
    if isinstance(base, (int, float)) and not isinstance(base, bool):
        if not (0 <= base <= MAX_TS_US * 1e3):
            raise UsageError(f"{label}: baseTimeNanoseconds {shown(base)} is not a time (0 to {MAX_TS_US * 1e3:g} ns)")
        base_us = float(base) / 1e3
    if col.span[0] < col.span[1] and col.span[1] - col.span[0] > MAX_SPAN_US:
        raise UsageError(f"{label}: its events span {(col.span[1] - col.span[0]) / 3.6e9:,.0f} h (ts {col.span[0]:g} to "
                         f"{col.span[1]:g} us); a capture lasts seconds to minutes: an event's ts or dur is corrupt")
    named = {pid: int(m.group(1)) for pid, n in col.pid_names.items() if (m := re.match(r"^rank (\d+)\b", n))}
    if named and header.get("commprof"):     # commprof's timeline, whole or one rank's: a process per rank and run
        groups = {pid: (r, col.pid_labels.get(pid, "")) for pid, r in named.items()}
    elif "rank" in info:
        rank = info["rank"]
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < 1_000_000:
            raise UsageError(f"{label}: distributedInfo.rank = {str(rank)[:40]!r}: not a rank (a whole number >= 0)")
        groups = {None: (rank, "")}
    else:
        m = _RANK_FILE_RE.search(os.path.basename(path))
        if not m and not (col.gpu_events or col.cpu_comm or col.rpc or col.by_pid):
            return []          # no rank and nothing to attribute: a front-end process's trace (vLLM's async_llm)
        if not m:
            raise UsageError(f"{label}: names no rank (no distributedInfo in the trace, no 'rank<N>' or 'TP-<N>' in "
                             "the file name); rename it, e.g. rank0.json.gz")
        groups = {None: (int(m.group(1)), "")}
    world = info.get("world_size") if isinstance(info.get("world_size"), int) \
        and not isinstance(info.get("world_size"), bool) and 0 < info.get("world_size") <= 1_000_000 else None
    if header.get("commprof") and isinstance(header["commprof"], dict):
        world = world or header["commprof"].get("world_size")
    out = []
    for gpid, (rank, run) in groups.items():
        own = (lambda pid: True) if gpid is None else (lambda pid, g=gpid: pid == g)
        backend = info.get("backend") if isinstance(info.get("backend"), str) else None
        rt = RankTrace(rank=rank, world=world, path=path, run=run, backend=backend and backend[:40], gpus=gpus,
                       producer=header["commprof"] if isinstance(header.get("commprof"), dict) else {})
        rt.span = (col.span[0] + base_us, col.span[1] + base_us)
        for pid, cls, name, ts, dur, corr, args in col.gpu_events:
            if not own(pid):
                continue
            launch = col.launch.get(corr)
            anchor = launch[0] if launch else ts
            rt.graph = rt.graph or bool(launch and launch[1])
            if cls == "memory":
                rt.memory.append((ts, dur, anchor))
                continue
            rt.kernels += 1
            if cls == "comm":
                size, dtype = _msg_bytes(args)
                op = op_of(str(args.get("Collective name") or name))
                rt.colls.append(Coll(ts, dur, name, op, size, dtype, anchor))
            else:
                rt.compute.append((ts, dur, anchor))
        for pid, d in col.by_pid.items():
            if own(pid):
                rt.marks.extend(d["marks"])
                rt.cpu_ops.extend(d["cpu"])
        if not rt.kernels:                 # CPU-only: the collectives are CPU ops
            rt.colls = _cpu_colls([e for e in col.cpu_comm if own(e[0])], [e for e in col.rpc if own(e[0])])
        else:
            _sizes_from_rpc(rt.colls, [e for e in col.rpc if own(e[0])])
        rt.backend = backend_of_ops(rt) or rt.backend or None   # the ops say which; the process group may not
        out.append(rt)
    return out


def _outermost(items):
    """Of nested intervals (ts, dur, ...), the outermost ones, in time order."""
    items = sorted(items, key=lambda e: (e[0], -e[1]))
    out, end = [], -math.inf
    for e in items:
        if e[0] >= end:
            out.append(e)
            end = e[0] + e[1]
    return out


def _cpu_colls(cpu_comm: list, rpc: list) -> list[Coll]:
    """CPU-side collectives: the outermost collective op of each call, sized by the
    ``record_param_comms`` inside it (or its own args)."""
    out = []
    starts = sorted(rpc, key=lambda e: e[1])
    # the c10d op is the call on the calling thread; gloo's own annotation runs on its worker
    # thread and need not nest inside it, so it is used only when no c10d op was recorded
    calls = [e for e in cpu_comm if e[1].startswith("c10d::")] or cpu_comm
    for ts, dur, name, args in _outermost([(e[2], e[3], e[1], e[4]) for e in calls]):
        size, dtype = _msg_bytes(args)
        cname = args.get("Collective name")
        if size is None:
            inner = [r for r in starts if ts <= r[1] <= ts + dur]
            if inner:
                size, dtype = _msg_bytes(inner[0][3])
                cname = cname or inner[0][3].get("Collective name")
        out.append(Coll(ts, dur, name, op_of(str(cname or name)), size, dtype, ts))
    if not out and rpc:          # only record_param_comms: it spans the call
        for pid, ts, end, args in sorted(rpc, key=lambda e: e[1]):
            size, dtype = _msg_bytes(args)
            out.append(Coll(ts, end - ts, "record_param_comms", op_of(str(args.get("Collective name", ""))),
                            size, dtype, ts))
    return out


def _sizes_from_rpc(colls: list[Coll], rpc: list) -> None:
    """A comm kernel without sizes in its args: the ``record_param_comms`` op its launch sits in."""
    if not rpc or all(c.size_bytes is not None for c in colls):
        return
    rpc = sorted(rpc, key=lambda e: e[1])
    starts = [e[1] for e in rpc]
    for c in colls:
        if c.size_bytes is not None:
            continue
        i = bisect_right(starts, c.anchor) - 1
        if i >= 0 and rpc[i][2] >= c.anchor:
            c.size_bytes, c.dtype = _msg_bytes(rpc[i][3])
            if c.op == "collective":
                c.op = op_of(str(rpc[i][3].get("Collective name", "")))


# --- intervals -------------------------------------------------------------------------------------------

def _merge(iv) -> list:
    """Disjoint, sorted [start, end] of intervals (s, e)."""
    out: list = []
    for s, e in sorted((s, e) for s, e in iv if e > s):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def _length(m) -> float:
    return float(sum(e - s for s, e in m))


def _inter(a, b) -> float:
    """Length of the intersection of two merged interval lists."""
    i = j = 0
    tot = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            tot += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tot


def _clip(iv, lo, hi):
    return [(max(s, lo), min(e, hi)) for s, e in iv if e > lo and s < hi]


# --- steps ---------------------------------------------------------------------------------------------

def find_steps(rt: RankTrace, step_re=None, plan_count: int | None = None) -> tuple[str, list]:
    """(how the steps were found, [(step id, lo, hi, GPU window or None)]): events whose anchor
    lies in [lo, hi) belong to the step."""
    cpu = [m for m in rt.marks if not m[3]]
    gpu = [m for m in rt.marks if m[3]]
    cands = [(step_re, f"--step-marker '{step_re.pattern}'")] if step_re is not None else STEP_RES
    for rx, how in cands:
        sel = sorted((m for m in cpu if rx.search(m[0])), key=lambda m: m[1])
        gsel = sorted((m for m in gpu if rx.search(m[0])), key=lambda m: m[1])
        if not sel and not gsel:
            continue
        by_name: dict = {}
        for g in gsel:
            by_name.setdefault(g[0], []).append(g)
        seen: dict = {}
        out = []
        for k, m in enumerate(sel or gsel):
            mm = re.match(r"^ProfilerStep#(\d+)$", m[0])
            i = seen.get(m[0], 0)
            seen[m[0]] = i + 1
            g = by_name.get(m[0], [])
            gwin = (g[i][1], g[i][1] + g[i][2]) if i < len(g) else None
            out.append((int(mm.group(1)) if mm else k, m[1], m[1] + m[2], gwin, m[0]))
        return how, out
    if step_re is not None:
        raise UsageError(f"--step-marker '{step_re.pattern}': matches no annotation in '{rt.path}' (rank {rt.rank})")
    colls = sorted(rt.colls, key=lambda c: c.anchor)
    if plan_count and len(colls) >= plan_count:
        n = len(colls) // plan_count
        bounds = [-math.inf]
        for k in range(1, n + 1):
            if k * plan_count < len(colls):
                bounds.append((colls[k * plan_count - 1].anchor + colls[k * plan_count].anchor) / 2)
            else:
                bounds.append(math.inf)
        return (f"every {plan_count} collectives (the plan's count per step; the trace has no step annotations)",
                [(k, bounds[k], bounds[k + 1], None, "") for k in range(n)])
    return "the whole capture as one step (no step annotations; pass --step-marker REGEX)", \
        [(0, -math.inf, math.inf, None, "")]


class _Index:
    """A rank's events sorted by the time that places them in a step, for slicing by step."""

    def __init__(self, rt: RankTrace):
        self.compute = sorted(rt.compute, key=lambda e: e[2])
        self.memory = sorted(rt.memory, key=lambda e: e[2])
        self.colls = sorted(rt.colls, key=lambda c: c.anchor)
        self.cpu = sorted(rt.cpu_ops)
        self.keys = {"compute": [e[2] for e in self.compute], "memory": [e[2] for e in self.memory],
                     "colls": [c.anchor for c in self.colls], "cpu": [e[0] for e in self.cpu]}

    def between(self, what: str, lo: float, hi: float) -> list:
        k = self.keys[what]
        return getattr(self, what)[bisect_left(k, lo):bisect_left(k, hi)]


def _rank_step(ix: _Index, lo: float, hi: float, gwin, cpu: bool) -> dict | None:
    """The time split of one rank in one step (us), or None when nothing of the rank is in it."""
    if not cpu:
        comp = [(ts, ts + d) for ts, d, _ in ix.between("compute", lo, hi)]
        mem = [(ts, ts + d) for ts, d, _ in ix.between("memory", lo, hi)]
        colls = sorted(ix.between("colls", lo, hi), key=lambda c: c.ts)
        ev = comp + mem + [(c.ts, c.ts + c.dur) for c in colls]
        if not ev:
            return None
        w0, w1 = gwin or (min(s for s, _ in ev), max(e for _, e in ev))
    else:
        colls = sorted(ix.between("colls", lo, hi), key=lambda c: c.ts)     # CPU: anchor = start
        comp = [(ts, ts + d) for ts, d in ix.between("cpu", lo, hi)]
        mem = []
        ev = comp + [(c.ts, c.ts + c.dur) for c in colls]
        if not ev:
            return None
        w0 = lo if lo > -math.inf else min(s for s, _ in ev)
        w1 = hi if hi < math.inf else max(e for _, e in ev)
    U_c = _merge(_clip(comp, w0, w1))
    U_m = _merge(_clip(mem, w0, w1))
    U_x = _merge(_clip([(c.ts, c.ts + c.dur) for c in colls], w0, w1))
    comm = _length(U_x)
    if cpu:          # one thread: an op around a collective is nesting, not concurrency
        overlapped = 0.0
        compute = _length(U_c) - _inter(U_c, U_x)
    else:
        overlapped = _inter(U_x, U_c)
        compute = _length(U_c)
    busy = _length(_merge([*map(tuple, U_c), *map(tuple, U_m), *map(tuple, U_x)]))
    exposed = comm - overlapped
    window = w1 - w0
    return {"window_us": window, "compute_us": compute, "comm_us": comm, "comm_exposed_us": exposed,
            "comm_overlapped_us": overlapped, "memory_us": max(0.0, busy - compute - exposed),
            "idle_us": max(0.0, window - busy), "colls": colls, "U_c": U_c, "start": w0}


# --- attribution across ranks ------------------------------------------------------------------------------

def attribute_run(ranks: list[RankTrace], step_re=None, plan=None) -> dict:
    """Per step and rank: the time split and, aligned across ranks, transfer and wait; per layer
    (when every step holds the plan's collectives) and per rank (kernel totals, HTA's overlap)."""
    ranks = sorted(ranks, key=lambda r: r.rank)
    cpu = not any(r.kernels for r in ranks)
    plan_count = len(plan) if plan else None
    hows, per_rank, marks = set(), [], {}
    index = [_Index(rt) for rt in ranks]
    for rt in ranks:
        how, steps = find_steps(rt, step_re, plan_count)
        hows.add(how)
        per_rank.append({sid: (lo, hi, g) for sid, lo, hi, g, _ in steps})
        for sid, *_, name in steps:
            marks.setdefault(sid, name)
    common = sorted(set.intersection(*(set(p) for p in per_rank)))
    notes = []
    has_colls = any(r.colls for r in ranks)
    dropped = {"empty": 0, "no collectives": 0}
    if any(len(p) != len(common) for p in per_rank):
        notes.append(f"steps seen by every rank: {len(common)} (per rank: "
                     f"{', '.join(f'{r.rank}: {len(p)}' for r, p in zip(ranks, per_rank))})")
    steps, tokens, coll_rows, layer_acc = [], [], [], {}
    counts = []
    for sid in common:
        info = vllm_step(marks.get(sid) or "") or {}
        if info.get("phase") == "empty":              # the engine scheduled nothing in this iteration
            dropped["empty"] += 1
            continue
        parts = [_rank_step(ix, *p[sid], cpu) for ix, p in zip(index, per_rank)]
        if any(x is None or x["window_us"] <= 0 for x in parts):
            continue
        lists = [x["colls"] for x in parts]
        if has_colls and not any(lists):             # a step without communication: no step of this account
            dropped["no collectives"] += 1
            continue
        phase = {"phase": info.get("phase", "decode"), "step_tokens": info.get("step_tokens", ""),
                 "requests": (info["prefill_requests"] + info["decode_requests"]) if info else "",
                 "decode_requests": info.get("decode_requests", "")}
        n = min(len(c) for c in lists)
        if any(len(c) != n for c in lists):
            notes.append(f"step {sid}: ranks issued {', '.join(str(len(c)) for c in lists)} collectives; the first {n} "
                         "are aligned")
        counts.append(max(len(c) for c in lists))
        trans = [0.0] * len(ranks)
        wait = [0.0] * len(ranks)
        strag = [0] * len(ranks)
        sites = plan if plan and all(len(c) == len(plan) for c in lists) else None
        token = len(tokens) // len(ranks)
        for k in range(n):
            durs = [c[k].dur for c in lists]
            t = min(durs)
            last = durs.index(t)
            strag[last] += 1
            for i, rt in enumerate(ranks):
                c = lists[i][k]
                trans[i] += t
                wait[i] += c.dur - t
                coll_rows.append({"step": sid, "token": token, "index": k, "rank": rt.rank,
                                  "site": sites[k].site if sites else "", "op": c.op, "kernel": c.name[:120],
                                  "size_bytes": c.size_bytes if c.size_bytes is not None else "",
                                  "start_us": c.ts - parts[i]["start"], "duration_us": c.dur, "transfer_us": t,
                                  "wait_us": c.dur - t, "straggler": int(i == last)})
        for i, (rt, x) in enumerate(zip(ranks, parts)):
            own = sum(c.dur for c in x["colls"][:n]) or 0.0
            w = x["comm_exposed_us"] * (wait[i] / own) if own > 0 else 0.0
            tr = x["comm_exposed_us"] - w
            compute = x["compute_us"] + x["memory_us"]
            lat = x["window_us"]
            steps.append({"step": sid, "token": token, "rank": rt.rank, **phase,
                          **{k: x[k] for k in ("window_us", "compute_us", "comm_us", "comm_exposed_us",
                                               "comm_overlapped_us", "memory_us", "idle_us")},
                          "collectives": len(x["colls"]), "transfer_us": tr, "wait_us": w,
                          "straggler_count": strag[i]})
            tokens.append({"rank": rt.rank, "token": token, "latency_us": lat, "latency_us_measured": lat,
                           "compute_us": compute, "transfer_us": tr, "wait_us": w, "gaps_us": x["idle_us"],
                           "residual_us": lat - compute - tr - w - x["idle_us"],
                           "comm_share_pct": 100.0 * (tr + w) / lat if lat > 0 else 0.0, "phase": phase["phase"],
                           "decode_requests": phase["decode_requests"], "step_tokens": phase["step_tokens"]})
            if sites:
                cl = x["colls"]
                for j, s in enumerate(sites):
                    if s.layer is None:
                        continue
                    prev_end = cl[j - 1].ts + cl[j - 1].dur if j else x["start"]
                    comp_us = _inter(x["U_c"], [[prev_end, cl[j].ts]]) if cl[j].ts > prev_end else 0.0
                    a = layer_acc.setdefault((s.layer, rt.rank), {"compute_us": 0.0, "transfer_us": 0.0,
                                                                  "wait_us": 0.0, "straggler_count": 0,
                                                                  "collectives": 0, "steps": set()})
                    d = [lists[r][j].dur for r in range(len(ranks))]
                    a["compute_us"] += comp_us
                    a["transfer_us"] += min(d)
                    a["wait_us"] += cl[j].dur - min(d)
                    a["straggler_count"] += int(d.index(min(d)) == i)
                    a["collectives"] += 1
                    a["steps"].add(sid)
    layers = []
    for (layer, rank), a in sorted(layer_acc.items()):
        ns = len(a["steps"])
        c, tr, w = a["compute_us"] / ns, a["transfer_us"] / ns, a["wait_us"] / ns
        layers.append({"layer": layer, "rank": rank, "compute_us": c, "transfer_us": tr, "wait_us": w,
                       "comm_share_pct": 100.0 * (tr + w) / (c + tr + w) if c + tr + w > 0 else 0.0,
                       "straggler_count": a["straggler_count"], "collectives": a["collectives"]})
    for what, n in dropped.items():
        if n:
            notes.append(f"{n} step{'s' if n > 1 else ''} {'with nothing scheduled' if what == 'empty' else 'without collectives'}"
                         " dropped (not counted as tokens)")
    return {"steps": steps, "tokens": tokens, "collectives": coll_rows, "layers": layers, "notes": notes,
            "dropped_steps": dropped,
            "step_source": "; ".join(sorted(hows)), "cpu": cpu, "counts": counts,
            "collectives_per_step": int(sorted(counts)[len(counts) // 2]) if counts else 0,
            "ranks": [rank_totals(rt, cpu, until=max((v[1] for v in p.values() if v[1] < math.inf), default=None))
                      for rt, p in zip(ranks, per_rank)]}


def rank_totals(rt: RankTrace, cpu: bool, until: float | None = None) -> dict:
    """Totals of one rank over the capture up to the end of its last step (``until``; kernels
    placed by their launch, as HTA's ``include_last_profiler_step=True`` keeps them): kernel time
    by kind (sums of durations, as HTA's kernel breakdown), and the comm/compute overlap in HTA's
    definition: time computing while communicating over time communicating, on merged intervals."""
    keep = (lambda a: True) if until is None else (lambda a: a <= until)  # noqa: E731
    colls = [c for c in rt.colls if keep(c.anchor)]
    compute = [e for e in rt.compute if keep(e[2])]
    memory = [e for e in rt.memory if keep(e[2])]
    comm = [(c.ts, c.ts + c.dur) for c in colls]
    comp = [(ts, ts + d) for ts, d, *_ in (rt.cpu_ops if cpu else compute)]
    U_x, U_c = _merge(comm), _merge(comp)
    lx = _length(U_x)
    return {"rank": rt.rank, "file": os.path.basename(rt.path), "backend": rt.backend or "",
            "comm_kernels": len(colls), "comm_kernel_us": float(sum(c.dur for c in colls)),
            "compute_kernels": 0 if cpu else len(compute),
            "compute_kernel_us": 0.0 if cpu else float(sum(d for _, d, _ in compute)),
            "memory_events": len(memory), "memory_us": float(sum(d for _, d, _ in memory)),
            "hta_overlap_pct": 100.0 * _inter(U_x, U_c) / lx if lx > 0 and not cpu else 0.0}


# --- checks across files -----------------------------------------------------------------------------------

def _few(ranks: list, n: int = 8) -> str:
    """Rank numbers for a one-line message: the first ``n``, then how many more."""
    text = ", ".join(map(str, ranks[:n]))
    return text + (f", ... ({len(ranks):,} in all)" if len(ranks) > n else "")


def check_ranks(ranks: list[RankTrace], tp: int | None) -> None:
    """One run's ranks: no rank twice, none missing, all from one run (same world size, captures
    that overlap in time)."""
    seen: dict = {}
    for rt in ranks:
        if rt.rank in seen:
            raise UsageError(f"rank {rt.rank} appears twice ('{seen[rt.rank].path}' and '{rt.path}'); "
                             "pass each rank's trace once")
        seen[rt.rank] = rt
    worlds = sorted({rt.world for rt in ranks if rt.world is not None})
    if len(worlds) > 1:
        by = ", ".join(f"rank {rt.rank}: {rt.world}" for rt in ranks)
        raise UsageError(f"the traces come from different runs: their world sizes differ ({by})")
    have = sorted(seen)
    want = set(range(have[0], have[-1] + 1))
    if tp and 1 < len(have) < tp:              # one TP group: the block of tp ranks the first belongs to
        first = have[0] - have[0] % tp
        want |= set(range(first, first + tp))
    missing = sorted(want - set(have))
    if missing:
        raise UsageError(f"rank{'s' if len(missing) > 1 else ''} {_few(missing)} missing: the traces "
                         f"hold ranks {_few(have)}; pass every rank's trace of the TP group")
    if worlds and have[-1] >= worlds[0]:
        raise UsageError(f"rank {have[-1]} in '{seen[have[-1]].path}' but the world size is {worlds[0]}: "
                         "the traces come from different runs")
    spans = [(rt.span, rt) for rt in ranks if rt.span[0] < rt.span[1] and not rt.run]
    for (s1, a), (s2, b) in zip(spans, spans[1:]):
        if s1[1] < s2[0] or s2[1] < s1[0]:
            raise UsageError(f"the traces come from different runs: rank {a.rank} ('{a.path}') and rank {b.rank} "
                             f"('{b.path}') were captured at times that do not overlap")


# --- the verb ----------------------------------------------------------------------------------------------

_DTYPE_NAMES = {"bfloat16": "bf16", "half": "fp16", "float16": "fp16", "float": "fp32", "float32": "fp32"}
KINETO_STEPS_CSV = "kineto_steps.csv"
KINETO_COLLECTIVES_CSV = "kineto_collectives.csv"
KINETO_RANKS_CSV = "kineto_ranks.csv"
STEP_COLUMNS = ["tp", "batch", "mode", "phase", "step", "token", "rank", "step_tokens", "requests", "window_us", "compute_us", "comm_us", "comm_exposed_us",
                "comm_overlapped_us", "memory_us", "idle_us", "collectives", "transfer_us", "wait_us",
                "straggler_count"]
COLL_COLUMNS = ["tp", "batch", "mode", "step", "token", "index", "rank", "site", "op", "kernel", "size_bytes",
                "start_us", "duration_us", "transfer_us", "wait_us", "straggler"]
RANK_COLUMNS = ["tp", "batch", "mode", "rank", "file", "backend", "comm_kernels", "comm_kernel_us", "compute_kernels",
                "compute_kernel_us", "memory_events", "memory_us", "hta_overlap_pct"]


def _run_label(label: str) -> dict:
    """A run label's fields ("tp=2 batch=8 mode=eager"); tp and batch must be whole numbers in range."""
    lab = {k: v for k, v in re.findall(r"(\w+)=(\S+)", label or "")}
    for key, hi in (("tp", MAX_TP), ("batch", 1 << 20)):
        if key in lab:
            v = lab[key]
            if not (v.isascii() and v.isdigit() and 1 <= int(v) <= hi):
                raise UsageError(f"run label {shown(label)}: {key}={shown(v)} is not a whole number in 1..{hi:,}")
    if "mode" in lab and lab["mode"] not in ("eager", "graph"):
        raise UsageError(f"run label {shown(label)}: mode={shown(lab['mode'])}: expected eager or graph")
    return lab


def import_kineto(paths: list[str], out_dir: str, step_marker: str | None = None, model: str | None = None,
                  tp: int | None = None, command=None) -> dict:
    """Read the traces, attribute every run in them, write a trace results dir; returns a short
    account (runs, steps, collectives per step against the plan, notes)."""
    from .attribution import summarize
    from .models import get_model
    from .stepmodel import decode_collectives
    from .results.trace import LAYER_COLUMNS, SUMMARY_COLUMNS, TOKEN_COLUMNS

    if not paths:
        raise UsageError("import kineto: no trace files given")
    if tp is not None and not 1 <= tp <= MAX_TP:
        raise UsageError(f"--tp {shown(tp)}: must be a whole number in 1..{MAX_TP:,}")
    try:
        step_re = re.compile(step_marker) if step_marker else None
    except re.error as e:
        raise UsageError(f"--step-marker '{step_marker}': not a regular expression ({e})") from None
    shape = get_model(model) if model else None
    results.check_out_dir(out_dir, resume=False)
    ranks, files, skipped = [], [], []
    for p in paths:
        rts = read_file(p, step_marker)
        if not rts:
            skipped.append(os.path.basename(p))
            continue
        ranks.extend(rts)
        files.append({"path": os.path.abspath(p), "sha256": results.file_sha256(p), "bytes": os.path.getsize(p),
                      "ranks": sorted({r.rank for r in rts})})
    if not any(r.kernels or r.colls for r in ranks):
        if skipped and not ranks:
            raise UsageError(f"{', '.join(repr(p) for p in paths)}: no rank's trace (only traces that name no rank "
                             "and hold no kernels or CPU ops, as vLLM's front-end async_llm trace)")
        raise UsageError(f"{', '.join(repr(p) for p in paths)}: no GPU kernels and no CPU collectives in the trace; "
                         "capture with torch.profiler activities=[CPU, CUDA] around the decode steps")
    shape, layers_run, layers_note = _producer_shape(ranks, shape)
    runs: dict = {}
    for r in ranks:
        runs.setdefault(r.run, []).append(r)
    tok_rows, lay_rows, sum_rows, step_rows, coll_rows, rank_rows, accounts = [], [], [], [], [], [], []
    for label, rs in runs.items():
        lab = _run_label(label)
        run_tp = int(lab.get("tp", 0)) or tp or (len(rs) if len(rs) > 1 else (rs[0].world or 1))
        check_ranks(rs, tp or (int(lab["tp"]) if "tp" in lab else None))
        mode = lab.get("mode") or ("graph" if any(r.graph for r in rs) else "eager")
        colls = [c for r in rs for c in r.colls]
        dtype = next((_DTYPE_NAMES.get(c.dtype or "", None) for c in colls if _DTYPE_NAMES.get(c.dtype or "")), "bf16")
        plan = None
        if shape is not None and run_tp > 1:
            plan = decode_collectives(_with_layers(shape, layers_run), run_tp, 1, dtype=dtype)
        att = attribute_run(rs, step_re, plan)
        if layers_note:
            att["notes"].insert(0, layers_note)
        if len(rs) < run_tp:
            att["notes"].insert(0, f"{len(rs)} of the TP group's {run_tp} ranks imported: transfer and wait are "
                                   "split over these ranks only (a single rank has no wait)")
        if not att["tokens"]:
            raise UsageError(f"{', '.join(sorted({os.path.basename(r.path) for r in rs}))}: no step holds kernels or "
                             f"collectives on every rank (steps from {att['step_source']})")
        decode_batch = _median([t["decode_requests"] for t in att["tokens"]
                                if t["phase"] == "decode" and t["decode_requests"] != ""])
        batch = int(lab.get("batch", 0)) or decode_batch or _batch_from_sizes(shape, colls, dtype) or 1
        common = {"kind": "imported", "tp": run_tp, "batch": batch, "mode": mode}
        L = shape.layers if shape else ""
        ran = layers_run or L
        tok_rows += [{**common, "scaled": 0, "layers_run": ran, "layers_model": L, **t} for t in att["tokens"]]
        lay_rows += [{**common, "phase": "decode", **r} for r in att["layers"]]
        phases = {}
        for t in att["tokens"]:
            phases.setdefault(t["phase"], []).append(t)
        summs = {}
        for ph in sorted(phases, key=("decode", "prefill", "mixed").index):
            toks = phases[ph]
            chunk = _median([t["step_tokens"] - (t["decode_requests"] or 0) for t in toks]) if ph != "decode" else 0
            b = batch if ph == "decode" else (_median([t["decode_requests"] for t in toks]) or 0)
            summs[ph] = summarize(toks, b, att["collectives_per_step"], chunk=chunk or 0, prompt=chunk or 0)
            summs[ph]["phase"] = ph
            sum_rows.append({**common, "batch": b if ph != "prefill" else 0, "scaled": 0, "layers_run": ran,
                             "layers_model": L, **summs[ph]})
        summ = summs.get("decode") or next(iter(summs.values()))
        step_rows += [{**common, **r} for r in att["steps"]]
        coll_rows += [{**common, **r} for r in att["collectives"]]
        rank_rows += [{**common, **r} for r in att["ranks"]]
        plan_count = len(plan) if plan else None
        accounts.append({"run": label or "kineto", "tp": run_tp, "batch": batch, "mode": mode,
                         "ranks": sorted(r.rank for r in rs), "steps": len(att["tokens"]) // len(rs),
                         "steps_by_phase": {ph: len(v) // len(rs) for ph, v in phases.items()},
                         "dropped_steps": att["dropped_steps"],
                         "backend": "+".join(sorted({r.backend for r in rs if r.backend})),
                         "batch_source": ("run label" if lab.get("batch") else "vLLM iteration marks (decode requests, "
                                          "median over decode steps)" if decode_batch else
                                          "first all-reduce's size / hidden" if batch > 1 else "assumed 1"),
                         "step_source": att["step_source"], "collectives_per_step": att["collectives_per_step"],
                         "plan_collectives_per_step": plan_count,
                         "matches_plan": None if plan_count is None else att["collectives_per_step"] == plan_count,
                         "cpu_only": att["cpu"], "comm_share_pct": summ["comm_share_pct"],
                         "ms_per_step": summ["ms_per_token"], "notes": att["notes"]})
    backends = sorted({r.backend for r in ranks if r.backend})
    meta = results.provenance(
        "import", "imported", "a PyTorch profiler (Kineto) trace attributed per step: compute / communication "
        "(transfer, wait) / memory / idle (commprof import kineto)",
        command=list(command) if command is not None else list(sys.argv), hosts=[],
        gpus=sorted({g for r in ranks for g in r.gpus}) or ["unknown (the trace names no device)"],
        status="running")
    meta.update({
        "source": "kineto", "source_files": files, "skipped_files": skipped,
        "backend": backends[0] if len(backends) == 1 else (backends or None),
        "world_size": max((r.world or 0 for r in ranks), default=0) or len({r.rank for r in ranks}),
        "ranks": sorted({r.rank for r in ranks}),
        "model": shape.to_dict() if shape else {"name": "unknown (no --model given)"},
        "scaled": False, "scaling": layers_note or "as captured (every layer the engine ran)",
        "step_marker": step_marker, "runs": accounts,
        "phases": "per step from vLLM's iteration marks where the trace has them (execute_context_N(T)_generation_M(K): "
                  "prefill = context requests only, decode = generation only, mixed = both); else every step decode",
        "config": {"dtype": dtype, "tp": tp},
        "columns": {
            "latency_us": "the step's window on the rank: its GPU-side span (first to last kernel, or the "
                          "step annotation's GPU span); on CPU-only traces the step annotation",
            "compute_us": "time some compute kernel runs (union), plus time only a memcpy/memset runs",
            "transfer_us": "exposed communication (a collective runs and no compute does) times the rank's "
                           "transfer fraction: per collective the shortest duration over the ranks",
            "wait_us": "exposed communication times the rank's wait fraction (own duration minus the shortest: "
                       "arrival skew)",
            "gaps_us": "idle: nothing runs on the GPU (host and launch overhead)",
            "comm_overlapped_us": "a collective runs beside compute (kineto_steps.csv); counted as compute, as in "
                                  "HTA's temporal breakdown",
            "hta_overlap_pct": "HTA's comm/compute overlap: time computing while communicating / time "
                               "communicating (merged intervals, whole capture)",
            "straggler": "this rank arrived last at the collective (its duration is the shortest)"},
    })
    os.makedirs(out_dir, exist_ok=True)
    results.write_meta(out_dir, meta)
    with results.failing(out_dir, "import kineto"):     # a full disk: meta.json says failed, not running
        _write_tables(out_dir, tok_rows, lay_rows, sum_rows, step_rows, coll_rows, rank_rows)
    results.finish_meta(out_dir, "complete")
    return {"out_dir": out_dir, "runs": accounts, "files": files, "skipped": skipped}


def _write_tables(out_dir, tok_rows, lay_rows, sum_rows, step_rows, coll_rows, rank_rows) -> None:
    from .results.trace import LAYER_COLUMNS, LAYERS_CSV, SUMMARY_COLUMNS, SUMMARY_CSV, TOKEN_COLUMNS, TOKENS_CSV

    write_table(os.path.join(out_dir, TOKENS_CSV), TOKEN_COLUMNS, tok_rows)
    write_table(os.path.join(out_dir, LAYERS_CSV), LAYER_COLUMNS,
                [{k: r.get(k, "") for k in LAYER_COLUMNS} for r in lay_rows])
    write_table(os.path.join(out_dir, SUMMARY_CSV), SUMMARY_COLUMNS,
                [{k: r.get(k, "") for k in SUMMARY_COLUMNS} for r in sum_rows])
    write_table(os.path.join(out_dir, KINETO_STEPS_CSV), STEP_COLUMNS, step_rows)
    write_table(os.path.join(out_dir, KINETO_COLLECTIVES_CSV), COLL_COLUMNS, coll_rows)
    write_table(os.path.join(out_dir, KINETO_RANKS_CSV), RANK_COLUMNS, rank_rows)
def backend_of_ops(rt: RankTrace) -> str:
    """The communication backend a rank's collectives name: NCCL/RCCL kernels, vLLM's custom
    all-reduce kernels, vLLM's CPU shared-memory ops, gloo's or c10d's CPU ops ('' when none)."""
    names = {c.name for c in rt.colls}
    found = []
    for pat, backend in ((r"^_C::shm_", "vllm-cpu-shm"), (r"nccl", "nccl"), (r"rccl", "rccl"),
                         (r"cross_device_reduce|one_shot|two_shot|allreduce_fusion", "vllm-custom-allreduce"),
                         (r"^gloo:", "gloo"), (r"^c10d::|record_param_comms", "" if rt.kernels else "gloo")):
        if backend and backend not in found and any(re.search(pat, n, re.IGNORECASE) for n in names):
            found.append(backend)
    return "+".join(found)


def _median(values) -> int | None:
    v = sorted(x for x in values if isinstance(x, (int, float)) and x == x)
    return int(v[len(v) // 2]) if v else None


def _producer_shape(ranks, shape):
    """What a commprof ``trace.json`` says about itself: its model (used when no ``--model`` is
    given) and how many of its layers the engine ran. Returns (shape, layers run or None, a note
    when the timeline holds fewer layers than the model: its per-step figures are of those layers,
    not scaled to the whole model)."""
    from .models import ModelShape, get_model

    head = next((r.producer for r in ranks if r.producer), {})
    if shape is None and head.get("model"):
        try:
            shape = get_model(str(head["model"]))
        except UsageError:
            d = head.get("model_shape")
            if isinstance(d, dict):
                try:
                    names = {f.name for f in dataclasses.fields(ModelShape)}
                    shape = ModelShape(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()
                                          if k in names})
                except (TypeError, ValueError):
                    shape = None
    run, total = head.get("layers_run"), head.get("layers_model")
    if not (isinstance(run, int) and isinstance(total, int) and 0 < run < total) or shape is None:
        return shape, None, ""
    return shape, run, (f"a commprof trace timeline of {run} of {total} layers (trace --layers {run}): per-step "
                        f"figures are of the {run} layer(s) run, not scaled to {total}; the trace's own "
                        "trace_summary.csv holds the scaled figures")


def _with_layers(shape, layers: int | None):
    """``shape`` cut to its first ``layers`` layers (the plan of a timeline that ran only those)."""
    if not layers or layers >= shape.layers:
        return shape
    return dataclasses.replace(shape, layers=layers)


def _batch_from_sizes(shape, colls, dtype: str) -> int | None:
    """Tokens per step from the first all-reduce's size (batch x hidden elements), when a model is given."""
    if shape is None:
        return None
    e = {"bf16": 2, "fp16": 2, "fp32": 4}.get(dtype, 2)
    for c in colls:
        if c.op == "all_reduce" and c.size_bytes:
            n = c.size_bytes // e
            if n % shape.hidden == 0 and n // shape.hidden >= 1:
                return n // shape.hidden
            return None
    return None


def run_import_kineto(paths: list[str], out: str, step_marker: str | None = None, model: str | None = None,
                      tp: int | None = None) -> int:
    """``commprof import kineto``: import, print one line per run, return the exit code (0)."""
    acc = import_kineto(paths, out, step_marker=step_marker, model=model, tp=tp)
    for a in acc["runs"]:
        plan = ""
        if a["plan_collectives_per_step"] is not None:
            plan = (f" (plan: {a['plan_collectives_per_step']}, "
                    f"{'matches' if a['matches_plan'] else 'DIFFERS'})")
        cpu_ops = f" (CPU ops, {a['backend'] or 'backend unknown'})" if a["cpu_only"] else ""
        print(f"imported {a['run']}: rank{'s' if len(a['ranks']) > 1 else ''} {', '.join(map(str, a['ranks']))}; "
              f"{a['steps']} step{'s' if a['steps'] != 1 else ''} ({a['step_source']}), "
              f"{a['collectives_per_step']} collectives/step{plan}, "
              f"{a['ms_per_step']:.3f} ms/step, communication {a['comm_share_pct']:.1f}% exposed"
              f"{cpu_ops} into {acc['out_dir']}")
        for n in (([f"skipped {', '.join(acc['skipped'])}: names no rank and holds no kernels or CPU ops "
                       "(a front-end process's trace)"] if acc.get("skipped") else []) + a["notes"])[:5]:
            print(f"  note: {n}", file=sys.stderr)
    return 0
