"""``commprof import kineto``: a serving engine's PyTorch-profiler (Kineto) traces as a trace
results dir: read (:mod:`commprof.ingest.kinetoread`), attribute per step and rank
(:mod:`commprof.ingest.kinetosteps`), and write ``trace_tokens.csv``/``trace_layers.csv``/
``trace_summary.csv`` beside ``kineto_steps.csv``, ``kineto_collectives.csv`` and ``kineto_ranks.csv``.
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys

from commprof import results
from commprof.model.errors import UsageError, shown
from commprof.model.fileio import shown_path
from commprof.results.kineto import write_kineto_tables
from commprof.ingest.kinetoread import MAX_TP, read_file
from commprof.ingest.kinetosteps import attribute_steps, check_ranks
from commprof.analysis.attribution import summarize
from commprof.model.models import get_model, ModelShape
from commprof.analysis.stepmodel import decode_collectives


# --- the import ----------------------------------------------------------------------------------------------

_DTYPE_NAMES = {"bfloat16": "bf16", "half": "fp16", "float16": "fp16", "float": "fp32", "float32": "fp32"}



def run_label(label: str) -> dict:
    """A run label's fields ("tp=2 batch=8 mode=eager"); tp and batch must be whole numbers in range."""
    lab = {k: v for k, v in re.findall(r"(\w+)=(\S+)", label or "")}
    for key, hi in (("tp", MAX_TP), ("batch", 1 << 20)):
        if key in lab:
            v = lab[key]
            if not (v.isascii() and v.isdigit() and 1 <= int(v) <= hi):
                raise UsageError(f"run label {shown(label)}: {key}={shown(v)} is not a whole number in 1..{hi:,}")
    if "mode" in lab and lab["mode"] not in ("eager", "graph"):
        raise UsageError(f"run label {shown(label)}: mode={shown(lab['mode'])}: expected eager or graph")
    return lab


def trace_files(paths: list[str]) -> list[str]:
    """The trace files ``paths`` name: a directory (a profiler's output dir, e.g. vLLM's
    VLLM_TORCH_PROFILER_DIR) stands for the ``*.json`` / ``*.json.gz`` files directly in it."""
    out = []
    for p in paths:
        if not os.path.isdir(p):
            out.append(p)
            continue
        found = sorted(os.path.join(p, n) for n in os.listdir(p)
                       if n.endswith((".json", ".json.gz")) and os.path.isfile(os.path.join(p, n)))
        if not found:
            raise UsageError(f"{shown_path(p)}: a directory with no trace files (*.json, *.json.gz) in it")
        out += found
    return out


