"""What one ``commprof moe`` run measures (the config every rank receives): the model's MoE shape,
the EP degrees, token counts, routing skews and placements. Model layer: nothing but the standard
library; the routing itself is :mod:`commprof.analysis.moeroute`."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from commprof.model.runconfig import RunConfig

PLACEMENTS = ("contiguous", "rebalanced")
DTYPE = "bf16"
DTYPE_BYTES = 2


@dataclass
class MoeRunConfig(RunConfig):
    VERB = "moe"
    model: dict
    eps: list
    tokens: list
    skews: list            # list[analysis.moeroute.Skew]
    iters: int
    warmup: int
    rebalance: int | None  # redundant slots; None = ep per degree
    seed: int
    extra: dict = field(default_factory=dict)

    def redundant(self, ep: int) -> int:
        return ep if self.rebalance is None else self.rebalance

    def cells(self) -> list[tuple]:
        return [(ep, t, s, p) for ep in self.eps for t in self.tokens for s in range(len(self.skews))
                for p in PLACEMENTS]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["skews"] = [s.spec for s in self.skews]
        return d
