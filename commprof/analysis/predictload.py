"""A server under load for ``commprof predict --concurrency N`` / ``--qps R`` with ``--isl/--osl``:
the batch the engine really decodes, the prompt tokens chunked into each decode step, and the two
per-token figures benchmarks publish, each named.

Continuous batching with chunked prefill (vLLM, SGLang, TensorRT-LLM): every step carries the
decode token of each running request and, up to ``--chunk`` tokens in all (the engine's
``max_num_batched_tokens``), pieces of waiting prompts. A request of ISL prompt and OSL output
tokens spends ``p`` steps in prefill (the last one gives its first token) and ``OSL - 1`` in
decode, so with ``L`` requests in flight (means; :func:`split_in_flight`):

* decode batch ``B = L x (OSL - 1) / (p + OSL - 1)`` (the row's batch);
* prompt tokens per step ``m = L x ISL / (p + OSL - 1)``; a step that carries prefill takes
  ``c = min(ISL, chunk - B)`` of them, ``p = ceil(ISL / c)``, raised while ``m > chunk - B`` (the
  prompts then share the room the decode batch leaves);
* a decoding request meets the others' prompts in a share ``f = min(1, m (L - 1) / L / c)`` of its
  steps (alone, ``L = 1``, it meets none).

**Closed loop** (``--concurrency N``, e.g. ``benchmark_serving --max-concurrency`` or a fixed pool of
users): ``L = N``. **Open loop** (``--qps R``, Poisson arrivals): Little's law, ``L = R x E2E``,
solved with the step times by a damped fixed-point iteration. ``L`` is capped by the sequences the
KV cache holds: past it (or with no fixed point) the box is over capacity, requests queue without
bound, and the row is the box at that limit with a note saying what it serves (queueing itself is
not modelled).

Two steps are priced by predict's step model (context the mean ``ISL + OSL / 2``): a decode step
``T_d`` of ``B`` tokens and the step that carries a prompt chunk, ``T_m``. How an engine runs that
chunk is its scheduler's policy (``--prefill-steps``):

* ``mixed`` (vLLM's chunked prefill, TensorRT-LLM's in-flight batching): the chunk rides in the decode
  step, one forward of ``B`` decode and ``c`` prompt tokens (``mixed_tokens``), under the step budget
  (``c = min(ISL, chunk - B)``);
* ``separate`` (SGLang's default: ``--enable-mixed-chunk`` is off, and only decode batches are CUDA-graph
  captured, https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py): the chunk
  is a forward of its own, eager, and the running requests wait for it: ``T_m = T_d + T_p(c)``, ``T_p``
  the eager prefill of ``c = min(ISL, chunk)`` tokens with its collectives (predict's TTFT prefill), and
  a prompt's TTFT ``p x T_p``. SGLang sizes its chunk by GPU memory (``chunked_prefill_size``: 2048 under
  35 GB, 8192 under 160 GB, else 16384; :func:`sglang_chunk`).

Then:

* ``tpot_ms`` = ``(1 - f) T_d + f T_m``: the mean time per output token after the first, what a serving
  benchmark reports as TPOT (and its mean ITL); the row's step columns are that same blend;
* ``ttft_load_ms`` = ``p x T_m`` (mixed) or ``p x T_p`` (separate): the prompt's steps (no queue);
* ``e2e_ms`` = TTFT + (OSL - 1) x TPOT, and ``e2e_per_output_token_ms`` = e2e / OSL: what a latency
  benchmark reports as ms per token (``benchmark_latency``: end-to-end time / output tokens);
* ``requests_s`` = L / e2e, ``output_tokens_s`` = L x OSL / e2e.

Modelled from predict's step; standard library only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from commprof.analysis.stepmodel import MAX_BATCH, MAX_CONTEXT
from commprof.model.errors import UsageError, shown

LOAD_COLUMNS = ["load", "concurrency", "qps", "isl", "osl", "chunk", "prefill_steps_policy", "requests_in_flight",
                "decode_batch", "prefill_tokens_per_step", "prefill_steps", "tpot_ms", "ttft_load_ms", "e2e_ms",
                "e2e_per_output_token_ms", "requests_s", "output_tokens_s", "load_note"]
LOAD_COLUMN_KINDS = {c: "predicted" for c in LOAD_COLUMNS}
LOAD_COLUMN_DOCS = {
    "requests_in_flight": "requests the engine holds at once: the concurrency (closed loop) or rate x e2e (Little's law)",
    "decode_batch": "sequences each step decodes: requests in flight x (OSL - 1) / (prefill steps + OSL - 1); the row's batch",
    "chunk": "--chunk: tokens one step carries at most (max_num_batched_tokens)",
    "prefill_steps_policy": "--prefill-steps: mixed (a prompt chunk rides in the decode step: vLLM, TensorRT-LLM) or "
                            "separate (a prompt chunk is its own eager forward, the running requests wait: SGLang's default)",
    "prefill_tokens_per_step": "prompt tokens of other requests chunked into each decode step (mean)",
    "prefill_steps": "steps one prompt's prefill takes: ceil(ISL / chunk), more while the prompts overrun the step budget",
    "tpot_ms": "serving benchmark's TPOT (= its mean ITL): decode steps and steps carrying others' prompt chunks, blended",
    "ttft_load_ms": "prefill_steps x the step carrying a prompt chunk (mixed) or x the prefill forward (separate); no queue",
    "e2e_ms": "ttft_load_ms + (OSL - 1) x tpot_ms",
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
    prefill: str = "mixed"      # --prefill-steps: PREFILL_POLICIES

    def levels(self) -> list[tuple[str, float]]:
        return [("concurrency", float(n)) for n in self.concurrency] + [("qps", r) for r in self.qps]


def _whole(v, flag: str, hi: int) -> int:
    if isinstance(v, str) and v.strip().isascii() and v.strip().isdigit():     # from the command line
        v = int(v.strip())
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= hi:
        raise UsageError(f"{flag} {shown(v)}: expected a whole number from 1 to {hi:,}")
    return v


#: ``--prefill-steps``: how the engine runs a waiting prompt's chunk (module docstring).
PREFILL_POLICIES = ("mixed", "separate")


def sglang_chunk(memory_gb: float) -> int:
    """SGLang's default ``chunked_prefill_size`` on a GPU of ``memory_gb``: 2048 under 35 GB, 8192 under
    160 GB, else 16384 (server_args.py, https://github.com/sgl-project/sglang)."""
    return 2048 if memory_gb < 35 else 8192 if memory_gb < 160 else 16384


def load_spec(concurrency, qps, isl: int, osl: int, chunk: int, prefill: str = "mixed") -> LoadSpec:
    """Validate ``--concurrency``, ``--qps``, ``--isl``, ``--osl``, ``--chunk`` and ``--prefill-steps`` together."""
    if prefill not in PREFILL_POLICIES:
        raise UsageError(f"--prefill-steps {shown(prefill)}: use mixed (vLLM, TensorRT-LLM) or separate (SGLang)")
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
                    _whole(chunk, "--chunk", MAX_CONTEXT), prefill)


