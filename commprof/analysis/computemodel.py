"""GPU compute of one decode step (and one prefill) from the model's shapes and a GPU's published figures.

Per layer and rank at TP=N, every kernel of the step is priced as a roofline with a floor:

    kernel_us = max((bytes + half_bytes) / (bandwidth x bw_frac), flops / (peak x flop_frac), floor_us)

* ``bandwidth`` is the datasheet's, or, where ``commprof/data/gpus.toml`` gives a GPU a published
  measured achievable bandwidth below it (``mem_bandwidth_achievable_gbps``, with its source: the
  H20, from a device-local copy measured on the H20-3e at about 2.2 TB/s, under half that part's
  4.8 TB/s datasheet), that one
  (:attr:`commprof.model.gpus.GpuSpec.roofline_bandwidth_gbps`); the datasheet bound keeps the datasheet;

* bytes are the weights the kernel reads (one rank's shard, :func:`commprof.analysis.stepmodel.weights_per_rank`
  shapes) and, for attention, the KV cache of every sequence (``batch x context``, GQA heads per
  rank, sliding-window layers capped at their window: :func:`commprof.analysis.stepmodel.kv_bytes_per_sequence_per_rank`);
* flops are ``2 x tokens x weights`` for a GEMM and ``4 x batch x context x heads x head_dim`` for
  attention (QK^T and PV);
* ``half_bytes`` makes the achieved bandwidth fall with the bytes a kernel moves: ``bw_frac`` at
  large kernels, half of it at ``half_bytes`` (a small GEMM of a small model, or a large model's
  GEMM split 8 ways, is further from the roofline than the big one);
* ``floor_us`` is the shortest a kernel runs on a GPU (launch, ramp and tail of a tiny kernel); in
  eager mode a kernel shorter than ``eager_gap_us`` (the host's launch time) waits for the next
  launch, a longer one hides it; under CUDA graphs there is no such wait;
* the step pays ``step_overhead_us`` of host work (scheduler, sampling, input preparation) once, and
  ``sampling_full_us`` more where it samples with top-p and penalties (``--sampling full``);
* under piecewise CUDA graphs (vLLM V1 0.7-0.10.x) the host runs each layer's attention op from Python
  between captured pieces: the step waits for the host where its time for the layers
  (``piecewise_host_us``) exceeds the GPU's work; an MLA model there runs that engine's own DeepSeek path,
  whose extra kernels (unfused expert routing, the shared experts' own MLP) the GPU pays
  (``piecewise_path_kernels``).

Prefill (TTFT) is the same sum over a ``prompt``-token step, compute bound: its GEMMs carry
``prompt`` tokens and attention is causal (``prompt^2 / 2`` per head).

The fractions and floors are :data:`CALIBRATION`, fitted on the ``fit`` figures of the published
corpus (``scripts/bench_predict_figures.py --fit``; results, fit and held out apart, in
``results/bench/predict_figures.*``), the others set; every number this module returns is
*modelled*. Only the standard library is imported here.
"""
from __future__ import annotations

from dataclasses import dataclass

from commprof.model.gpus import GpuSpec
from commprof.model.models import ModelShape, is_moe_layer, is_sliding
from commprof.analysis.stepmodel import check_tp, dtype_bytes, kv_bytes_per_sequence_per_rank, kv_heads_per_rank
from commprof.analysis.quant import FORMATS as QUANT_FORMATS, bytes_per_weight, gemm_dtype as quant_gemm_dtype

