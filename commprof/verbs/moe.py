"""``commprof moe``: expert-parallel dispatch/combine all-to-all under skewed routing.

The step itself (routing, placement, rebalancing, the tables) is :mod:`commprof.analysis.moeroute`; this
module validates the flags, starts the ranks (``microbench.moe_rank``) and shows the results
(``commprof.views.moe``): ``moe_steps.csv``, ``moe_ranks.csv``, ``meta.json`` and two charts
(per-rank load before/after rebalancing, latency vs skew).
"""
from __future__ import annotations

from commprof.model.registry import MoeConfig  # noqa: F401 - the flags, declared once




from commprof.capture import launch
from commprof import results
from commprof.model.errors import UsageError
from commprof.capture.launch import torchrun_env
from commprof.analysis.moeroute import parse_skew
from commprof.model.moeconfig import MoeRunConfig
from commprof.results.moe import STEPS_CSV
from commprof.model.units import parse_int_list
from commprof.views import moe as views
from commprof.views.console import progress_bar
from commprof.model.models import get_model
from commprof.model.errors import EXIT_WRONG

DEFAULT_MODEL = "Qwen3-30B-A3B"




# ---------------------------------------------------------------- configuration


def build_config(*, model: str | None, ep: str, tokens: str, skew: str, iters: int | None, warmup: int | None,
                 rebalance: int | None, seed: int, backend: str, timeout_s: float, out: str | None,
                 argv: list, progress: bool = True) -> MoeRunConfig:
    """Validate every flag (nothing is started)."""
    shape = get_model(model or DEFAULT_MODEL)
    if shape.experts <= 0:
        raise UsageError(f"--model {model or shape.name}: a dense model (no routed experts); use an MoE model such as "
                         "Qwen3-30B-A3B, Qwen3-235B-A22B, DeepSeek-V3 or an MoE config.json")
    if not 1 <= shape.top_k <= shape.experts:
        raise UsageError(f"--model {model or shape.name}: top_k (num_experts_per_tok) {shape.top_k} must be between 1 "
                         f"and the expert count {shape.experts}")
    eps = sorted(set(parse_int_list(ep, "--ep")))
    for e in eps:
        if shape.experts % e:
            raise UsageError(f"--ep {e} does not divide {shape.name}'s {shape.experts} experts")
    token_list = parse_int_list(tokens, "--tokens")
    specs = [s.strip() for s in skew.split(",") if s.strip()]
    if not specs:
        raise UsageError("--skew: give at least one of uniform, zipf:S, hot:K[:SHARE], file:PATH")
    if "uniform" not in [s.lower() for s in specs]:
        specs.insert(0, "uniform")       # the baseline of every slowdown
    skews = [parse_skew(s, shape.experts, seed) for s in specs]
    for e in eps:
        n = e if rebalance is None else rebalance
        if n < 0 or n > shape.experts or n % e:
            raise UsageError(f"--rebalance {n}: the redundant slots must be a multiple of ep {e} "
                             f"and at most the {shape.experts} experts")
    launch.check_counts(timeout_s, iters, warmup)
    world, name, reason, trun = launch.choose_world(backend, max(eps), "--ep")
    out_dir = out or results.default_out_dir() + "-moe"
    if not trun or trun["rank"] == 0:
        results.check_out_dir(out_dir, False)
    return MoeRunConfig(model=shape.to_dict(), eps=eps, tokens=token_list, skews=skews,
                     iters=iters if iters is not None else (100 if name == "nccl" else 20),
                     warmup=warmup if warmup is not None else (10 if name == "nccl" else 2),
                     rebalance=rebalance, seed=seed, backend=name, backend_reason=reason,
                     timeout_s=float(timeout_s), out_dir=out_dir, argv=argv, world_size=world,
                     launch="torchrun" if trun else "local", progress=progress)


# ---------------------------------------------------------------- entry

def run_ranks(cfg: MoeRunConfig) -> bool:
    """Measure every cell; True on the process that holds the results."""
    return launch.run_ranks(cfg, "microbench.moe_rank:run_rank", progress=progress_bar)




def run(flags: MoeConfig, echo=print) -> int:
    """``commprof moe``: validate, measure, print one line per (ep, tokens, skew), draw charts.
    Returns the exit code (1 when a received-bytes check failed)."""
    import sys

    cfg = build_config(model=flags.model, ep=flags.ep, tokens=flags.tokens, skew=flags.skew, iters=flags.iters,
                       warmup=flags.warmup, rebalance=flags.rebalance, seed=flags.seed, backend=flags.backend,
                       timeout_s=flags.timeout_s, out=flags.out, argv=flags.argv)
    trun = torchrun_env()
    if trun is None or trun["rank"] == 0:
        print(f"commprof: moe {cfg.model['name']} ({cfg.model['experts']} experts, top-{cfg.model['top_k']}, "
              f"hidden {cfg.model['hidden']}): backend {cfg.backend} ({cfg.backend_reason}); {cfg.world_size} ranks; "
              f"{len(cfg.cells())} cells; results -> {cfg.out_dir}", file=sys.stderr)
    if not run_ranks(cfg):
        return 0
    r = results.load(cfg.out_dir)
    steps, ranks = r["moe_steps"], r["moe_ranks"]
    views.print_summary(steps, echo)
    if flags.charts:
        with results.failing(cfg.out_dir):
            for p in views.charts(steps, ranks, r.meta, cfg.out_dir):
                print(f"chart: {p}", file=sys.stderr)
    bad = int((steps.wrong > 0).sum())
    if bad:
        print(f"commprof: error: {bad} step row(s) failed the received-bytes check (column wrong); "
              f"see {cfg.out_dir}/{STEPS_CSV}", file=sys.stderr)
        return EXIT_WRONG
    return 0
