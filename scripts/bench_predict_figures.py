"""Benchmark: ``commprof predict`` against the corpus of published, measured decode figures.

    python scripts/bench_predict_figures.py [--out results/bench] [--fit] [--breakdown ID ...] [--aic PATH | --no-aic]

The corpus is ``tests/data/published-decode/figures.csv`` (one row per published figure: engine,
GPU, interconnect, model, weights, TP, batch, prompt/output lengths, metric, source URL and table;
``role`` = ``fit`` or ``heldout``; see its SOURCE.md). Each figure is predicted with
:func:`commprof.analysis.predictmodel.predict_point` on the figure's reference interconnect profile,
converted to the figure's own metric (a serving TPOT/ITL is one decode step with the other requests'
prompt tokens mixed in; a latency benchmark's e2e/osl and a single stream's tok/s are the prefill
plus osl - 1 decode steps over osl), and compared: ratio = predicted / measured.

Writes ``predict_figures.csv`` (one row per figure) and ``predict_figures.md``/``.json`` (the table,
median and worst |error| for the fit and the held-out figures apart, the median ratio, the error
band per kind derived from the held-out residuals: :data:`commprof.analysis.errorband.ERROR_BANDS`
must equal what this prints). ``--fit`` prints the engine-collective and efficiency parameters
fitted on the ``fit`` figures only and stops. Nothing is timed: the figures are published
measurements, the predictions modelled.

NVIDIA AIConfigurator beside each figure where it has the system (``--aic``, default
``.venv-aic/bin/aiconfigurator`` when present; ``python -m venv .venv-aic && .venv-aic/bin/pip install
aiconfigurator``): ``aiconfigurator cli estimate`` on the same case (``scripts/bench_predict.py``'s
:func:`aic_ms`), for dense Llama and Qwen models in bf16 or fp8 on the systems it has (H100 SXM/PCIe,
H200, A100 SXM/PCIe, B200, L40S, RTX PRO 6000); each row says why it was not run otherwise.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchfile import measured, write_result  # noqa: E402

CORPUS = os.path.join(REPO, "tests", "data", "published-decode")
#: Weights spellings of the corpus the model may know under another name (first accepted wins).
WEIGHT_ALIASES = {"int4-awq": ("int4-awq", "int4", "w4a16", "awq")}


#: How the benchmark prices a figure's recorded ``mode`` (empty: as recorded). The corpus says how each figure ran
#: (``piecewise``: vLLM V1 0.8-0.10.x, whose CUDA graphs stop at every attention op); since the fourteenth pass of
#: issue 31 (docs/predict.md, rule (I)) each is priced so, with predict's ``--mode piecewise``.
PRICED_MODE: dict = {}
#: The prefill policy (``--prefill-steps``) a loaded serving figure is priced with, by the corpus' ``engine_gen``
#: (absent: predict's default, ``mixed``): SGLang's own, ``separate`` (a waiting prompt is a forward of its own
#: unless launched with ``--enable-mixed-chunk``, which the cookbook's launches are not), with the chunk SGLang
#: sizes by GPU memory (fourteenth pass of issue 31, rule (I)).
PRICED_PREFILL: dict = {"sglang": "separate"}


def priced_mode(f: dict) -> str:
    """The mode the benchmark prices figure ``f`` in (:data:`PRICED_MODE`)."""
    return PRICED_MODE.get(f["mode"], f["mode"])


def priced_cal(f: dict, cal: dict | None) -> dict:
    """The calibration figure ``f`` is priced with: ``cal``, with the sampler's top-p and penalties paid
    where the figure's benchmark states them (the corpus' ``sampling`` = ``full``: predict ``--sampling full``)."""
    return {**(cal or {}), "sampling_full": 1.0} if f.get("sampling") == "full" else dict(cal or {})


def measured_ms(f: dict) -> float:
    """The figure as ms per output token: ``ms`` as it is, ``ms e2e`` over osl, ``tok/s`` inverted."""
    v = float(f["value"])
    unit = f["unit"]
    if unit == "ms":
        return v
    if unit == "ms e2e":
        return v / int(f["osl"])
    if unit == "tok/s":
        return 1000.0 / v
    raise ValueError(f"{f['id']}: unit {unit!r}")


def load_figures(path: str = os.path.join(CORPUS, "figures.csv")) -> list[dict]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        for k in ("count", "tp", "batch", "isl", "osl"):
            r[k] = int(r[k])
        r["ep"] = int(r.get("ep") or 1)
        r["measured_ms"] = measured_ms(r)
    return rows


def pcie_card_of(gpu_key: str):
    """The PCIe card of the SXM module ``gpu_key`` names (gpus.toml, :func:`commprof.model.gpus.sibling_forms`),
    or None for a card sold in one form."""
    from commprof.model.gpus import get_gpu, sibling_forms

    g = get_gpu(gpu_key)
    return next((o for o in sibling_forms(g) if g.form_factor == "sxm" and o.form_factor == "pcie"), None)


def as_pcie_card(f: dict) -> dict:
    """Figure ``f`` on the PCIe form of its card, on the reference profile that card implies
    (:func:`commprof.analysis.predictmodel.default_comm`: PCIe of its generation, P2P on a data-center card)."""
    from commprof.analysis.predictmodel import default_comm

    card = pcie_card_of(f["gpu"])
    comm, _ = default_comm(card)
    link = f"PCIe {card.pcie_gen}.0 (identified)" if f["tp"] > 1 else f["interconnect"]
    return {**f, "gpu": card.key, "comm": comm, "interconnect": link}


def identify_boxes(figures: list[dict], cal: dict | None = None) -> dict[str, dict]:
    """Per source whose page does not state its card's form factor (``form_factor`` = ``not stated``, an
    SXM module also sold as a PCIe card, :func:`pcie_card_of`): which box its figures were measured on, SXM
    on NVLink as transcribed or the PCIe card, judged on the source's own ``fit`` figures at TP > 1 only
    (where the link decides; a single GPU differs by a few percent of bandwidth): the lower sum of squared
    log(predicted / measured) wins. A source without such a figure keeps SXM. Held-out figures never take part."""
    out: dict[str, dict] = {}
    for f in figures:
        if f.get("form_factor") != "not stated" or pcie_card_of(f["gpu"]) is None:
            continue
        src = out.setdefault(f["source_url"], {"gpu": f["gpu"], "judged_on": []})
        if f["role"] == "fit" and f["tp"] > 1:
            src["judged_on"].append(f)
    for src in out.values():
        sxm = [(f, p["ms"]) for f in src.pop("judged_on") if (p := predict_figure(f, cal)) is not None]  # priced at all
        src["fit_figures"] = [f["id"] for f, _ in sxm]
        if not sxm:
            src.update(box="sxm", why="form factor not stated, SXM taken: no fit figure at TP > 1 to tell")
            continue
        loss = {"sxm": sum(math.log(ms / f["measured_ms"]) ** 2 for f, ms in sxm),
                "pcie": sum(math.log(predict_figure(as_pcie_card(f), cal)["ms"] / f["measured_ms"]) ** 2
                            for f, _ in sxm)}
        box = "pcie" if loss["pcie"] < loss["sxm"] else "sxm"
        src.update(box=box, loss={k: round(v, 5) for k, v in loss.items()},
                   why=f"form factor not stated: {pcie_card_of(src['gpu']).key if box == 'pcie' else src['gpu']} "
                       f"identified on {len(sxm)} fit figure(s) at TP > 1 (sum of squared log ratio: SXM "
                       f"{loss['sxm']:.4f}, PCIe {loss['pcie']:.4f})")
    return out


def as_judged(figures: list[dict], boxes: dict[str, dict] | None = None) -> list[dict]:
    """The figures on the boxes :func:`identify_boxes` found (``box`` says which and why, per row)."""
    boxes = identify_boxes(figures) if boxes is None else boxes
    out = []
    for f in figures:
        b = boxes.get(f["source_url"]) if f.get("form_factor") == "not stated" else None
        if b is None:
            out.append({**f, "box": "as stated"})
        else:
            out.append({**(as_pcie_card(f) if b["box"] == "pcie" else f), "box": b["why"]})
    return out


_COMMS: dict = {}
_SHAPES: dict = {}


def _comm(spec: str):
    from commprof.analysis.commsource import comm_source

    if spec not in _COMMS:
        _COMMS[spec] = comm_source(spec)
    return _COMMS[spec]


def _model(name: str):
    from commprof.model.models import get_model

    if name not in _SHAPES:
        _SHAPES[name] = get_model(name)
    return _SHAPES[name]


def _load_row(f: dict, weights: str, cal: dict | None) -> dict:
    """The figure's box at concurrency ``batch`` with its ISL/OSL, through predict's load model; a
    median figure (``stat``) is the median step: a pure decode step while fewer than half of a
    request's steps carry another's prompt chunk, else a mixed one (the mean, ``tpot_ms``, blends them).
    The row keeps both steps (``decode_row``, ``mixed_row``) and the split (``split``) for :func:`breakdown`."""
    from commprof.analysis.predictload import carrying_step, load_point, load_spec, sglang_chunk, split_in_flight
    from commprof.model.gpus import get_gpu
    from commprof.model.registry import PredictConfig

    # the engine's own prefill policy (PRICED_PREFILL): SGLang's separate prefill forwards with the chunk it sizes
    # by GPU memory; else predict's defaults, --chunk 2048 and --prefill-steps mixed
    policy = PRICED_PREFILL.get(f.get("engine_gen", ""), "mixed")
    chunk = sglang_chunk(get_gpu(f["gpu"]).memory_gb) if policy == "separate" else PredictConfig().chunk
    spec = load_spec([f["batch"]], [], f["isl"], f["osl"], chunk, policy)
    steps: dict = {}

    def step_row(b, m, ctx, prompt=None):   # each step priced once: load_point's steps are the median's too
        if (b, m, ctx, prompt) not in steps:
            steps[b, m, ctx, prompt] = priced_point(f, b, ctx, weights, cal, prompt=prompt, mixed_tokens=m)
        return steps[b, m, ctx, prompt]
    row = load_point(step_row, spec, "concurrency", float(f["batch"]))
    sp = split_in_flight(float(row["requests_in_flight"]), spec)
    ctx = f["isl"] + f["osl"] // 2
    row.update(split=sp, decode_row=step_row(sp.decode_batch, 0, ctx),
               mixed_row=carrying_step(step_row, sp, spec, ctx)[0])
    row["median_ms"] = (row["mixed_row"] if sp.mixed_share >= 0.5 else row["decode_row"])["ms_per_token"]
    return row


#: The collective a figure's expert parallelism runs (``predict --ep-comm``): every corpus row with ``ep`` > 1
#: ran at data parallel 1 without an all-to-all backend, so the experts' output stays in the TP all-reduce.
PRICED_EP_COMM = "all-reduce"


def priced_point(f: dict, batch: int, ctx: int, weights: str, cal: dict | None, prompt: int | None = None,
                 mixed_tokens: int = 0) -> dict:
    """One predict row for figure ``f``'s box at ``batch`` and ``ctx``: ``predict_point``, then the figure's
    expert parallelism (its ``ep`` column) as ``predict --ep N --ep-comm`` :data:`PRICED_EP_COMM` prices it."""
    from commprof.analysis.predictmodel import predict_point
    from commprof.analysis.predictmoe import apply_ep
    from commprof.model.gpus import get_gpu

    model, gpu, comm = _model(f["model"]), get_gpu(f["gpu"]), _comm(f["comm"])
    r = predict_point(model, gpu, comm, f["tp"], batch, ctx, prompt=prompt, mode=priced_mode(f), weights=weights,
                      cal=cal, mixed_tokens=mixed_tokens)
    ep = int(f.get("ep") or 1)
    if ep > 1:
        r = apply_ep(r, model, gpu, comm, ep, batch + mixed_tokens, ctx, mode=priced_mode(f), cal=cal,
                     weights=weights, ep_comm=PRICED_EP_COMM)
    return r


def is_loaded(f: dict) -> bool:
    """A serving figure (TPOT or ITL) at concurrency > 1: priced through predict's load model."""
    return f["metric"] in ("TPOT", "ITL") and f["batch"] > 1


