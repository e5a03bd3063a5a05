"""``commprof predict --weights`` for quantized checkpoints (commprof.analysis.quant): bytes per
weight with their scales and zero points, which parts are quantized, and the GEMM rate each
format gets on each GPU, against hand-computed figures."""
from __future__ import annotations

import pytest

from commprof.analysis.computemodel import step_kernels
from commprof.analysis.predictmodel import predict_table
from commprof.analysis.quant import FORMATS, bytes_per_weight, gemm_dtype, weight_bytes_per_rank
from commprof.analysis.stepmodel import weights_per_rank
from commprof.model.errors import UsageError
from commprof.model.gpus import get_gpu
from commprof.model.models import get_model


def test_bytes_per_weight_include_scales_and_zero_points_by_hand():
    assert bytes_per_weight("bf16") == 2.0 and bytes_per_weight("fp16") == 2.0
    assert bytes_per_weight("fp8") == 1.0                      # one fp32 scale per tensor: 0 per weight
    assert bytes_per_weight("fp8-block") == 1.0 + 4.0 / (128 * 128)          # 1.000244
    assert bytes_per_weight("int4-awq") == 0.5 + (2.0 + 0.5) / 128           # 0.51953125
    assert bytes_per_weight("int4-gptq") == 0.51953125
    assert bytes_per_weight("w4a16") == 0.5 + 2.0 / 128                      # 0.515625, symmetric
    assert bytes_per_weight("nvfp4") == 0.5 + 1.0 / 16                       # 0.5625: an E4M3 scale per 16
    assert bytes_per_weight("mxfp4") == 0.5 + 1.0 / 32                       # 0.53125: an E8M0 scale per 32
    from commprof.analysis.quant import gemm_rate_note
    note = gemm_rate_note("nvfp4", get_gpu("b200"))
    assert note.startswith("--weights nvfp4: 0.5625 bytes a weight (group 16, scales included)") and "upper value" in note
    assert all(f.source for f in FORMATS.values())
    with pytest.raises(UsageError, match="--weights 'int3'"):
        bytes_per_weight("int3")


@pytest.mark.parametrize("weights, gpu, want", [
    ("fp8", "h100-sxm", "fp8"), ("fp8-block", "h200", "fp8"), ("fp8", "l40s", "fp8"), ("fp8", "rtx5090", "fp8"),
    ("fp8", "a100-sxm", "bf16"),          # Ampere: FP8 Marlin, weight-only, the BF16 rate
    ("fp8", "rtx3090", "bf16"),
    ("int4-awq", "h100-sxm", "bf16"), ("int4-gptq", "rtx4090", "bf16"), ("w4a16", "b200", "bf16"),
    ("nvfp4", "b200", "bf16"), ("mxfp4", "h100-sxm", "bf16"),
    ("bf16", "h100-sxm", "bf16")])
def test_the_gemm_rate_each_format_gets_on_each_gpu(weights, gpu, want):
    assert gemm_dtype(weights, get_gpu(gpu)) == want


def test_llama31_8b_int4_awq_weights_by_hand():
    # Llama-3.1-8B: hidden 4096, 32 layers, 32 query / 8 KV heads of 128, FFN 14336, vocab 128256, untied.
    # Linear weights per layer: q 4096x4096 + k,v 2 x 4096x1024 + o 4096x4096 = 41,943,040;
    # MLP 3 x 4096 x 14336 = 176,160,768; 32 layers: 6,979,321,856 weights at 0.51953125 bytes.
    # Embedding + lm_head 2 x 128256 x 4096 x 2 bytes = 2,101,346,304; norms (2 x 32 + 1) x 4096 x 2 = 532,480.
    m = get_model("Llama-3.1-8B")
    linear = 32 * (41_943_040 + 176_160_768)
    assert linear == 6_979_321_856
    want = int(linear * 0.51953125 + 2_101_346_304 + 532_480)
    got = weight_bytes_per_rank(weights_per_rank(m, 1), "int4-awq", 2)
    assert got == pytest.approx(want, abs=2)
    assert got / 1e9 == pytest.approx(5.728, abs=1e-3)
    rows, notes, _ = predict_table(m, ["rtx4090"], [], [1], [1], context=1024, weights="int4-awq")
    assert rows[0]["weights_gb_per_rank"] == pytest.approx(want / 1e9, rel=1e-9)
    assert any(n.startswith("--weights int4-awq: 0.5195 bytes a weight (group 128, scales and zero points") and
               "dequantized to bf16" in n for n in notes)


