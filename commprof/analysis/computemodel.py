"""GPU compute of one decode step (and one prefill) from the model's shapes and a GPU's published figures.

Per layer and rank at TP=N, every kernel of the step is priced as a roofline with a floor:

    kernel_us = max(bytes / (bandwidth x bw_frac), flops / (peak x flop_frac), floor_us)

* bytes are the weights the kernel reads (one rank's shard, :func:`commprof.analysis.stepmodel.weights_per_rank`
  shapes) and, for attention, the KV cache of every sequence (``batch x context``, GQA heads per
  rank, sliding-window layers capped at their window: :func:`commprof.analysis.stepmodel.kv_bytes_per_sequence_per_rank`);
* flops are ``2 x tokens x weights`` for a GEMM and ``4 x batch x context x heads x head_dim`` for
  attention (QK^T and PV);
* ``floor_us`` is the shortest a kernel runs on a GPU (launch, ramp and tail of a tiny kernel); in
  eager mode each kernel also pays ``eager_gap_us`` of host launch gap, under CUDA graphs it does not;
* the step pays ``step_overhead_us`` of host work (scheduler, sampling, input preparation) once.

Prefill (TTFT) is the same sum over a ``prompt``-token step, compute bound: its GEMMs carry
``prompt`` tokens and attention is causal (``prompt^2 / 2`` per head).

The fractions and floors are :data:`CALIBRATION`: ``bw_frac`` and ``step_overhead_us`` fitted on
published measured decode figures (``scripts/bench_predict.py --fit``, results in
``results/bench/predict_calibration.*``), the others set; every number this module returns is
*modelled*. Only the standard library is imported here.
"""
from __future__ import annotations

from dataclasses import dataclass

from commprof.model.gpus import GpuSpec
from commprof.model.models import ModelShape, is_moe_layer, is_sliding
from commprof.analysis.stepmodel import check_tp, dtype_bytes, kv_bytes_per_sequence_per_rank, kv_heads_per_rank
from commprof.analysis.quant import FORMATS as QUANT_FORMATS, bytes_per_weight, gemm_dtype as quant_gemm_dtype

#: The modelled GPU's achievable fractions and floors. ``bw_frac`` and ``step_overhead_us`` are what
#: ``scripts/bench_predict.py --fit`` printed on the eight published figures of its ``FIGURES`` (NVIDIA
#: NIM, 2x H100, Llama-3.3-70B fp8 at concurrency 1/5/25; vLLM's performance dashboard, H100 and
#: A100 SXM, Llama-3.1-8B TP=1 and Llama-3-70B TP=4 at batch 8, bf16); held-out and in-sample errors
#: in ``results/bench/predict_calibration.md``. One ``bw_frac`` serves HBM and GDDR parts alike: the
#: only GDDR figure with a stated setup (8x L20, TP=8) is held out, too few to fit a second one.
#: ``flop_frac``, ``prefill_flop_frac``, ``floor_us`` and ``eager_gap_us`` are set, not fitted.
CALIBRATION = {
    "bw_frac": 0.64,            # achieved / datasheet memory bandwidth of a decode GEMM or attention kernel
    "flop_frac": 0.60,          # achieved / datasheet dense tensor FLOP/s (decode GEMMs at large batch)
    "prefill_flop_frac": 0.60,  # the same for prefill GEMMs
    "floor_us": 2.5,            # a kernel's shortest run on the GPU (graph replay)
    "eager_gap_us": 4.0,        # host launch gap per kernel without CUDA graphs
    "small_kernels_per_layer": 5,   # norms, rotary, activation, residual adds: floor-bound
    "step_overhead_us": 300.0,  # host work per step: scheduler, sampling, input preparation
}
CALIBRATION_SOURCE = ("bw_frac and step_overhead_us fitted by scripts/bench_predict.py --fit on NVIDIA NIM's "
                      "published ITL (https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance: Llama-3.3-70B "
                      "fp8 TP2 on 2x H100 80G) and vLLM's performance dashboard (https://buildkite.com/vllm/"
                      "performance-benchmark/builds/9555 and /9523: Llama-3.1-8B TP1 and Llama-3-70B TP4, batch 8, "
                      "on H100 and A100 SXM); the other constants set; see results/bench/predict_calibration.md")
MODES = ("graph", "eager")


@dataclass(frozen=True)
class Kernel:
    """One kernel of a step on one rank: what it reads and computes, and its modelled time."""

    name: str
    count: int          # how many of it the step runs (e.g. one per layer)
    bytes_read: float   # per run
    flops: float        # per run
    us: float           # modelled time per run, including its floor
    bound: str          # "memory", "compute" or "floor"