def predict_figure(f: dict, cal: dict | None = None) -> dict | None:
    """The figure's metric as predicted (ms per output token), with the step's compute and
    communication; None when the model cannot price the figure's weights."""
    cal = priced_cal(f, cal)
    serving = f["metric"] in ("TPOT", "ITL")
    ctx = f["isl"] + f["osl"] // 2
    # A serving figure at concurrency c > 1 is priced as `predict --concurrency c --isl --osl` prices it
    # (commprof.analysis.predictload; the engine's prefill policy, PRICED_PREFILL): decode steps, and steps that
    # also carry (or wait for) a prompt chunk of another request, blended by the share of a request's steps that meet one.
    loaded = is_loaded(f)
    r = None
    for w in WEIGHT_ALIASES.get(f["weights"], (f["weights"],)):
        try:
            if loaded:
                r = _load_row(f, w, cal)
            else:
                r = priced_point(f, f["batch"], ctx, w, cal, prompt=None if serving else f["batch"] * f["isl"])
            break
        except (ValueError, KeyError):
            continue
        except Exception as e:          # UsageError for an unknown --weights
            if type(e).__name__ != "UsageError":
                raise
    if r is None:
        return None
    ms = (r["median_ms"] if f.get("stat") == "median" else r["tpot_ms"]) if loaded else r["ms_per_token"]
    if not serving:      # the batch's prompts in one prefill step (the first token), then osl - 1 decode steps
        ms = (r["prefill_ms"] + (f["osl"] - 1) * r["ms_per_token"]) / f["osl"]
    return {"ms": ms, "step_ms": r["ms_per_token"], "compute_ms": r["compute_ms"], "comm_ms": r["comm_ms"],
            "comm_share_pct": r["comm_share_pct"], "row": r}


