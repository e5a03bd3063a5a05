"""A trace results dir: ``trace_tokens.csv`` (per tp, batch, mode, token, rank), ``trace_layers.csv``
(per layer and rank, with straggler counts), ``trace_summary.csv`` (one row per run),
``meta.json`` and ``trace.json`` (every rank's raw segment stamps in the Trace Event format, for
Perfetto or chrome://tracing; ``commprof import kineto`` reads it back), and the same events one
file per rank, ``kineto/rank<r>.trace.json``, with ``distributedInfo`` (HTA reads that folder). Rank 0 (or
``trace --predict``) appends one attributed run at a time."""
from __future__ import annotations

import os

from commprof.model.fileio import write_atomic
from commprof.model.machine import now_iso
from commprof.results.meta import check_out_dir, finish_meta, provenance, rank_fields, write_meta
from commprof.results.table import TableAppender
from commprof.model.collectives import DTYPE_BYTES

TRACE_US_DECIMALS = 3       # trace.json records its times in us to the nanosecond


def trace_us(x) -> float:
    """A time in us as trace.json records it: to the nanosecond. The straggler of a collective is
    decided on these values, so a run and its trace.json read back name the same rank."""
    return round(float(x), TRACE_US_DECIMALS)


TOKENS_CSV = "trace_tokens.csv"


LAYERS_CSV = "trace_layers.csv"


SUMMARY_CSV = "trace_summary.csv"


TOKEN_COLUMNS = ["kind", "scaled", "layers_run", "layers_model", "tp", "batch", "mode", "token", "rank",
                 "latency_us", "compute_us", "transfer_us", "wait_us", "gaps_us", "residual_us",
                 "comm_share_pct", "latency_us_measured", "phase"]


LAYER_COLUMNS = ["kind", "tp", "batch", "mode", "layer", "rank", "compute_us", "transfer_us", "wait_us",
                 "comm_share_pct", "straggler_count", "collectives", "phase"]


SUMMARY_COLUMNS = ["kind", "scaled", "tp", "batch", "mode", "ms_per_token", "tokens_per_s",
                   "collectives_per_step", "collectives_per_token", "comm_share_pct", "transfer_share_pct",
                   "wait_share_pct", "compute_ms", "transfer_ms", "wait_ms", "gaps_ms", "max_residual_pct",
                   "tokens", "layers_run", "layers_model", "phase", "prompt", "chunk", "ttft_ms", "ttft_comm_ms",
                   "ttft_comm_share_pct", "remainder_ms", "repeats", "ms_per_token_repeats", "repeat_spread",
                   "unstable"]

#: ``trace_repeats.csv`` (``trace --repeat N`` with N > 1): one row per repeat of each run.
REPEATS_CSV = "trace_repeats.csv"
REPEAT_COLUMNS = ["kind", "tp", "batch", "mode", "phase", "repeat", "start_s", "tokens", "ms_per_token",
                  "tokens_per_s", "compute_ms", "transfer_ms", "wait_ms", "gaps_ms", "comm_share_pct", "ttft_ms",
                  "unstable"]
REPEAT_COLUMN_DOCS = {
    "repeat": "which repeat of the run (1 to --repeat); the repeats are interleaved: every run's repeat 1, then "
              "every run's repeat 2, ...",
    "start_s": "when the repeat's timed tokens started, seconds since rank 0 began the first run",
    "ms_per_token": "that repeat's own median over its tokens (trace_summary.csv's is over every repeat's tokens)",
    "unstable": "that repeat's own tokens spread (interquartile range over 0.5 of the median), else empty",
}

#: What the noise columns of ``trace_summary.csv`` mean (commprof.analysis.noise holds the limits).
NOISE_COLUMN_DOCS = {
    "repeats": "times the run was timed (--repeat, the repeats interleaved over the trace); with more than one, "
               "the summary's figures are over every repeat's tokens pooled (trace_tokens.csv numbers them on: "
               "repeat r's token t is (r - 1) x tokens + t)",
    "ms_per_token_repeats": "each repeat's ms/token (its own median), ';'-separated (empty for one repeat)",
    "repeat_spread": "max / min of the repeats' ms/token (empty for one repeat)",
    "unstable": "why the run's ms/token is not a steady figure (empty when it is): its repeats' ms/token more than "
                "2x apart, or its tokens' interquartile range over 0.5 of their median (commprof.analysis.noise)",
}


TRACE_JSON = "trace.json"

#: Trace Event format names of the engine's collectives, as Kineto writes record_param_comms.
_COLL_NAME = {"embedding": "allreduce", "attn_out": "allreduce", "mlp_out": "allreduce", "logits": "allgather"}
_TORCH_DTYPE = {"bf16": "BFloat16", "fp16": "Half", "fp32": "Float"}


