"""``commprof sweep``: collective latency at decode sizes across TP degrees, in one launch of
``max(tp)`` ranks (see ``commprof.launch``); the per-rank side is ``microbench.collective_bench``."""
from __future__ import annotations

from dataclasses import dataclass

from . import launch, results
from .collectives import COLLECTIVES, DEFAULT_OPS, DTYPE_BYTES
from .errors import DeviceError, UsageError, where
from .launch import resolve_backend, torchrun_env
from .models import DEFAULT_MODEL, ModelShape, get_model
from .sizes import parse_sizes
from .sweepconfig import SweepConfig, plan_cells
from .units import parse_int_list

GLOO_MAX_LOCAL_RANKS = 64
MODES = ("eager", "graph")


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
    if timeout_s <= 0:
        raise UsageError("--timeout must be a positive number of seconds")
    for name, v in (("--iters", iters), ("--warmup", warmup)):
        if v is not None and v < (1 if name == "--iters" else 0):
            raise UsageError(f"{name} {v}: must be {'at least 1' if name == '--iters' else 'zero or more'}")

    trun = torchrun_env()
    max_tp = max(tps)
    if trun:
        world = trun["world"]
        if max_tp > world:
            raise DeviceError(f"{where(trun['rank'])}: --tp {max_tp} needs {max_tp} ranks, "
                              f"but torchrun started WORLD_SIZE={world}")
    else:
        world = max_tp
    name, reason = resolve_backend(backend, max_tp, trun)
    if name == "gloo" and not trun and max_tp > GLOO_MAX_LOCAL_RANKS:
        raise DeviceError(f"{where()}: --tp {max_tp} asks for {max_tp} local CPU ranks; gloo runs at most "
                          f"{GLOO_MAX_LOCAL_RANKS} here (use torchrun across nodes for more)")
    mode_list = [m.strip() for m in (modes or ("eager,graph" if name == "nccl" else "eager")).split(",") if m.strip()]
    for m in mode_list:
        if m not in MODES:
            raise UsageError(f"--modes: unknown mode '{m}'; use eager and/or graph")
    if "graph" in mode_list and name != "nccl":
        raise UsageError("--modes graph needs CUDA graphs, i.e. the nccl backend on GPUs")

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
