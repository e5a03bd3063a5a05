"""Quantized weights for ``commprof predict --weights``: the bytes one weight costs in memory and
in a decode step, and the tensor-core rate its GEMMs run at on a given GPU.

A format is :class:`QuantFormat`: ``bits`` per weight, the group its scales (and zero points)
cover, their sizes, and what the GEMM computes in. Bytes per weight (:func:`bytes_per_weight`)::

    bits / 8 + (scale_bytes + zero_bits / 8) / group

* ``fp8`` (per-tensor FP8 E4M3, as vLLM's ``quantization=fp8`` and llm-compressor's FP8 checkpoints
  store it): 1 byte, one FP32 scale per tensor (0 per weight at any real size);
* ``fp8-block`` (DeepSeek-V3's 128 x 128 block scales, its config.json ``weight_block_size``
  [128, 128]; DeepSeek-V3 report arXiv:2412.19437 section 3.3): 1 + 4 / 16384 bytes;
* ``int4-awq`` (AWQ, arXiv:2306.00978, with AutoAWQ's defaults: 4 bits, group size 128,
  asymmetric): 0.5 + (2 + 0.5) / 128 bytes, an FP16 scale and a packed 4-bit zero point per group;
* ``int4-gptq`` (GPTQ, arXiv:2210.17323, as AutoGPTQ stores it: ``qweight``, ``scales``, packed
  4-bit ``qzeros``, group size 128): the same 0.5 + 2.5 / 128 bytes; the act-order ``g_idx`` (one
  int32 per input row) adds 4 / output columns, under 0.001 bytes for every real layer, left out;
* ``w4a16`` (symmetric 4-bit weights, BF16/FP16 activations, group 128, as compressed-tensors'
  W4A16 scheme and the Marlin kernel take them, arXiv:2408.11743): 0.5 + 2 / 128 bytes, no zeros.
* ``nvfp4`` (NVIDIA's 4-bit float: E2M1 elements, one FP8 E4M3 scale per 16, one FP32 scale per
  tensor; NVIDIA's NVFP4 introduction, https://developer.nvidia.com/blog/introducing-nvfp4-for-efficient-and-accurate-low-precision-inference/):
  0.5 + 1 / 16 bytes;
* ``mxfp4`` (the Open Compute Project's microscaling FP4: E2M1 elements, one E8M0 scale per 32; OCP
  Microscaling Formats (MX) v1.0, https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf):
  0.5 + 1 / 32 bytes.

What is quantized: every linear layer of the decoder blocks (q/k/v/o, gate/up/down, routed and
shared experts). Embeddings, lm_head, norms and the MoE router stay in the activation dtype, as
AWQ, GPTQ and vLLM's FP8 leave them (:func:`weight_bytes_per_rank`).

GEMM rate (:func:`gemm_dtype`): FP8 weights (per tensor or block) run on FP8 tensor cores where the
GPU has them (Ada, Hopper, Blackwell: ``fp8_tflops`` > 0 in gpus.toml), activations quantized to
FP8 on the fly (W8A8); without them (Ampere) vLLM runs FP8 checkpoints weight-only through its FP8
Marlin kernel (W8A16: the weights dequantized to 16 bits in the kernel), so the GEMM computes at
the BF16/FP16 rate and only the bytes shrink. 4-bit weight-only formats always dequantize to the
activation dtype inside the kernel: the GEMM's rate is the BF16/FP16 one, and at decode, where the
GEMMs are memory bound, the 4-bit bytes are what is saved. The FP4 formats are priced the same way:
Blackwell's FP4 tensor cores (W4A4) run a compute-bound GEMM faster than that rate, which gpus.toml
does not give, so a large batch or a prefill on FP4 weights is an upper value there; elsewhere engines
run them weight-only (FP4 Marlin), as priced. Modelled; standard library only.
"""
from __future__ import annotations

from dataclasses import dataclass

from commprof.model.errors import UsageError, shown


@dataclass(frozen=True)
class QuantFormat:
    """One ``--weights`` format: how a weight is stored and what its GEMM computes in."""

    name: str
    bits: int              # bits per weight (16: not quantized)
    group: int             # weights one scale covers (0: one scale per tensor, or none)
    scale_bytes: float     # bytes of one scale
    zero_bits: int         # bits of one zero point per group (0: symmetric)
    compute: str           # "act" (the activation dtype), "fp8" (FP8 tensor cores where the GPU has them)
    source: str

    @property
    def quantized(self) -> bool:
        return self.bits < 16


_AWQ = "AWQ arXiv:2306.00978; AutoAWQ defaults w_bit 4, q_group_size 128, zero_point True (https://github.com/casper-hansen/AutoAWQ)"
_GPTQ = ("GPTQ arXiv:2210.17323; AutoGPTQ's format: qweight, fp16 scales and packed 4-bit qzeros per group of 128 "
         "(https://github.com/AutoGPTQ/AutoGPTQ)")