@dataclass(frozen=True)
class Split:
    """What ``L`` requests in flight mean per step (means; see the module)."""

    in_flight: float
    decode_batch: int          # B
    prompt_tokens: int         # m: prompt tokens per step, over all steps
    chunk_tokens: int          # c: prompt tokens a step carrying prefill takes, min(ISL, chunk - B)
    prefill_steps: int         # p: steps one prompt's prefill takes
    mixed_share: float         # f: share of a decoding request's steps that carry others' prompts


def split_in_flight(in_flight: float, spec: LoadSpec) -> Split:
    """``in_flight`` requests as decode batch, prompt tokens and prefill steps (module docstring):
    ``B = L (OSL-1) / (p + OSL - 1)``, ``m = L ISL / (p + OSL - 1)``, ``c = min(ISL, chunk - B)``,
    ``p = ceil(ISL / c)``, raised while ``m > chunk - B``; ``f = min(1, m (L-1)/L / c)``. Under the
    ``separate`` policy a prefill forward has the whole ``chunk`` to itself (``chunk`` in place of ``chunk - B``)."""
    isl, osl, chunk = spec.isl, spec.osl, spec.chunk
    mixed = spec.prefill == "mixed"     # separate: a prefill forward has the whole budget to itself
    p = max(1, math.ceil(isl / chunk))
    for _ in range(64):             # the least p whose prompts fit the room the decode batch leaves
        b = max(1, round(in_flight * (osl - 1) / (p + osl - 1)))
        room = max(1, chunk - b) if mixed else chunk
        p_new = max(math.ceil(isl / min(isl, room)), math.ceil(in_flight * isl / room) - osl + 1)
        if p_new <= p:
            break
        p = p_new
    cycle = p + osl - 1
    b = max(1, round(in_flight * (osl - 1) / cycle))
    m = in_flight * isl / cycle
    c = max(1, min(isl, chunk - b if mixed else chunk))
    others = m * (in_flight - 1) / in_flight if in_flight > 1 else 0.0
    return Split(in_flight, b, round(m), c, p, min(1.0, others / c))


