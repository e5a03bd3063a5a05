"""``commprof predict``: each token's time on a box you don't own.

Compute is modelled from the model's shapes and the GPU's published figures
(:mod:`commprof.analysis.computemodel`, :mod:`commprof.model.gpus`); communication is the 2L+2 collectives of a
step (:func:`commprof.analysis.stepmodel.decode_collectives`) priced by that box's own numbers: a reference
profile (modelled), an imported nccl-tests log (imported) or a sweep of the real box (measured),
looked up as ``trace --predict`` does (:class:`commprof.analysis.latency.CommTable`). Nothing is overlapped:
a step is compute + gaps + communication, and every user of the batch gets one token per step.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from commprof import results
from commprof.results.meta import shown_path
from commprof.analysis.computemodel import (CALIBRATION, CALIBRATION_SOURCE, MODES, WEIGHT_DTYPES, prefill_compute, step_compute,
                           weight_bytes_per_elem)
from commprof.model.errors import EXIT_OK, UsageError, shown
from commprof.model.gpus import GpuSpec, get_gpu
from commprof.model.models import DEFAULT_MODEL, ModelShape, get_model
from commprof.analysis.stepmodel import (MAX_BATCH, MAX_CONTEXT, MAX_TP, check_tp, dtype_bytes, kv_budget, kv_bytes_per_sequence_per_rank,
                      prefill_comm_us, step_collectives, weights_per_rank)
from commprof.views.console import emit, stdout_console
from commprof.views.predict import predict_chart, render_predict
from commprof.analysis.costmodel import resolve_comm_source
from commprof.analysis.latency import CommTable, stand_in_op
from commprof.analysis.predictserve import (SERVE_COLUMN_DOCS, SERVE_COLUMN_KINDS, SERVE_COLUMNS, ServeAccount,
                                            add_serve_account, serve_line)
from commprof.results.predict import PREDICT_CSV

PREDICT_CHART = "predict.png"
CSV_COLUMNS = ["box", "gpu", "comm", "comm_kind", "comm_timing", "tp", "batch", "context", "mode",
               "compute_ms", "kernel_ms", "floor_ms", "gaps_ms", "comm_ms", "ms_per_token",
               "tokens_s_per_user", "tokens_s_per_box", "tokens_s_per_gpu", "comm_share_pct",
               "collectives_per_step", "prompt", "ttft_ms", "ttft_comm_ms", "weights_gb_per_rank",
               "kv_gb_per_sequence_per_rank", "kv_max_sequences", "weights_fit", "note"]

#: What kind of figure each column is: the compute side is modelled, the communication side is
#: the comm input's own kind (``comm_kind``: modelled, imported or measured), the totals predicted.
COLUMN_KINDS = {
    "compute_ms": "modelled", "kernel_ms": "modelled", "floor_ms": "modelled", "gaps_ms": "modelled",
    "comm_ms": "comm_kind", "ttft_comm_ms": "comm_kind", "ms_per_token": "predicted",
    "tokens_s_per_user": "predicted", "tokens_s_per_box": "predicted", "tokens_s_per_gpu": "predicted",
    "comm_share_pct": "predicted", "ttft_ms": "predicted", "weights_gb_per_rank": "modelled",
    "kv_gb_per_sequence_per_rank": "modelled", "kv_max_sequences": "modelled",
}
COLUMN_DOCS = {
    "compute_ms": "GPU time of one decode step on one rank: kernel_ms + floor_ms + gaps_ms",
    "kernel_ms": "the kernels' rooflines: max(bytes / achievable bandwidth, FLOPs / achievable FLOP/s)",
    "floor_ms": "what kernel floors (the shortest a kernel runs) add above the rooflines",
    "gaps_ms": "host time per step: scheduler and sampling, plus launch gaps in eager mode",
    "comm_ms": "the step's 2L+2 collectives priced by the comm input, one after another (no overlap)",
    "ms_per_token": "one step: compute_ms + comm_ms; every sequence of the batch gets one token",
    "tokens_s_per_box": "batch x 1000 / ms_per_token for one TP group of tp GPUs",
    "tokens_s_per_gpu": "tokens_s_per_box / tp",
    "comm_share_pct": "comm_ms / ms_per_token x 100",
    "ttft_ms": "prefill of the prompt in one step (compute bound) + its collectives + one decode step",
    "kv_max_sequences": "sequences of --context tokens whose KV cache fits beside the weights (--mem-util)",
}


@dataclass
class PredictConfig:
    """``commprof predict``'s flags."""
    model: str = DEFAULT_MODEL
    gpus: list = field(default_factory=lambda: ["rtx5090"])
    comms: list = field(default_factory=lambda: ["reference:pcie5-nop2p"])
    tps: list = field(default_factory=lambda: [2, 4, 8])
    batches: list = field(default_factory=lambda: [1, 8, 32])
    context: int = 4096
    prompt: int | None = None
    dtype: str = "bf16"
    weights: str = "bf16"
    mode: str = "graph"
    mem_util: float = 0.9
    out: str | None = None
    charts: bool = True
    as_json: bool = False
    calibration: dict = field(default_factory=dict)
    serve: str | None = None        # a commprof serve dir: the measured scheduling account