WEIGHT_DTYPES = tuple(QUANT_FORMATS)       # bf16, fp16, fp8, fp8-block, int4-awq, int4-gptq, w4a16


def weight_bytes_per_elem(weights: str, dtype: str) -> float:
    """Bytes of one weight of a quantized linear layer, scales and zero points included
    (:func:`commprof.analysis.quant.bytes_per_weight`); the activation dtype's when not quantized."""
    if weights not in WEIGHT_DTYPES:
        raise ValueError(f"weights {weights!r}: use one of {WEIGHT_DTYPES}")
    return bytes_per_weight(weights, dtype_bytes(dtype))


def _price(name, count, nbytes, flops, gpu: GpuSpec, dtype: str, cal: dict, flop_frac: float) -> Kernel:
    t_mem = nbytes / (gpu.mem_bandwidth_gbps * 1e3 * cal["bw_frac"])           # GB/s = 1e3 B/us
    t_fl = flops / (gpu.peak_tflops(dtype) * 1e6 * flop_frac)                 # TFLOP/s = 1e6 FLOP/us
    us = max(t_mem, t_fl, cal["floor_us"])
    bound = "floor" if us == cal["floor_us"] and us > max(t_mem, t_fl) else ("memory" if t_mem >= t_fl else "compute")
    return Kernel(name, int(count), float(nbytes), float(flops), float(us), bound)