#: The modelled GPU's achievable fractions, floors and the engine's per-collective terms.
#: Every constant of :data:`FIT_GRID` is what ``scripts/bench_predict_figures.py --fit`` finds on the 39
#: ``fit`` figures of ``tests/data/published-decode/figures.csv`` (NVIDIA NIM 2x H100 fp8; vLLM's dashboard
#: on H100/A100 SXM; Qwen's speed benchmarks on A100 and H20, AWQ and MoE among them; 8x L20 eager;
#: QwQ-32B-AWQ on RTX 5090, RTX 3090 Ti and 2x RTX 4070 Ti SUPER; silybench Qwen3-8B on H100; SGLang's
#: cookbook, DeepSeek-R1 and Qwen3-235B on 8x B200 under load); the 51 held-out figures were never used
#: to fit anything (the committed constants are the fit's fixed point; the ninth pass searched from two
#: starts, the committed constants and the MoE ramps off with the tile cap on, and kept the lower loss).
#: Errors per figure, fit and held out apart, in ``results/bench/predict_figures.md``. ``flop_frac``,
#: ``prefill_flop_frac``, ``floor_us`` and ``small_kernels_per_layer`` are set, not fitted; so, since the
#: fourteenth pass of issue 31, are the model's structural switches (``half_bytes_bw_scaled``, ``fill_sm_scaled``,
#: ``fill_clock_scaled``, ``moe_expert_streams``), held at the values their arguments give (Little's law, the
#: SMs' shared fixed work, the tile cap in place of per-expert ramps) instead of flipped by a refit.
CALIBRATION = {
    "bw_frac": 0.74,            # best achieved / datasheet memory bandwidth (a large decode GEMM or attention read)
    # the same on a GDDR card (gpus.toml memory_type gddr6/gddr6x/gddr7); 0 = bw_frac on every memory.
    # A decode GEMV keeps a bounded number of bytes in flight per SM; by Little's law the bytes a memory
    # needs in flight are its bandwidth x latency, per SM about 5-7 KB on a GDDR card (RTX 4090: 1008 GB/s
    # over 128 SMs) and 11-18 KB on an HBM part (A100: 2039 GB/s over 108, H100: 3350 over 132), so the
    # same kernels stream nearer a GDDR card's datasheet (a plain read kernel reaches 91% of a 4090's
    # 1008 GB/s, https://github.com/krrishnarraj/clpeak/issues/106). Fitted on the GDDR fit figures.
    "gddr_bw_frac": 0.88,
    "flop_frac": 0.60,          # achieved / datasheet dense tensor FLOP/s (decode GEMMs at large batch)
    "prefill_flop_frac": 0.60,  # the same for prefill GEMMs
    "floor_us": 2.5,            # a kernel's shortest run on the GPU (graph replay)
    "eager_gap_us": 6.0,        # host time to launch one kernel without CUDA graphs (hidden behind longer kernels)
    "small_kernels_per_layer": 5,   # norms, rotary, activation, residual adds: floor-bound
    "step_overhead_us": 500.0,   # host work per step: scheduler, sampling, input preparation
    # Efficiency that falls with the work per kernel: a memory-bound kernel of b bytes runs
    # (b + half_bytes) / (bandwidth x bw_frac), i.e. it reaches half of its best bandwidth at
    # b = half_bytes (the bytes in flight a GPU needs to cover its memory latency, by Little's law:
    # a small GEMM at TP=8 or of a small model never has them). 0 = one bw_frac for every shape.
    "half_bytes": 500000.0,
    # 1: half_bytes is quoted at an A100's bandwidth (HALF_REF_GBPS) and a GPU streaming B GB/s needs
    # half_bytes x B / HALF_REF_GBPS in flight (Little's law: bandwidth x latency), so the ramp costs the
    # same time on a slow and a fast memory; 0: the same bytes on every GPU (a slow memory pays longer).
    "half_bytes_bw_scaled": 1.0,
    # The same ramp as a time: a memory-bound kernel pays fill_us on top of its bytes (launch into
    # the graph, the first loads' latency, the tail wave). By Little's law the bytes a GPU needs in
    # flight are bandwidth x latency, so a fixed time, not fixed bytes, is the same on a slow and a
    # fast memory; half_bytes, a fixed byte count, costs a GDDR card (1 TB/s) 2-3x the time it costs
    # an HBM part. 0 = none.
    "fill_us": 5.0,
    # 1: fill_us is an A100's (FILL_REF_SMS streaming multiprocessors) and a GPU with n SMs pays
    # fill_us x FILL_REF_SMS / n: the fixed work of a kernel beyond its bytes (each thread block's
    # prologue, partial-sum reduction and epilogue, the tail wave) is done by the SMs side by side, so it
    # shrinks with their number, not with DRAM bandwidth; 0: the same time on every GPU.
    "fill_sm_scaled": 1.0,
    # 1 (with fill_sm_scaled): that fixed work runs at the SMs' clock too, so a GPU whose SMs boost to
    # f MHz pays a further FILL_REF_CLOCK_MHZ / f (gpus.toml boost_clock_mhz, the vendor's figure; a
    # GPU without one is taken at the reference clock): a GeForce card at 2.5 GHz does a kernel's
    # prologue, partial-sum reduction and epilogue in 0.56 of the time an A100 at 1.41 GHz does. 0: SMs only.
    "fill_clock_scaled": 1.0,
    # 4-bit weight-only GEMMs (AWQ/GPTQ/w4a16 via Marlin) on Hopper reach this share of the
    # bandwidth a 16-bit GEMM reaches there (quant_bw_scale); 1 = the same.
    "int4_hopper_frac": 0.6,
    # Per-SM streaming rate (GB/s): a kernel's bytes pass the SMs' load pipes (bytes in flight per
    # SM / memory latency, Little's law) and DRAM in series; 0 = DRAM only.
    "sm_stream_gbps": 0.0,
    # 1: a grouped MoE expert GEMM pays the per-kernel ramp once per active expert; 0: once per launch.
    # The ninth pass's fit turned it off: with the tile cap (moe_tile_gbps) pricing the SMs a small
    # grouped GEMM leaves idle, per-expert ramps would price them twice.
    "moe_expert_streams": 0.0,
    # ... but for at most this many experts (0 = no bound): the grouped GEMM's tiles of different
    # experts run side by side over the SMs, so beyond a few experts (a batch that touches most of a
    # layer's experts) more experts fill SMs that were idle instead of adding their ramps one after
    # another. Fitted on the fit figures (per launch: moe_gemm_launches below); the batch-1 figures
    # touch top_k experts and do not see it.
    "moe_stream_cap": 0.0,
    # Set from the engines' source, not fitted: the fused MoE path of a decode step is two grouped
    # GEMM launches (w13, then w2), each paying the ramps above, and four small kernels around them
    # (top-k routing, moe_align_block_size, the activation, moe_sum): vLLM's
    # vllm/model_executor/layers/fused_moe/fused_moe.py (fused_experts_impl), which SGLang's
    # fused_moe_triton adapts. 1 and 0 = the whole MoE layer as one launch.
    "moe_gemm_launches": 2.0,
    "moe_aux_kernels": 4.0,
    # A grouped expert GEMM fills only as many SMs as it has output tiles: the fused MoE kernel's grid
    # is (rows of each active expert, padded to BLOCK_SIZE_M) x (N / BLOCK_SIZE_N), and it has no
    # split-K, so at a small batch w13 (N = 2 x expert_ffn / tp) and w2 (N = hidden) are
    # ``active x ceil(N / moe_tile_n)`` working tiles, one thread block each, and a launch streams
    # at most ``moe_tile_gbps`` per tile (the bytes one block keeps in flight over the memory's
    # latency, Little's law): min(DRAM x bw_frac, tiles x moe_tile_gbps). A TP=8 shard of a
    # 128-expert model at batch 1 (8 experts x 6 tiles of w13) leaves most of a B200's 148 SMs idle;
    # a TP=1 30B-A3B (8 x 24 tiles) fills an H20's 78. moe_tile_n is set from SGLang's tuned
    # fused_moe configs at M=1 (python/sglang/srt/layers/moe/fused_moe_triton/configs: E=128,N=192
    # on H100, E=128,N=768 on H20, E=257,N=256 fp8 block on B200: BLOCK_SIZE_N 64); moe_tile_gbps
    # is fitted (0 = off: the launch streams at DRAM's rate).
    "moe_tile_n": 64.0,
    "moe_tile_gbps": 15.0,
    # The grouped expert GEMM streams at this share of the rate a dense GEMM of the same bytes reaches where
    # DRAM binds it (the tile cap above binds first at a small batch): a fused MoE kernel gathers each active
    # expert's few token rows by index (sorted_token_ids) and pads them to its tile, so its loads are less
    # regular than a dense GEMV's. Fitted (fourteenth pass of issue 31: SGLang's DeepSeek-R1 and Qwen3-235B
    # figures at concurrency 16-64, where a step touches most experts); 1 = a dense GEMM's rate.
    "moe_bw_frac": 0.75,
    # Set from the engines' source, not fitted: an MLA layer (DeepSeek-V2/V3/R1, Kimi-K2) on SGLang's
    # absorbed decode path (python/sglang/srt/models/deepseek_v2.py, forward_absorb) reads its q/kv-side
    # weights in four launches, the fused q_a + kv_a down-projection, q_b, and the two absorbed batched
    # products with w_kc and w_vc, each with its ramp, and runs two norms of its own (q_a_layernorm,
    # kv_a_layernorm) beside the layer's others. 1 and 0 = the q/kv side as one GEMM, no extra norms.
    "mla_proj_launches": 4.0,
    "mla_norm_kernels": 2.0,
    # The collective as the engine pays it (commprof.analysis.enginecomm): per call under CUDA
    # graphs, more per call in eager mode, and the rank skew of NCCL over PCIe (a fraction of the
    # loop's time; pcie_skew_frac in eager mode, where each rank's host launches each collective,
    # pcie_skew_graph_frac under CUDA graphs), plus a fixed cost per NCCL call on PCIe.
    "coll_graph_us": 2.0,
    "coll_eager_us": 0.0,
    "pcie_skew_frac": 1.0,
    "pcie_skew_graph_frac": 0.25,
    "pcie_call_us": 15.0,
    # 1: the roofline starts from a GPU's published measured achievable bandwidth where gpus.toml
    # gives one lower than the datasheet (mem_bandwidth_achievable_gbps, with its source); 0: the datasheet
    "achievable_bw": 1.0,
    # Piecewise CUDA graphs (mode "piecewise": vLLM's V1 engine from 0.7 to 0.10.x captures the layers
    # between attention ops and runs each attention op from Python; from 0.11 its default captures
    # decode steps whole). The host then does per layer: one graph piece's launch and the attention
    # op's dispatch and kernel launches. On the GPU each launch made outside a graph waits as in eager
    # mode (piecewise_launch_us); the host launches ahead of the GPU, so a step costs
    # step_overhead_us + max(GPU work, layers x host per layer) (piecewise_host_us).
    # Set, not fitted: piecewise_layer_us is the host time per layer of a standard (FlashAttention)
    # attention op, from a published A/B in which the piecewise run is host-bound (vLLM issue #47089,
    # Qwen3-0.6B, TP1, B200, vLLM 0.23.0, batch 1: median TPOT 3.64 ms piecewise vs 1.53 ms full graph;
    # (3.64 ms - step_overhead_us) / 28 layers). An attention op that launches more kernels pays
    # eager_gap_us for each one beyond piecewise_attn_kernels: vLLM's V1 FlashAttention op launches 2
    # (reshape_and_cache_flash, flash_attn_varlen_func); its MLA decode op with FlashMLA 8
    # (concat_and_cache_mla, the W_UK batched product, the q concatenation, FlashMLA's split-KV and
    # combine kernels, the W_UV batched product, its reshape copy, the copy into the output):
    # vllm/v1/attention/backends/flash_attn.py and mla/common.py, mla/flashmla.py.
    "piecewise_layer_us": 112.0,
    "piecewise_attn_kernels": 2.0,
    "piecewise_mla_attn_kernels": 8.0,
    # Set from the engines' source, not fitted: the kernels vLLM V1 0.7-0.10.x's DeepSeek path (its
    # vllm/model_executor/models/deepseek_v2.py) launches per layer of an MLA model beyond the fused path this
    # inventory takes from SGLang (mla_proj_launches above), counted at decode batch 1 in the vLLM 0.10.1 and
    # SGLang 0.5.6 wheels (Inductor's fusion of vLLM's compiled pieces checked on a CPU build): per MLA layer 3
    # (rotary as two kernels where SGLang's is one in place, the attention op's zero-filled output buffer, the
    # query concatenation and the output copy, less FA3's scheduler kernel that FlashMLA does without); per MoE
    # layer the grouped top-k routing as 10 kernels (vllm/model_executor/layers/fused_moe/fused_moe.py
    # grouped_topk: six Inductor kernels, three top-k calls and a sort) where SGLang's moe_fused_gate is one:
    # 9 more; the shared experts as their own MLP (gate_up GEMM, activation, down GEMM) and the scaled add,
    # where SGLang folds them into the routed GEMM as one more expert: 4 more, and 2 more where the GEMMs take
    # quantized activations (W8A8: a per-token-group quant kernel before each). vLLM fused the routing from
    # 0.10.2 (vllm-project/vllm#23274; the sigmoid and bias too in #28124), so `graph` (vLLM >= 0.11, SGLang)
    # leaves them out (0.10.2 runs piecewise with the fused routing: 9 fewer a MoE layer than priced here).
    # MLA models only: GLM-4.5's 160 experts miss SGLang's fused gate (a power of two), so there vLLM 0.10.1's
    # routing is no longer than SGLang's and the shared experts' 4 net about 1 (counted in the same wheels).
    # Kimi-K2's single expert group takes about 2 fewer routing kernels in vLLM than DeepSeek's 8 groups.
    # Each is priced as a small kernel (the activation's bytes, floor_us at least).
    "piecewise_mla_extra_kernels": 3.0,
    "piecewise_moe_routing_kernels": 9.0,
    "piecewise_shared_expert_kernels": 4.0,
    "piecewise_shared_quant_kernels": 2.0,
    # The sampler's own work per step beyond a plain draw (greedy, or temperature alone), paid with
    # sampling_full 1 (predict --sampling full): top-p / top-k over the whole vocabulary (each sequence's
    # logits sorted) and repetition, presence and frequency penalties (each sequence's prompt and output
    # tokens counted again every step): vLLM V0's slow sampler path (vllm/model_executor/layers/sampler.py,
    # _apply_penalties and _apply_top_k_top_p, run eagerly after the step's graph). Fitted on the fit
    # figures whose benchmark states those settings: Qwen2.5's speed benchmark (vLLM 0.6.3, batch 1;
    # QwenLM/Qwen2.5 examples/speed-benchmark/speed_benchmark_vllm.py: top_p 0.8 and the three penalties).
    "sampling_full_us": 1250.0,
    "sampling_full": 0.0,
}
CALIBRATION_SOURCE = ("bw_frac (HBM) and gddr_bw_frac (GDDR cards, gpus.toml memory_type), half_bytes (scaled with the "
                      "GPU's bandwidth, half_bytes_bw_scaled), fill_us (shared by the SMs at their clock, fill_sm_scaled "
                      "and fill_clock_scaled: x 108 / sm_count x 1410 / boost_clock_mhz), "
                      "step_overhead_us, eager_gap_us, int4_hopper_frac (4-bit "
                      "weight-only GEMMs on Hopper: Marlin is built for Ampere, "
                      "https://github.com/IST-DASLab/marlin_artifact), moe_stream_cap, moe_tile_gbps, moe_bw_frac, sm_stream_gbps and the "
                      "engine-collective terms "
                      "(coll_graph_us, coll_eager_us, pcie_skew_frac, pcie_skew_graph_frac, pcie_call_us) fitted by scripts/bench_predict_figures.py --fit "
                      "on the fit figures of tests/data/published-decode/figures.csv (NVIDIA NIM "
                      "https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance, vLLM's performance dashboard "
                      "https://buildkite.com/vllm/performance-benchmark/builds/, Qwen's speed benchmarks "
                      "https://github.com/QwenLM/Qwen2.5 docs, vLLM issue #4852, SGLang's cookbook "
                      "https://github.com/sgl-project/sgl-cookbook); custom all-reduce from "
                      "sgl-project/sglang #2904; the MoE layer's kernels (moe_gemm_launches, moe_aux_kernels) from vLLM's "
                      "vllm/model_executor/layers/fused_moe/fused_moe.py; the grouped GEMM's tile width (moe_tile_n) from "
                      "SGLang's tuned fused_moe configs (python/sglang/srt/layers/moe/fused_moe_triton/configs, M=1); "
                      "the MLA layer's launches (mla_proj_launches, mla_norm_kernels) from SGLang's "
                      "python/sglang/srt/models/deepseek_v2.py; a GPU's measured achievable bandwidth, where gpus.toml gives one "
                      "(H20: NVIDIA/nvbandwidth #48), in place of its datasheet's; for --mode piecewise, piecewise_layer_us "
                      "from vllm-project/vllm#47089's piecewise vs full-graph A/B (Qwen3-0.6B, B200, batch 1) and the "
                      "attention op's kernels (piecewise_attn_kernels, piecewise_mla_attn_kernels) from vLLM's "
                      "vllm/v1/attention/backends, and an MLA model's kernels beyond the fused path "
                      "(piecewise_mla_extra_kernels, piecewise_moe_routing_kernels, piecewise_shared_expert_kernels, "
                      "piecewise_shared_quant_kernels) counted in the vLLM 0.10.1 and SGLang 0.5.6 source; for --sampling full, sampling_full_us fitted on the fit figures of "
                      "Qwen2.5's speed benchmark (top-p 0.8 and repetition, presence and frequency penalties, "
                      "https://github.com/QwenLM/Qwen2.5 examples/speed-benchmark); the other constants set; "
                      "see results/bench/predict_figures.md")