def kind_of(f: dict) -> str:
    """The error kind a figure belongs to (:func:`commprof.analysis.errorband.error_kind`)."""
    from commprof.analysis.errorband import error_kind

    return error_kind(f["tp"], f["comm"])


def datasheet_bound_ms(f: dict) -> float | None:
    """The figure's time with every byte at peak bandwidth, every FLOP at peak, no floors, no
    overheads and no communication: a measured figure below it did not run as described."""
    from commprof.analysis.computemodel import IDEAL

    p = predict_figure(f, IDEAL)
    return None if p is None else p["ms"] - p["comm_ms"]


def evaluate(figures: list[dict], cal: dict | None = None) -> list[dict]:
    rows = []
    for f in figures:
        p = predict_figure(f, cal)
        bound = datasheet_bound_ms(f)
        row = {"id": f["id"], "role": f["role"], "kind": kind_of(f), "engine": f["engine"], "gpu": f["gpu"],
               "tp": f["tp"], "interconnect": f["interconnect"], "comm": f["comm"], "model": f["model"],
               "weights": f["weights"], "batch": f["batch"], "isl": f["isl"], "osl": f["osl"], "mode": f["mode"],
               "metric": f["metric"], "measured_ms": round(f["measured_ms"], 4),
               "datasheet_bound_ms": None if bound is None else round(bound, 4),
               "source_url": f["source_url"], "where": f["where"], "box": f.get("box", "as stated")}
        if p is None:
            row.update(status="not priced", note=f"weights {f['weights']}: not in this model")
        elif f["measured_ms"] < bound:
            row.update(status="impossible", note="faster than the datasheet allows: not counted")
        else:
            row.update(status="counted", note="")
        if p is not None:
            from commprof.analysis.errorband import band

            lo, hi = band(p["ms"], row["kind"])
            row.update(predicted_ms=round(p["ms"], 4), predicted_lo_ms=round(lo, 4), predicted_hi_ms=round(hi, 4),
                       comm_ms=round(p["comm_ms"], 4), comm_share_pct=round(p["comm_share_pct"], 2),
                       ratio=round(p["ms"] / f["measured_ms"], 4),
                       in_band=lo <= f["measured_ms"] <= hi)
        rows.append(row)
    return rows


