"""Reading PyTorch-profiler (Kineto) traces: one :class:`RankTrace` per rank, streamed.

Reads Chrome-trace JSON (``.json`` or ``.json.gz``) as torch.profiler, vLLM
(``VLLM_TORCH_PROFILER_DIR`` / ``--profiler-config``) and SGLang (``/start_profile``) write it,
one file per rank, or one file holding several ranks (``commprof trace``'s own ``trace.json``:
one process per rank). The file is streamed event by event and only the events the attribution
(:mod:`commprof.ingest.kinetosteps`) needs are kept, so a trace far larger than memory is read or refused
with its size, never an out-of-memory crash.
"""
from __future__ import annotations

import gzip
import json
import zlib
import math
import os
import re
from bisect import bisect_right
from dataclasses import dataclass, field

from commprof.model.errors import UsageError, shown
from commprof.model.fileio import check_regular

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
#: CPU ops only a training step runs: autograd's backward functions and torch.optim's step and
#: zero_grad (their names as torch.profiler records them). An inference engine's decode runs none.
TRAINING_OP_RE = re.compile(r"^(?:autograd::engine::evaluate_function\b|Optimizer\.(?:step|zero_grad)#)")
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
    training_ops: int = 0                           # backward / optimizer ops on the CPU: a training step
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
        self.training: dict = {}        # pid -> backward/optimizer CPU ops seen

    def _comm_args(self, name: str, args: dict) -> dict:
        """A collective's size arguments, each checked: a count or size that is no whole number of
        elements (negative, fractional, over 2^53, not a number) is a corrupt trace, refused."""
        out = {k: args[k] for k in _COMM_KEYS if k in args}
        for k in ("In msg nelems", "Out msg nelems", "size_bytes"):
            if k in out and not _is_count(out[k]):
                raise UsageError(f"{self.label}: collective {shown(name, 40)} has '{k}' = {shown(out[k], 40)}: not a "
                                 "count of elements (a whole number from 0 to 2^53); the trace is corrupt")
        return out

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
                                        self._comm_args(name, args)))
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
                self.rpc.append((pid, ts, ts + dur, self._comm_args(name, args)))
                return
            if any(r.match(name) for r, _ in STEP_RES) or (self.step_re and self.step_re.search(name)):
                self._keep()
                self.by_pid.setdefault(pid, {"marks": [], "cpu": []})["marks"].append((name, ts, dur, False))
                return
            if CPU_COMM_RE.match(name) or "Collective name" in args:
                self._keep()
                self.cpu_comm.append((pid, name, ts, dur, self._comm_args(name, args)))
                return
            if TRAINING_OP_RE.match(name):
                self.training[pid] = self.training.get(pid, 0) + 1
            if cat == "cpu_op":
                self._keep()
                self.by_pid.setdefault(pid, {"marks": [], "cpu": []})["cpu"].append((ts, dur))


def _is_key(v) -> bool:
    """A usable correlation id: a whole number or a short string (not a list, dict, float or bool)."""
    return (isinstance(v, int) and not isinstance(v, bool) and abs(v) < 1 << 63) or (isinstance(v, str) and len(v) < 64)


def _is_count(x) -> bool:
    """A whole number of elements or bytes: an int (or a whole float) from 0 to 2^53."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    if isinstance(x, float) and not (math.isfinite(x) and x == int(x)):
        return False
    return 0 <= x <= 2 ** 53


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
    _check_header(label, header)
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
        rt.training_ops = sum(n for pid, n in col.training.items() if own(pid))
        if not rt.kernels:                 # CPU-only: the collectives are CPU ops
            rt.colls = _cpu_colls([e for e in col.cpu_comm if own(e[0])], [e for e in col.rpc if own(e[0])])
        else:
            _sizes_from_rpc(rt.colls, [e for e in col.rpc if own(e[0])])
        rt.backend = backend_of_ops(rt) or rt.backend or None   # the ops say which; the process group may not
        out.append(rt)
    return out


def _check_header(label: str, header: dict) -> None:
    """The header entries commprof reads, of the types Kineto writes them: ``distributedInfo`` an
    object whose ``backend`` is a name and ``world_size`` a whole number >= 1, ``deviceProperties``
    a list of objects. Another type is a corrupt (or hand-made) trace: refused in one line."""
    def bad(what, v, want):
        raise UsageError(f"{label}: {what} = {shown(v, 40)}: expected {want}; not a trace as the PyTorch profiler "
                         "writes it (the header is corrupt)")
    info = header.get("distributedInfo")
    if info is not None:
        if not isinstance(info, dict):
            bad("distributedInfo", info, "an object (rank, world_size, backend)")
        if "backend" in info and info["backend"] is not None and not isinstance(info["backend"], str):
            bad("distributedInfo.backend", info["backend"], "a backend's name (e.g. \"nccl\")")
        ws = info.get("world_size")
        if ws is not None and (isinstance(ws, bool) or not isinstance(ws, int) or not 1 <= ws <= 1_000_000):
            bad("distributedInfo.world_size", ws, "a whole number from 1 to 1,000,000")
    props = header.get("deviceProperties")
    if props is not None and (not isinstance(props, list) or not all(isinstance(d, dict) for d in props)):
        bad("deviceProperties", props, "a list of objects, one per device")


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
