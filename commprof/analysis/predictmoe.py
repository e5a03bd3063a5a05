"""Expert parallelism for ``commprof predict --ep N``: an MoE model's expert layers when the
experts are placed whole on ranks instead of sharded over the TP group.

The TP group of ``tp`` GPUs runs attention as before. With ``--ep N`` (N divides ``tp`` and the
expert count) the routed experts are split into N groups of ``E / N`` whole experts, each group
sharded over ``tp / N`` GPUs (SGLang's ``moe_tp_size = tp_size / ep_size``; ``--ep tp`` is vLLM's
``--enable-expert-parallel`` on one TP group). Per MoE layer and step of B tokens, top-k of E:

* **active experts**: uniform routing hits ``E x (1 - (1 - k/E)^B)`` distinct experts in all
  (:func:`~commprof.analysis.computemodel.experts_touched`); one rank's group holds ``E / N``, each
  hit with ``p = 1 - (1 - k/E)^B``, so the count on a rank is Binomial(E/N, p) and the step waits
  for the busiest of the N groups: ``E[max of N]`` (:func:`expected_max_binomial`). With a
  ``commprof moe`` dir (``--moe-skew``), the hot rank gets ``imbalance x B x k / N`` token choices
  (its measured max / mean load) and hits ``E/N x (1 - (1 - N/E)^choices)`` of its experts;
* **their bytes**: each active expert's ``3 x hidden x expert_ffn / (tp/N)`` weights at the
  ``--weights`` bytes; FLOPs ``6 x hidden x expert_ffn / (tp/N)`` per token choice on the rank
  (``B x k / N``, times the imbalance), priced by the same roofline as every kernel;
* **dispatch and combine**: the MLP-out all-reduce of each MoE layer becomes two all-to-alls over
  the N ranks of ``B x k x hidden`` elements each rank sends (:mod:`commprof.analysis.stepmodel`'s
  sizes; times the imbalance: the hot rank receives that much more), priced by the box's numbers
  at N ranks (an all_to_all the comm input lacks stands in by
  :func:`commprof.analysis.latency.stand_in_op`), plus, when ``tp / N > 1``, an all-reduce of
  ``B x hidden`` inside each expert group (priced at ``tp / N`` ranks).

``ep_comm`` (``--ep-comm``) says which collective the engine runs for the experts: ``all-to-all`` (the
default: dispatch and combine as above, SGLang with an all-to-all backend or DP attention, vLLM with data
parallelism) or ``all-reduce`` (every rank holds every token, computes its own experts' share and the MoE
output is summed by the same all-reduce as under TP: vLLM's ``--enable-expert-parallel`` at data parallel 1,
``FusedMoE`` reducing over the TP group; SGLang's ``--ep-size`` without an all-to-all backend): the
collectives are then the TP row's, unchanged.

Shared experts and the leading dense layers are unchanged (sharded over TP; stepmodel's rule: a
shared expert adds no collective). Modelled; standard library only.
"""
from __future__ import annotations

import math

from commprof.analysis.computemodel import (CALIBRATION, collective_mode, experts_touched, host_wait_us, moe_expert_kernel,
                                           quant_bw_scale, step_kernels, step_overhead_us, weight_bytes_per_elem)
from commprof.analysis.quant import gemm_dtype as quant_gemm_dtype
from commprof.analysis.stepmodel import dtype_bytes, step_collectives
from commprof.model.collectives import COLLECTIVES
from commprof.model.errors import UsageError
from commprof.model.models import ModelShape, is_moe_layer
from commprof.model.units import finite_float

#: The columns ``--ep`` adds to predict.csv.
MOE_COLUMNS = ["ep", "moe_active_experts", "moe_active_experts_per_rank", "moe_expert_ms", "moe_a2a_ms",
               "moe_imbalance"]
MOE_COLUMN_KINDS = {c: "modelled" for c in MOE_COLUMNS}
MOE_COLUMN_KINDS["moe_a2a_ms"] = "comm_kind"
MOE_COLUMN_DOCS = {
    "ep": "expert-parallel degree: E / ep whole experts per expert group, each sharded over tp / ep GPUs",
    "moe_active_experts": "distinct routed experts a step hits in all, E x (1 - (1 - k/E)^tokens), per MoE layer",
    "moe_active_experts_per_rank": "on the busiest expert group: expected max over ep of Binomial(E/ep, p), or the "
                                   "measured imbalance's hot rank",
    "moe_expert_ms": "the routed experts' GPU time per step on the busiest rank (all MoE layers)",
    "moe_a2a_ms": "the dispatch and combine all-to-alls of every MoE layer (and the expert group's all-reduce)",
    "moe_imbalance": "max / mean token load over ranks the experts' time and all-to-alls are scaled by "
                     "(1: uniform routing; else from the --moe-skew dir)",
}


