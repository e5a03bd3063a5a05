"""The ms/token model of ``commprof predict`` (and :func:`commprof.predict`): each token's time on a
box nobody ran here.

Compute is modelled from the model's shapes and the GPU's published figures
(:mod:`commprof.analysis.computemodel`, :mod:`commprof.model.gpus`); communication is the 2L+2
collectives of a step (:func:`commprof.analysis.stepmodel.step_collectives`) priced by that box's
own numbers (a :class:`commprof.analysis.commsource.CommSource`: a reference profile in memory, an
imported nccl-tests log or a sweep of the real box). Nothing is overlapped: a step is compute +
gaps + communication, and every user of the batch gets one token per step.

:func:`predict_table` is the whole computation (validated inputs -> rows, notes, provenance); the
verb adds files, the console and the chart, the API a DataFrame. Standard library only.
"""
from __future__ import annotations

from commprof.analysis.commsource import CommSource, ScaledComm, comm_source
from commprof.analysis.enginecomm import engine_price
from commprof.analysis.inengine import factor_against, inspector_rows
from commprof.results.meta import shown_path
from commprof.analysis.errorband import BAND_SOURCE, ERROR_BANDS, band, error_kind, share_band
from commprof.analysis.computemodel import (CALIBRATION, CALIBRATION_SOURCE, MODE_HELP, MODES, WEIGHT_DTYPES,
                                           SAMPLING_HELP, SAMPLINGS, collective_mode, host_wait_us, piecewise_host_us,
                                           prefill_compute, quant_bw_scale, step_compute, step_overhead_us)
from commprof.analysis.stepmodel import (MAX_BATCH, MAX_CONTEXT, MAX_TP, check_tp, dtype_bytes, kv_budget,
                                         kv_bytes_per_sequence_per_rank, prefill_comm_us, step_collectives,
                                         weights_per_rank)
from commprof.model.errors import UsageError, shown
from commprof.model.gpus import GpuSpec, get_gpu, other_forms
from commprof.model.models import ModelShape, get_model
from commprof.analysis.quant import gemm_rate_note, weight_bytes_per_rank as quant_weight_bytes
from commprof.analysis.predictmoe import MOE_COLUMN_DOCS, MOE_COLUMN_KINDS, MOE_COLUMNS, check_ep, check_ep_comm, ep_rows
from commprof.analysis.predictload import LOAD_COLUMN_DOCS, LOAD_COLUMN_KINDS, LOAD_COLUMNS, load_rows

CSV_COLUMNS = ["box", "gpu", "comm", "comm_kind", "comm_timing", "tp", "batch", "context", "mode",
               "compute_ms", "kernel_ms", "floor_ms", "gaps_ms", "comm_ms", "ms_per_token",
               "tokens_s_per_user", "tokens_s_per_box", "tokens_s_per_gpu", "comm_share_pct",
               "collectives_per_step", "prompt", "ttft_ms", "ttft_comm_ms", "weights_gb_per_rank",
               "kv_gb_per_sequence_per_rank", "kv_max_sequences", "weights_fit", "note",
               "error_kind", "ms_per_token_lo", "ms_per_token_hi", "comm_share_lo_pct", "comm_share_hi_pct"]