def import_kineto(paths: list[str], out_dir: str, step_marker: str | None = None, model: str | None = None,
                  tp: int | None = None, command=None) -> dict:
    """Read the traces, attribute every run in them, write a trace results dir; returns a short
    account (runs, steps, collectives per step against the plan, notes)."""
    if not paths:
        raise UsageError("import kineto: no trace files given")
    if tp is not None and not 1 <= tp <= MAX_TP:
        raise UsageError(f"--tp {shown(tp)}: must be a whole number in 1..{MAX_TP:,}")
    try:
        step_re = re.compile(step_marker) if step_marker else None
    except re.error as e:
        raise UsageError(f"--step-marker '{step_marker}': not a regular expression ({e})") from None
    shape = get_model(model) if model else None
    paths = trace_files(paths)
    results.check_out_dir(out_dir, resume=False)
    ranks, files, skipped = [], [], []
    for p in paths:
        rts = read_file(p, step_marker)
        if not rts:
            skipped.append(os.path.basename(p))
            continue
        ranks.extend(rts)
        files.append({"path": shown_path(p), "sha256": results.file_sha256(p), "bytes": os.path.getsize(p),
                      "ranks": sorted({r.rank for r in rts})})
    if not any(r.kernels or r.colls for r in ranks):
        if skipped and not ranks:
            raise UsageError(f"{', '.join(repr(p) for p in paths)}: no rank's trace (only traces that name no rank "
                             "and hold no kernels or CPU ops, as vLLM's front-end async_llm trace)")
        raise UsageError(f"{', '.join(repr(p) for p in paths)}: no GPU kernels and no CPU collectives in the trace; "
                         "capture with torch.profiler activities=[CPU, CUDA] around the decode steps")
    shape, layers_run, layers_note = _producer_shape(ranks, shape)
    runs: dict = {}
    for r in ranks:
        runs.setdefault(r.run, []).append(r)
    tok_rows, lay_rows, sum_rows, step_rows, coll_rows, rank_rows, accounts = [], [], [], [], [], [], []
    for label, rs in runs.items():
        lab = run_label(label)
        run_tp = int(lab.get("tp", 0)) or tp or (len(rs) if len(rs) > 1 else (rs[0].world or 1))
        check_ranks(rs, tp or (int(lab["tp"]) if "tp" in lab else None))
        mode = lab.get("mode") or ("graph" if any(r.graph for r in rs) else "eager")
        colls = [c for r in rs for c in r.colls]
        dtype = next((_DTYPE_NAMES.get(c.dtype or "", None) for c in colls if _DTYPE_NAMES.get(c.dtype or "")), "bf16")
        plan = None
        if shape is not None and run_tp > 1:
            plan = decode_collectives(_with_layers(shape, layers_run), run_tp, 1, dtype=dtype)
        att = attribute_steps(rs, step_re, plan)
        if layers_note:
            att["notes"].insert(0, layers_note)
        if len(rs) < run_tp:
            att["notes"].insert(0, f"{len(rs)} of the TP group's {run_tp} ranks imported: transfer and wait are "
                                   "split over these ranks only (a single rank has no wait)")
        if not att["tokens"]:
            raise UsageError(f"{', '.join(sorted({os.path.basename(r.path) for r in rs}))}: no step holds kernels or "
                             f"collectives on every rank (steps from {att['step_source']})")
        training = sum(r.training_ops for r in rs)
        if training and not any(t["phase"] != "decode" for t in att["tokens"]):
            # backward and optimizer ops: these steps train a model; no token is generated in them
            for t in att["tokens"] + att["steps"]:
                t["phase"] = "training"
            att["notes"].insert(0, f"training steps, not decode steps: the trace holds {training:,} backward/optimizer "
                                   "CPU ops (autograd::engine::evaluate_function, Optimizer.step#); figures are per "
                                   "step, with no tokens/s")
        decode_batch = _median([t["decode_requests"] for t in att["tokens"]
                                if t["phase"] == "decode" and t["decode_requests"] != ""])
        is_training = any(t["phase"] == "training" for t in att["tokens"])
        batch = 0 if is_training else (int(lab.get("batch", 0)) or decode_batch
                                       or _batch_from_sizes(shape, colls, dtype) or 1)
        common = {"kind": "imported", "tp": run_tp, "batch": batch, "mode": mode}
        L = shape.layers if shape else ""
        ran = layers_run or L
        tok_rows += [{**common, "scaled": 0, "layers_run": ran, "layers_model": L, **t} for t in att["tokens"]]
        lay_rows += [{**common, "phase": "decode", **r} for r in att["layers"]]
        phases = {}
        for t in att["tokens"]:
            phases.setdefault(t["phase"], []).append(t)
        summs = {}
        for ph in sorted(phases, key=("decode", "prefill", "mixed", "training").index):
            toks = phases[ph]
            chunk = _median([t["step_tokens"] - (t["decode_requests"] or 0) for t in toks]) \
                if ph in ("prefill", "mixed") else 0
            b = batch if ph == "decode" else 1 if ph == "training" else (_median([t["decode_requests"] for t in toks]) or 0)
            summs[ph] = summarize(toks, b, att["collectives_per_step"], chunk=chunk or 0, prompt=chunk or 0)
            summs[ph]["phase"] = ph
            if ph == "training":            # a training step generates no tokens
                summs[ph].update({"tokens_per_s": float("nan"), "collectives_per_token": float("nan")})
            sum_rows.append({**common, "batch": b if ph not in ("prefill", "training") else 0, "scaled": 0, "layers_run": ran,
                             "layers_model": L, **summs[ph]})
        summ = summs.get("decode") or next(iter(summs.values()))
        step_rows += [{**common, **r} for r in att["steps"]]
        coll_rows += [{**common, **r} for r in att["collectives"]]
        rank_rows += [{**common, **r} for r in att["ranks"]]
        plan_count = len(plan) if plan else None
        accounts.append({"run": label or "kineto", "tp": run_tp, "batch": batch, "mode": mode,
                         "step_kind": "training" if "training" in phases else "inference",
                         "ranks": sorted(r.rank for r in rs), "steps": len(att["tokens"]) // len(rs),
                         "steps_by_phase": {ph: len(v) // len(rs) for ph, v in phases.items()},
                         "dropped_steps": att["dropped_steps"],
                         "backend": "+".join(sorted({r.backend for r in rs if r.backend})),
                         "batch_source": ("none: training steps" if is_training else "run label" if lab.get("batch") else "vLLM iteration marks (decode requests, "
                                          "median over decode steps)" if decode_batch else
                                          "first all-reduce's size / hidden" if batch > 1 else "assumed 1"),
                         "step_source": att["step_source"], "collectives_per_step": att["collectives_per_step"],
                         "plan_collectives_per_step": plan_count,
                         "matches_plan": None if plan_count is None else att["collectives_per_step"] == plan_count,
                         "cpu_only": att["cpu"], "comm_share_pct": summ["comm_share_pct"],
                         "ms_per_step": summ["ms_per_token"], "tokens_per_s": summ.get("tokens_per_s"),
                         "comm_ms_per_token": (summ["ms_per_token"] * summ["comm_share_pct"] / 100 / batch
                                               if batch and not is_training else None),
                         "notes": att["notes"]})
    backends = sorted({r.backend for r in ranks if r.backend})
    meta = results.provenance(
        "import", "imported", "a PyTorch profiler (Kineto) trace attributed per step: compute / communication "
        "(transfer, wait) / memory / idle (commprof import kineto)",
        command=list(command) if command is not None else list(sys.argv), hosts=[],
        gpus=sorted({g for r in ranks for g in r.gpus}) or ["unknown (the trace names no device)"],
        status="running")
    meta.update({
        "source": "kineto", "source_files": files, "skipped_files": skipped,
        "backend": backends[0] if len(backends) == 1 else (backends or None),
        "world_size": max((r.world or 0 for r in ranks), default=0) or len({r.rank for r in ranks}),
        "ranks": sorted({r.rank for r in ranks}),
        "model": shape.to_dict() if shape else {"name": "unknown (no --model given)"},
        "scaled": False, "scaling": layers_note or "as captured (every layer the engine ran)",
        "step_marker": step_marker, "runs": accounts,
        "phases": "per step from vLLM's iteration marks where the trace has them (execute_context_N(T)_generation_M(K): "
                  "prefill = context requests only, decode = generation only, mixed = both); else every step decode, "
                  "or training where the trace holds backward/optimizer ops (figures per step, no tokens)",
        "config": {"dtype": dtype, "tp": tp},
        "columns": {
            "latency_us": "the step's window on the rank: its GPU-side span (first to last kernel, or the "
                          "step annotation's GPU span); on CPU-only traces the step annotation",
            "compute_us": "time some compute kernel runs (union), plus time only a memcpy/memset runs",
            "transfer_us": "exposed communication (a collective runs and no compute does) times the rank's "
                           "transfer fraction: per collective the shortest duration over the ranks",
            "wait_us": "exposed communication times the rank's wait fraction (own duration minus the shortest: "
                       "arrival skew)",
            "gaps_us": "idle: nothing runs on the GPU (host and launch overhead)",
            "comm_overlapped_us": "a collective runs beside compute (kineto_steps.csv); counted as compute, as in "
                                  "HTA's temporal breakdown",
            "hta_overlap_pct": "HTA's comm/compute overlap: time computing while communicating / time "
                               "communicating (merged intervals, whole capture); empty on a CPU-only trace "
                               "(kineto_ranks.csv na_reason)",
            "compute_kernels": "compute kernels (compute_kernel_us their summed time); empty on a CPU-only "
                               "trace, which has no kernels: compute_cpu_ops counts its CPU ops instead",
            "remainder_ms": "trace_summary.csv: ms_per_token minus compute_ms + transfer_ms + wait_ms + gaps_ms. "
                            "Each is a median over steps and medians do not add (the median of a sum is not the "
                            "sum of the medians; ms_per_token is the slowest rank's step, the parts the mean over "
                            "ranks); the shares (comm_share_pct, transfer_share_pct, wait_share_pct) are of the summed time instead",
            "compute_cpu_us": "CPU-only traces: the union of the CPU ops' intervals outside the collectives "
                              "(ops nest, so their durations are not summed)",
            "straggler": "this rank arrived last at the collective (its duration is the shortest)"},
    })
    os.makedirs(out_dir, exist_ok=True)
    results.write_meta(out_dir, meta)
    with results.failing(out_dir, "import kineto"):     # a full disk: meta.json says failed, not running
        write_kineto_tables(out_dir, tok_rows, lay_rows, sum_rows, step_rows, coll_rows, rank_rows)
    results.finish_meta(out_dir, "complete")
    return {"out_dir": out_dir, "runs": accounts, "files": files, "skipped": skipped}


def _median(values) -> int | None:
    v = sorted(x for x in values if isinstance(x, (int, float)) and x == x)
    return int(v[len(v) // 2]) if v else None


def _producer_shape(ranks, shape):
    """What a commprof ``trace.json`` says about itself: its model (used when no ``--model`` is
    given) and how many of its layers the engine ran. Returns (shape, layers run or None, a note
    when the timeline holds fewer layers than the model: its per-step figures are of those layers,
    not scaled to the whole model)."""
    head = next((r.producer for r in ranks if r.producer), {})
    if shape is None and head.get("model"):
        try:
            shape = get_model(str(head["model"]))
        except UsageError:
            d = head.get("model_shape")
            if isinstance(d, dict):
                try:
                    names = {f.name for f in dataclasses.fields(ModelShape)}
                    shape = ModelShape(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()
                                          if k in names})
                except (TypeError, ValueError):
                    shape = None
    run, total = head.get("layers_run"), head.get("layers_model")
    if not (isinstance(run, int) and isinstance(total, int) and 0 < run < total) or shape is None:
        return shape, None, ""
    return shape, run, (f"a commprof trace timeline of {run} of {total} layers (trace --layers {run}): per-step "
                        f"figures are of the {run} layer(s) run, not scaled to {total}; the trace's own "
                        "trace_summary.csv holds the scaled figures")


def _with_layers(shape, layers: int | None):
    """``shape`` cut to its first ``layers`` layers (the plan of a timeline that ran only those)."""
    if not layers or layers >= shape.layers:
        return shape
    return dataclasses.replace(shape, layers=layers)


def _batch_from_sizes(shape, colls, dtype: str) -> int | None:
    """Tokens per step from the first all-reduce's size (batch x hidden elements), when a model is given."""
    if shape is None:
        return None
    e = {"bf16": 2, "fp16": 2, "fp32": 4}.get(dtype, 2)
    for c in colls:
        if c.op == "all_reduce" and c.size_bytes:
            n = c.size_bytes // e
            if n % shape.hidden == 0 and n // shape.hidden >= 1:
                return n // shape.hidden
            return None
    return None


def per_token(a: dict) -> str:
    """What a decode step is per token: the batch the step decodes, tokens/s, and the exposed
    communication each token carries (per step / batch); nothing for training steps."""
    if a.get("step_kind") == "training" or not a.get("batch") or a.get("comm_ms_per_token") is None:
        return ""
    tps = a.get("tokens_per_s")
    rate = f", {tps:,.0f} tokens/s" if isinstance(tps, (int, float)) and tps == tps else ""
    return f" (batch {a['batch']}{rate}: {a['comm_ms_per_token']:.3f} ms of it per token)"


def run_import_kineto(paths: list[str], out: str, step_marker: str | None = None, model: str | None = None,
                      tp: int | None = None) -> int:
    """``commprof import kineto``: import, print one line per run, return the exit code (0)."""
    acc = import_kineto(paths, out, step_marker=step_marker, model=model, tp=tp)
    for a in acc["runs"]:
        plan = ""
        if a["plan_collectives_per_step"] is not None:
            plan = (f" (plan: {a['plan_collectives_per_step']}, "
                    f"{'matches' if a['matches_plan'] else 'DIFFERS'})")
        cpu_ops = f" (CPU ops, {a['backend'] or 'backend unknown'})" if a["cpu_only"] else ""
        print(f"imported {a['run']}: rank{'s' if len(a['ranks']) > 1 else ''} {', '.join(map(str, a['ranks']))}; "
              f"{a['steps']}{' training' if a.get('step_kind') == 'training' else ''} "
              f"step{'s' if a['steps'] != 1 else ''} ({a['step_source']}), "
              f"{a['collectives_per_step']} collectives/step{plan}, "
              f"{a['ms_per_step']:.3f} ms/step, communication {a['comm_share_pct']:.1f}% exposed"
              f"{per_token(a)}{cpu_ops} into {acc['out_dir']}")
        for n in (([f"skipped {', '.join(acc['skipped'])}: names no rank and holds no kernels or CPU ops "
                       "(a front-end process's trace)"] if acc.get("skipped") else []) + a["notes"])[:5]:
            print(f"  note: {n}", file=sys.stderr)
    return 0