#: ``--ep-comm``: the collective an engine runs for its experts under expert parallelism (module doc).
EP_COMMS = ("all-to-all", "all-reduce")


def check_ep_comm(ep_comm: str) -> str:
    """``--ep-comm``: one of :data:`EP_COMMS`."""
    if ep_comm not in EP_COMMS:
        raise UsageError(f"--ep-comm {ep_comm!r}: use one of {', '.join(EP_COMMS)}")
    return ep_comm


def check_ep(model: ModelShape, ep: int) -> int:
    """``--ep``: a whole number >= 1 that divides the routed experts (1 for any model)."""
    if not isinstance(ep, int) or isinstance(ep, bool) or ep < 1:
        raise UsageError(f"--ep {ep!r}: expected a whole number >= 1")
    if ep > 1 and not model.experts:
        raise UsageError(f"--ep {ep}: model {model.name} has no routed experts (a dense model has no expert "
                         "parallelism); drop --ep or use an MoE model")
    if ep > 1 and model.experts % ep:
        raise UsageError(f"--ep {ep} does not divide model {model.name}'s {model.experts} routed experts")
    return ep


def expected_max_binomial(n: int, p: float, groups: int) -> float:
    """``E[max of groups]`` independent Binomial(n, p) counts: ``sum over x < n of 1 - F(x)^groups``."""
    if n <= 0 or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return float(n)
    q = 1.0 - p
    pmf = q ** n
    cdf, total = 0.0, 0.0
    for x in range(n):
        cdf += pmf
        total += 1.0 - min(cdf, 1.0) ** groups
        pmf *= (n - x) / (x + 1) * p / q
    return total


def active_experts_per_rank(model: ModelShape, ep: int, tokens: int, imbalance: float | None = None) -> float:
    """Distinct routed experts the busiest of ``ep`` expert groups reads in one step of ``tokens``."""
    per = model.experts // ep
    if imbalance is not None:
        choices = imbalance * tokens * model.top_k / ep
        return per * (1.0 - (1.0 - 1.0 / per) ** choices) if per > 1 else min(1.0, choices)
    p = 1.0 - (1.0 - model.top_k / model.experts) ** tokens
    return expected_max_binomial(per, p, ep)