#: What kind of figure each column is: the compute side is modelled, the communication side is
#: the comm input's own kind (``comm_kind``: modelled, imported or measured), the totals predicted.
COLUMN_KINDS = {
    "compute_ms": "modelled", "kernel_ms": "modelled", "floor_ms": "modelled", "gaps_ms": "modelled",
    "comm_ms": "comm_kind", "ttft_comm_ms": "comm_kind", "ms_per_token": "predicted",
    "tokens_s_per_user": "predicted", "tokens_s_per_box": "predicted", "tokens_s_per_gpu": "predicted",
    "comm_share_pct": "predicted", "ttft_ms": "predicted", "weights_gb_per_rank": "modelled",
    "kv_gb_per_sequence_per_rank": "modelled", "kv_max_sequences": "modelled",
    "ms_per_token_lo": "predicted", "ms_per_token_hi": "predicted", "comm_share_lo_pct": "predicted",
    "comm_share_hi_pct": "predicted",
}
COLUMN_DOCS = {
    "compute_ms": "GPU time of one decode step on one rank: kernel_ms + floor_ms + gaps_ms",
    "kernel_ms": "the kernels' rooflines: max(bytes / achievable bandwidth, FLOPs / achievable FLOP/s)",
    "floor_ms": "what kernel floors (the shortest a kernel runs) add above the rooflines",
    "gaps_ms": "host time per step: scheduler and sampling, plus launch gaps in eager mode",
    "comm_ms": "the step's 2L+2 collectives priced by the comm input, one after another (no overlap)",
    "ms_per_token": "one step: compute_ms + comm_ms; every sequence of the batch gets one token",
    "tokens_s_per_box": "batch x 1000 / ms_per_token for one TP group of tp GPUs",
    "tokens_s_per_gpu": "tokens_s_per_box / tp",
    "comm_share_pct": "comm_ms / ms_per_token x 100",
    "ttft_ms": "prefill of the prompt in one step (compute bound) + its collectives + one decode step",
    "kv_max_sequences": "sequences of --context tokens whose KV cache fits beside the weights (--mem-util)",
    "error_kind": "tp1, nvlink or pcie: the kind of prediction whose past error the band carries",
    "ms_per_token_lo": "ms_per_token x the 10th percentile of measured/predicted over the held-out published "
                       "figures of its kind (commprof.analysis.errorband)",
    "ms_per_token_hi": "ms_per_token x the 90th percentile of the same",
    "comm_share_lo_pct": "the lowest communication share the band allows (the whole difference in compute or comm)",
    "comm_share_hi_pct": "the highest communication share the band allows",
}


# --- the prediction -------------------------------------------------------------------------------


def check_list(values, flag: str, maximum: int) -> list[int]:
    out = []
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= maximum:
            raise UsageError(f"{flag} {shown(v)}: expected whole numbers from 1 to {maximum:,}")
        out.append(v)
    if not out:
        raise UsageError(f"{flag}: give at least one value")
    return out


