"""``commprof sweep``: collective latency at decode sizes across TP degrees, in one launch of
``max(tp)`` ranks (see ``commprof.launch``); the per-rank side is ``microbench.collective_bench``."""
from __future__ import annotations

from dataclasses import dataclass

from . import launch, results
from .collectives import COLLECTIVES, DEFAULT_OPS, DTYPE_BYTES
from .errors import UsageError
from .models import DEFAULT_MODEL, ModelShape, get_model
from .sizes import parse_sizes
from .sweepconfig import SweepConfig, plan_cells
from .units import parse_int_list



@dataclass
class SweepOutcome:
    out_dir: str
    rows: int
    wrong_rows: int


def build_config(*, tp: str, ops: str | None, sizes: str, model: str | None, batch: str, dtype: str,
                 backend: str, modes: str | None, iters: int | None, warmup: int | None,
                 concurrent: bool, timeout_s: float, out: str | None, resume: bool, argv: list[str],
                 progress: bool = True) -> SweepConfig:
    """Validate every flag and derive the sweep's configuration (nothing is started)."""
    tps = parse_int_list(tp, "--tp")
    op_list = [o.strip() for o in (ops or ",".join(DEFAULT_OPS)).split(",") if o.strip()]
    for o in op_list:
        if o not in COLLECTIVES:
            raise UsageError(f"--ops: unknown op '{o}'; use {', '.join(COLLECTIVES)}")
    if dtype not in DTYPE_BYTES:
        raise UsageError(f"--dtype '{dtype}': use {', '.join(DTYPE_BYTES)}")
    batches = parse_int_list(batch, "--batch")
    shape: ModelShape | None = None
    if model or sizes.strip().lower() == "decode":
        shape = get_model(model or DEFAULT_MODEL)
    points = parse_sizes(sizes, op_list, shape, batches, DTYPE_BYTES[dtype])
    launch.check_counts(timeout_s, iters, warmup)
    max_tp = max(tps)
    world, name, reason, trun = launch.choose_world(backend, max_tp, "--tp")
    mode_list = launch.parse_modes(modes, name)

    out_dir = out or results.default_out_dir()
    if not trun or trun["rank"] == 0:
        results.check_out_dir(out_dir, resume)
    return SweepConfig(
        ops=op_list, tps=tps, points=points, dtype=dtype, modes=mode_list,
        iters=iters if iters is not None else (200 if name == "nccl" else 40),
        warmup=warmup if warmup is not None else (20 if name == "nccl" else 3),
        backend=name, backend_reason=reason, concurrent=concurrent, timeout_s=float(timeout_s),
        out_dir=out_dir, resume=resume, sizes_spec=sizes, model=shape.to_dict() if shape else None,
        batches=batches if sizes.strip().lower() == "decode" else [], argv=argv, world_size=world,
        launch="torchrun" if trun else "local", progress=progress,
    )


def run(cfg: SweepConfig) -> SweepOutcome | None:
    """Run the sweep; returns what was written on the process that holds the results."""
    if not launch.run_ranks(cfg, "microbench.collective_bench:run_rank"):
        return None
    rows = results.read_rows(cfg.out_dir)
    return SweepOutcome(cfg.out_dir, len(rows), sum(1 for r in rows if r.get("status") == "WRONG"))


def cells_count(cfg: SweepConfig) -> int:
    return len(plan_cells(cfg))