#: The constants of vLLM 0.7-0.10.1's own DeepSeek kernels (:func:`piecewise_path_counts`), by name: 0 in
#: :data:`IDEAL`, and 0 for a vLLM that no longer runs them (scripts/bench_piecewise_ab.py).
PIECEWISE_PATH_KERNELS = ("piecewise_mla_extra_kernels", "piecewise_moe_routing_kernels",
                          "piecewise_shared_expert_kernels", "piecewise_shared_quant_kernels")
MODES = ("graph", "piecewise", "eager")
#: What each mode means, for help texts and errors.
MODE_HELP = ("graph (CUDA graphs capture the whole decode step: SGLang, TensorRT-LLM, vLLM V0 and vLLM >= 0.11), "
             "piecewise (vLLM V1 0.7-0.10.x: graphs between attention ops, each attention op run from Python; for an MLA "
             "model, that engine's DeepSeek kernels too) "
             "or eager (no CUDA graphs)")
SAMPLINGS = ("greedy", "full")
#: What each --sampling means, for help texts and errors.
SAMPLING_HELP = ("greedy (argmax, or a temperature draw: the sampler's cost is in the step's host work) or full "
                 "(top-p/top-k over the whole vocabulary and repetition, presence or frequency penalties: "
                 "vLLM V0's slow sampler path, sampling_full_us a step)")