def test_a_decode_step_reads_the_4bit_bytes_and_runs_at_the_bf16_rate():
    m, gpu = get_model("Llama-3.1-8B"), get_gpu("h100-sxm")
    ks = {k.name: k for k in step_kernels(m, gpu, 1, 1, 1, 1024, weights="w4a16")}
    # qkv_proj: 4096 x (4096 + 2048) weights at 0.515625 bytes + one token's 4096 x 2 bytes of activations
    assert ks["qkv_proj"].bytes_read == pytest.approx(4096 * 6144 * 0.515625 + 4096 * 2)
    assert ks["gate_up_proj"].bytes_read == pytest.approx(2 * 4096 * 14336 * 0.515625 + 4096 * 2)
    # lm_head stays bf16: 128256 x 4096 x 2 + the logits
    assert ks["lm_head"].bytes_read == pytest.approx(128256 * 4096 * 2 + 128256 * 2)
    # at batch 4096 the GEMMs are compute bound, at the BF16 rate: FLOPs / (989.5e6 x 0.6) us
    big = {k.name: k for k in step_kernels(m, gpu, 1, 4096, 4096, 16, weights="w4a16")}
    assert big["gate_up_proj"].bound == "compute"
    assert big["gate_up_proj"].us == pytest.approx(4.0 * 4096 * 4096 * 14336 / (989.5e6 * 0.6))
    fp8 = {k.name: k for k in step_kernels(m, gpu, 1, 4096, 4096, 16, weights="fp8")}
    assert fp8["gate_up_proj"].us == pytest.approx(4.0 * 4096 * 4096 * 14336 / (1979e6 * 0.6))


def test_quantized_weights_make_a_70b_fit_where_bf16_does_not():
    args = ("Llama-3.1-70B", ["rtx-a6000"], [], [2], [1])
    bf16 = predict_table(*args, context=1024)[0][0]
    int4 = predict_table(*args, context=1024, weights="int4-gptq")[0][0]
    assert not bf16["weights_fit"] and int4["weights_fit"]
    assert int4["ms_per_token"] < bf16["ms_per_token"]
    # fp8-block costs a hair more than per-tensor fp8
    fp8 = predict_table("Qwen2.5-72B", ["h100-sxm"], [], [2], [1], weights="fp8")[0][0]
    blk = predict_table("Qwen2.5-72B", ["h100-sxm"], [], [2], [1], weights="fp8-block")[0][0]
    assert blk["weights_gb_per_rank"] > fp8["weights_gb_per_rank"]
    assert blk["weights_gb_per_rank"] == pytest.approx(fp8["weights_gb_per_rank"], rel=1e-3)


def test_cli_takes_the_new_weights_and_refuses_others(cli_inproc):
    ok = cli_inproc("predict", "--model", "Qwen3-8B", "--gpu", "l40s", "--tp", "1", "--batch", "1",
                    "--weights", "int4-awq", "--json")
    assert ok.returncode == 0, ok.stderr
    bad = cli_inproc("predict", "--model", "Qwen3-8B", "--gpu", "l40s", "--tp", "1", "--weights", "nf4")
    assert bad.returncode == 2 and "--weights 'nf4'" in bad.stderr and "int4-awq" in bad.stderr