def summary(ratios: list[float]) -> dict:
    if not ratios:
        return {"n": 0}
    errs = [abs(r - 1) * 100 for r in ratios]
    return {"n": len(ratios), "median_ratio": round(statistics.median(ratios), 3),
            "median_abs_err_pct": round(statistics.median(errs), 1), "worst_abs_err_pct": round(max(errs), 1)}


def held_out_bands(rows: list[dict], min_n: int | None = None) -> dict:
    """Per kind, the band of measured / predicted over the held-out figures of that kind (its 10th
    to 90th percentile, with the extremes beside), and ``all`` over every held-out figure: what a
    predicted ms/token of that kind has been off by on figures the model never saw."""
    from commprof.analysis.errorband import KINDS, MIN_FIGURES

    min_n = MIN_FIGURES if min_n is None else min_n
    held = [r for r in rows if r["role"] == "heldout" and r["status"] == "counted"]
    out = {}
    for kind in (*KINDS, "all"):
        sub = [r for r in held if kind == "all" or r["kind"] == kind]
        inv = sorted(r["measured_ms"] / r["predicted_ms"] for r in sub)
        if len(inv) >= min_n:
            dec = statistics.quantiles(inv, n=10, method="inclusive")
            out[kind] = {"lo": round(dec[0], 3), "hi": round(dec[-1], 3), "min": round(inv[0], 3),
                         "max": round(inv[-1], 3), "n": len(inv)}
    return out