# --- communication --------------------------------------------------------------------------------

_KIND_OF_VERB = {"reference": "modelled", "import": "imported", "sweep": "measured"}


class CommPrices:
    """One box's collective latency, from a reference profile or a results dir (a sweep, an
    imported nccl-tests log), priced as ``trace --predict`` prices it. A dir without all-gather
    rows prices the logits all-gather as an all-reduce of the same size (an upper bound: a ring
    all-reduce moves twice an all-gather's bytes), and says so."""

    def __init__(self, spec: str):
        self.spec = spec
        path = resolve_comm_source(spec)
        if not os.path.isdir(path):
            raise UsageError(f"--comm {shown(spec)}: not a results dir nor reference:<profile> "
                             "(e.g. reference:pcie5-nop2p, or a dir written by commprof sweep or commprof import)")
        self.table = CommTable(path)
        meta = self.table.meta
        self.kind = meta.get("kind") if meta.get("kind") in ("modelled", "imported", "measured") else \
            _KIND_OF_VERB.get(meta.get("verb"), "measured")
        self.label = spec if spec.startswith("reference:") else os.path.basename(os.path.normpath(spec))
        df = self.table.df
        self.have = {(str(o), int(t)) for o, t in zip(df["op"], df["tp"])}
        self.notes: list[str] = []
        self._memo: dict = {}

    def tps(self) -> list[int]:
        return sorted({t for _, t in self.have})

    def covers(self, tp: int) -> bool:
        return tp == 1 or ("all_reduce", tp) in self.have

    def price(self, tp: int, mode: str):
        """``price(op, size_bytes) -> us`` at ``tp``."""
        def price(op: str, size_bytes: int) -> float:
            op, rule = stand_in_op(op, tp, self.have)       # the one rule for a missing all-gather
            if rule and f"{self.label}: {rule}" not in self.notes:
                self.notes.append(f"{self.label}: {rule}")
            key = (op, tp, mode, int(size_bytes))
            if key not in self._memo:       # a step repeats the same few sizes 2L+2 times
                self._memo[key] = self.table.latency_us(*key)
            return self._memo[key]
        return price

    def describe(self) -> dict:
        m = self.table.meta
        spec = self.spec if self.spec.startswith("reference:") else shown_path(self.spec)
        return {"spec": spec, "results_dir": shown_path(self.table.path), "kind": self.kind,
                "verb": m.get("verb"), "hosts": m.get("hosts"), "gpus": m.get("gpus"),
                "profile": m.get("profile"), "title": m.get("title"), "start_time": m.get("start_time"),
                "statistic": f"{self.table.stat}, log-log interpolation in size",
                "timing": self.table.timing, "tps": self.tps(), "notes": self.notes}


# --- the prediction -------------------------------------------------------------------------------


def _check_list(values, flag: str, maximum: int) -> list[int]:
    out = []
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= maximum:
            raise UsageError(f"{flag} {shown(v)}: expected whole numbers from 1 to {maximum:,}")
        out.append(v)
    if not out:
        raise UsageError(f"{flag}: give at least one value")
    return out