#: Every ``--weights`` value. bf16/fp16: not quantized (the activation dtype's bytes).
FORMATS: dict[str, QuantFormat] = {f.name: f for f in (
    QuantFormat("bf16", 16, 0, 0.0, 0, "act", "not quantized"),
    QuantFormat("fp16", 16, 0, 0.0, 0, "act", "not quantized"),
    QuantFormat("fp8", 8, 0, 4.0, 0, "fp8", "per-tensor FP8 E4M3 with one FP32 scale: vLLM's fp8 quantization "
                "(https://docs.vllm.ai/en/latest/features/quantization/fp8.html); on GPUs without FP8 tensor cores "
                "vLLM runs it weight-only with its FP8 Marlin kernel"),
    QuantFormat("fp8-block", 8, 128 * 128, 4.0, 0, "fp8", "FP8 E4M3 with one FP32 scale per 128 x 128 block: "
                "DeepSeek-V3 config.json quantization_config weight_block_size [128, 128] "
                "(https://huggingface.co/deepseek-ai/DeepSeek-V3), report arXiv:2412.19437 section 3.3"),
    QuantFormat("int4-awq", 4, 128, 2.0, 4, "act", _AWQ),
    QuantFormat("int4-gptq", 4, 128, 2.0, 4, "act", _GPTQ),
    QuantFormat("w4a16", 4, 128, 2.0, 0, "act", "symmetric 4-bit weights, group 128, fp16 scales, 16-bit "
                "activations: compressed-tensors W4A16 as vLLM's Marlin kernel runs it (Marlin arXiv:2408.11743)"),
    QuantFormat("nvfp4", 4, 16, 1.0, 0, "act", "NVFP4: E2M1 weights, one FP8 E4M3 scale per 16 and one FP32 scale "
                "per tensor (https://developer.nvidia.com/blog/introducing-nvfp4-for-efficient-and-accurate-low-precision-"
                "inference/); priced at the activation dtype's GEMM rate (Blackwell's FP4 tensor cores are faster "
                "when compute bound)"),
    QuantFormat("mxfp4", 4, 32, 1.0, 0, "act", "MXFP4: E2M1 weights, one E8M0 scale per 32 (OCP Microscaling Formats "
                "(MX) v1.0, https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf); "
                "priced at the activation dtype's GEMM rate"),
)}


#: The 4-bit float formats (E2M1 elements with block scales).
FP4_FORMATS = ("nvfp4", "mxfp4")


def quant_format(weights: str) -> QuantFormat:
    """The format named by ``--weights``; UsageError lists them."""
    if weights not in FORMATS:
        raise UsageError(f"--weights {shown(weights)}: use one of {', '.join(FORMATS)}")
    return FORMATS[weights]


def bytes_per_weight(weights: str, act_bytes: int = 2) -> float:
    """Bytes one quantized weight costs, its share of the scales and zero points included; an
    unquantized format costs the activation dtype's ``act_bytes``. A per-tensor scale (group 0)
    counts as 0 per weight."""
    f = quant_format(weights)
    if not f.quantized:
        return float(act_bytes)
    per_group = (f.scale_bytes + f.zero_bits / 8.0) / f.group if f.group else 0.0
    return f.bits / 8.0 + per_group


def gemm_dtype(weights: str, gpu, act_dtype: str = "bf16") -> str:
    """The dtype whose tensor-core rate a GEMM over ``weights`` runs at on ``gpu``: ``fp8`` for FP8
    formats on a GPU with FP8 tensor cores, else the activation dtype (weight-only dequant)."""
    f = quant_format(weights)
    if f.compute == "fp8" and getattr(gpu, "fp8_tflops", 0) > 0:
        return "fp8"
    return act_dtype


def gemm_rate_note(weights: str, gpu, act_dtype: str = "bf16") -> str:
    """One line: the bytes per weight and the GEMM rate ``weights`` gets on ``gpu``."""
    f = quant_format(weights)
    if not f.quantized:
        return ""
    g = gemm_dtype(weights, gpu, act_dtype)
    rate = gpu.peak_tflops(g)
    how = ("FP8 tensor cores (W8A8)" if g == "fp8" else
           ("no FP8 tensor cores: weight-only, dequantized to " + act_dtype if f.compute == "fp8" else
            f"weight-only, dequantized to {act_dtype} in the GEMM"))
    if f.name in FP4_FORMATS:
        how += " (FP4 tensor cores, where the GPU has them, are faster when compute bound: an upper value at a large batch)"
    return (f"--weights {weights}: {bytes_per_weight(weights):.4g} bytes a weight (group {f.group or 'per tensor'}, "
            f"scales{' and zero points' if f.zero_bits else ''} included) on the decoder's linear layers; "
            f"GEMMs at {rate:g} TFLOP/s on {gpu.key}, {how}; embeddings, lm_head, norms and router in {act_dtype}")


#: The parts of :func:`commprof.analysis.stepmodel.weights_per_rank` a format quantizes.
QUANTIZED_PARTS = ("attention", "dense_mlp", "moe_experts", "moe_shared_experts")


def weight_bytes_per_rank(parts: dict, weights: str, act_bytes: int = 2) -> int:
    """One rank's weight bytes under ``weights``, from ``parts`` (the activation-dtype bytes by part
    of :func:`~commprof.analysis.stepmodel.weights_per_rank`): the :data:`QUANTIZED_PARTS` at
    :func:`bytes_per_weight`, the rest (embedding, lm_head, norms, router) as they are."""
    scale = bytes_per_weight(weights, act_bytes) / act_bytes
    total = 0.0
    for k, v in parts.items():
        if k in ("total", "attention_per_layer"):
            continue
        total += v * scale if k in QUANTIZED_PARTS else v
    return int(total)