def predict_point(model: ModelShape, gpu: GpuSpec, comm: CommSource, tp: int, batch: int, context: int,
                  prompt: int | None = None, dtype: str = "bf16", mode: str = "graph", mem_util: float = 0.9,
                  cal: dict | None = None, weights: str = "bf16", mixed_tokens: int = 0) -> dict:
    """One (box, TP, batch): a row of :data:`CSV_COLUMNS`. ``mixed_tokens``: prompt tokens of other
    requests sharing each decode step (continuous batching), priced in compute and collectives."""
    cal = {**CALIBRATION, **(cal or {})}
    comp = step_compute(model, gpu, tp, batch, context, dtype, mode, cal, weights, mixed_tokens)
    sites = step_collectives(model, tp, batch + int(mixed_tokens), batch, dtype)
    price = engine_price(comm, gpu, tp, collective_mode(mode), cal) if tp > 1 else (lambda op, s: 0.0)
    comm_us = sum(price(s.op, s.size_bytes) for s in sites)
    # piecewise graphs: the step waits for the host where its layers outlast the GPU's work (computemodel)
    wait_us = host_wait_us(comp["host_us"], comp["compute_us"] - step_overhead_us(cal) + comm_us)
    comp = {**comp, "compute_us": comp["compute_us"] + wait_us, "gap_us": comp["gap_us"] + wait_us}
    step_us = comp["compute_us"] + comm_us
    w = quant_weight_bytes(weights_per_rank(model, tp, dtype), weights, dtype_bytes(dtype))   # analysis/quant.py
    kv_seq = kv_bytes_per_sequence_per_rank(model, tp, context, dtype)
    _, _, fit, max_seq = kv_budget(gpu.memory_bytes, mem_util, w, kv_seq)
    row = {
        "box": f"{gpu.key} + {comm.label}", "gpu": gpu.key, "comm": comm.label, "comm_kind": comm.kind,
        "comm_timing": comm.timing, "tp": tp, "batch": batch, "context": context, "mode": mode,
        "compute_ms": comp["compute_us"] / 1e3, "kernel_ms": comp["kernel_us"] / 1e3,
        "floor_ms": comp["floor_us"] / 1e3, "gaps_ms": comp["gap_us"] / 1e3, "comm_ms": comm_us / 1e3,
        "ms_per_token": step_us / 1e3, "tokens_s_per_user": 1e6 / step_us,
        "tokens_s_per_box": batch * 1e6 / step_us, "tokens_s_per_gpu": batch * 1e6 / step_us / tp,
        "comm_share_pct": 100.0 * comm_us / step_us, "collectives_per_step": len(sites),
        "prompt": prompt or "", "ttft_ms": "", "ttft_comm_ms": "",
        "weights_gb_per_rank": w / 1e9, "kv_gb_per_sequence_per_rank": kv_seq / 1e9,
        "kv_max_sequences": max_seq, "weights_fit": bool(fit),
        "note": "" if fit else f"weights ({w / 1e9:.1f} GB per rank) do not fit in {gpu.memory_gb} GB x {mem_util}",
        # piecewise graphs: the host's time for the layers and the part of it the step waits for
        # (kept for --ep's repricing, analysis/predictmoe.py; not CSV columns)
        "host_ms": comp["host_us"] / 1e3, "host_wait_ms": wait_us / 1e3,
    }
    kind = error_kind(tp, comm.label)
    lo, hi = band(step_us / 1e3, kind)
    s_lo, s_hi = share_band(comm_us / 1e3, step_us / 1e3, lo, hi)
    row.update(error_kind=kind, ms_per_token_lo=lo, ms_per_token_hi=hi, comm_share_lo_pct=s_lo, comm_share_hi_pct=s_hi)
    if prompt:
        pre = prefill_compute(model, gpu, tp, prompt, dtype, "eager", cal, weights)
        pc = prefill_comm_us(model, tp, prompt, prompt, price, dtype=dtype) if tp > 1 else 0.0
        row["ttft_ms"] = (pre["compute_us"] + pc + step_us) / 1e3
        row["ttft_comm_ms"] = pc / 1e3
        # the prompt's eager forward alone, ttft_comm_ms of it collectives (a load's separate prefill step,
        # analysis/predictload.py; ttft_ms less ms_per_token, which --ep reprices but not this)
        row["prefill_ms"] = (pre["compute_us"] + pc) / 1e3
    return row


def predict_rows(model: ModelShape, boxes: list[tuple[GpuSpec, CommSource]], tps, batches, context: int,
                 prompt: int | None = None, dtype: str = "bf16", mode: str = "graph", mem_util: float = 0.9,
                 cal: dict | None = None, weights: str = "bf16") -> tuple[list[dict], list[str]]:
    """Every (box, TP, batch) the comm input covers; (rows, notes on what was skipped)."""
    rows, notes = [], []
    for gpu, comm in boxes:
        for tp in tps:
            if not comm.covers(tp):
                notes.append(f"{comm.label}: no all_reduce rows at tp={tp} (it has tp={', '.join(map(str, comm.tps()))}); "
                             f"tp={tp} skipped for {gpu.key}")
                continue
            for batch in batches:
                rows.append(predict_point(model, gpu, comm, tp, batch, context, prompt, dtype, mode, mem_util, cal,
                                          weights))
    if not rows:
        raise UsageError("predict: no TP degree of --tp is covered by the --comm input(s): " + "; ".join(notes))
    return rows, notes


def default_comm(gpu: GpuSpec) -> tuple[str, str]:
    """The reference profile a GPU's class implies when no --comm is given, and why: an NVLink part
    (SXM) its NVLink generation's profile; a PCIe card its PCIe generation's, with P2P where the card
    allows it (GeForce cards: P2P disabled by NVIDIA's driver, so no P2P; professional and data-center
    PCIe cards: P2P)."""
    if gpu.nvlink_gen in (3, 4, 5) and gpu.form_factor != "pcie":    # a PCIe card's NVLink bridge joins pairs only
        return f"reference:nvlink{gpu.nvlink_gen}", f"{gpu.key} has NVLink {gpu.nvlink_gen} (gpus.toml nvlink_gen)"
    gen = 5 if gpu.pcie_gen >= 5 else 4
    geforce = "geforce" in gpu.name.lower() if gpu.pcie_p2p is None else not gpu.pcie_p2p   # gpus.toml pcie_p2p
    p2p = "nop2p" if geforce else "p2p"
    why = (f"{gpu.key} is a PCIe {gpu.pcie_gen} card without NVLink; "
           + ("a GeForce card: the driver disables P2P, so no P2P" if geforce else
              "a professional/data-center card: P2P allowed"))
    if gpu.pcie_gen < 4:
        why += "; no PCIe 3 profile: PCIe 4's used (optimistic)"
    return f"reference:pcie{gen}-{p2p}", why