def fit(figures: list[dict], start: dict | None = None) -> dict:
    """The free calibration constants minimising (median, max) |log ratio| over the fit figures
    only: a coordinate search over :data:`commprof.analysis.computemodel.FITTED` and
    :data:`commprof.analysis.enginecomm.FITTED` (their grids), from the committed constants or, with
    ``start``, from them with those replaced (a second start: the search is local)."""
    from commprof.analysis.computemodel import CALIBRATION, FIT_GRID

    fitset = [f for f in figures if f["role"] == "fit"]

    def loss(cal):
        errs = []
        for f in fitset:
            p = predict_figure(f, cal)
            if p is not None:
                errs.append(abs(math.log(p["ms"] / f["measured_ms"])))
        errs.sort()
        # robust: the median plus the mean of the best 80% (a figure the model cannot hold, e.g. a
        # setup the page does not describe, must not drag every other prediction)
        core = errs[:max(1, int(round(0.8 * len(errs))))]
        return (statistics.median(errs) + statistics.mean(core), len(errs))

    import itertools

    cal = {k: CALIBRATION[k] for k in FIT_GRID}
    cal.update(start or {})
    best = loss(cal)
    # two groups of terms trade against each other, so each is searched jointly: the compute side
    # (bandwidth share, byte ramp, fill time and how it scales), and the GDDR share with the PCIe
    # collective terms (a GDDR box's decode step is its bytes and its collectives), and the MoE layer's
    # ramps with its tile cap; then every term in
    # turn; the rounds repeat until nothing improves
    joints = (("bw_frac", "half_bytes", "half_bytes_bw_scaled", "fill_us", "fill_sm_scaled", "fill_clock_scaled"),
              ("gddr_bw_frac", "pcie_skew_frac", "pcie_skew_graph_frac", "pcie_call_us"),
              # the MoE layer's terms: per-expert ramps and the tile cap price the same idle SMs two ways
              ("moe_expert_streams", "moe_stream_cap", "moe_tile_gbps", "moe_bw_frac"))
    for _ in range(4):
        start = best
        for joint in joints:
            # the structural switches (half_bytes_bw_scaled, fill_sm_scaled, fill_clock_scaled, moe_expert_streams)
            # are held at their argued values: FIT_GRID leaves them out (fourteenth pass of issue 31, rule (I))
            joint = tuple(k for k in joint if k in FIT_GRID)
            for combo in itertools.product(*(FIT_GRID[k] for k in joint)):
                trial = {**cal, **dict(zip(joint, combo))}
                l = loss(trial)
                if l < best:
                    best, cal = l, trial
        for k, grid in FIT_GRID.items():
            for v in grid:
                trial = {**cal, k: v}
                l = loss(trial)
                if l < best:
                    best, cal = l, trial
        if best >= start:
            break
    return {"cal": cal, "loss": best[0], "n": best[1]}


def breakdown(f: dict, cal: dict | None = None) -> list[str]:
    """The figure's modelled decode step on one rank, kernel by kernel (count, MB read per run, us per
    run with its ramp, us per step), then the host overhead and the collectives: what each term adds
    to the predicted ms/token. Lines of text; their us per step add up to the step's modelled time. Under
    load (a serving figure at concurrency > 1) the table is the pure decode step at the load's decode
    batch, and a last line says how the load blends it with the steps carrying a prompt chunk."""
    from commprof.analysis.computemodel import CALIBRATION, mem_frac_key, ramp_us as ramp_of, roofline_gbps, step_compute
    from commprof.model.gpus import get_gpu

    cal = {**CALIBRATION, **(cal or {})}
    p = predict_figure(f, cal)
    if p is None:
        return [f"{f['id']}: weights {f['weights']} not in this model"]
    r = p["row"]
    gpu = get_gpu(f["gpu"])
    load = []
    if "decode_row" in r:              # under load: the table is the pure decode step, then how the load blends it
        sp, mix = r["split"], r["mixed_row"]
        load = [f"load: concurrency {f['batch']}, ISL {f['isl']}, OSL {f['osl']}: {sp.mixed_share:.1%} of a request's "
                f"steps also carry a {sp.chunk_tokens}-token prompt chunk ({mix['ms_per_token']:.3f} ms, of which "
                f"collectives {mix['comm_ms']:.3f} ms); mean step (TPOT) {r['tpot_ms']:.3f} ms, median step "
                f"{r['median_ms']:.3f} ms"]
        r = r["decode_row"]
    comp = step_compute(_model(f["model"]), gpu, f["tp"], r["batch"], r["context"], mode=priced_mode(f), cal=cal,
                        weights=_weights_of(f))
    bw = roofline_gbps(gpu, cal)
    frac_name = mem_frac_key(gpu, cal)
    frac = float(cal[frac_name])
    out = [f"{f['id']}: {f['model']} {f['weights']} on {gpu.key} x{f['tp']}, batch {f['batch']}, context {r['context']}, "
           f"{f['mode']}{'' if priced_mode(f) == f['mode'] else ' (priced as ' + priced_mode(f) + ')'}; roofline {bw:g} GB/s x {frac_name} {frac:g}; measured {f['measured_ms']:.3f} ms, "
           f"predicted {p['ms']:.3f} ms ({f['metric']})",
           f"{'kernel':<20}{'count':>6}{'MB/run':>10}{'us/run':>9}{'us/step':>10}  bound"]
    for k in comp["by_kernel"]:
        out.append(f"{k['name']:<20}{k['count']:>6}{k['bytes_read'] / 1e6:>10.3f}{k['us']:>9.2f}"
                   f"{k['count'] * k['us']:>10.1f}  {k['bound']}")
    n = sum(k["count"] for k in comp["by_kernel"] if k["bytes_read"] > 0)
    ramp_us = ramp_of(gpu, cal)
    out += [f"{'host (gaps)':<20}{'':>6}{'':>10}{'':>9}{comp['gap_us']:>10.1f}",
            f"{'collectives':<20}{r['collectives_per_step']:>6}{'':>10}{'':>9}{r['comm_ms'] * 1e3:>10.1f}",
            f"{'step':<20}{'':>6}{comp['bytes_read'] / 1e6:>10.1f}{'':>9}{r['ms_per_token'] * 1e3:>10.1f}",
            f"of which the per-kernel ramp (half_bytes / bandwidth + fill_us, {ramp_us:.2f} us on this GPU) over "
            f"{n} memory kernels: {n * ramp_us / 1e3:.2f} ms; every byte at {frac_name}: "
            f"{comp['bytes_read'] / (bw * 1e3 * frac) / 1e3:.2f} ms"]
    out += _moe_tile_lines(_model(f["model"]), gpu, f["tp"], r["batch"], cal, bw * frac)
    if f.get("box", "as stated") != "as stated":       # the page does not say SXM or PCIe: identify_boxes
        out.append(f"box: {f['box']}")
    return out + load


