"""What one ``commprof trace`` run measures (the config every rank receives) and the order of its
runs. Model layer: no torch, nothing but the standard library."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from commprof.model.runconfig import RunConfig


@dataclass
class TraceRunConfig(RunConfig):
    VERB = "trace"
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
    phase: str = "decode"       # decode, prefill (a prompt in chunks) or mixed (chunks + decode tokens)
    prompt: int = 0             # prefill/mixed: the prompt's length in tokens
    chunk: int = 0              # prefill/mixed: prefill tokens per step (at most the prompt)
    comm_from: str | None = None  # --predict: the sweep dir (or modelled reference dir) of the box predicted
    repeat: int = 1             # --repeat: each run timed this many times, the repeats interleaved

    @property
    def steps(self) -> int:
        """Timed steps per run: ``tokens`` decode steps, or the ceil(prompt / chunk) chunk steps of
        one prompt's prefill."""
        if self.phase == "decode" or not self.chunk:
            return self.tokens
        return -(-self.prompt // self.chunk)

    @property
    def engine_context(self) -> int:
        """The tokens each cache holds: ``context`` for decode; the prompt for prefill and mixed
        (the prefill sequence attends over its whole prompt; the engine takes one context, so a
        mixed step's decode sequences hold as many)."""
        return self.context if self.phase == "decode" else self.prompt

    @property
    def layers_model(self) -> int:
        return int(self.model["layers"])

    @property
    def scaled(self) -> bool:
        return self.layers < self.layers_model

    def to_dict(self) -> dict:
        return asdict(self)


def repeat_count(cfg) -> int:
    """How many times each run is timed (``--repeat``; configs from before it ran once)."""
    return max(1, int(getattr(cfg, "repeat", 1) or 1))


def plan_runs(cfg: TraceRunConfig) -> list[tuple[int, int, str]]:
    """(tp, batch, mode) of every run, in order; a prefill runs no decode tokens (batch 0)."""
    batches = [0] if cfg.phase == "prefill" else cfg.batches
    return [(tp, b, m) for tp in cfg.tps for b in batches for m in cfg.modes]