def make_boxes(gpus: list, comms: list, notes: list | None = None) -> list[tuple[GpuSpec, CommSource]]:
    """Pair --gpu and --comm: the same number of each, or one of either used with every other;
    no --comm: each GPU's class default (:func:`default_comm`), said in ``notes``."""
    if gpus and not comms:
        comms = []
        for g in gpus:
            spec, why = default_comm(get_gpu(g) if isinstance(g, str) else g)
            comms.append(spec)
            if notes is not None:
                notes.append(f"no --comm: {spec} chosen for {g} ({why}); give --comm to price another box")
    if notes is not None:
        for g in gpus:
            others = other_forms(g) if isinstance(g, str) else []
            if others:
                taken = get_gpu(g)
                alts = ", ".join(f"{o.key} ({o.interconnect_class})" for o in others)
                notes.append(f"--gpu {g}: taken as {taken.key} ({taken.interconnect_class}); the same chip is also "
                             f"sold as {alts}, whose collectives at TP > 2 go over PCIe: if the box's form is not "
                             f"known, price both (--gpu {taken.key},{others[0].key})")
    if not gpus or not comms:
        raise UsageError("predict needs --gpu SKU and --comm reference:<profile> | DIR")
    if len(gpus) != len(comms) and 1 not in (len(gpus), len(comms)):
        raise UsageError(f"--gpu has {len(gpus)} entries and --comm {len(comms)}: give as many of each "
                         "(box by box), or one of either")
    n = max(len(gpus), len(comms))
    gs = [get_gpu(g) for g in (gpus if len(gpus) == n else gpus * n)]
    cache: dict = {}
    cs = []
    for c in (comms if len(comms) == n else comms * n):
        key = c if isinstance(c, str) else id(c)
        if key not in cache:
            cache[key] = comm_source(c)
        cs.append(cache[key])
    return list(zip(gs, cs))




def quant_rate_note(weights: str, gpu, cal: dict | None = None) -> str:
    """One line when ``weights``' GEMMs on ``gpu`` are priced below the bandwidth a 16-bit GEMM
    reaches there (4-bit weight-only on Hopper: :func:`commprof.analysis.computemodel.quant_bw_scale`)."""
    s = quant_bw_scale(weights, gpu, cal)
    if s >= 1.0:
        return ""
    return (f"{gpu.key}: --weights {weights} GEMMs priced at {s:g} of a 16-bit GEMM's bandwidth (int4_hopper_frac: "
            "Marlin kernels are built for Ampere, not yet optimized for Hopper, "
            "https://github.com/IST-DASLab/marlin_artifact; the share fitted on published AWQ figures)")


def achievable_bw_note(gpu) -> str:
    """One line when ``gpu``'s roofline starts from a published measured achievable bandwidth below
    its datasheet (``mem_bandwidth_achievable_gbps`` in gpus.toml), naming both and the source."""
    if gpu.roofline_bandwidth_gbps >= gpu.mem_bandwidth_gbps:
        return ""
    src = gpu.optional_sources.get("mem_bandwidth_achievable_gbps", "")
    return (f"{gpu.key}: memory roofline from its measured achievable bandwidth, {gpu.roofline_bandwidth_gbps:g} GB/s "
            f"(datasheet {gpu.mem_bandwidth_gbps:g} GB/s): {src.split(' ')[0]}")