#: The step columns blended over a decoding request's pure decode and mixed steps.
_STEP_FIELDS = ("compute_ms", "kernel_ms", "floor_ms", "gaps_ms", "comm_ms", "ms_per_token")


def _blend(dec: dict, mixed: dict, f: float) -> dict:
    out = {**dec}
    for k in _STEP_FIELDS:
        out[k] = (1.0 - f) * dec[k] + f * mixed[k]
    t_us = out["ms_per_token"] * 1e3
    out.update(tokens_s_per_user=1e6 / t_us, tokens_s_per_box=dec["batch"] * 1e6 / t_us,
               tokens_s_per_gpu=dec["batch"] * 1e6 / t_us / dec["tp"], comm_share_pct=100.0 * out["comm_ms"] / out["ms_per_token"])
    return out


def carrying_step(step_row, sp: Split, spec: LoadSpec, context: int) -> tuple[dict, float]:
    """(the step that carries a prompt chunk, as a decoding request meets it; the prefill's share of it,
    ms): mixed, one forward of ``B`` decode and ``c`` prompt tokens; separate, the decode step plus the
    eager prefill forward of ``c`` tokens that the running requests wait for
    (``step_row(B, 0, ctx, prompt=c)``: its ``prefill_ms``, ``ttft_comm_ms`` of it collectives)."""
    if spec.prefill == "mixed":
        mixed = step_row(sp.decode_batch, sp.chunk_tokens, context)
        return mixed, mixed["ms_per_token"]
    r = step_row(sp.decode_batch, 0, context, prompt=sp.chunk_tokens)
    pre, pre_comm = r["prefill_ms"], r["ttft_comm_ms"]
    out = {**r, "ms_per_token": r["ms_per_token"] + pre, "comm_ms": r["comm_ms"] + pre_comm,
           "compute_ms": r["compute_ms"] + pre - pre_comm, "kernel_ms": r["kernel_ms"] + pre - pre_comm}
    return out, pre


def evaluate(step_row, sp: Split, spec: LoadSpec, context: int) -> tuple[dict, dict]:
    """(the row a decoding request sees: pure decode and chunk-carrying steps blended by ``f``, the
    load figures): TPOT the blended step, TTFT ``p`` prompt steps, e2e TTFT + (OSL - 1) TPOT."""
    dec = step_row(sp.decode_batch, 0, context)
    mixed, prompt_ms = carrying_step(step_row, sp, spec, context)
    row = _blend(dec, mixed, sp.mixed_share)
    tpot, ttft = row["ms_per_token"], sp.prefill_steps * prompt_ms
    e2e = ttft + (spec.osl - 1) * tpot
    return row, {"requests_in_flight": sp.in_flight, "decode_batch": sp.decode_batch,
                 "prefill_tokens_per_step": sp.prompt_tokens, "prefill_steps": sp.prefill_steps,
                 "tpot_ms": tpot, "ttft_load_ms": ttft, "e2e_ms": e2e, "e2e_per_output_token_ms": e2e / spec.osl,
                 "requests_s": sp.in_flight * 1e3 / e2e, "output_tokens_s": sp.in_flight * spec.osl * 1e3 / e2e}