def _shard(n: int, tp: int) -> int:
    return -(-n // tp)


def _attn_proj_elems(model: ModelShape, tp: int) -> tuple[int, int]:
    """(qkv-side, o) weight elements of one layer's attention on one rank."""
    h = model.hidden
    heads = model.q_heads // tp
    if model.is_mla:
        qk_dim = model.qk_nope_head_dim + model.qk_rope_head_dim
        q = (h * model.q_lora_rank + model.q_lora_rank * heads * qk_dim) if model.q_lora_rank else h * heads * qk_dim
        kv = (h * (model.kv_lora_rank + model.qk_rope_head_dim)
              + model.kv_lora_rank * heads * (model.qk_nope_head_dim + model.v_head_dim))
        return q + kv, heads * model.v_head_dim * h
    q_cols = heads * model.head_dim
    kv_cols = kv_heads_per_rank(model, tp) * model.head_dim
    return h * (q_cols + 2 * kv_cols), q_cols * h


def experts_touched(experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct routed experts a step of ``tokens`` tokens reads, with uniform routing:
    ``E x (1 - (1 - k/E)^tokens)``."""
    if experts <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def causal_pairs(tokens: int, window: int) -> float:
    """(query, key) pairs of causal attention over ``tokens`` tokens when each attends to at most
    ``window`` (itself included): ``sum over i of min(i, window)``."""
    w = min(window, tokens)
    return w * (w + 1) / 2 + (tokens - w) * w


def step_kernels(model: ModelShape, gpu: GpuSpec, tp: int, tokens: int, seqs: int, context: int,
                 dtype: str = "bf16", cal: dict | None = None, prefill: bool = False,
                 weights: str = "bf16") -> list[Kernel]:
    """The kernels of one forward step on one rank: ``tokens`` tokens of ``seqs`` sequences, each
    attending to ``context`` tokens (decode: tokens = seqs = batch; prefill: tokens = prompt,
    seqs = 1, causal attention over the prompt). ``dtype`` is the activations' and KV cache's;
    ``weights="fp8"`` reads 1-byte weights and runs the GEMMs at the GPU's FP8 rate."""
    cal = {**CALIBRATION, **(cal or {})}
    check_tp(model, tp)
    e = dtype_bytes(dtype)
    we = weight_bytes_per_elem(weights, dtype)
    gemm_dtype = quant_gemm_dtype(weights, gpu, dtype)     # fp8 tensor cores, or dequant to the activations'
    ff = cal["prefill_flop_frac"] if prefill else cal["flop_frac"]
    h, L = model.hidden, model.layers
    qkv, o = _attn_proj_elems(model, tp)
    heads = model.q_heads // tp
    out: list[Kernel] = []

    def add(name, count, nbytes, flops, gemm=True):
        if count:
            out.append(_price(name, count, nbytes, flops, gpu, gemm_dtype if gemm else dtype, cal, ff))

    act = tokens * h * e          # activations in and out of a GEMM: small beside the weights at decode
    add("qkv_proj", L, qkv * we + act, 2.0 * tokens * qkv)
    # attention: every sequence reads its KV cache; sliding layers only their window
    if model.is_mla:
        qk_dim, v_dim = model.kv_lora_rank + model.qk_rope_head_dim, model.kv_lora_rank
    else:
        qk_dim = v_dim = model.head_dim
    kv_tok_layer = kv_bytes_per_sequence_per_rank(model, tp, 1, dtype) / L
    n_slide = sum(1 for i in range(L) if is_sliding(model, i))
    for name, n, ctx in (("attention", L - n_slide, context),
                         ("attention_sliding", n_slide, min(context, model.sliding_window or context))):
        if prefill:      # causal: the i-th token attends to i tokens (or its window)
            pairs = causal_pairs(tokens, ctx)
            add(name, n, seqs * ctx * kv_tok_layer, 2.0 * pairs * heads * (qk_dim + v_dim), gemm=False)
        else:
            add(name, n, seqs * ctx * kv_tok_layer, 2.0 * seqs * ctx * heads * (qk_dim + v_dim), gemm=False)
    add("o_proj", L, o * we + act, 2.0 * tokens * o)
    moe_layers = sum(1 for i in range(L) if is_moe_layer(model, i))
    dense = L - moe_layers
    ffn_r = _shard(model.ffn, tp)
    add("gate_up_proj", dense, 2 * h * ffn_r * we + act, 4.0 * tokens * h * ffn_r)
    add("down_proj", dense, ffn_r * h * we + act, 2.0 * tokens * h * ffn_r)
    if moe_layers:
        ef = _shard(model.expert_ffn, tp)
        touched = experts_touched(model.experts, model.top_k, tokens)
        add("moe_router", moe_layers, h * model.experts * e, 2.0 * tokens * h * model.experts)
        add("moe_experts", moe_layers, touched * 3 * h * ef * we, 6.0 * tokens * model.top_k * h * ef)
        if model.shared_experts:
            sf = _shard(model.shared_expert_ffn or model.expert_ffn, tp)
            add("moe_shared", moe_layers, model.shared_experts * 3 * h * sf * we,
                6.0 * tokens * model.shared_experts * h * sf)
    add("small", L * int(cal["small_kernels_per_layer"]), 2 * act, 0.0, gemm=False)
    vocab_r = _shard(model.vocab, tp)
    logit_tokens = seqs
    add("lm_head", 1, vocab_r * h * e + logit_tokens * vocab_r * e, 2.0 * logit_tokens * h * vocab_r)
    return out


def step_compute(model: ModelShape, gpu: GpuSpec, tp: int, batch: int, context: int, dtype: str = "bf16",
                 mode: str = "graph", cal: dict | None = None, weights: str = "bf16", mixed_tokens: int = 0) -> dict:
    """One decode step of ``batch`` sequences at ``context`` tokens on one rank, modelled (us):
    ``mixed_tokens`` prompt tokens of other requests riding in the same step (chunked prefill under
    continuous batching) add their GEMM work (their attention is left out);
    ``kernel_us`` (the rooflines), ``floor_us`` (what the kernel floors add above them),
    ``gap_us`` (eager launch gaps and the step's host overhead), ``compute_us`` (their sum), with
    the bytes and FLOPs they come from and the kernel list."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: use one of {MODES}")
    cal = {**CALIBRATION, **(cal or {})}
    ks = step_kernels(model, gpu, tp, batch + int(mixed_tokens), batch, context, dtype, cal, weights=weights)
    return _totals(ks, mode, cal)


def _totals(ks: list[Kernel], mode: str, cal: dict) -> dict:
    n = sum(k.count for k in ks)
    total_us = sum(k.count * k.us for k in ks)
    roof_us = 0.0
    for k in ks:
        roof = k.us if k.bound != "floor" else 0.0
        roof_us += k.count * roof
    floor_us = total_us - roof_us
    gap_us = cal["step_overhead_us"] + (n * cal["eager_gap_us"] if mode == "eager" else 0.0)
    return {"kernel_us": roof_us, "floor_us": floor_us, "gap_us": gap_us, "compute_us": total_us + gap_us,
            "kernels": n, "bytes_read": sum(k.count * k.bytes_read for k in ks),
            "flops": sum(k.count * k.flops for k in ks), "by_kernel": [k.__dict__ for k in ks]}


def prefill_compute(model: ModelShape, gpu: GpuSpec, tp: int, prompt: int, dtype: str = "bf16",
                    mode: str = "eager", cal: dict | None = None, weights: str = "bf16") -> dict:
    """One ``prompt``-token prefill step on one rank (the whole prompt in one step), modelled: the
    same totals as :func:`step_compute`. Engines run prefill eagerly, so ``mode`` defaults to eager."""
    cal = {**CALIBRATION, **(cal or {})}
    ks = step_kernels(model, gpu, tp, prompt, 1, prompt, dtype, cal, prefill=True, weights=weights)
    return _totals(ks, mode, cal)