#: Said with every prediction of a multi-head latent attention model (DeepSeek-V2/V3/R1, Kimi-K2).
MLA_NOTE = ("MLA model: the published figures of this class (DeepSeek-R1 FP8 on 8x B200 under SGLang, fit and "
            "held out; DeepSeek-R1 AWQ on 8x H100 and FP8 on 8x H200 under vLLM 0.9-0.10, held out; "
            "results/bench/predict_figures.md) ran 1.15-1.16x slower than the prediction at concurrency 1 under SGLang "
            "and 0.96-1.15x of it at 16-64 (with --prefill-steps separate, SGLang's own); the two under vLLM ran "
            "1.76-1.92x slower at concurrency 1 (16.1 and 15.85 ms a token on different GPUs and weights, flat from 128 "
            "to 8192 prompt tokens; the second's launch set expert parallelism, 1.68x with --ep 8 --ep-comm all-reduce), "
            "1.12-1.21x with --mode piecewise (vLLM V1 before 0.11, as the benchmark prices them: the attention op run "
            "from Python between graph pieces and that engine's own DeepSeek kernels, its unfused expert routing and "
            "the shared experts' own MLP; 1.09x for the second with its --ep): read the ms/token as a lower bound")
#: Said when an MoE model's time to first token is printed (--prompt, or the TTFT under a load): the published
#: concurrency-1 TTFTs of SGLang's cookbook against this model (tests/test_predict_moe.py recomputes the ratios).
MOE_TTFT_NOTE = ("MoE model, time to first token: SGLang's published TTFTs at concurrency 1 for DeepSeek-R1 FP8 and "
                 "Qwen3-235B-A22B on 8x B200 (https://github.com/sgl-project/sgl-cookbook, section 5.1 Speed Benchmark: "
                 "126-166 ms and 99-140 ms for 610- and 4,194-token prompts) were 1.4-3.2x what this model prices, the "
                 "most for short prompts (a prefill costing about 100 ms whatever its length: not modelled); read TTFT, "
                 "and under a load the stalls other requests' prefills cause, as a lower bound")


#: How far ``--mode piecewise`` has been off, said with it: its piecewise - full-graph difference against five
#: published vLLM A/B runs it was not set from (results/bench/piecewise_ab.json; tests/test_predict.py checks the
#: figures against it).
PIECEWISE_CHECK = ("on 5 published piecewise vs full-graph A/B runs the modelled difference was 0.52-2.47x the "
                   "measured one, below it on 4 (median 0.62: results/bench/piecewise_ab.md)")


def piecewise_note(model: ModelShape, rows: list[dict], cal: dict) -> str:
    """What ``--mode piecewise`` adds, said once: the host's time per step for the layers, and how many
    rows wait for it (computemodel.piecewise_host_us, host_wait_us)."""
    host_ms = piecewise_host_us(model, cal) / 1e3
    waits = [r for r in rows if float(r.get("host_wait_ms") or 0.0) > 0]
    told = (f"{len(waits)} of {len(rows)} rows wait for it (their GPU work is shorter: in gaps ms)" if waits
            else "every row's GPU work outlasts it")
    mla = ", plus the MLA op's extra launches" if model.is_mla else ""
    path = ""
    if model.is_mla:
        moe = int(cal["piecewise_moe_routing_kernels"]) + (int(cal["piecewise_shared_expert_kernels"])
                                                           if model.shared_experts else 0)
        path = (f"; that engine's DeepSeek path launches {int(cal['piecewise_mla_extra_kernels'])} more kernels a layer "
                f"and {moe} more an MoE layer ({moe + int(cal['piecewise_shared_quant_kernels'])} with W8A8 GEMMs: "
                f"unfused expert routing, the shared experts' own MLP), counted in the vLLM 0.10.1 and SGLang 0.5.6 "
                f"source and priced as small kernels")
    return (f"--mode piecewise (vLLM V1 0.7-0.10.x): the host runs each layer's attention op between captured graph "
            f"pieces, {host_ms:.2f} ms a step for {model.layers} layers (piecewise_layer_us {cal['piecewise_layer_us']:g} us, "
            f"from vllm-project/vllm#47089's piecewise vs full-graph A/B{mla}); {told}; the op's launches outside a "
            f"graph add their waits on the GPU{path}; {PIECEWISE_CHECK}")