def timeline_events(runs: list, model: dict, dtype: str, backend: str, chunk: int = 0) -> list[dict]:
    """Trace Event format events of the raw stamps of each run ``(tp, batch, mode, recs)``: one
    process per rank and run, a compute track and a communication track, a ``ProfilerStep#t``
    per token; tokens laid end to end (token t of every rank starts when the slowest rank's token
    t-1 ended: the time between tokens is not stamped). Times in us."""
    import math

    e = DTYPE_BYTES.get(dtype, 2)
    cat = "cpu_op"
    out: list[dict] = []
    for run_i, (tp, batch, mode, recs) in enumerate(runs):
        recs = sorted(recs, key=lambda r: r["rank"])
        hidden = int(model.get("hidden", 0) or 0)
        vocab_r = math.ceil(int(model.get("vocab", 0) or 0) / max(1, tp))
        rows_out = batch + (1 if chunk else 0)
        ar = (batch + chunk) * hidden
        lat_max = [max(float(r["lat"][t]) for r in recs) for t in range(len(recs[0]["lat"]))]
        starts = [0.0]
        for v in lat_max[:-1]:
            starts.append(starts[-1] + v)
        label = f"tp={tp} batch={batch} mode={mode}"
        for r in recs:
            pid = 1000 * run_i + int(r["rank"])
            out += [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"rank {r['rank']}"}},
                    {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": label}},
                    {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
                    {"ph": "M", "name": "thread_name", "pid": pid, "tid": 0, "args": {"name": "steps"}},
                    {"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "compute"}},
                    {"ph": "M", "name": "thread_name", "pid": pid, "tid": 2, "args": {"name": "communication"}}]
            for t, t0 in enumerate(starts):
                step = {"ph": "X", "name": f"ProfilerStep#{t}", "pid": pid, "tid": 0, "ts": trace_us(t0),
                        "dur": trace_us(r["lat"][t])}
                out.append({**step, "cat": "user_annotation"})
                for j, seg in enumerate(r["segments"]):
                    if seg.is_comm and tp == 1:
                        continue                 # no collective runs at tp=1: its time is a gap, as in trace
                    ev = {"ph": "X", "cat": cat, "name": seg.name, "pid": pid, "tid": 2 if seg.is_comm else 1,
                          "ts": trace_us(t0 + float(r["offs"][t][j])), "dur": trace_us(r["durs"][t][j]),
                          "args": {"site": seg.kind, "layer": seg.layer}}
                    if seg.is_comm and tp > 1:
                        coll = _COLL_NAME.get(seg.kind, "allreduce")
                        n_in = rows_out * vocab_r if coll == "allgather" else ar
                        n_out = tp * n_in if coll == "allgather" else ar
                        ev["args"].update({"Collective name": coll, "In msg nelems": n_in, "Out msg nelems": n_out,
                                           "Group size": tp, "dtype": _TORCH_DTYPE.get(dtype, dtype),
                                           "size_bytes": n_out * e})
                    out.append(ev)
    return as_nccl(out, dtype) if backend == "nccl" else out


#: NCCL's device kernel names (``ncclDevKernel_<Coll>[_<Op>_<type>]_<ALGO>_<PROTO>``, NCCL 2.19+
#: src/device/generate.py); commprof times the whole collective, not NCCL's algorithm or protocol,
#: so those two parts are left off. HTA counts a kernel as communication by its ``nccl`` prefix.
_NCCL_KERNEL = {"allreduce": "ncclDevKernel_AllReduce_Sum_{t}", "allgather": "ncclDevKernel_AllGather"}
_NCCL_TYPE = {"bf16": "bf16", "fp16": "f16", "fp32": "f32"}
#: GPU streams as Kineto numbers them (its ``tid`` of a kernel): compute and communication apart.
_STREAM = {1: 7, 2: 13}


def as_nccl(events: list[dict], dtype: str) -> list[dict]:
    """The events of :func:`timeline_events` as an NCCL run's Kineto trace shows them: segments as
    GPU kernels (``cat: kernel``, on a stream of device ``rank``), collectives named as NCCL's
    kernels (the site kept in ``args.site``/``args.label``), and each ``ProfilerStep#t`` also as a
    GPU-side annotation. Pure: the same stamps in, the GPU form out."""
    out = []
    for ev in events:
        if ev.get("ph") != "X":
            out.append(ev)
            continue
        if ev.get("cat") == "user_annotation":
            out += [ev, {**ev, "cat": "gpu_user_annotation"}]
            continue
        ev = {**ev, "cat": "kernel", "tid": _STREAM.get(ev["tid"], ev["tid"]),
              "args": {**ev["args"], "device": ev["pid"] % 1000, "stream": _STREAM.get(ev["tid"], ev["tid"])}}
        coll = ev["args"].get("Collective name")
        if coll:
            ev["args"]["label"] = ev["name"]
            ev["name"] = _NCCL_KERNEL.get(coll, "ncclDevKernel_AllReduce_Sum_{t}").format(t=_NCCL_TYPE.get(dtype, dtype))
        out.append(ev)
    for ev in events:
        if ev.get("ph") == "M" and ev.get("name") == "thread_name" and ev["tid"] in _STREAM:
            out.append({**ev, "tid": _STREAM[ev["tid"]], "args": {"name": f"stream {_STREAM[ev['tid']]} "
                                                                            f"{ev['args']['name']}"}})
    return out


def write_timeline(path: str, runs: list, model: dict, dtype: str, backend: str, chunk: int = 0,
                   layers_run: int | None = None) -> None:
    """``trace.json`` (Trace Event format; opens in Perfetto and chrome://tracing), written atomically.
    Its ``commprof`` header says what the file is: the model's shape and how many of its layers
    the engine ran (``import kineto`` reads both, so a ``--layers 1`` timeline is not taken for a
    whole model)."""
    import json

    doc = {"schemaVersion": 1, "displayTimeUnit": "ms",
           "commprof": timeline_header(runs, model, dtype, backend, layers_run),
           "traceEvents": timeline_events(runs, model, dtype, backend, chunk)}
    write_atomic(path, json.dumps(doc, separators=(",", ":")))
    write_rank_traces(os.path.join(os.path.dirname(path), RANK_TRACE_DIR), doc)


def timeline_header(runs: list, model: dict, dtype: str, backend: str, layers_run: int | None = None) -> dict:
    """The ``commprof`` header of a timeline: what the file is (``import kineto`` reads it)."""
    return {"format": "commprof trace timeline", "version": 1, "backend": backend, "dtype": dtype,
            "model": model.get("name"), "world_size": max(len(r[3]) for r in runs),
            "model_shape": model, "layers_model": model.get("layers"),
            "layers_run": layers_run or model.get("layers"),
            "layout": "tokens laid end to end; segment offsets and durations as stamped"}


#: Folder of the per-rank traces (only trace files in it: HTA reads every .json of a folder).
RANK_TRACE_DIR = "kineto"


def rank_trace_docs(doc: dict) -> dict[int, dict]:
    """One Kineto-style trace per rank from a timeline ``doc``, as PyTorch's profiler writes one
    per process: ``distributedInfo`` {backend, rank, world_size} first (HTA finds a file's rank by
    the first ``"rank": N`` in it), then the ``commprof`` header and that rank's events (all runs)."""
    head = doc["commprof"]
    by_rank: dict[int, list] = {}
    for ev in doc["traceEvents"]:
        by_rank.setdefault(int(ev["pid"]) % 1000, []).append(ev)
    return {r: {"distributedInfo": {"backend": head["backend"], "rank": r, "world_size": head["world_size"]},
                "schemaVersion": doc.get("schemaVersion", 1), "displayTimeUnit": "ms", "commprof": head,
                "traceEvents": evs} for r, evs in sorted(by_rank.items())}


def rank_trace_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank{rank}.trace.json")


def write_rank_traces(folder: str, doc: dict) -> list[str]:
    """``kineto/rank<r>.trace.json`` (one per rank, see :func:`rank_trace_docs`), each atomically."""
    import json

    os.makedirs(folder, exist_ok=True)
    paths = []
    for r, one in rank_trace_docs(doc).items():
        paths.append(rank_trace_path(folder, r))
        write_atomic(paths[-1], json.dumps(one, separators=(",", ": ")))
    return paths


class TraceWriter:
    """Rank 0's handle on a trace results dir: rows appended one run at a time."""

    def __init__(self, cfg, meta: dict, kind: str = "measured"):
        self.cfg, self.meta, self.kind = cfg, meta, kind
        p = cfg.out_dir
        self.tokens = TableAppender(os.path.join(p, TOKENS_CSV), TOKEN_COLUMNS)
        self.layers = TableAppender(os.path.join(p, LAYERS_CSV), LAYER_COLUMNS)
        self.summary = TableAppender(os.path.join(p, SUMMARY_CSV), SUMMARY_COLUMNS)
        self.timeline: list = []
        self.repeats = None         # trace_repeats.csv, opened at its first row

    def add_repeat(self, tp, batch, mode, repeat: int, start_s: float, summary: dict, unstable: str = ""):
        """One ``trace_repeats.csv`` row: one repeat of one run (``--repeat`` above 1), its own
        summary figures (``commprof.analysis.attribution.summarize``) and when it started."""
        if self.repeats is None:
            self.repeats = TableAppender(os.path.join(self.cfg.out_dir, REPEATS_CSV), REPEAT_COLUMNS)
        self.repeats.write([{**summary, "kind": self.kind, "tp": tp, "batch": batch, "mode": mode,
                             "phase": summary.get("phase", "decode"), "repeat": repeat,
                             "start_s": round(float(start_s), 6), "unstable": unstable}])

    def add_attributed(self, tp, batch, mode, att, recs=None):
        """Append one run (``commprof.analysis.attribution.attribute_tokens``) to the three tables; ``recs``
        (the ranks' raw stamps) also go into ``trace.json`` when the writer closes."""
        if recs is not None:
            self.timeline.append((tp, batch, mode, recs))
        common = {"kind": self.kind, "tp": tp, "batch": batch, "mode": mode,
                  "phase": att["summary"].get("phase", "decode")}
        self.tokens.write([{**common, "scaled": int(att["scaled"]), "layers_run": att["layers_run"],
                            "layers_model": self.cfg.layers_model, **r} for r in att["tokens"]])
        self.layers.write([{**common, **r} for r in att["layers"]])
        self.summary.write([{**common, "scaled": int(att["scaled"]), "layers_run": att["layers_run"],
                             "layers_model": self.cfg.layers_model, **att["summary"]}])

    def close(self, status: str = "complete"):
        for c in (self.tokens, self.layers, self.summary, self.repeats):
            if c is not None:
                c.close()
        if self.timeline:
            write_timeline(os.path.join(self.cfg.out_dir, TRACE_JSON), self.timeline, self.cfg.model,
                           getattr(self.cfg, "dtype", "bf16"), getattr(self.cfg, "backend", "gloo"),
                           chunk=int(getattr(self.cfg, "chunk", 0) or 0),
                           layers_run=getattr(self.cfg, "layers", None))
        finish_meta(self.cfg.out_dir, status)


def open_trace(cfg, rank_infos: list[dict], kind: str = "measured", extra: dict | None = None):
    """Create the results dir and its ``meta.json`` (provenance), return the writer."""
    check_out_dir(cfg.out_dir, resume=False)
    os.makedirs(cfg.out_dir, exist_ok=True)
    what = ("per-token decode latency split into compute / transfer / wait / gaps (commprof trace)"
            if kind == "measured" else
            "predicted per-token decode latency: compute measured here + collective latency from another box")
    meta = provenance(
        "trace", kind, what, command=cfg.argv,
        runs=[{"start_time": now_iso(), "command": cfg.argv, "status": "running"}],
        backend=cfg.backend, backend_reason=cfg.backend_reason, launch=cfg.launch,
        **rank_fields(rank_infos),
        model=cfg.model, scaled=cfg.scaled,
        scaling=(f"{cfg.layers} of {cfg.layers_model} layers ran; per-layer parts scaled by "
                 f"{cfg.layers_model}/{cfg.layers}" if cfg.scaled else "all layers ran"),
        engine_approximations=["random weights", "MLA attention runs as grouped-query attention",
                               "an MoE MLP runs as a dense MLP as wide as the active experts",
                               "Gemma extra norms and soft-capping left out"],
        memory=cfg.memory, config=cfg.to_dict(), phase=getattr(cfg, "phase", "decode"),
        **({"prompt": cfg.prompt, "chunk": cfg.chunk,
            "prefill_approximations": [
                "every chunk step runs a full chunk of `chunk` tokens (a last, shorter chunk is timed as full)",
                "the chunk's queries score the prefill sequence's whole cache of `prompt` tokens (no causal "
                "mask): about twice a causal prefill's attention work",
                "a mixed step's decode sequences hold `prompt` tokens of cache too (one context per engine)"]}
           if getattr(cfg, "phase", "decode") != "decode" else {}),
        columns={"transfer_us": "per collective, the minimum duration over the group's ranks",
                 "wait_us": "own duration of the collective minus the transfer (arrival skew)",
                 "gaps_us": "time in the token covered by no segment (host/launch overhead)",
                 "residual_us": "latency - (compute + transfer + wait + gaps)",
                 "straggler_count": "collectives of that layer for which this rank arrived last",
                 "phase": "decode, prefill (each row one chunk step of a prompt) or mixed (a chunk + decode tokens)",
                 "ttft_ms": "prefill/mixed: time to first token of one prompt = its ceil(prompt / chunk) chunk "
                            "steps (mean step of the slowest rank x steps)",
                 "ttft_comm_ms": "prefill/mixed: the part of ttft_ms in collectives (ttft_ms x comm_share_pct)",
                 "tokens_per_s": "decode: generated tokens/s; prefill: prompt tokens/s; mixed: decode tokens/s",
                 **NOISE_COLUMN_DOCS},
    )
    if getattr(cfg, "repeat", 1) > 1:
        meta["repeat_columns"] = REPEAT_COLUMN_DOCS
    meta.update(extra or {})
    write_meta(cfg.out_dir, meta)
    return TraceWriter(cfg, meta, kind)