def _moe_tile_lines(model, gpu, tp: int, tokens: int, cal: dict, dram_gbps: float) -> list[str]:
    """How the grouped expert GEMM's launches stream (moe_tile_gbps): each launch's working blocks and the
    rate they cap it at, beside DRAM's; nothing for a dense model or with the cap off."""
    from commprof.analysis.computemodel import experts_touched, moe_launches

    rate = float(cal.get("moe_tile_gbps", 0.0) or 0.0)
    if not model.experts or rate <= 0:
        return []
    active = experts_touched(model.experts, model.top_k, tokens)
    share = float(cal.get("moe_bw_frac", 1.0))          # the grouped GEMM's share of the streaming rate
    parts = [f"{name} {blocks:.0f} blocks x {rate:g} GB/s = {blocks * rate:.0f} GB/s"
             f"{' (binds)' if blocks * rate < dram_gbps * share else ''}"
             for name, _, _, blocks in moe_launches(active, tokens * model.top_k, model.hidden,
                                                    -(-model.expert_ffn // tp), cal)]
    return [f"moe_experts: {active:.1f} active experts a layer; " + ", ".join(parts)
            + f"; DRAM {dram_gbps:.0f} GB/s x moe_bw_frac {share:g} = {dram_gbps * share:.0f} GB/s "
            f"(moe_tile_gbps, moe_tile_n {cal.get('moe_tile_n', 64):g})"]


def _weights_of(f: dict) -> str:
    return WEIGHT_ALIASES.get(f["weights"], (f["weights"],))[0]


COLUMNS = ["id", "role", "kind", "status", "engine", "gpu", "tp", "interconnect", "comm", "model", "weights", "batch",
           "isl", "osl", "mode", "metric", "measured_ms", "predicted_ms", "predicted_lo_ms", "predicted_hi_ms",
           "ratio", "in_band", "comm_ms", "comm_share_pct", "datasheet_bound_ms", "note", "source_url", "where", "box"]


def aic_row(f: dict, exe: str) -> dict:
    """AIConfigurator's figure for ``f`` as ``aic_ms``/``aic_ratio``/``aic_note`` (the note says why not)."""
    from commprof.model.models import get_model
    from bench_predict import AIC_FAMILIES, AIC_SYSTEMS, aic_ms

    m = get_model(f["model"])
    why_not = [(f["gpu"] not in AIC_SYSTEMS, f"AIConfigurator has no {f['gpu']} system"),
               (bool(m.experts), "MoE model: not run here"),
               (f["weights"] not in ("bf16", "fp16", "fp8"), f"{f['weights']} weights: not run here"),
               (not m.name.startswith(AIC_FAMILIES), f"{m.name}: not run here")]
    why = next((text for hit, text in why_not if hit), "")
    if why:
        return {"aic_ms": None, "aic_ratio": None, "aic_note": why}
    case = {**f, "metric": "e2e / osl" if f["metric"] in ("e2e/osl", "tok/s") else f["metric"]}
    r = aic_ms(case, exe)
    if not r or "ms" not in r:
        return {"aic_ms": None, "aic_ratio": None, "aic_note": (r or {}).get("error", "no estimate")}
    return {"aic_ms": round(r["ms"], 4), "aic_ratio": round(r["ms"] / f["measured_ms"], 4), "aic_note": r["command"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    ap.add_argument("--fit", action="store_true", help="print the constants fitted on the fit figures and stop")
    ap.add_argument("--fit-start", default="", metavar="K=V,...",
                    help="with --fit: start the search from the committed constants with these replaced, e.g. "
                         "moe_stream_cap=0,moe_tile_gbps=10")
    default_aic = os.path.join(REPO, ".venv-aic", "bin", "aiconfigurator")
    ap.add_argument("--aic", default=default_aic if os.path.exists(default_aic) else "",
                    help="aiconfigurator executable, beside each figure where it has the system (skipped when absent)")
    ap.add_argument("--no-aic", dest="aic", action="store_const", const="", help="leave AIConfigurator out")
    ap.add_argument("--breakdown", metavar="ID", action="append", default=[],
                    help="print figure ID's modelled step kernel by kernel and stop (repeatable)")
    args = ap.parse_args()
    raw = load_figures()
    boxes = identify_boxes(raw)
    figures = as_judged(raw, boxes)
    if args.breakdown:
        by_id = {f["id"]: f for f in figures}
        for fid in args.breakdown:
            if fid not in by_id:
                print(f"--breakdown {fid}: no such figure in {os.path.join(CORPUS, 'figures.csv')}", file=sys.stderr)
                return 2
            print("\n".join(breakdown(by_id[fid])) + "\n")
        return 0
    if args.fit:
        from commprof.analysis.computemodel import FIT_GRID

        start = {}
        for item in filter(None, args.fit_start.split(",")):
            key, _, val = (x.strip() for x in item.partition("="))
            if key not in FIT_GRID:
                print(f"--fit-start {item}: {key!r} is not a fitted constant ({', '.join(FIT_GRID)})", file=sys.stderr)
                return 2
            try:
                num = float(val)
            except ValueError:
                num = math.nan
            if not (math.isfinite(num) and num >= 0):
                print(f"--fit-start {item}: {val!r} is not a finite number >= 0", file=sys.stderr)
                return 2
            start[key] = num
        print(fit(figures, start))
        return 0
    from commprof.analysis.computemodel import CALIBRATION
    from commprof.analysis.errorband import ERROR_BANDS
    from commprof.model.machine import now_iso

    start = now_iso()
    rows = evaluate(figures)
    aic_on = bool(args.aic)
    if aic_on:
        by_id = {f["id"]: f for f in figures}
        for r in rows:
            r.update(aic_row(by_id[r["id"]], args.aic))
    counted = [r for r in rows if r["status"] == "counted"]
    fit_s = summary([r["ratio"] for r in counted if r["role"] == "fit"])
    held_s = summary([r["ratio"] for r in counted if r["role"] == "heldout"])
    by_kind = {k: summary([r["ratio"] for r in counted if r["role"] == "heldout" and r["kind"] == k])
               for k in sorted({r["kind"] for r in counted})}
    bands = held_out_bands(rows)
    in_band = [r for r in counted if r["role"] == "heldout" and r["in_band"]]
    met = bool(held_s["n"]) and held_s["median_abs_err_pct"] <= 10 and held_s["worst_abs_err_pct"] <= 25 \
        and 0.95 <= held_s["median_ratio"] <= 1.05
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "predict_figures.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    result = {**measured(__file__, start, "commprof predict against published measured decode figures "
                                          "(tests/data/published-decode/figures.csv), fit and held-out figures apart"),
              "kind": "modelled-vs-published", "calibration": CALIBRATION, "figures": rows, "fit": fit_s,
              "boxes": boxes,
              "held_out": held_s, "held_out_by_kind": by_kind, "held_out_bands": bands,
              "error_bands_in_code": ERROR_BANDS, "bands_match_code": bands == ERROR_BANDS,
              "target": "held-out figures: median |error| <= 10%, every figure within 25%, median ratio 0.95-1.05",
              "met": met}
    if aic_on:
        from bench_predict import aic_version

        both = [r for r in counted if r.get("aic_ratio") is not None]
        result["aiconfigurator"] = {
            "version": aic_version(args.aic),
            "where_it_ran": {part: {"n": len(rs), "commprof": summary([r["ratio"] for r in rs]),
                                    "aiconfigurator": summary([r["aic_ratio"] for r in rs])}
                             for part, rs in (("all", both), ("fit", [r for r in both if r["role"] == "fit"]),
                                              ("heldout", [r for r in both if r["role"] == "heldout"]))}}
    table = ["| figure | role | kind | GPU x TP | weights | batch | metric | measured ms | predicted ms (band) | ratio | "
             "comm share | AIConfigurator ms (ratio) | source |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "predicted_ms" in r:
            pred = f"{r['predicted_ms']:.2f} ({r['predicted_lo_ms']:.2f}-{r['predicted_hi_ms']:.2f})"
            ratio = f"{r['ratio']:.3f}" + ("" if r["status"] == "counted" else f" ({r['status']})")
            share = f"{r['comm_share_pct']:.0f}%"
        else:
            pred, ratio, share = "-", r["status"] + ": " + r["note"], "-"
        aic = ("not run (no --aic)" if not aic_on else
               f"{r['aic_ms']:.2f} ({r['aic_ratio']:.3f})" if r.get("aic_ratio") is not None else "- " + r["aic_note"])
        table.append(f"| {r['id']} | {r['role']} | {r['kind']} | {r['gpu']} x{r['tp']} | {r['weights']} | {r['batch']} | "
                     f"{r['metric']} | {r['measured_ms']:.3f} | {pred} | {ratio} | {share} | {aic} | "
                     f"{r['source_url']} ({r['where']}) |")

    def line(name, s):
        if not s.get("n"):
            return f"{name}: none"
        return (f"{name}: median ratio {s['median_ratio']}, median |error| {s['median_abs_err_pct']}%, "
                f"worst {s['worst_abs_err_pct']}% over {s['n']} figures")

    table += ["", f"Commit: {result['versions'].get('commprof_commit')}. Constants: {CALIBRATION}.",
              "", line("Fit figures (the calibration saw them)", fit_s) + ".",
              line("Held-out figures (never used to fit anything)", held_s) + "."]
    for k, s in by_kind.items():
        table.append("- " + line(f"held out, {k}", s))
    if aic_on:
        a = result["aiconfigurator"]
        table.append("")
        table += [f"AIConfigurator {a['version']} beside commprof where it ran ({part}): " +
                  (line("commprof", v["commprof"]) + "; " + line("AIConfigurator", v["aiconfigurator"])
                   if v["n"] else "none") + "." for part, v in a["where_it_ran"].items()]
    table += ["", "Error band per kind (measured / predicted over the held-out figures, 10th to 90th percentile; "
              "extremes in brackets): " +
              "; ".join(f"{k} {v['lo']}-{v['hi']} [{v['min']}-{v['max']}] (n={v['n']})" for k, v in bands.items()) +
              f". commprof.analysis.errorband.ERROR_BANDS {'matches' if bands == ERROR_BANDS else 'DOES NOT match'} these.",
              f"Held-out figures inside their band: {len(in_band)} of {held_s['n']} (the band is drawn from these "
              "same residuals: it says how far off a prediction of its kind has been on figures the fit never saw, "
              "not a confidence interval; a kind with fewer than 3 held-out figures takes the 'all' band).",
              "Boxes where the page does not state the card's form factor (identified on the source's own fit "
              "figures at TP > 1, never on held-out ones): " +
              "; ".join(f"{src} -> {b['why']}" for src, b in boxes.items()) + ".",
              f"Figures recorded as run under piecewise CUDA graphs (vLLM V1 0.8-0.10.x), priced as "
              f"{PRICED_MODE.get('piecewise', 'piecewise')} (PRICED_MODE; docs/predict.md, twelfth to fourteenth passes of "
              f"issue 31): {sum(r['mode'] == 'piecewise' for r in rows)}. Loaded serving figures priced with their engine's "
              f"prefill policy (PRICED_PREFILL {PRICED_PREFILL}; else mixed): "
              f"{sum(1 for f in figures if f.get('engine_gen') in PRICED_PREFILL and is_loaded(f))}.",
              f"Not priced: {', '.join(r['id'] for r in rows if r['status'] == 'not priced') or 'none'}. "
              f"Not counted (faster than the datasheet): {', '.join(r['id'] for r in rows if r['status'] == 'impossible') or 'none'}."]
    write_result(args.out, "predict_figures", "commprof predict vs published decode figures", result, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