def predict_point(model: ModelShape, gpu: GpuSpec, comm: CommPrices, tp: int, batch: int, context: int,
                  prompt: int | None = None, dtype: str = "bf16", mode: str = "graph", mem_util: float = 0.9,
                  cal: dict | None = None, weights: str = "bf16", mixed_tokens: int = 0) -> dict:
    """One (box, TP, batch): a row of :data:`CSV_COLUMNS`. ``mixed_tokens``: prompt tokens of other
    requests sharing each decode step (continuous batching), priced in compute and collectives."""
    cal = {**CALIBRATION, **(cal or {})}
    comp = step_compute(model, gpu, tp, batch, context, dtype, mode, cal, weights, mixed_tokens)
    sites = step_collectives(model, tp, batch + int(mixed_tokens), batch, dtype)
    price = comm.price(tp, mode) if tp > 1 else (lambda op, s: 0.0)
    comm_us = sum(price(s.op, s.size_bytes) for s in sites)
    step_us = comp["compute_us"] + comm_us
    w = int(weights_per_rank(model, tp, dtype)["total"] * weight_bytes_per_elem(weights, dtype) / dtype_bytes(dtype))
    kv_seq = kv_bytes_per_sequence_per_rank(model, tp, context, dtype)
    _, _, fit, max_seq = kv_budget(gpu.memory_bytes, mem_util, w, kv_seq)
    row = {
        "box": f"{gpu.key} + {comm.label}", "gpu": gpu.key, "comm": comm.label, "comm_kind": comm.kind,
        "comm_timing": comm.table.timing, "tp": tp, "batch": batch, "context": context, "mode": mode,
        "compute_ms": comp["compute_us"] / 1e3, "kernel_ms": comp["kernel_us"] / 1e3,
        "floor_ms": comp["floor_us"] / 1e3, "gaps_ms": comp["gap_us"] / 1e3, "comm_ms": comm_us / 1e3,
        "ms_per_token": step_us / 1e3, "tokens_s_per_user": 1e6 / step_us,
        "tokens_s_per_box": batch * 1e6 / step_us, "tokens_s_per_gpu": batch * 1e6 / step_us / tp,
        "comm_share_pct": 100.0 * comm_us / step_us, "collectives_per_step": len(sites),
        "prompt": prompt or "", "ttft_ms": "", "ttft_comm_ms": "",
        "weights_gb_per_rank": w / 1e9, "kv_gb_per_sequence_per_rank": kv_seq / 1e9,
        "kv_max_sequences": max_seq, "weights_fit": bool(fit),
        "note": "" if fit else f"weights ({w / 1e9:.1f} GB per rank) do not fit in {gpu.memory_gb} GB x {mem_util}",
    }
    if prompt:
        pre = prefill_compute(model, gpu, tp, prompt, dtype, "eager", cal, weights)
        pc = prefill_comm_us(model, tp, prompt, prompt, price, dtype=dtype) if tp > 1 else 0.0
        row["ttft_ms"] = (pre["compute_us"] + pc + step_us) / 1e3
        row["ttft_comm_ms"] = pc / 1e3
    return row


def predict_rows(model: ModelShape, boxes: list[tuple[GpuSpec, CommPrices]], tps, batches, context: int,
                 prompt: int | None = None, dtype: str = "bf16", mode: str = "graph", mem_util: float = 0.9,
                 cal: dict | None = None, weights: str = "bf16") -> tuple[list[dict], list[str]]:
    """Every (box, TP, batch) the comm input covers; (rows, notes on what was skipped)."""
    rows, notes = [], []
    for gpu, comm in boxes:
        for tp in tps:
            if not comm.covers(tp):
                notes.append(f"{comm.label}: no all_reduce rows at tp={tp} (it has tp={', '.join(map(str, comm.tps()))}); "
                             f"tp={tp} skipped for {gpu.key}")
                continue
            for batch in batches:
                rows.append(predict_point(model, gpu, comm, tp, batch, context, prompt, dtype, mode, mem_util, cal,
                                          weights))
    if not rows:
        raise UsageError("predict: no TP degree of --tp is covered by the --comm input(s): " + "; ".join(notes))
    return rows, notes


def _boxes(gpus: list, comms: list) -> list[tuple[GpuSpec, CommPrices]]:
    """Pair --gpu and --comm: the same number of each, or one of either used with every other."""
    if not gpus or not comms:
        raise UsageError("predict needs --gpu SKU and --comm reference:<profile> | DIR")
    if len(gpus) != len(comms) and 1 not in (len(gpus), len(comms)):
        raise UsageError(f"--gpu has {len(gpus)} entries and --comm {len(comms)}: give as many of each "
                         "(box by box), or one of either")
    n = max(len(gpus), len(comms))
    gs = [get_gpu(g) for g in (gpus if len(gpus) == n else gpus * n)]
    cache: dict[str, CommPrices] = {}
    cs = []
    for c in (comms if len(comms) == n else comms * n):
        if c not in cache:
            cache[c] = CommPrices(c)
        cs.append(cache[c])
    return list(zip(gs, cs))