def sampling_note(cal: dict) -> str:
    """What ``--sampling full`` adds, said once (computemodel.step_overhead_us)."""
    return (f"--sampling full: the sampler's top-p/top-k sort over the whole vocabulary and its repetition, presence "
            f"and frequency penalties add {float(cal['sampling_full_us']) / 1e3:.2f} ms a step to the host's work "
            f"(sampling_full_us, fitted on Qwen2.5's speed-benchmark figures: vLLM 0.6.3, batch 1; in gaps ms)")


def predict_table(model, gpus: list, comms: list, tps, batches, context: int = 4096, prompt: int | None = None,
                  dtype: str = "bf16", weights: str = "bf16", mode: str = "graph", mem_util: float = 0.9,
                  calibration: dict | None = None, ep: int = 1, moe_steps: list | None = None,
                  load=None, comm_overhead_from: str | None = None,
                  sampling: str = "greedy", ep_comm: str = "all-to-all") -> tuple[list[dict], list[str], dict]:
    """Validated inputs -> (rows of :data:`CSV_COLUMNS`, notes, the provenance a predict dir's
    meta.json carries). ``model``: a name, a config.json path or a :class:`ModelShape`; ``gpus``
    and ``comms``: as ``--gpu`` and ``--comm`` (specs or :class:`CommSource` objects)."""
    if mode not in MODES:
        raise UsageError(f"--mode {shown(mode)}: use {MODE_HELP}")
    if sampling not in SAMPLINGS:
        raise UsageError(f"--sampling {shown(sampling)}: use {SAMPLING_HELP}")
    if not (0.0 < float(mem_util) <= 1.0):
        raise UsageError(f"--mem-util {shown(mem_util)}: expected a fraction in (0, 1]")
    dtype_bytes(dtype)
    tps = check_list(list(tps), "--tp", MAX_TP)
    batches = check_list(list(batches), "--batch", MAX_BATCH)
    check_list([context], "--context", MAX_CONTEXT)
    if prompt is not None:
        check_list([prompt], "--prompt", MAX_CONTEXT)
    model = model if isinstance(model, ModelShape) else get_model(model)
    for tp in tps:
        check_tp(model, tp)
    chosen: list[str] = []
    boxes = make_boxes(list(gpus), list(comms), chosen)
    if comm_overhead_from:
        boxes = scale_by_engine(boxes, comm_overhead_from, mode, chosen)
    if weights not in WEIGHT_DTYPES:
        raise UsageError(f"--weights {shown(weights)}: use one of {', '.join(WEIGHT_DTYPES)}")
    calibration = dict(calibration or {})
    if sampling == "full":        # the sampler's top-p sort and penalties, once a step (computemodel.step_overhead_us)
        calibration["sampling_full"] = 1.0
    check_ep(model, ep)
    check_ep_comm(ep_comm)
    if ep_comm != "all-to-all" and ep == 1:
        raise UsageError(f"--ep-comm {ep_comm} needs --ep N (N > 1): it says which collective expert parallelism runs")
    ep_on, load_notes = ep != 1 or moe_steps is not None, []
    if load is not None:        # the load decides the batch: analysis/predictload.py
        def step_row_of(g, c, tp):
            def step_row(b, m, ctx, prompt=None):
                r = predict_point(model, g, c, tp, b, ctx, prompt, dtype, mode, mem_util, calibration, weights, m)
                if ep_on:
                    (r,), ns = ep_rows([r], model, [(g, c)], ep, ctx, dtype, mode, calibration, weights, moe_steps,
                                       tokens_of=lambda _: b + m, ep_comm=ep_comm)
                    load_notes.extend(n for n in ns if n not in load_notes)
                return r
            return step_row
        load_tps = [t for t in tps if t % ep == 0]
        if not load_tps:
            raise UsageError(f"predict --ep {ep}: it divides no --tp degree ({', '.join(map(str, tps))})")
        rows, notes = load_rows(boxes, load_tps, load, step_row_of)
        notes += [f"tp={t} skipped (--ep {ep} does not divide tp={t})" for t in tps if t % ep] + load_notes
    else:
        rows, notes = predict_rows(model, boxes, tps, batches, context, prompt, dtype, mode, mem_util, calibration,
                                   weights)
    csv_columns, extra_kinds, extra_docs = list(CSV_COLUMNS), {}, {}
    if ep_on:      # expert parallelism: analysis/predictmoe.py
        if load is None:
            rows, ep_notes = ep_rows(rows, model, boxes, ep, context, dtype, mode, calibration, weights, moe_steps,
                                     ep_comm=ep_comm)
            notes += ep_notes
        csv_columns, extra_kinds, extra_docs = csv_columns + MOE_COLUMNS, MOE_COLUMN_KINDS, MOE_COLUMN_DOCS
    if load is not None:
        csv_columns += LOAD_COLUMNS
        extra_kinds, extra_docs = {**extra_kinds, **LOAD_COLUMN_KINDS}, {**extra_docs, **LOAD_COLUMN_DOCS}
    comms_used = {id(c): c for _, c in boxes}
    notes[:0] = chosen
    notes += list(dict.fromkeys(n for g, _ in boxes if (n := gemm_rate_note(weights, g, dtype))))   # quantized weights
    notes += list(dict.fromkeys(n for g, _ in boxes if (n := quant_rate_note(weights, g, calibration))))
    notes += list(dict.fromkeys(n for g, _ in boxes if (n := achievable_bw_note(g))))   # measured bandwidth
    notes += [n for c in comms_used.values() for n in c.notes]
    if mode == "piecewise":
        notes.append(piecewise_note(model, rows, {**CALIBRATION, **calibration}))
    if sampling == "full":
        notes.append(sampling_note({**CALIBRATION, **calibration}))
    if model.is_mla:
        notes.append(MLA_NOTE)
    if model.experts and (prompt or load is not None):
        notes.append(MOE_TTFT_NOTE)
    meta = {
        "gpus": sorted({g.name for g, _ in boxes}), "model": model.to_dict(), "dtype": dtype, "weights": weights,
        "mode": mode, "sampling": sampling, "context": context, "prompt": prompt, "mem_util": mem_util,
        "boxes": [{"box": f"{g.key} + {c.label}", "gpu": g.to_dict(), "comm": c.describe()} for g, c in boxes],
        "calibration": {**CALIBRATION, **calibration}, "calibration_source": CALIBRATION_SOURCE,
        "error_bands": ERROR_BANDS, "error_band_source": BAND_SOURCE,
        "column_kinds": COLUMN_KINDS, "columns": COLUMN_DOCS, "notes": notes,
    }
    if csv_columns != CSV_COLUMNS:       # --ep / load columns (predictmoe.py, predictload.py)
        meta.update(csv_columns=csv_columns, ep=ep, ep_comm=ep_comm if ep_on else None, load=load and load.__dict__,
                    column_kinds={**COLUMN_KINDS, **extra_kinds},
                    columns={**COLUMN_DOCS, **extra_docs})
    return rows, notes, meta


