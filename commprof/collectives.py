"""The one table of collectives: sizes, bandwidth factors, how to run them, what they must return.

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
from typing import Callable

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Layout:
    """Buffers of one rank for one call."""

    size_bytes: int       # nccl-tests "size" after rounding
    in_numel: int
    out_numel: int        # 0 = in-place (the input buffer is the output)


@dataclass(frozen=True)
class Collective:
    name: str
    size_meaning: str
    _factor: Callable[[int], float]
    _split: bool          # size is a total split into n equal parts

    def busbw_factor(self, n: int) -> float:
        return self._factor(n)

    def layout(self, size_bytes: int, n: int, elem_bytes: int) -> Layout:
        numel = max(size_bytes // elem_bytes, 1)
        if self._split:
            numel = max(numel // n, 1) * n
        if self.name == "all_reduce" or self.name == "broadcast":
            return Layout(numel * elem_bytes, numel, 0)
        if self.name == "all_gather":
            return Layout(numel * elem_bytes, numel // n, numel)
        if self.name == "reduce_scatter":
            return Layout(numel * elem_bytes, numel, numel // n)
        if self.name == "all_to_all":
            return Layout(numel * elem_bytes, numel, numel)
        raise AssertionError(self.name)

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
        import functools

        import torch.distributed as dist

        if self.name == "all_reduce":
            return functools.partial(dist.all_reduce, inp, group=group)
        if self.name == "all_gather":
            return functools.partial(all_gather_fn(dist), out, inp, group=group)
        if self.name == "reduce_scatter":
            return functools.partial(reduce_scatter_fn(dist), out, inp, group=group)
        if self.name == "all_to_all":
            return functools.partial(dist.all_to_all_single, out, inp, group=group)
        if self.name == "broadcast":
            return functools.partial(dist.broadcast, inp, src=root_global_rank, group=group)
        raise AssertionError(self.name)

    def expected(self, inputs: list, group_rank: int):
        """The exact result group member ``group_rank`` must hold, from every member's input."""
        import torch

        n = len(inputs)
        if self.name == "all_reduce":
            return torch.stack(inputs).sum(0)
        if self.name == "broadcast":
            return inputs[0].clone()
        if self.name == "all_gather":
            return torch.cat(inputs)
        if self.name == "reduce_scatter":
            return torch.stack(inputs).sum(0).chunk(n)[group_rank].clone()
        if self.name == "all_to_all":
            return torch.cat([x.chunk(n)[group_rank] for x in inputs])
        raise AssertionError(self.name)


def all_gather_fn(dist):
    """torch 2.13 renamed all_gather_into_tensor to all_gather_single (the old name warns)."""
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def reduce_scatter_fn(dist):
    """torch 2.13 renamed reduce_scatter_tensor to reduce_scatter_single (the old name warns)."""
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


COLLECTIVES: dict[str, Collective] = {c.name: c for c in [
    Collective("all_reduce", "one rank's buffer", lambda n: 2 * (n - 1) / n, False),
    Collective("all_gather", "gathered output, all ranks", lambda n: (n - 1) / n, True),
    Collective("reduce_scatter", "scattered input, all ranks", lambda n: (n - 1) / n, True),
    Collective("all_to_all", "one rank's send buffer", lambda n: (n - 1) / n, True),
    Collective("broadcast", "the buffer", lambda n: 1.0, False),
]}

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
