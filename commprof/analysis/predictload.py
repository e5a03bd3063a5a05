"""A server under load for ``commprof predict --concurrency N`` / ``--qps R`` with ``--isl/--osl``:
the batch the engine really decodes, the prompt tokens chunked into each decode step, and the two
per-token figures benchmarks publish, each named.

Continuous batching with chunked prefill (vLLM, SGLang, TensorRT-LLM): every step carries the
decode token of each running request and, up to ``--chunk`` tokens in all (the engine's
``max_num_batched_tokens``), pieces of waiting prompts. A request of ISL prompt and OSL output
tokens spends ``p`` steps in prefill (the last one gives its first token) and ``OSL - 1`` in
decode, so a share ``(OSL - 1) / (p + OSL - 1)`` of the requests in flight are decoding. With
``L`` requests in flight, per step (means):

* decode batch ``B = L x (OSL - 1) / (p + OSL - 1)``;
* prompt tokens ``m = L x ISL / (p + OSL - 1)`` (each request brings ISL tokens once per cycle);
* ``p = ceil(ISL / chunk)``, raised while ``m > chunk - B`` (the prompts share the step budget).

**Closed loop** (``--concurrency N``, e.g. ``benchmark_serving --max-concurrency`` or a fixed pool of
users): ``L = N``. **Open loop** (``--qps R``, Poisson arrivals): Little's law, ``L = R x E2E``,
solved with the step time by fixed-point iteration (``B = R x (OSL - 1) x T``, ``m = R x ISL x T``);
when no fixed point exists within the KV cache and the step budget, the box is over capacity and
the row says so (queueing is not modelled: continuous batching admits every request while the KV
cache holds it).

A step of ``B`` decode tokens and ``m`` prompt tokens costs ``T`` (predict's step model with
``mixed_tokens = m``, its context the mean ``ISL + OSL / 2``). Then:

* ``tpot_ms`` = T: the mean time per output token after the first, what a serving benchmark reports
  as TPOT (and its mean ITL: every decode step gives each running request one token);
* ``ttft_load_ms`` = p x T: the prompt's steps (no queue);
* ``e2e_ms`` = (p + OSL - 1) x T, and ``e2e_per_output_token_ms`` = e2e / OSL: what a latency benchmark
  reports as ms per token (``benchmark_latency``: the batch's end-to-end time / output tokens);
* ``requests_s`` = L / e2e, ``output_tokens_s`` = L x OSL / e2e.

Modelled from predict's step; standard library only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from commprof.analysis.stepmodel import MAX_BATCH, MAX_CONTEXT
from commprof.model.errors import UsageError, shown

LOAD_COLUMNS = ["load", "concurrency", "qps", "isl", "osl", "chunk", "requests_in_flight", "decode_batch",
                "prefill_tokens_per_step", "prefill_steps", "tpot_ms", "ttft_load_ms", "e2e_ms",
                "e2e_per_output_token_ms", "requests_s", "output_tokens_s", "load_note"]
LOAD_COLUMN_KINDS = {c: "predicted" for c in LOAD_COLUMNS}
LOAD_COLUMN_DOCS = {
    "requests_in_flight": "requests the engine holds at once: the concurrency (closed loop) or rate x e2e (Little's law)",
    "decode_batch": "sequences each step decodes: requests in flight x (OSL - 1) / (prefill steps + OSL - 1); the row's batch",
    "prefill_tokens_per_step": "prompt tokens of other requests chunked into each decode step (mean)",
    "prefill_steps": "steps one prompt's prefill takes: ceil(ISL / chunk), more while the prompts overrun the step budget",
    "tpot_ms": "serving benchmark's TPOT (= its mean ITL): one step of decode_batch + prefill_tokens_per_step tokens",
    "ttft_load_ms": "prefill_steps x the step (no queue)",
    "e2e_ms": "(prefill_steps + OSL - 1) x the step",
    "e2e_per_output_token_ms": "latency benchmark's per-token figure: e2e_ms / OSL",
    "requests_s": "requests_in_flight / e2e", "output_tokens_s": "requests_in_flight x OSL / e2e, per TP group",
    "load_note": "over capacity, or a batch the KV cache does not hold",
}

MAX_QPS = 1e6
MAX_ITER = 200


@dataclass(frozen=True)
class LoadSpec:
    """The validated load: closed-loop levels, open-loop rates and the request shape."""

    concurrency: tuple
    qps: tuple
    isl: int
    osl: int
    chunk: int

    def levels(self) -> list[tuple[str, float]]:
        return [("concurrency", float(n)) for n in self.concurrency] + [("qps", r) for r in self.qps]


def _whole(v, flag: str, hi: int) -> int:
    if isinstance(v, str) and v.strip().isascii() and v.strip().isdigit():     # from the command line
        v = int(v.strip())
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= hi:
        raise UsageError(f"{flag} {shown(v)}: expected a whole number from 1 to {hi:,}")
    return v


def load_spec(concurrency, qps, isl: int, osl: int, chunk: int) -> LoadSpec:
    """Validate ``--concurrency``, ``--qps``, ``--isl``, ``--osl`` and ``--chunk`` together."""
    conc = tuple(_whole(n, "--concurrency", MAX_BATCH) for n in (concurrency or []))
    rates = []
    for r in qps or []:
        try:
            x = float(str(r).strip())
        except ValueError:
            raise UsageError(f"--qps {shown(r)}: expected requests per second, e.g. 2 or 0.5") from None
        if not (math.isfinite(x) and 0 < x <= MAX_QPS):
            raise UsageError(f"--qps {shown(r)}: expected a rate above 0 and at most {MAX_QPS:g} requests/s")
        rates.append(x)
    if not conc and not rates:
        raise UsageError("predict's load needs --concurrency N or --qps R")
    return LoadSpec(conc, tuple(rates), _whole(isl, "--isl", MAX_CONTEXT), _whole(osl, "--osl", MAX_CONTEXT),
                    _whole(chunk, "--chunk", MAX_CONTEXT))


def split_in_flight(in_flight: float, spec: LoadSpec) -> tuple[int, int, int]:
    """(decode batch, prompt tokens per step, prefill steps per prompt) of ``in_flight`` requests."""
    isl, osl, chunk = spec.isl, spec.osl, spec.chunk
    p = max(1, math.ceil(isl / chunk))
    for _ in range(64):             # raise p while the prompts overrun the step's budget
        cycle = p + osl - 1
        b = in_flight * (osl - 1) / cycle
        m = in_flight * isl / cycle
        room = chunk - b
        if room <= 0 or m <= room + 1e-9:
            break
        p = max(p + 1, math.ceil(in_flight * isl / room) - osl + 1)
    cycle = p + osl - 1
    return max(1, round(in_flight * (osl - 1) / cycle)), round(in_flight * isl / cycle), p


def _figures(row: dict, in_flight: float, p: int, spec: LoadSpec) -> dict:
    t = row["ms_per_token"]
    e2e = (p + spec.osl - 1) * t
    return {"requests_in_flight": in_flight, "prefill_steps": p, "tpot_ms": t, "ttft_load_ms": p * t,
            "e2e_ms": e2e, "e2e_per_output_token_ms": e2e / spec.osl, "requests_s": in_flight * 1e3 / e2e,
            "output_tokens_s": in_flight * spec.osl * 1e3 / e2e}


def load_point(step_row, spec: LoadSpec, kind: str, level: float) -> dict:
    """One load level on one box and TP: ``step_row(batch, mixed_tokens, context) -> row`` prices a
    step (predict_point); returns that row with :data:`LOAD_COLUMNS`."""
    context = spec.isl + spec.osl // 2
    base = {"load": f"{kind} {level:g}", "concurrency": int(level) if kind == "concurrency" else "",
            "qps": level if kind == "qps" else "", "isl": spec.isl, "osl": spec.osl, "chunk": spec.chunk}
    note = ""
    if kind == "concurrency":
        in_flight = level
        b, m, p = split_in_flight(in_flight, spec)
        row = step_row(b, m, context)
    else:
        row = step_row(1, 0, context)
        t = row["ms_per_token"] / 1e3
        p = max(1, math.ceil(spec.isl / spec.chunk))
        converged, prev = False, None
        for _ in range(MAX_ITER):
            in_flight = level * (p + spec.osl - 1) * t            # Little's law: L = R x e2e
            b, m, p = split_in_flight(in_flight, spec)
            if b > MAX_BATCH:
                break
            if (b, m, p) == prev:                               # the same step again: a fixed point
                converged = True
                break
            prev = (b, m, p)
            row = step_row(b, m, context)
            t_new = row["ms_per_token"] / 1e3
            if abs(t_new - t) <= 1e-4 * t:
                converged, t = True, t_new
                break
            t = 0.5 * (t + t_new)
        in_flight = level * (p + spec.osl - 1) * row["ms_per_token"] / 1e3
        if not converged:
            note = (f"over capacity: at {level:g} requests/s the step time grows without a fixed point (requests "
                    "pile up); the row is the last iterate")
    if p > math.ceil(spec.isl / spec.chunk):
        note = (note + "; " if note else "") + (f"the prompts overrun the {spec.chunk}-token steps: each prefill "
                                                f"takes {p} steps")
    kv = row.get("kv_max_sequences")
    if isinstance(kv, (int, float)) and row.get("weights_fit") and in_flight > kv:
        note = (note + "; " if note else "") + (f"{in_flight:.0f} requests in flight but the KV cache holds "
                                                f"{kv} sequences of {context} tokens: the engine would queue the rest")
    return {**row, **base, "decode_batch": b, "prefill_tokens_per_step": m, **_figures(row, in_flight, p, spec),
            "load_note": note}


def load_rows(boxes: list, tps: list, spec: LoadSpec, step_row_of) -> tuple[list[dict], list[str]]:
    """Every (box, TP, load level): ``step_row_of(gpu, comm, tp)`` returns that box's
    ``step_row(batch, mixed_tokens, context)``; TP degrees the comm input lacks are skipped."""
    rows, notes = [], []
    for gpu, comm in boxes:
        for tp in tps:
            if not comm.covers(tp):
                notes.append(f"{comm.label}: no all_reduce rows at tp={tp}; tp={tp} skipped for {gpu.key}")
                continue
            fn = step_row_of(gpu, comm, tp)
            for kind, level in spec.levels():
                rows.append(load_point(fn, spec, kind, level))
    if not rows:
        raise UsageError("predict: no TP degree of --tp is covered by the --comm input(s): " + "; ".join(notes))
    notes.append(f"load: ISL {spec.isl}, OSL {spec.osl}, at most {spec.chunk} tokens a step (chunked prefill); the "
                 "batch each row decodes is the load's (--batch is not used); tpot_ms is a serving benchmark's "
                 "TPOT/ITL, e2e_per_output_token_ms a latency benchmark's end-to-end / output tokens")
    return rows, notes


def load_line(row: dict) -> str:
    """One line per load row, each figure named."""
    s = (f"{row['gpu']} TP={row['tp']} {row['load']} (ISL {row['isl']}, OSL {row['osl']}): decode batch "
         f"{row['decode_batch']} + {row['prefill_tokens_per_step']} prompt tokens a step; TPOT/ITL (serving benchmark) "
         f"{row['tpot_ms']:.2f} ms, end-to-end / output tokens (latency benchmark) {row['e2e_per_output_token_ms']:.2f} ms, "
         f"TTFT {row['ttft_load_ms']:.1f} ms, {row['output_tokens_s']:.0f} output tokens/s")
    return s + (f" [{row['load_note']}]" if row.get("load_note") else "")