def ep_expert_kernel(model: ModelShape, gpu, tp: int, ep: int, tokens: int, dtype: str = "bf16",
                     cal: dict | None = None, weights: str = "bf16", imbalance: float | None = None):
    """The routed experts' kernel of one MoE layer on the busiest rank under ``--ep``: its
    :func:`active_experts_per_rank` experts' ``3 x hidden x expert_ffn / (tp/ep)`` weights read, and
    ``6 x hidden x expert_ffn / (tp/ep)`` FLOPs per token choice it gets (``imbalance x tokens x top_k / ep``)."""
    cal = {**CALIBRATION, **(cal or {})}
    moe_layers = sum(1 for i in range(model.layers) if is_moe_layer(model, i))
    h, ef = model.hidden, -(-model.expert_ffn // (tp // ep))
    active = active_experts_per_rank(model, ep, tokens, imbalance)
    choices = (1.0 if imbalance is None else float(imbalance)) * tokens * model.top_k / ep
    # as in step_kernels: each active expert a GEMM of its own (its ramp), 4-bit weights on Hopper at their rate
    return moe_expert_kernel(moe_layers, active, choices, h, ef, weight_bytes_per_elem(weights, dtype), gpu,
                             quant_gemm_dtype(weights, gpu, dtype), cal, cal["flop_frac"],
                             quant_bw_scale(weights, gpu, cal))


def _roof_split(k) -> tuple[float, float]:
    """(roofline us, floor us) of one kernel run: as predictmodel's kernel_ms / floor_ms split it."""
    return (k.us, 0.0) if k.bound != "floor" else (0.0, k.us)


def apply_ep(row: dict, model: ModelShape, gpu, comm, ep: int, tokens: int, context: int, dtype: str = "bf16",
             mode: str = "graph", cal: dict | None = None, weights: str = "bf16",
             imbalance: float | None = None, ep_comm: str = "all-to-all") -> dict:
    """``row`` (a predict row at TP ``row['tp']``, experts sharded over TP) with its MoE layers under
    expert parallelism ``ep``: the routed experts' kernel and, with ``ep_comm`` ``all-to-all``, the
    MLP-out all-reduces of the MoE layers replaced as the module says (``all-reduce``: kept as they are);
    the totals, rates and share recomputed; :data:`MOE_COLUMNS` added. ``tokens``: tokens per step (the
    batch, plus prompt tokens sharing the step)."""
    check_ep_comm(ep_comm)
    cal = {**CALIBRATION, **(cal or {})}
    tp, batch = int(row["tp"]), int(row["batch"])
    moe_layers = sum(1 for i in range(model.layers) if is_moe_layer(model, i))
    imb = 1.0 if imbalance is None else float(imbalance)
    touched = experts_touched(model.experts, model.top_k, tokens)
    out = {**row, "ep": ep, "moe_active_experts": touched, "moe_imbalance": imb}
    ks = {k.name: k for k in step_kernels(model, gpu, tp, tokens, batch, context, dtype, cal, weights=weights)}
    k_tp = ks.get("moe_experts")
    if ep == 1 or k_tp is None:
        out.update(moe_active_experts_per_rank=touched * (1 if ep == 1 else 1.0 / ep),
                   moe_expert_ms=(k_tp.count * k_tp.us / 1e3) if k_tp else 0.0, moe_a2a_ms=0.0)
        return out
    moe_tp, h = tp // ep, model.hidden
    active = active_experts_per_rank(model, ep, tokens, imbalance)
    k_ep = ep_expert_kernel(model, gpu, tp, ep, tokens, dtype, cal, weights, imbalance)
    (r_tp, f_tp), (r_ep, f_ep) = _roof_split(k_tp), _roof_split(k_ep)
    # communication: the MoE layers' MLP-out all-reduce at tp -> dispatch + combine at ep (+ group all-reduce)
    elem = dtype_bytes(dtype)
    cmode = collective_mode(mode)
    if ep_comm == "all-reduce":     # the TP all-reduce sums the experts' shares: the row's collectives stand
        removed = added = 0.0
        n_coll = 1
    else:
        price_tp = comm.price(tp, cmode)
        removed = sum(price_tp(s.op, s.size_bytes) for s in step_collectives(model, tp, tokens, batch, dtype)
                      if s.kind == "mlp_out" and is_moe_layer(model, s.layer))
        a2a = COLLECTIVES["all_to_all"].layout(int(tokens * model.top_k * h * elem * imb), ep, elem)
        per_layer = 2 * comm.price(ep, cmode)("all_to_all", a2a.size_bytes)
        n_coll = 2
        if moe_tp > 1:
            ar = COLLECTIVES["all_reduce"].layout(tokens * h * elem, moe_tp, elem)
            per_layer += comm.price(moe_tp, cmode)("all_reduce", ar.size_bytes)
            n_coll = 3
        added = moe_layers * per_layer
    d_compute = moe_layers * ((r_ep - r_tp) + (f_ep - f_tp))
    comm_us = row["comm_ms"] * 1e3 + added - removed
    # piecewise graphs: the host's wait is taken again against the GPU's new work (computemodel.host_wait_us)
    # (the GPU's work: the step less the host's own, its overhead and any wait, then EP's changes)
    old_wait = float(row.get("host_wait_ms") or 0.0) * 1e3
    gpu_us = row["ms_per_token"] * 1e3 - old_wait - step_overhead_us(cal) + d_compute + added - removed
    wait = host_wait_us(float(row.get("host_ms") or 0.0) * 1e3, gpu_us)
    d_compute += wait - old_wait
    step_us = (row["ms_per_token"] * 1e3) + d_compute + added - removed
    out.update(
        host_wait_ms=wait / 1e3, gaps_ms=row["gaps_ms"] + (wait - old_wait) / 1e3,
        compute_ms=row["compute_ms"] + d_compute / 1e3, kernel_ms=row["kernel_ms"] + moe_layers * (r_ep - r_tp) / 1e3,
        floor_ms=row["floor_ms"] + moe_layers * (f_ep - f_tp) / 1e3, comm_ms=comm_us / 1e3,
        ms_per_token=step_us / 1e3, tokens_s_per_user=1e6 / step_us, tokens_s_per_box=batch * 1e6 / step_us,
        tokens_s_per_gpu=batch * 1e6 / step_us / tp, comm_share_pct=100.0 * comm_us / step_us,
        collectives_per_step=row["collectives_per_step"] + moe_layers * (n_coll - 1),
        moe_active_experts_per_rank=active, moe_expert_ms=k_ep.count * k_ep.us / 1e3, moe_a2a_ms=added / 1e3)
    return out


def ep_note(model: ModelShape, ep: int, imbalance: float | None, skew_note: str = "",
            ep_comm: str = "all-to-all") -> str:
    """One line: what ``--ep`` did."""
    how = (f"measured imbalance {imbalance:.3g} (max / mean rank load){': ' + skew_note if skew_note else ''}"
           if imbalance is not None else "uniform routing, the busiest group's expected active experts")
    if ep_comm == "all-reduce":
        return (f"--ep {ep} --ep-comm all-reduce: {model.experts // ep} whole routed experts per expert group; each "
                f"rank computes its experts for every token and each MoE layer's output is summed by the TP "
                f"all-reduce, as without --ep; {how}")
    return (f"--ep {ep}: {model.experts // ep} whole routed experts per expert group; each MoE layer's all-reduce "
            f"is a dispatch and a combine all-to-all over {ep} ranks of tokens x top_k {model.top_k} x hidden; {how}")


def pick_imbalance(rows: list[dict], ep: int, tokens: int) -> tuple[float, str] | None:
    """From ``commprof moe``'s ``moe_steps.csv`` rows: the ``contiguous`` placement at ``ep`` (what an
    engine without expert load balancing runs), the token count nearest ``tokens`` (in log), the
    largest imbalance over the skews there; (imbalance, which row) or None when no row has ``ep``."""
    cand = [r for r in rows if _int(r.get("ep")) == ep and str(r.get("placement", "contiguous")) == "contiguous"
            and _num(r.get("imbalance")) is not None and (_int(r.get("tokens")) or 0) > 0]
    if not cand:
        return None
    near = min(cand, key=lambda r: abs(math.log(_int(r["tokens"]) / tokens)))["tokens"]
    at = [r for r in cand if r["tokens"] == near]
    best = max(at, key=lambda r: _num(r["imbalance"]))
    return _num(best["imbalance"]), f"ep {ep}, {near} tokens, skew {best.get('skew')}, contiguous placement"


def _num(v):
    return finite_float(v, above=0.0)


def _int(v):
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return None


def ep_rows(rows: list[dict], model: ModelShape, boxes: list, ep: int, context: int, dtype: str, mode: str,
            cal: dict | None, weights: str, moe_steps: list[dict] | None = None,
            tokens_of=None, ep_comm: str = "all-to-all") -> tuple[list[dict], list[str]]:
    """Every predict row under ``--ep`` (:func:`apply_ep`), with the notes: a row whose TP degree
    ``ep`` does not divide, or whose comm input has no rows at ``ep`` (or ``tp / ep``) ranks, is
    dropped and said. ``boxes``: the (GpuSpec, CommSource) pairs the rows came from;
    ``moe_steps``: a ``commprof moe`` dir's step rows (the measured imbalance), or None;
    ``tokens_of(row)``: tokens per step (default the row's batch)."""
    check_ep(model, ep)
    check_ep_comm(ep_comm)
    if moe_steps is not None and ep == 1:
        raise UsageError("--moe-skew needs --ep N (N > 1): the skew is the expert groups' imbalance")
    by_box = {f"{g.key} + {c.label}": (g, c) for g, c in boxes}
    out, notes, skipped = [], [], set()
    said = set()
    for r in rows:
        gpu, comm = by_box[r["box"]]
        tp = int(r["tp"])
        # the ranks the comm input must price: ep and tp / ep for the all-to-alls, none beyond the row's for all-reduce
        need = (ep, tp // ep) if ep_comm == "all-to-all" else ()
        if tp % ep or any(n > 1 and not comm.covers(n) for n in need):
            if (r["box"], tp) not in skipped:
                skipped.add((r["box"], tp))
                why = (f"--ep {ep} does not divide tp={tp}" if tp % ep else
                       f"{comm.label} has no all_reduce rows at {ep} or {tp // ep} ranks")
                notes.append(f"{r['box']}: tp={tp} skipped ({why})")
            continue
        tokens = int(tokens_of(r) if tokens_of else r["batch"])
        imb, skew_note = None, ""
        if moe_steps is not None:
            got = pick_imbalance(moe_steps, ep, tokens)
            if got is None:
                raise UsageError(f"--moe-skew: the commprof moe dir has no contiguous-placement rows at ep={ep}; "
                                 "run commprof moe with that --ep")
            imb, skew_note = got
        key = (imb, skew_note)
        if key not in said:
            said.add(key)
            notes.append(ep_note(model, ep, imb, skew_note, ep_comm))
        out.append(apply_ep(r, model, gpu, comm, ep, tokens, context, dtype, mode, cal, weights, imb, ep_comm))
    if not out:
        raise UsageError(f"predict --ep {ep}: no row left: " + "; ".join(notes))
    return out, notes