#: The SM count fill_us is quoted at when ``fill_sm_scaled`` is on: an A100's 108 SMs
#: (https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf).
FILL_REF_SMS = 108
#: The bandwidth half_bytes is quoted at when ``half_bytes_bw_scaled`` is on: an A100 80GB SXM's 2039 GB/s
#: (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf).
HALF_REF_GBPS = 2039.0
#: The SM boost clock fill_us is quoted at when ``fill_clock_scaled`` is on: an A100's 1410 MHz (same whitepaper).
FILL_REF_CLOCK_MHZ = 1410.0


def mem_frac_key(gpu: GpuSpec, cal: dict) -> str:
    """Which calibration constant prices ``gpu``'s streaming: ``gddr_bw_frac`` on a GDDR card where it
    is set, else ``bw_frac``."""
    gddr = float(cal.get("gddr_bw_frac", 0.0) or 0.0) > 0 and getattr(gpu, "is_gddr", False)
    return "gddr_bw_frac" if gddr else "bw_frac"


def mem_frac(gpu: GpuSpec, cal: dict) -> float:
    """The share of ``gpu``'s roofline bandwidth a large memory-bound kernel reaches (:func:`mem_frac_key`)."""
    return float(cal[mem_frac_key(gpu, cal)])


def roofline_gbps(gpu: GpuSpec, cal: dict) -> float:
    """The bandwidth the roofline starts from: the datasheet's, or a published measured achievable one
    where the GPU has one and it is lower (``achievable_bw`` on; the datasheet bound keeps the datasheet)."""
    return gpu.roofline_bandwidth_gbps if cal.get("achievable_bw", 1.0) else gpu.mem_bandwidth_gbps


def half_bytes_on(gpu: GpuSpec, cal: dict) -> float:
    """``half_bytes`` on ``gpu``: as given, or scaled by the GPU's roofline bandwidth over
    ``HALF_REF_GBPS`` when ``half_bytes_bw_scaled`` is on (the same ramp time on every memory)."""
    half = float(cal.get("half_bytes", 0.0))
    if cal.get("half_bytes_bw_scaled", 0.0):
        half *= roofline_gbps(gpu, cal) / HALF_REF_GBPS
    return half


