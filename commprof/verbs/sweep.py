"""``commprof sweep``: collective latency at decode sizes across TP degrees, in one launch of
``max(tp)`` ranks (see ``commprof.capture.launch``); the per-rank side is ``microbench.collective_bench``."""
from __future__ import annotations

from commprof.model.registry import SweepConfig  # noqa: F401 - the flags, declared once

from dataclasses import asdict, dataclass

from commprof.capture import launch
from commprof import results
from commprof.model.collectives import COLLECTIVES, DEFAULT_OPS, DTYPE_BYTES
from commprof.model.errors import DeviceError, UsageError
from commprof.model.models import DEFAULT_MODEL, ModelShape, get_model
from commprof.model.sizes import parse_sizes
from commprof.model.sweepconfig import BACK_TO_BACK, CUSTOM, CUSTOM_OPS, IMPLS, PER_CALL, TIMINGS, SweepRunConfig, plan_cells
from commprof.model.units import parse_int_list
from commprof.results.sweep import resume_state
from commprof.capture.nvmltopo import save_topology
from commprof.capture.nvmlhealth import HealthSampler, save_health
from commprof.model.units import human_bytes
from commprof.model.errors import EXIT_WRONG
from commprof.capture.launch import shared_core_note, torchrun_env
from commprof.views.show import show
from commprof.views.console import progress_bar

from commprof.model.runconfig import MAX_REPEAT  # the most repeats --repeat takes, shared with trace

#: The longest prompt (and chunk) --sizes prefill takes, in tokens: the plan's --context bound.
MAX_PROMPT_TOKENS = 1 << 24


@dataclass
class SweepOutcome:
    out_dir: str
    rows: int
    wrong_rows: int
    refused: list | None = None     # custom cells the one-shot kernel refused (meta.json custom_refused)


