"""What one ``commprof trace`` run measures (the config every rank receives) and the order of its
runs. Model layer: no torch, nothing but the standard library."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .runconfig import RunConfig


@dataclass
class TraceConfig(RunConfig):
    model: dict
    tps: list[int]
    batches: list[int]
    context: int
    tokens: int
    warmup: int
    layers: int                 # layers actually run
    dtype: str = "bf16"
    modes: list[str] = field(default_factory=lambda: ["eager"])
    seed: int = 0
    memory: dict = field(default_factory=dict)

    @property
    def layers_model(self) -> int:
        return int(self.model["layers"])

    @property
    def scaled(self) -> bool:
        return self.layers < self.layers_model

    def to_dict(self) -> dict:
        return asdict(self)


def plan_runs(cfg: TraceConfig) -> list[tuple[int, int, str]]:
    return [(tp, b, m) for tp in cfg.tps for b in cfg.batches for m in cfg.modes]
