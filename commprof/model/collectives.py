"""The one table of collectives: sizes, bandwidth factors, how to run them, what they must return.

Each op is ONE entry of :data:`COLLECTIVES` (as nccl-tests keeps one file per collective with its
formula beside it): its buffer layout, how it binds to ``torch.distributed``, the exact result
the correctness check expects, and its busbw factor. Adding an op is adding one entry.

Size convention (nccl-tests ``doc/PERFORMANCE.md``): ``size_bytes`` is the larger of one rank's send
and receive buffers:

========================  =============================  ===================
op                        size_bytes is                  busbw factor (n)
========================  =============================  ===================
all_reduce                one rank's buffer              2(n-1)/n
all_gather                the gathered output (total)    (n-1)/n
reduce_scatter            the scattered input (total)    (n-1)/n
all_to_all                one rank's send buffer         (n-1)/n
broadcast                 the buffer                     1
========================  =============================  ===================

``algbw_gbps = size_bytes / latency / 1e9`` and ``busbw_gbps = algbw_gbps * factor`` (GB = 1e9 B).
Sizes that do not split evenly over n ranks are rounded down to a multiple of n elements, as
nccl-tests does; the row records the size actually sent.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Layout:
    """Buffers of one rank for one call."""

    size_bytes: int       # nccl-tests "size" after rounding
    in_numel: int
    out_numel: int        # 0 = in-place (the input buffer is the output)


@dataclass(frozen=True)
class Collective:
    """One collective: everything the sweep, the tracer and the cost model need to know about it.

    The per-op parts are plain functions held by the entry; torch arrives as an argument
    (``dist`` / ``torch``) so that building the table, and ``import commprof``, never need torch.
    """

    name: str
    size_meaning: str     # what ``size_bytes`` is, in nccl-tests' words
    split: bool           # size is a total split into n equal parts: rounded to n elements
    # (numel, n) -> one rank's (in_numel, out_numel); numel = size in elements; out 0 = in place
    numels: Callable[[int, int], tuple[int, int]]
    busbw_formula: str    # nccl-tests' factor as written in doc/PERFORMANCE.md
    factor: Callable[[int], float]        # n -> busbw / algbw, the formula above
    # (dist, inp, out, group, root_global_rank) -> zero-argument callable issuing the op once
    call: Callable[[Any, Any, Any, Any, int], Callable[[], Any]]
    # (torch, every member's input, group_rank) -> the exact result that member must hold
    reference: Callable[[Any, list, int], Any]

    def busbw_factor(self, n: int) -> float:
        """busbw / algbw for ``n`` ranks (nccl-tests' definition, ``busbw_formula``)."""
        return self.factor(n)

    def layout(self, size_bytes: int, n: int, elem_bytes: int) -> Layout:
        """One rank's buffers for a ``size_bytes`` op (nccl-tests' meaning) over ``n`` ranks."""
        numel = max(size_bytes // elem_bytes, 1)
        if self.split:
            numel = max(numel // n, 1) * n
        in_numel, out_numel = self.numels(numel, n)
        return Layout(numel * elem_bytes, in_numel, out_numel)

    def bandwidth_gbps(self, size_bytes: int, latency_us: float, n: int) -> tuple[float, float]:
        """(algbw, busbw) in GB/s for one op of ``size_bytes`` taking ``latency_us``."""
        if latency_us <= 0:
            return float("nan"), float("nan")
        algbw = size_bytes / (latency_us * 1e-6) / 1e9
        return algbw, algbw * self.busbw_factor(n)

    # --- running and checking (torch is imported lazily: `import commprof` must not need it) ---

    def bind(self, inp, out, group, root_global_rank: int):
        """A zero-argument callable issuing the collective once (blocking as torch defines it).

        Bound once per cell so the timed call has no dispatch of its own between the two clock
        reads: one partial, straight into torch.distributed.
        """
        import torch.distributed as dist

        return self.call(dist, inp, out, group, root_global_rank)

    def expected(self, inputs: list, group_rank: int):
        """The exact result group member ``group_rank`` must hold, from every member's input."""
        import torch

        return self.reference(torch, inputs, group_rank)


def all_gather_fn(dist):
    """torch 2.13 renamed all_gather_into_tensor to all_gather_single (the old name warns)."""
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def reduce_scatter_fn(dist):
    """torch 2.13 renamed reduce_scatter_tensor to reduce_scatter_single (the old name warns)."""
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _table(*entries: Collective) -> dict[str, Collective]:
    table = {c.name: c for c in entries}
    if len(table) != len(entries):
        raise AssertionError("two collectives share a name")
    return table


COLLECTIVES: dict[str, Collective] = _table(
    Collective(
        "all_reduce", "one rank's buffer", split=False,
        numels=lambda numel, n: (numel, 0),                            # in place
        busbw_formula="2(n-1)/n", factor=lambda n: 2 * (n - 1) / n,
        call=lambda dist, inp, out, group, root: partial(dist.all_reduce, inp, group=group),
        reference=lambda torch, xs, r: torch.stack(xs).sum(0),
    ),
    Collective(
        "all_gather", "the gathered output", split=True,
        numels=lambda numel, n: (numel // n, numel),                   # send one share, receive all
        busbw_formula="(n-1)/n", factor=lambda n: (n - 1) / n,
        call=lambda dist, inp, out, group, root: partial(all_gather_fn(dist), out, inp, group=group),
        reference=lambda torch, xs, r: torch.cat(xs),
    ),
    Collective(
        "reduce_scatter", "the scattered input", split=True,
        numels=lambda numel, n: (numel, numel // n),                   # send all, receive one share
        busbw_formula="(n-1)/n", factor=lambda n: (n - 1) / n,
        call=lambda dist, inp, out, group, root: partial(reduce_scatter_fn(dist), out, inp, group=group),
        reference=lambda torch, xs, r: torch.stack(xs).sum(0).chunk(len(xs))[r].clone(),
    ),
    Collective(
        "all_to_all", "one rank's send buffer", split=True,
        numels=lambda numel, n: (numel, numel),                        # share i goes to rank i
        busbw_formula="(n-1)/n", factor=lambda n: (n - 1) / n,
        call=lambda dist, inp, out, group, root: partial(dist.all_to_all_single, out, inp, group=group),
        reference=lambda torch, xs, r: torch.cat([x.chunk(len(xs))[r] for x in xs]),
    ),
    Collective(
        "broadcast", "the buffer", split=False,
        numels=lambda numel, n: (numel, 0),                            # in place, from the root
        busbw_formula="1", factor=lambda n: 1.0,
        call=lambda dist, inp, out, group, root: partial(dist.broadcast, inp, src=root, group=group),
        reference=lambda torch, xs, r: xs[0].clone(),
    ),
)

DEFAULT_OPS = ("all_reduce", "all_gather")


def check_input(group_rank: int, numel: int, dtype):
    """Deterministic per-rank data whose reductions are exact in bf16/fp16/fp32.

    Values are small integers 0..3 that differ by rank and position, so a sum over up to 85 ranks
    stays an exactly representable integer in bf16 (8-bit mantissa) and a misplaced or missing
    contribution changes the result.
    """
    import torch

    idx = torch.arange(numel, dtype=torch.int64)
    return ((idx + 3 * group_rank + 1) % 4).to(dtype)