def build_config(*, tp: str, ops: str | None, sizes: str, model: str | None, batch: str, dtype: str,
                 backend: str, modes: str | None, iters: int | None, warmup: int | None,
                 concurrent: bool, timeout_s: float, out: str | None, resume: bool, argv: list[str],
                 progress: bool = True, impl: str | None = None, verify: bool = False,
                 timing: str = PER_CALL, loop: int = 20, prompt: str | None = None,
                 chunk: str | None = None, repeat: int = 1) -> SweepRunConfig:
    """Validate every flag and derive the sweep's configuration (nothing is started). ``prompt``
    and ``chunk`` (comma lists of tokens) go with ``sizes="prefill"`` only."""
    if timing not in TIMINGS:
        raise UsageError(f"--timing '{timing}': use {' or '.join(TIMINGS)}")
    if isinstance(loop, bool) or not isinstance(loop, int) or not 1 <= loop <= 100_000:
        raise UsageError(f"--loop {loop!r}: calls per timed loop, a whole number from 1 to 100000")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= MAX_REPEAT:
        raise UsageError(f"--repeat {repeat!r}: times each cell is measured, a whole number from 1 to {MAX_REPEAT}")
    tps = parse_int_list(tp, "--tp")
    op_list = [o.strip() for o in (ops or ",".join(DEFAULT_OPS)).split(",") if o.strip()]
    for o in op_list:
        if o not in COLLECTIVES:
            raise UsageError(f"--ops: unknown op '{o}'; use {', '.join(COLLECTIVES)}")
    if dtype not in DTYPE_BYTES:
        raise UsageError(f"--dtype '{dtype}': use {', '.join(DTYPE_BYTES)}")
    batches = parse_int_list(batch, "--batch")
    prefill = sizes.strip().lower() == "prefill"
    if not prefill and (prompt is not None or chunk is not None):
        raise UsageError(f"{'--prompt' if prompt is not None else '--chunk'} sets prefill sizes: "
                         "add --sizes prefill")
    prompts = parse_int_list(prompt, "--prompt", MAX_PROMPT_TOKENS) if prompt is not None else None
    chunks = parse_int_list(chunk, "--chunk", MAX_PROMPT_TOKENS) if chunk is not None else None
    shape: ModelShape | None = None
    if model or sizes.strip().lower() in ("decode", "prefill"):
        shape = get_model(model or DEFAULT_MODEL)
    points = parse_sizes(sizes, op_list, shape, batches, DTYPE_BYTES[dtype], prompts, chunks)
    launch.check_counts(timeout_s, iters, warmup)
    max_tp = max(tps)
    world, name, reason, trun = launch.choose_world(backend, max_tp, "--tp")
    mode_list = launch.parse_modes(modes, name)
    impls = parse_impls(impl, name, reason, op_list, mode_list)
    if verify and CUSTOM not in impls:
        raise UsageError("--verify checks the custom all-reduce on every call; add --impl custom")
    if verify and timing == BACK_TO_BACK:
        raise UsageError("--verify checks every timed call on known inputs, which a back-to-back loop "
                         "does not reload; use --timing per-call with --verify")

    out_dir = out or results.default_out_dir()
    if not trun or trun["rank"] == 0:
        results.check_out_dir(out_dir, resume)
        if resume:      # every reason to refuse the dir: one line, exit 2, before any rank starts
            results.meta.lock_dir(out_dir)      # two resumes of one dir at once: the second is refused
            try:
                resume_state(out_dir, name, dtype, impls, timing)
            except BaseException:
                results.meta.unlock_dir(out_dir)
                raise
    return SweepRunConfig(
        ops=op_list, tps=tps, points=points, dtype=dtype, modes=mode_list,
        iters=iters if iters is not None else (200 if name == "nccl" else 40),
        warmup=warmup if warmup is not None else (20 if name == "nccl" else 3),
        backend=name, backend_reason=reason, concurrent=concurrent, timeout_s=float(timeout_s),
        out_dir=out_dir, resume=resume, sizes_spec=sizes, model=shape.to_dict() if shape else None,
        batches=batches if sizes.strip().lower() == "decode" else [], argv=argv, world_size=world,
        launch="torchrun" if trun else "local", progress=progress,
        impls=impls if impls != [name] else [], verify=verify, timing=timing, loop=loop, repeat=repeat,
    )


def parse_impls(spec: str | None, backend: str, backend_reason: str, ops: list[str], modes: list[str]) -> list[str]:
    """--impl: which implementations to time side by side. ``nccl`` (or ``gloo``) is the backend's
    own collective; ``custom`` is commprof's one-shot all-reduce (cuda_ext/), all_reduce in eager
    mode only, on GPUs with the NCCL backend and cupy."""
    impls = [i.strip().lower() for i in (spec or backend).split(",") if i.strip()]
    if not impls:
        raise UsageError(f"--impl: empty list; use {backend} and/or custom")
    for i in impls:
        if i not in IMPLS:
            raise UsageError(f"--impl: unknown implementation '{i}'; use {backend} and/or custom")
        if i in ("nccl", "gloo") and i != backend:
            # No GPUs (auto chose gloo) is a missing device; an explicit --backend is a flag clash.
            err = DeviceError if backend_reason.startswith("auto") else UsageError
            raise err(f"--impl {i}: this run uses the {backend} backend ({backend_reason}); "
                      f"its own collectives are --impl {backend}")
    impls = list(dict.fromkeys(impls))
    if CUSTOM in impls:
        if backend != "nccl" and not oneshot_test_hook():
            raise DeviceError(f"--impl custom: the one-shot all-reduce runs on NVIDIA GPUs with the nccl "
                              f"backend; this run uses {backend} ({backend_reason})")
        if not any(o in CUSTOM_OPS for o in ops):
            raise UsageError(f"--impl custom covers {', '.join(CUSTOM_OPS)} only; add it to --ops")
        if "eager" not in modes:
            raise UsageError("--impl custom runs in eager mode only (its kernel takes a new barrier epoch "
                             "on every call, which a captured graph would replay unchanged); add --modes eager")
        if backend == "nccl":
            from cuda_ext.loader import require_gpu
            require_gpu()         # cupy present and sees a GPU, or one line saying what is missing
    return impls


