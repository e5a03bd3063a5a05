"""Message sizes of a sweep: derived from a model's decode step, powers of two, or a list."""
from __future__ import annotations

from dataclasses import dataclass

from commprof.model.errors import UsageError, shown, warn
from commprof.model.models import ModelShape
from commprof.model.units import human_bytes, limit_text, parse_bytes

# The largest payload a sweep measures: its send and receive buffers (2 x 64 GiB) still fit in
# one 141 GB GPU, and a larger size is a typo far more often than a plan.
MAX_MESSAGE_BYTES = 64 << 30


@dataclass(frozen=True)
class SizePoint:
    """One requested payload for one op (``size_bytes`` in the op's nccl-tests meaning)."""

    op: str
    size_bytes: int
    batch: int | None = None
    site: str = ""


# Which tensor of a decode step each op carries when sizes come from a model.
DECODE_SITE = {
    "all_reduce": ("hidden", "attn-out/mlp-out all-reduce: batch x hidden"),
    "all_gather": ("vocab", "logits all-gather: batch x vocab (gathered output)"),
    "reduce_scatter": ("hidden", "sequence-parallel reduce-scatter: batch x hidden"),
    "all_to_all": ("hidden", "MoE dispatch all-to-all: batch x hidden"),
    "broadcast": ("hidden", "activation broadcast: batch x hidden"),
}


def decode_sizes(ops, model: ModelShape, batches, dtype_bytes: int) -> list[SizePoint]:
    """Payloads of one decode step: all-reduce = batch x hidden x dtype bytes; all-gather =
    logits, batch x vocab x dtype bytes in total. UsageError when one is over 64 GiB."""
    points = []
    for op in ops:
        dim_name, site = DECODE_SITE[op]
        dim = model.hidden if dim_name == "hidden" else model.vocab
        for b in batches:
            size = b * dim * dtype_bytes
            if size > MAX_MESSAGE_BYTES:
                raise UsageError(f"--sizes decode: {op} at batch {b} is {b} x {dim_name} {dim} x {dtype_bytes} "
                                 f"bytes = {human_bytes(size)}, over the {limit_text(MAX_MESSAGE_BYTES)} "
                                 "limit per message; use a smaller --batch")
            points.append(SizePoint(op, size, b, site))
    return points


def prefill_sizes(ops, model: ModelShape, prompts, chunks, dtype_bytes: int) -> list[SizePoint]:
    """Payloads of prefill steps: for each prompt length P and chunk size K (no chunks: K = P), a
    step carries min(K, P) tokens, so all-reduce (and reduce-scatter, all-to-all, broadcast) =
    tokens x hidden x dtype bytes; all-gather = the logits of 1 token (the chunk's last), 1 x vocab
    x dtype bytes, whatever the prompt. A size met twice is listed once."""
    points, seen = [], set()
    for op in ops:
        dim_name, _ = DECODE_SITE[op]
        for p in prompts:
            for k in (chunks or [p]):
                tokens = min(k, p)
                if dim_name == "vocab":
                    size, rows, site = model.vocab * dtype_bytes, 1, "prefill logits all-gather: 1 token x vocab"
                else:
                    size, rows = tokens * model.hidden * dtype_bytes, tokens
                    site = f"prefill {op}: {tokens} tokens x hidden (prompt {p}, chunk {min(k, p)})"
                if size > MAX_MESSAGE_BYTES:
                    raise UsageError(f"--sizes prefill: {op} at {tokens} tokens is {human_bytes(size)}, over the "
                                     f"{limit_text(MAX_MESSAGE_BYTES)} limit per message; use a smaller --chunk")
                if (op, size) in seen:
                    continue
                seen.add((op, size))
                points.append(SizePoint(op, size, rows, site))
    return points


def parse_sizes(spec: str, ops, model: ModelShape | None, batches, dtype_bytes: int, prompts=None,
                chunks=None) -> list[SizePoint]:
    """``decode`` | ``prefill`` | ``pow2:MIN-MAX`` | ``SIZE,SIZE,...`` (binary suffixes: 4K = 4096 bytes).

    Every size is a whole number of bytes from 1 to 64 GiB (:data:`MAX_MESSAGE_BYTES`); an empty
    list element (``4K,,8K``) is refused; a size given twice is measured once, with a warning.
    ``prefill`` takes its prompt lengths from ``prompts`` and chunk sizes from ``chunks``
    (:func:`prefill_sizes`).
    """
    text = spec.strip()
    what = f"--sizes {shown(spec, 30)}"
    usage = "use decode, prefill, pow2:4K-64M or a list like 4K,64K,1M"
    if text.lower() == "decode":
        if model is None:
            raise UsageError("--sizes decode needs a model (--model)")
        return decode_sizes(ops, model, batches, dtype_bytes)
    if text.lower() == "prefill":
        if model is None:
            raise UsageError("--sizes prefill needs a model (--model)")
        if not prompts:
            raise UsageError("--sizes prefill needs --prompt N[,N...] (prompt lengths in tokens, e.g. 512,2048,8192)")
        return prefill_sizes(ops, model, prompts, chunks, dtype_bytes)
    if text.lower().startswith("pow2:"):
        lo_hi = text[5:].split("-")
        try:
            if len(lo_hi) != 2:
                raise ValueError("expected MIN-MAX")
            lo, hi = (parse_bytes(v, MAX_MESSAGE_BYTES) for v in lo_hi)
        except ValueError as e:
            raise UsageError(f"{what}: {e}; expected pow2:MIN-MAX, e.g. pow2:4K-64M") from None
        if lo > hi:
            raise UsageError(f"{what}: MIN is larger than MAX")
        sizes, s = [], lo
        while s <= hi:
            sizes.append(s)
            s *= 2
        return [SizePoint(op, s) for op in ops for s in sizes]
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise UsageError(f"{what}: empty; {usage}")
    sizes, seen = [], set()
    for i, p in enumerate(parts, start=1):
        if not p:
            raise UsageError(f"{what}: element {i} is empty (two commas in a row, or a comma at an end); {usage}")
        try:
            size = parse_bytes(p, MAX_MESSAGE_BYTES)
        except ValueError as e:
            raise UsageError(f"{what}: {e}; {usage}") from None
        if size in seen:
            warn(f"{what}: {human_bytes(size)} is given twice; it is measured once")
            continue
        seen.add(size)
        sizes.append(size)
    return [SizePoint(op, s) for op in ops for s in sizes]
