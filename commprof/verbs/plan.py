"""``commprof plan``: the step and memory model (:mod:`commprof.analysis.stepmodel`) of one model, TP degree and
batch, printed and (``--out``) written as ``plan.json`` + ``plan.csv``; nothing runs."""
from __future__ import annotations

from commprof.model.registry import PlanConfig  # noqa: F401 - the flags, declared once

import os

from commprof.model.errors import EXIT_OK, UsageError
from commprof.model.fileio import all_or_none, write_json
from commprof.model.models import get_model
from commprof.analysis.stepmodel import MOE_MODES, Plan, build_plan
from commprof.model.units import parse_bytes
from commprof.views.console import emit
from commprof.views.plan import render_plan
from commprof import results
from commprof.results import check_out_dir

PLAN_JSON = "plan.json"
PLAN_CSV = "plan.csv"
CSV_COLUMNS = ["site", "kind", "layer", "op", "size_bytes", "send_bytes_per_rank"]


def write_plan(plan: Plan, out_dir: str) -> list[str]:
    """Write ``plan.json`` and ``plan.csv`` (one row per collective) into ``out_dir``; refuses a
    directory that already holds files. Returns the two paths."""
    # check_out_dir's own message offers --resume, which a plan has no use for: say it here first.
    entries = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []
    if entries:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise UsageError(f"output dir '{out_dir}' already holds files ({shown}); choose another --out")
    check_out_dir(out_dir, resume=False)
    os.makedirs(out_dir, exist_ok=True)
    json_path = os.path.join(out_dir, PLAN_JSON)
    csv_path = os.path.join(out_dir, PLAN_CSV)
    rows = []
    for s in plan.sites:
        row = s.to_dict()
        row["layer"] = "" if s.layer is None else s.layer
        rows.append(row)
    with all_or_none(json_path, csv_path, os.path.join(out_dir, results.META_JSON)):
        write_json(json_path, plan.to_dict())
        results.write_table(csv_path, CSV_COLUMNS, rows)
        results.write_meta(out_dir, results.provenance(
            "plan", "modelled", f"collectives and memory of one {plan.phase} step, modelled from the model's "
            "shapes (commprof plan)", status="complete", hosts=["modelled: no box"], model=plan.model.name,
            source=plan.model.source, tp=plan.tp, batch=plan.batch, context=plan.context, dtype=plan.dtype,
            phase=plan.phase, **({"prompt": plan.prefill["prompt"], "chunk": plan.prefill["chunk"]}
                                 if plan.prefill else {})))
    return [json_path, csv_path]




def run(cfg: PlanConfig, console=None) -> int:
    """``commprof plan``: model, build, write (``cfg.out``), print; the exit code.

    ``cfg.gpu_mem`` is text with binary suffixes (``80G`` = 80 GiB). ``cfg.as_json`` prints the
    plan's dict to stdout instead of the tables.
    """
    if cfg.moe not in MOE_MODES:
        raise UsageError(f"--moe '{cfg.moe}': use tp (experts sharded by tensor parallelism) "
                         "or ep (expert parallelism)")
    gpu_mem_bytes = None
    if cfg.gpu_mem is not None:
        try:
            gpu_mem_bytes = parse_bytes(str(cfg.gpu_mem))
        except ValueError as e:
            raise UsageError(f"--gpu-mem: {e}") from None
    model = get_model(cfg.model)
    plan = build_plan(model, cfg.tp, cfg.batch, cfg.context, gpu_mem_bytes, cfg.mem_util, cfg.dtype, cfg.sp, cfg.moe,
                      cfg.phase, cfg.prompt, cfg.chunk)
    paths = write_plan(plan, cfg.out) if cfg.out else []
    emit(plan.to_dict(), cfg.as_json, lambda c: render_plan(plan, c), paths, console, 150)
    return EXIT_OK