def write_predict(out_dir: str, rows: list[dict], meta_extra: dict, columns: list[str] = CSV_COLUMNS) -> list[str]:
    """``predict.csv`` and ``meta.json`` (kind predicted, a label per column) into a new dir."""
    results.check_out_dir(out_dir, resume=False)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, PREDICT_CSV)
    results.write_table(path, columns, rows)      # floats to 6 significant digits, as every table
    results.write_meta(out_dir, results.provenance(
        "predict", "predicted", "per-token decode time on boxes not run here: GPU compute modelled from published "
        "specs, communication from each box's own numbers (commprof predict)", status="complete",
        hosts=["modelled: no box"], **meta_extra))
    return [os.path.join(out_dir, results.META_JSON), path]


def run(cfg: PredictConfig, console=None) -> int:
    """``commprof predict``: rows, files, console table and chart; the exit code."""
    if cfg.mode not in MODES:
        raise UsageError(f"--mode {shown(cfg.mode)}: use graph (CUDA graphs, as engines decode) or eager")
    if not (0.0 < float(cfg.mem_util) <= 1.0):
        raise UsageError(f"--mem-util {shown(cfg.mem_util)}: expected a fraction in (0, 1]")
    dtype_bytes(cfg.dtype)
    tps = _check_list(cfg.tps, "--tp", MAX_TP)
    batches = _check_list(cfg.batches, "--batch", MAX_BATCH)
    _check_list([cfg.context], "--context", MAX_CONTEXT)
    if cfg.prompt is not None:
        _check_list([cfg.prompt], "--prompt", MAX_CONTEXT)
    model = get_model(cfg.model)
    for tp in tps:
        check_tp(model, tp)
    boxes = _boxes(list(cfg.gpus), list(cfg.comms))
    if cfg.weights not in WEIGHT_DTYPES:
        raise UsageError(f"--weights {shown(cfg.weights)}: use one of {', '.join(WEIGHT_DTYPES)}")
    rows, notes = predict_rows(model, boxes, tps, batches, cfg.context, cfg.prompt, cfg.dtype, cfg.mode,
                               cfg.mem_util, cfg.calibration, cfg.weights)
    comms = {c.spec: c for _, c in boxes}
    notes += [n for c in comms.values() for n in c.notes]
    meta_extra = {
        "gpus": sorted({g.name for g, _ in boxes}), "model": model.to_dict(), "dtype": cfg.dtype, "weights": cfg.weights, "mode": cfg.mode,
        "context": cfg.context, "prompt": cfg.prompt, "mem_util": cfg.mem_util,
        "boxes": [{"box": f"{g.key} + {c.label}", "gpu": g.to_dict(), "comm": c.describe()} for g, c in boxes],
        "calibration": {**CALIBRATION, **cfg.calibration}, "calibration_source": CALIBRATION_SOURCE,
        "column_kinds": COLUMN_KINDS, "columns": COLUMN_DOCS, "notes": notes,
    }
    columns, extra_lines = CSV_COLUMNS, None
    if cfg.serve:       # the fourth account: scheduling, measured by commprof serve
        account = ServeAccount(cfg.serve)
        notes += add_serve_account(rows, account, cfg.prompt)
        columns = CSV_COLUMNS + SERVE_COLUMNS
        meta_extra.update(serve=account.describe, column_kinds={**COLUMN_KINDS, **SERVE_COLUMN_KINDS},
                          columns={**COLUMN_DOCS, **SERVE_COLUMN_DOCS})
        extra_lines = [serve_line(r) for r in rows]
    paths = []
    if cfg.out:
        paths = write_predict(cfg.out, rows, meta_extra, columns)
        if cfg.charts:
            paths.append(predict_chart(rows, os.path.join(cfg.out, PREDICT_CHART), results.read_meta(cfg.out)))

    def render(c):
        c = c or stdout_console(170)
        render_predict(rows, notes, model.name, c)
        for line in extra_lines or []:
            c.print(line, soft_wrap=True)

    emit({"rows": rows, **meta_extra}, cfg.as_json, render, paths, console, 170)
    return EXIT_OK