def ramp_us(gpu: GpuSpec, cal: dict) -> float:
    """What a memory-bound kernel pays on ``gpu`` beyond its bytes: the byte ramp at the kernel's
    bandwidth plus the fill time (both once per weight stream)."""
    return (half_bytes_on(gpu, cal) / (roofline_gbps(gpu, cal) * 1e3 * mem_frac(gpu, cal))
            + float(cal.get("fill_us", 0.0)) * fill_scale(gpu, cal))


def fill_scale(gpu: GpuSpec, cal: dict) -> float:
    """What one ``fill_us`` costs on ``gpu``: ``FILL_REF_SMS / sm_count`` when ``fill_sm_scaled`` is on,
    times ``FILL_REF_CLOCK_MHZ / boost_clock_mhz`` when ``fill_clock_scaled`` is on too (and the GPU
    gives its clock); 1 otherwise. The fixed work of a kernel is done by the SMs side by side, at their clock."""
    if not cal.get("fill_sm_scaled", 0.0) or gpu.sm_count <= 0:
        return 1.0
    k = FILL_REF_SMS / gpu.sm_count
    clk = float(getattr(gpu, "boost_clock_mhz", 0.0) or 0.0)
    if cal.get("fill_clock_scaled", 0.0) and clk > 0:
        k *= FILL_REF_CLOCK_MHZ / clk
    return k

#: The datasheet bound: every byte at peak bandwidth, every FLOP at peak, no floors or overheads
#: (a measured figure faster than this did not run as described).
IDEAL = {"bw_frac": 1.0, "flop_frac": 1.0, "prefill_flop_frac": 1.0, "floor_us": 0.0, "eager_gap_us": 0.0,
         "step_overhead_us": 0.0, "half_bytes": 0.0, "coll_graph_us": 0.0, "coll_eager_us": 0.0,
         "pcie_skew_frac": 0.0, "pcie_skew_graph_frac": 0.0, "pcie_call_us": 0.0, "achievable_bw": 0.0,
         "fill_us": 0.0, "fill_sm_scaled": 0.0, "fill_clock_scaled": 0.0, "gddr_bw_frac": 0.0, "half_bytes_bw_scaled": 0.0, "int4_hopper_frac": 1.0, "moe_expert_streams": 0.0, "sm_stream_gbps": 0.0,
         "moe_aux_kernels": 0.0, "moe_tile_gbps": 0.0, "mla_norm_kernels": 0.0, "mla_proj_launches": 1.0,
         "sampling_full_us": 0.0, "moe_bw_frac": 1.0, "piecewise_layer_us": 0.0,
         **{k: 0.0 for k in PIECEWISE_PATH_KERNELS}}

#: The constants ``scripts/bench_predict_figures.py --fit`` may move, with the values it tries
#: (fit figures only; everything else is set).
FIT_GRID = {
    "bw_frac": [x / 100 for x in range(50, 91, 2)],
    "step_overhead_us": [0.0, 100.0, 200.0, 300.0, 400.0, 500.0, 700.0, 1000.0, 1500.0],
    "half_bytes": [0.0, 0.5e6, 1e6, 2e6, 3e6, 4e6, 6e6, 8e6, 12e6],
    "coll_graph_us": [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 15.0, 20.0, 30.0],
    "coll_eager_us": [0.0, 5.0, 10.0, 20.0, 30.0, 50.0, 80.0],
    "pcie_skew_frac": [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0],
    "pcie_skew_graph_frac": [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0],
    "pcie_call_us": [0.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0],
    "eager_gap_us": [2.0, 4.0, 6.0, 8.0, 10.0, 15.0],
    "fill_us": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0],
    "gddr_bw_frac": [0.0] + [x / 100 for x in range(70, 97, 2)],
    "int4_hopper_frac": [0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 0.9, 1.0],
    "moe_stream_cap": [0.0, 4.0, 8.0, 16.0, 32.0, 64.0],
    "sm_stream_gbps": [0.0, 50.0, 100.0, 150.0, 200.0, 300.0],
    "moe_tile_gbps": [0.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 80.0],
    "moe_bw_frac": [x / 100 for x in range(50, 101, 5)],
    "sampling_full_us": [0.0, 250.0, 500.0, 750.0, 1000.0, 1250.0, 1500.0, 2000.0],
}


@dataclass(frozen=True)
class Kernel:
    """One kernel of a step on one rank: what it reads and computes, and its modelled time."""

    name: str
    count: int          # how many of it the step runs (e.g. one per layer)
    bytes_read: float   # per run
    flops: float        # per run
    us: float           # modelled time per run, including its floor
    bound: str          # "memory", "compute" or "floor"


WEIGHT_DTYPES = tuple(QUANT_FORMATS)       # bf16, fp16, fp8, fp8-block, int4-awq, int4-gptq, w4a16, nvfp4, mxfp4


def weight_bytes_per_elem(weights: str, dtype: str) -> float:
    """Bytes of one weight of a quantized linear layer, scales and zero points included
    (:func:`commprof.analysis.quant.bytes_per_weight`); the activation dtype's when not quantized."""
    if weights not in WEIGHT_DTYPES:
        raise ValueError(f"weights {weights!r}: use one of {WEIGHT_DTYPES}")
    return bytes_per_weight(weights, dtype_bytes(dtype))