def oneshot_test_hook() -> bool:
    """commprof's own tests stand a CPU emulation in for the kernel (``COMMPROF_TEST_ONESHOT``)."""
    import os

    return bool(os.environ.get("COMMPROF_TEST_ONESHOT"))


def run_ranks(cfg: SweepRunConfig) -> SweepOutcome | None:
    """Run the sweep; returns what was written on the process that holds the results."""
    health = HealthSampler().start()        # GPU health before, during and after (nothing without NVML)
    try:
        if not launch.run_ranks(cfg, "microbench.collective_bench:run_rank", progress=progress_bar):
            return None
    finally:
        save_topology(cfg.out_dir)          # beside the rows whenever NVML answers, also after a failure
        save_health(cfg.out_dir, health.stop())
    rows = results.read_rows(cfg.out_dir)
    refused = results.read_meta(cfg.out_dir).get("custom_refused") or []
    return SweepOutcome(cfg.out_dir, len(rows), sum(1 for r in rows if r.get("status") == "WRONG"), refused)


def refusal_lines(refused: list[dict]) -> list[str]:
    """meta.json ``custom_refused`` as a few lines: one per (TP degree, reason), sizes listed."""
    by: dict = {}
    for r in refused:
        by.setdefault((int(r.get("tp", 0)), r.get("reason", "?"), r.get("then", "")), []).append(int(r.get("size_bytes", 0)))
    out = []
    for (tp, reason, then), sizes in sorted(by.items()):
        shown = ", ".join(human_bytes(s) for s in sorted(sizes)[:6]) + (", ..." if len(sizes) > 6 else "")
        out.append(f"custom all_reduce refused at TP={tp} for {len(sizes)} size(s) ({shown}): {reason}; {then}")
    return out


def cells_count(cfg: SweepRunConfig) -> int:
    return len(plan_cells(cfg))




def run(cfg: SweepConfig) -> int:
    """``commprof sweep``: validate the flags, run the ranks, show the results; the exit code."""
    flags = {k: v for k, v in asdict(cfg).items() if k != "charts"}
    return measure(build_config(**flags), charts=cfg.charts)


def measure(cfg: SweepRunConfig, charts: bool = True) -> int:
    """Run the ranks of a validated sweep, then on the process that holds the results show the
    table and charts, say which custom cells were refused, and return the exit code (1 when a
    correctness check found wrong elements)."""
    import sys

    trun = torchrun_env()
    lead = trun is None or trun["rank"] == 0
    if lead:
        print(f"commprof: backend {cfg.backend} ({cfg.backend_reason}); {cfg.world_size} ranks ({cfg.launch}); "
              f"{cells_count(cfg)} cells" + (f" x {cfg.repeat} repeats (interleaved)" if cfg.repeat > 1 else "")
              + f"; results -> {cfg.out_dir}", file=sys.stderr)
        note = shared_core_note(cfg.backend, trun)
        if note:
            print(f"commprof: {note}", file=sys.stderr)
    try:
        outcome = run_ranks(cfg)
    finally:
        results.meta.unlock_dir(cfg.out_dir)
    if not lead or outcome is None:
        return 0
    with results.failing(cfg.out_dir):
        show(results.load(cfg.out_dir), charts=charts)
    for line in refusal_lines(outcome.refused or []):
        print(f"commprof: {line}", file=sys.stderr)
    if outcome.wrong_rows:
        print(f"commprof: error: {outcome.wrong_rows} row(s) failed the correctness check (column wrong); "
              f"see {cfg.out_dir}/sweep.csv", file=sys.stderr)
        return EXIT_WRONG
    return 0