def load_point(step_row, spec: LoadSpec, kind: str, level: float) -> dict:
    """One load level on one box and TP: ``step_row(batch, mixed_tokens, context) -> row`` prices a
    step (predict_point); returns the blended row with :data:`LOAD_COLUMNS`."""
    context = spec.isl + spec.osl // 2
    base = {"load": f"{kind} {level:g}", "concurrency": int(level) if kind == "concurrency" else "",
            "qps": level if kind == "qps" else "", "isl": spec.isl, "osl": spec.osl, "chunk": spec.chunk,
            "prefill_steps_policy": spec.prefill}
    first = step_row(1, 0, context)
    kv = first.get("kv_max_sequences") if first.get("weights_fit") else None
    cap = float(min(kv, MAX_BATCH)) if isinstance(kv, (int, float)) and kv >= 1 else float(MAX_BATCH)
    notes = []
    if kind == "concurrency":
        in_flight = min(level, cap)
        if level > cap:
            notes.append(f"{level:g} users but the KV cache holds {cap:.0f} sequences of {context} tokens: "
                         "the rest wait in the engine's queue (not modelled)")
        row, fig = evaluate(step_row, split_in_flight(in_flight, spec), spec, context)
    else:
        in_flight, converged, over = level * (spec.isl / spec.chunk + spec.osl) * first["ms_per_token"] / 1e3, False, False
        prev = None
        for _ in range(MAX_ITER):
            sp = split_in_flight(max(in_flight, 1e-9), spec)
            row, fig = evaluate(step_row, sp, spec, context)
            new = level * fig["e2e_ms"] / 1e3              # Little's law: L = R x e2e
            if new > cap:
                over = True
                break
            key = (sp.decode_batch, sp.chunk_tokens, sp.prefill_steps, sp.prompt_tokens)
            if abs(new - in_flight) <= 1e-3 * max(in_flight, 1.0) or key == prev:
                converged, in_flight = True, new
                break
            prev, in_flight = key, 0.5 * (in_flight + new)
        if over or not converged:
            row, fig = evaluate(step_row, split_in_flight(cap, spec), spec, context)
            notes.append(f"over capacity: {level:g} requests/s is more than the box serves at this shape "
                         f"(about {fig['requests_s']:.3g} requests/s with {cap:.0f} requests in flight"
                         f"{', the KV cache full' if cap == kv else ''}); requests queue without bound, the row "
                         "is the box at that limit")
        else:
            fig["requests_in_flight"] = in_flight
    if fig["prefill_steps"] > math.ceil(spec.isl / spec.chunk) and fig["prefill_steps"] > 1:
        notes.append(f"each prompt's prefill takes {fig['prefill_steps']} steps (the decode batch leaves "
                     f"{max(1, spec.chunk - fig['decode_batch'])} of the {spec.chunk} tokens a step)")
    return {**row, **base, **fig, "load_note": "; ".join(notes)}


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
    how = ("prompt chunks ride in the decode steps" if spec.prefill == "mixed" else
           "each prompt chunk is its own eager forward and the running requests wait for it")
    notes.append(f"load: ISL {spec.isl}, OSL {spec.osl}, at most {spec.chunk} tokens a step (chunked prefill; {how}); the "
                 "batch each row decodes is the load's (--batch is not used); tpot_ms is a serving benchmark's "
                 "TPOT/ITL, e2e_per_output_token_ms a latency benchmark's end-to-end / output tokens")
    if spec.prefill == "separate":      # SGLang sizes its own chunk by GPU memory: say where --chunk differs
        for gpu in dict.fromkeys(g for g, _ in boxes):
            own = sglang_chunk(gpu.memory_gb)
            if own != spec.chunk:
                notes.append(f"{gpu.key}: SGLang's default chunk on a GPU of {gpu.memory_gb:g} GB is {own} tokens "
                             f"(chunked_prefill_size), {spec.chunk} priced; give --chunk {own} to match it")
    return rows, notes


def load_line(row: dict) -> str:
    """One line per load row, each figure named."""
    s = (f"{row['gpu']} TP={row['tp']} {row['load']} (ISL {row['isl']}, OSL {row['osl']}): decode batch "
         f"{row['decode_batch']} + {row['prefill_tokens_per_step']} prompt tokens a step"
         f"{' (in prefill forwards of their own)' if row.get('prefill_steps_policy') == 'separate' else ''}; TPOT/ITL (serving benchmark) "
         f"{row['tpot_ms']:.2f} ms, end-to-end / output tokens (latency benchmark) {row['e2e_per_output_token_ms']:.2f} ms, "
         f"TTFT {row['ttft_load_ms']:.1f} ms, {row['output_tokens_s']:.0f} output tokens/s")
    return s + (f"; note: {row['load_note']}" if row.get("load_note") else "")