def _price(name, count, nbytes, flops, gpu: GpuSpec, dtype: str, cal: dict, flop_frac: float,
           bw_scale: float = 1.0, streams: float = 1.0, cap_gbps: float = 0.0) -> Kernel:
    # the ramp (half_bytes, fill_us) is paid once per independent weight stream of the kernel: once
    # for a GEMM, once per active expert for a grouped MoE GEMM (``streams``)
    half = half_bytes_on(gpu, cal) * streams if nbytes > 0 else 0.0
    # the fixed work shared by the SMs, at their clock (fill_scale)
    fill = float(cal.get("fill_us", 0.0)) * streams * fill_scale(gpu, cal) if nbytes > 0 else 0.0
    bw_gbps = roofline_gbps(gpu, cal)
    rate = bw_gbps * mem_frac(gpu, cal) * bw_scale
    if cap_gbps > 0:               # a launch with too few thread blocks to fill the memory (moe_tile_gbps)
        rate = min(rate, cap_gbps)
    t_mem = (nbytes + half) / (rate * 1e3) + fill  # GB/s = 1e3 B/us
    # the SMs' side of the stream, in series with DRAM's (sm_stream_gbps per SM, 0 = off): a GPU with
    # few SMs for its bandwidth (H200, H20) keeps fewer bytes in flight per GB/s than one with many
    # (RTX 4090/5090, L20), so it reaches less of its DRAM bandwidth in a streaming GEMV
    sm_rate = float(cal.get("sm_stream_gbps", 0.0))
    if sm_rate > 0 and nbytes > 0 and gpu.sm_count > 0:
        t_mem += (nbytes + half) / (gpu.sm_count * sm_rate * 1e3 * bw_scale)
    t_fl = flops / (gpu.peak_tflops(dtype) * 1e6 * flop_frac)                 # TFLOP/s = 1e6 FLOP/us
    us = max(t_mem, t_fl, cal["floor_us"])
    bound = "floor" if us == cal["floor_us"] and us > max(t_mem, t_fl) else ("memory" if t_mem >= t_fl else "compute")
    return Kernel(name, int(count), float(nbytes), float(flops), float(us), bound)


def quant_bw_scale(weights: str, gpu: GpuSpec, cal: dict | None = None) -> float:
    """The share of a 16-bit GEMM's bandwidth a quantized GEMM over ``weights`` reaches on ``gpu``:
    ``int4_hopper_frac`` for a 4-bit weight-only format (AWQ, GPTQ, w4a16) on a Hopper GPU
    (``arch = "hopper"`` in gpus.toml), else 1. The engines run these through Marlin kernels
    (vLLM's ``awq_marlin``/``gptq_marlin``, which SGLang borrows), built on Ampere's ``mma.sync`` and
    ``cp.async``; their authors state MARLIN "is not yet optimized for Hopper"
    (https://github.com/IST-DASLab/marlin_artifact README, Requirements), and on Hopper the
    in-register dequantization, not DRAM, sets the pace: the decode GEMM moves a quarter of the bytes
    but does not reach the bandwidth a BF16 or FP8 one does. Fitted (fit figures: Qwen3-4B and
    Qwen3-14B AWQ on H20)."""
    cal = {**CALIBRATION, **(cal or {})}
    f = QUANT_FORMATS.get(weights)
    if f is None or not f.quantized or f.bits != 4 or f.compute != "act":
        return 1.0
    return float(cal.get("int4_hopper_frac", 1.0)) if getattr(gpu, "arch", "") == "hopper" else 1.0


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


def moe_streams(active: float, cal: dict) -> float:
    """The ramps an MoE layer's grouped expert GEMMs pay over ``active`` experts: one per expert
    (``moe_expert_streams``), at most ``moe_stream_cap`` of them (0 = no bound), in each of its
    ``moe_gemm_launches`` launches (w13 and w2); one per launch when ``moe_expert_streams`` is off."""
    launches = max(1.0, float(cal.get("moe_gemm_launches", 1.0) or 1.0))
    if not cal.get("moe_expert_streams", 1.0):
        return launches
    cap = float(cal.get("moe_stream_cap", 0.0) or 0.0)
    return launches * max(1.0, min(active, cap) if cap > 0 else active)


#: The grouped expert GEMM's row tile (``BLOCK_SIZE_M``) at a small batch: 16 in SGLang's tuned fused_moe
#: configs up to M = 128 or more (the same files as ``moe_tile_n``). Each active expert's rows are padded
#: to it (moe_align_block_size), so a decode step's few tokens per expert are one row tile.
MOE_TILE_M = 16