def scale_by_engine(boxes, inspector_dir: str, mode: str, notes: list) -> list:
    """``--comm-overhead-from DIR``: each box's collective prices times the engine's in-service
    factor (NCCL Inspector's in-engine mean / the box's comm source at the same op, TP and size,
    calls-weighted: :func:`commprof.analysis.inengine.factor_against`); a note per source says it."""
    insp = inspector_rows(inspector_dir)
    scaled, out = {}, []
    for g, c in boxes:
        if id(c) not in scaled:
            f, rows = factor_against(insp, c, mode)
            if f is None:
                raise UsageError(f"--comm-overhead-from '{inspector_dir}': none of the engine's collectives "
                                 f"({', '.join(sorted({r['op'] + ' tp=' + str(r['tp']) for r in rows})) or 'none'}) "
                                 f"falls within {c.label}'s ops, TP degrees and sizes")
            n = sum(r["calls"] for r in rows if r["ratio"] is not None)
            why = (f"NCCL Inspector in {shown_path(inspector_dir)}: the engine's mean per call / {c.label}'s price at "
                   f"the same op, TP and size, calls-weighted over {n:,} calls")
            scaled[id(c)] = ScaledComm(c, f, why)
            notes.append(f"--comm-overhead-from: {c.label}'s collective prices x{f:.2f} ({why})")
        out.append((g, scaled[id(c)]))
    return out
