"""What a sweep will run: its configuration and the ordered list of cells every rank walks."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from commprof.model.collectives import COLLECTIVES, DTYPE_BYTES
from commprof.model.runconfig import RunConfig
from commprof.model.sizes import SizePoint
from commprof.model.units import human_bytes

#: --timing: one barrier-aligned call per sample (what a decode step pays: it issues one
#: collective at a time between kernels), or nccl-tests' method: a loop of back-to-back calls
#: timed as one and averaged (what vendor logs show).
PER_CALL, BACK_TO_BACK = "per-call", "back-to-back"
TIMINGS = (PER_CALL, BACK_TO_BACK)


@dataclass
class SweepRunConfig(RunConfig):
    VERB = "sweep"
    ops: list[str]
    tps: list[int]
    points: list[SizePoint]
    dtype: str = "bf16"
    modes: list[str] = field(default_factory=lambda: ["eager"])
    iters: int = 50
    warmup: int = 5
    concurrent: bool = False
    resume: bool = False
    sizes_spec: str = "decode"
    model: dict | None = None
    batches: list[int] = field(default_factory=list)
    impls: list[str] = field(default_factory=list)   # [] = the backend's own collectives only
    verify: bool = False           # --verify: check every custom call against torch's all_reduce
    timing: str = PER_CALL         # per-call (one barrier-aligned call per sample) or back-to-back
    loop: int = 20                 # back-to-back: calls timed as one loop per sample (nccl-tests -n)
    repeat: int = 1                # --repeat: each cell measured this many times, the repeats interleaved

    @property
    def baseline_impl(self) -> str:
        """The name of the backend's own collectives in the ``impl`` column: nccl or gloo."""
        return self.backend

    def impl_list(self) -> list[str]:
        return self.impls or [self.baseline_impl]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["points"] = [asdict(p) for p in self.points]
        return d


@dataclass(frozen=True)
class Cell:
    """One measurement: an op at one size, one TP degree, one timing mode, one implementation
    (the backend's collective, or ``custom``: commprof's one-shot all-reduce, cuda_ext/)."""

    op: str
    tp: int
    size_bytes: int        # after rounding to the TP degree (see collectives.Layout)
    in_numel: int
    out_numel: int
    mode: str
    batch: int | None
    site: str
    impl: str = ""         # "" = the backend's own collective; "custom" = the one-shot kernel

    @property
    def key(self) -> str:
        return cell_key(self.op, self.tp, self.size_bytes, self.mode, self.impl)

    @property
    def custom(self) -> bool:
        return self.impl == CUSTOM

    @property
    def label(self) -> str:
        return f"{self.op} tp={self.tp} {human_bytes(self.size_bytes)} {self.mode}" + (" custom" if self.custom else "")


CUSTOM = "custom"
#: Implementations --impl accepts: the backend's own (named after it) and commprof's one-shot kernel.
IMPLS = ("nccl", "gloo", CUSTOM)
#: Ops the custom implementation covers.
CUSTOM_OPS = ("all_reduce",)


def repeat_count(cfg) -> int:
    """How many times each cell runs (``--repeat``; configs from before it ran once)."""
    return max(1, int(getattr(cfg, "repeat", 1) or 1))


def cell_key(op: str, tp: int, size_bytes: int, mode: str, impl: str = "") -> str:
    """The identity of a cell in a results table (resume skips the keys already there). The
    backend's own cells keep the key they had before --impl existed."""
    base = f"{op}|tp{int(tp)}|{int(size_bytes)}|{mode}"
    return base + "|custom" if impl == CUSTOM else base


def row_key(row: dict) -> str:
    """The key of the cell a sweep.csv row answers. A row measured with the backend because the
    custom kernel refused the cell (column ``fallback``) answers the custom cell."""
    requested = CUSTOM if row.get("impl") == CUSTOM or row.get("fallback") else ""
    return cell_key(row["op"], int(row["tp"]), int(row["size_bytes"]), row["mode"], requested)


def plan_cells(cfg: SweepRunConfig) -> list[Cell]:
    """Every rank derives the same ordered list from the same config (lock-step without talking)."""
    elem = DTYPE_BYTES[cfg.dtype]
    cells, seen = [], set()
    for tp in cfg.tps:
        for op in cfg.ops:
            for p in (p for p in cfg.points if p.op == op):
                lay = COLLECTIVES[op].layout(p.size_bytes, tp, elem)
                for mode in cfg.modes:
                    for impl in cfg.impl_list():
                        if impl == CUSTOM and (op not in CUSTOM_OPS or mode != "eager"):
                            continue      # build_config says so once; the kernel runs eager only
                        c = Cell(op, tp, lay.size_bytes, lay.in_numel, lay.out_numel, mode, p.batch, p.site,
                                 CUSTOM if impl == CUSTOM else "")
                        if c.key not in seen:
                            seen.add(c.key)
                            cells.append(c)
    return cells
