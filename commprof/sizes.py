"""Message sizes of a sweep: derived from a model's decode step, powers of two, or a list."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError
from .models import ModelShape
from .units import parse_bytes


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
    logits, batch x vocab x dtype bytes in total."""
    points = []
    for op in ops:
        dim_name, site = DECODE_SITE[op]
        dim = model.hidden if dim_name == "hidden" else model.vocab
        for b in batches:
            points.append(SizePoint(op, b * dim * dtype_bytes, b, site))
    return points


def parse_sizes(spec: str, ops, model: ModelShape | None, batches, dtype_bytes: int) -> list[SizePoint]:
    """``decode`` | ``pow2:MIN-MAX`` | ``SIZE,SIZE,...`` (binary suffixes: 4K = 4096 bytes)."""
    text = spec.strip()
    if text.lower() == "decode":
        if model is None:
            raise UsageError("--sizes decode needs a model (--model)")
        return decode_sizes(ops, model, batches, dtype_bytes)
    if text.lower().startswith("pow2:"):
        rng = text[5:]
        lo_hi = rng.split("-")
        try:
            if len(lo_hi) != 2:
                raise ValueError("expected MIN-MAX")
            lo, hi = parse_bytes(lo_hi[0]), parse_bytes(lo_hi[1])
        except ValueError as e:
            raise UsageError(f"--sizes '{spec}': {e}; expected pow2:MIN-MAX, e.g. pow2:4K-64M") from None
        if lo > hi:
            raise UsageError(f"--sizes '{spec}': MIN is larger than MAX")
        sizes, s = [], lo
        while s <= hi:
            sizes.append(s)
            s *= 2
        return [SizePoint(op, s) for op in ops for s in sizes]
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise UsageError(f"--sizes '{spec}': empty; use decode, pow2:4K-64M or a list like 4K,64K,1M")
    try:
        sizes = [parse_bytes(p) for p in parts]
    except ValueError as e:
        raise UsageError(f"--sizes '{spec}': {e}; use decode, pow2:4K-64M or a list like 4K,64K,1M") from None
    return [SizePoint(op, s) for op in ops for s in sizes]