def moe_tiles(active: float, n: int, cal: dict, choices: float = 0.0) -> float:
    """Working thread blocks of one grouped expert GEMM launch over ``active`` experts whose output
    has ``n`` columns, ``choices`` token choices spread over them: ``active x ceil(n / moe_tile_n)``
    column tiles, times the row tiles each expert's rows fill (``ceil(choices / active / MOE_TILE_M)``,
    one at a decode step's batch, many in a prefill)."""
    tile = max(1.0, float(cal.get("moe_tile_n", 64.0) or 64.0))
    act = max(1.0, active)
    rows = max(1.0, -(-float(choices) / act // MOE_TILE_M)) if choices > 0 else 1.0
    return act * -(-float(n) // tile) * rows


def moe_launches(active: float, choices: float, h: int, ef: int, cal: dict) -> list[tuple[str, int, float, float]]:
    """The grouped expert GEMM launches of one MoE layer on one rank, as ``(name, output columns,
    share of the layer's expert bytes and FLOPs, working blocks)``: w13 (``2 x ef`` columns over ``h``)
    and w2 (``h`` columns over ``ef``) with ``moe_gemm_launches`` 2, one launch of both otherwise;
    blocks by :func:`moe_tiles`."""
    launches = max(1.0, float(cal.get("moe_gemm_launches", 1.0) or 1.0))
    parts = (("w13", 2 * ef, 2.0 / 3.0), ("w2", h, 1.0 / 3.0)) if launches >= 2 else (("w13+w2", 2 * ef + h, 1.0),)
    return [(name, cols, share, moe_tiles(active, cols, cal, choices)) for name, cols, share in parts]


def moe_expert_kernel(count: int, active: float, choices: float, h: int, ef: int, we: float, gpu: GpuSpec,
                      gemm_dtype: str, cal: dict, flop_frac: float, bw_scale: float = 1.0) -> Kernel:
    """The routed experts of one MoE layer on one rank, ``count`` layers: ``active`` experts'
    ``3 x h x ef`` weights of ``we`` bytes read, ``6 x h x ef`` FLOPs per token choice
    (``choices`` = tokens x top_k reaching this rank). With ``moe_tile_gbps`` off, one kernel paying
    :func:`moe_streams` ramps; with it on, each of :func:`moe_launches` priced on its own, capped at
    ``blocks x moe_tile_gbps``, paying its share of the ramps, and summed into one entry (its bound
    the longest launch's)."""
    streams = moe_streams(active, cal)
    nbytes, flops = active * 3 * h * ef * we, 6.0 * choices * h * ef
    bw_scale = bw_scale * float(cal.get("moe_bw_frac", 1.0))     # the gathered rows' share of the rate
    rate = float(cal.get("moe_tile_gbps", 0.0) or 0.0)
    if rate <= 0:
        return _price("moe_experts", count, nbytes, flops, gpu, gemm_dtype, cal, flop_frac, bw_scale, streams)
    launches = moe_launches(active, choices, h, ef, cal)
    ks = [_price("moe_experts", count, nbytes * share, flops * share, gpu, gemm_dtype, cal, flop_frac, bw_scale,
                 streams / len(launches), cap_gbps=blocks * rate) for _, _, share, blocks in launches]
    return Kernel("moe_experts", int(count), float(nbytes), float(flops), float(sum(k.us for k in ks)),
                  max(ks, key=lambda k: k.us).bound)


def causal_pairs(tokens: int, window: int) -> float:
    """(query, key) pairs of causal attention over ``tokens`` tokens when each attends to at most
    ``window`` (itself included): ``sum over i of min(i, window)``."""
    w = min(window, tokens)
    return w * (w + 1) / 2 + (tokens - w) * w


def small_kernel(name: str, count: int, tokens: int, model: ModelShape, gpu: GpuSpec, dtype: str,
                 cal: dict) -> Kernel:
    """``count`` small kernels (norms, rotary, activations, residual adds, routing) over ``tokens`` tokens'
    activations, read and written: no FLOPs, floor-bound at a decode batch."""
    return _price(name, count, 2 * tokens * model.hidden * dtype_bytes(dtype), 0.0, gpu, dtype, cal,
                  cal["flop_frac"])


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

    qscale = quant_bw_scale(weights, gpu, cal)

    def add(name, count, nbytes, flops, gemm=True, quantized=False, streams=1.0):
        if count:
            out.append(_price(name, count, nbytes, flops, gpu, gemm_dtype if gemm else dtype, cal, ff,
                              qscale if quantized else 1.0, streams))

    act = tokens * h * e          # activations in and out of a GEMM: small beside the weights at decode
    add("qkv_proj", L, qkv * we + act, 2.0 * tokens * qkv, quantized=True,
        streams=max(1.0, float(cal.get("mla_proj_launches", 1.0) or 1.0)) if model.is_mla else 1.0)
    if model.is_mla:      # q_a_layernorm and kv_a_layernorm over the latent rows
        add("mla_norm", L * int(cal.get("mla_norm_kernels", 0)),
            2 * tokens * (model.q_lora_rank + model.kv_lora_rank) * e, 0.0, gemm=False)
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
    add("o_proj", L, o * we + act, 2.0 * tokens * o, quantized=True)
    moe_layers = sum(1 for i in range(L) if is_moe_layer(model, i))
    dense = L - moe_layers
    ffn_r = _shard(model.ffn, tp)
    add("gate_up_proj", dense, 2 * h * ffn_r * we + act, 4.0 * tokens * h * ffn_r, quantized=True)
    add("down_proj", dense, ffn_r * h * we + act, 2.0 * tokens * h * ffn_r, quantized=True)
    if moe_layers:
        ef = _shard(model.expert_ffn, tp)
        touched = experts_touched(model.experts, model.top_k, tokens)
        add("moe_router", moe_layers, h * model.experts * e, 2.0 * tokens * h * model.experts)
        # The grouped expert GEMM (vLLM's and SGLang's fused_moe) sorts the step's tokens by expert and
        # pads each expert's rows to its tile (moe_align_block_size), so each active expert's weights
        # are a GEMM of their own inside the one launch: at a small batch, `touched` small GEMMs, each
        # paying the ramp of a small kernel (moe_expert_streams: 1 = the whole layer as one GEMM).
        out.append(moe_expert_kernel(moe_layers, touched, tokens * model.top_k, h, ef, we, gpu, gemm_dtype, cal,
                                     ff, qscale))
        # routing, alignment, activation and the weighted sum: small kernels over top_k rows per token
        add("moe_aux", moe_layers * int(cal.get("moe_aux_kernels", 0)), 2 * tokens * model.top_k * h * e, 0.0,
            gemm=False)
        if model.shared_experts:
            sf = _shard(model.shared_expert_ffn or model.expert_ffn, tp)
            add("moe_shared", moe_layers, model.shared_experts * 3 * h * sf * we,
                6.0 * tokens * model.shared_experts * h * sf, quantized=True)
    if int(cal["small_kernels_per_layer"]):
        out.append(small_kernel("small", L * int(cal["small_kernels_per_layer"]), tokens, model, gpu, dtype, cal))
    vocab_r = _shard(model.vocab, tp)
    logit_tokens = seqs
    add("lm_head", 1, vocab_r * h * e + logit_tokens * vocab_r * e, 2.0 * logit_tokens * h * vocab_r)
    return out


def piecewise_path_counts(model: ModelShape, gpu: GpuSpec, cal: dict | None = None, weights: str = "bf16",
                          dtype: str = "bf16") -> dict[str, int]:
    """Kernels per step that vLLM V1 0.7-0.10.x's DeepSeek path launches beyond the fused path the inventory
    prices, by cause (CALIBRATION's ``piecewise_*_kernels`` and their source): an MLA model's layers
    (``piecewise_mla_extra_kernels`` each) and its MoE layers with shared experts (routing, the shared
    experts' own MLP, and their activation quants where the GEMMs run W8A8); none for other models."""
    cal = {**CALIBRATION, **(cal or {})}
    if not model.is_mla:
        return {}
    moe = sum(1 for i in range(model.layers) if is_moe_layer(model, i))
    shared = moe if model.shared_experts else 0
    w8a8 = quant_gemm_dtype(weights, gpu, dtype) == "fp8"
    counts = {"MLA layers": model.layers * int(cal.get("piecewise_mla_extra_kernels", 0)),
              "MoE routing": moe * int(cal.get("piecewise_moe_routing_kernels", 0)),
              "shared experts": shared * int(cal.get("piecewise_shared_expert_kernels", 0)
                                             + (cal.get("piecewise_shared_quant_kernels", 0) if w8a8 else 0))}
    return {k: v for k, v in counts.items() if v}


def piecewise_path_kernels(model: ModelShape, gpu: GpuSpec, tokens: int, dtype: str = "bf16",
                           cal: dict | None = None, weights: str = "bf16") -> list[Kernel]:
    """:func:`piecewise_path_counts` as one kernel entry (``piecewise_path``), each a small kernel over
    ``tokens`` tokens' activations (the ``small`` row's price); empty where the model has none."""
    cal = {**CALIBRATION, **(cal or {})}
    n = sum(piecewise_path_counts(model, gpu, cal, weights, dtype).values())
    return [small_kernel("piecewise_path", n, tokens, model, gpu, dtype, cal)] if n else []


def collective_mode(mode: str) -> str:
    """The mode a step's collectives are priced in: under piecewise CUDA graphs they run inside the
    captured pieces, as under a whole-step graph."""
    return "graph" if mode == "piecewise" else mode


def piecewise_host_us(model: ModelShape, cal: dict | None = None) -> float:
    """The host's time for one decode step's layers under piecewise CUDA graphs (us, modelled):
    ``layers x (piecewise_layer_us + eager_gap_us x the attention op's kernels beyond a standard op's)``
    (:data:`CALIBRATION`'s piecewise terms and their sources)."""
    cal = {**CALIBRATION, **(cal or {})}
    extra = max(0.0, attn_op_kernels(model, cal) - float(cal["piecewise_attn_kernels"]))
    return model.layers * (float(cal["piecewise_layer_us"]) + extra * float(cal["eager_gap_us"]))


def attn_op_kernels(model: ModelShape, cal: dict) -> float:
    """Kernels the attention op launches from Python under piecewise CUDA graphs (CALIBRATION's
    ``piecewise_attn_kernels``, ``piecewise_mla_attn_kernels`` for an MLA model)."""
    return float(cal["piecewise_mla_attn_kernels"] if model.is_mla else cal["piecewise_attn_kernels"])


def piecewise_launch_us(model: ModelShape, ks: list[Kernel], cal: dict | None = None) -> float:
    """What the GPU waits for launches made outside a graph under piecewise CUDA graphs (us, modelled):
    per layer the attention op's ``k`` kernels and the next piece are launched by the host, and each
    launch makes the GPU wait ``eager_gap_us`` less the kernel before it (the eager rule of
    :func:`_totals`): the previous piece's last kernel and the op's ``k - 1`` small kernels, at
    ``floor_us``, and the attention kernel itself, at its modelled time:
    ``layers x k x max(0, eager_gap_us - floor_us) + sum over attention kernels of max(0, eager_gap_us - t)``."""
    cal = {**CALIBRATION, **(cal or {})}
    gap, floor = float(cal["eager_gap_us"]), float(cal["floor_us"])
    small = model.layers * attn_op_kernels(model, cal) * max(0.0, gap - floor)
    return small + sum(k.count * max(0.0, gap - k.us) for k in ks if k.name in ("attention", "attention_sliding"))


def step_overhead_us(cal: dict | None = None) -> float:
    """The host's own work once a step (us, modelled): ``step_overhead_us``, plus ``sampling_full_us``
    where the step samples with top-p and penalties (``sampling_full`` 1: predict ``--sampling full``)."""
    cal = {**CALIBRATION, **(cal or {})}
    full = float(cal.get("sampling_full", 0.0) or 0.0) > 0
    return float(cal["step_overhead_us"]) + (float(cal.get("sampling_full_us", 0.0)) if full else 0.0)


def host_wait_us(host_us: float, gpu_us: float) -> float:
    """What a step waits for its host beyond the GPU's own work: the host launches ahead of the GPU,
    so only host time beyond the GPU's shows (0 when the GPU is the slower)."""
    return max(0.0, float(host_us) - float(gpu_us))


def step_compute(model: ModelShape, gpu: GpuSpec, tp: int, batch: int, context: int, dtype: str = "bf16",
                 mode: str = "graph", cal: dict | None = None, weights: str = "bf16", mixed_tokens: int = 0) -> dict:
    """One decode step of ``batch`` sequences at ``context`` tokens on one rank, modelled (us):
    ``mixed_tokens`` prompt tokens of other requests riding in the same step (chunked prefill under
    continuous batching) add their GEMM work (their attention is left out);
    ``kernel_us`` (the rooflines), ``floor_us`` (what the kernel floors add above them),
    ``gap_us`` (eager launch gaps and the step's host overhead), ``compute_us`` (their sum), with
    the bytes and FLOPs they come from and the kernel list; ``host_us``, under piecewise CUDA graphs, the
    host's time for the layers (:func:`piecewise_host_us`; 0 otherwise), which the step waits for only
    where it exceeds the GPU's work (``compute_us`` less :func:`step_overhead_us`, plus the collectives the caller
    prices: :func:`host_wait_us`)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: use one of {MODES}")
    cal = {**CALIBRATION, **(cal or {})}
    ks = step_kernels(model, gpu, tp, batch + int(mixed_tokens), batch, context, dtype, cal, weights=weights)
    if mode == "piecewise":
        ks = ks + piecewise_path_kernels(model, gpu, batch + int(mixed_tokens), dtype, cal, weights)
    out = _totals(ks, mode, cal)
    out["host_us"] = 0.0
    if mode == "piecewise":
        launch_us = piecewise_launch_us(model, ks, cal)
        out.update(gap_us=out["gap_us"] + launch_us, compute_us=out["compute_us"] + launch_us,
                   piecewise_launch_us=launch_us,
                   # the host's own time per step: a floor the GPU's work may hide (predictmodel.predict_point)
                   host_us=piecewise_host_us(model, cal))
    return out


def _totals(ks: list[Kernel], mode: str, cal: dict) -> dict:
    n = sum(k.count for k in ks)
    total_us = sum(k.count * k.us for k in ks)
    roof_us = 0.0
    for k in ks:
        roof = k.us if k.bound != "floor" else 0.0
        roof_us += k.count * roof
    floor_us = total_us - roof_us
    # Eager mode: the host launches kernel after kernel, eager_gap_us each; a kernel longer than a
    # launch hides the next launch (the GPU runs behind the host), a shorter one waits for it.
    # Under CUDA graphs the whole step is one launch.
    eager_us = sum(k.count * max(0.0, cal["eager_gap_us"] - k.us) for k in ks) if mode == "eager" else 0.0
    gap_us = step_overhead_us(cal) + eager_us
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
