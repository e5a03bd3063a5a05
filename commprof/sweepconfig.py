"""What a sweep will run: its configuration and the ordered list of cells every rank walks."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .collectives import COLLECTIVES, DTYPE_BYTES
from .sizes import SizePoint
from .units import human_bytes


@dataclass
class SweepConfig:
    ops: list[str]
    tps: list[int]
    points: list[SizePoint]
    dtype: str = "bf16"
    modes: list[str] = field(default_factory=lambda: ["eager"])
    iters: int = 50
    warmup: int = 5
    backend: str = "gloo"
    backend_reason: str = ""
    concurrent: bool = False
    timeout_s: float = 120.0
    out_dir: str = ""
    resume: bool = False
    sizes_spec: str = "decode"
    model: dict | None = None
    batches: list[int] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)
    world_size: int = 0
    launch: str = "local"            # "local" (commprof starts the ranks) or "torchrun"
    progress: bool = False

    def to_dict(self) -> dict:
        d = asdict(self)
        d["points"] = [asdict(p) for p in self.points]
        return d


@dataclass(frozen=True)
class Cell:
    """One measurement: an op at one size, one TP degree, one timing mode."""

    op: str
    tp: int
    size_bytes: int        # after rounding to the TP degree (see collectives.Layout)
    in_numel: int
    out_numel: int
    mode: str
    batch: int | None
    site: str

    @property
    def key(self) -> str:
        return cell_key(self.op, self.tp, self.size_bytes, self.mode)

    @property
    def label(self) -> str:
        return f"{self.op} tp={self.tp} {human_bytes(self.size_bytes)} {self.mode}"


def cell_key(op: str, tp: int, size_bytes: int, mode: str) -> str:
    return f"{op}|tp{int(tp)}|{int(size_bytes)}|{mode}"


def plan_cells(cfg: SweepConfig) -> list[Cell]:
    """Every rank derives the same ordered list from the same config (lock-step without talking)."""
    elem = DTYPE_BYTES[cfg.dtype]
    cells, seen = [], set()
    for tp in cfg.tps:
        for op in cfg.ops:
            for p in (p for p in cfg.points if p.op == op):
                lay = COLLECTIVES[op].layout(p.size_bytes, tp, elem)
                for mode in cfg.modes:
                    c = Cell(op, tp, lay.size_bytes, lay.in_numel, lay.out_numel, mode, p.batch, p.site)
                    if c.key not in seen:
                        seen.add(c.key)
                        cells.append(c)
    return cells
