"""The GPUs and models ``commprof predict`` knows (issue 31): each new SKU loads with a source
beside every figure and its interconnect class picks the default comm; each new model's shapes add
up to its published parameter count, and fits (or not) where its bytes say it must."""
from __future__ import annotations

import pytest

from commprof.analysis.predictmodel import default_comm, predict_table
from commprof.analysis.stepmodel import weights_per_rank
from commprof.model.gpus import FIGURES, OPTIONAL_FIGURES, get_gpu, gpu_table
from commprof.model.models import get_model

NEW_SKUS = ("a100-sxm-40gb", "rtx3090", "rtx-a6000", "rtx-pro-6000", "l40s", "l20", "h20", "a30", "h800", "gb200",
            "rtx3090ti", "rtx-6000-ada", "rtx4080", "rtx4070-ti-super", "rtx5080", "rtx5070-ti")


@pytest.mark.parametrize("sku", NEW_SKUS)
def test_every_new_sku_has_a_source_beside_every_figure(sku):
    g = gpu_table()[sku]
    assert set(g.sources) == set(FIGURES)
    assert set(g.optional_sources) <= set(OPTIONAL_FIGURES)
    assert all(len(s) >= 8 for s in {**g.sources, **g.optional_sources}.values())
    assert g.mem_bandwidth_gbps > 0 and g.bf16_tflops > 0 and g.memory_gb > 0 and g.sm_count > 0
    assert g.form_factor in ("sxm", "pcie")
    d = g.to_dict()
    assert d["form_factor"] == g.form_factor and "form_factor" in d["sources"]


def test_new_skus_carry_their_datasheet_figures():
    a40 = get_gpu("a100-40gb")
    assert (a40.memory_gb, a40.mem_bandwidth_gbps, a40.bf16_tflops, a40.int8_tops) == (40, 1555, 312, 624)
    r3090 = get_gpu("3090")
    assert (r3090.memory_gb, r3090.mem_bandwidth_gbps, r3090.bf16_tflops, r3090.fp8_tflops) == (24, 936, 71, 0)
    assert get_gpu("a6000").mem_bandwidth_gbps == 768 and get_gpu("a6000").memory_gb == 48
    a30 = get_gpu("a30")
    assert (a30.memory_gb, a30.mem_bandwidth_gbps, a30.bf16_tflops, a30.nvlink_bridge_gbps) == (24, 933, 165, 200)
    gb = get_gpu("gb200")
    assert (gb.memory_gb, gb.mem_bandwidth_gbps, gb.bf16_tflops, gb.fp8_tflops, gb.nvlink_gen) == (186, 8000, 2500,
                                                                                                   5000, 5)
    # GB200 = NVL72 totals / 72 (13.4 TB, 576 TB/s, 130 TB/s NVLink)
    assert gb.memory_gb == pytest.approx(13.4e3 / 72, rel=0.01)
    assert gb.mem_bandwidth_gbps == pytest.approx(576e3 / 72) and gb.nvlink_gbps_per_gpu == pytest.approx(130e3 / 72, rel=0.01)


def test_every_sku_states_a_boost_clock_with_its_source():
    assert {k for k, g in gpu_table().items() if not g.boost_clock_mhz} == set()
    # H20: NVIDIA gives no clock (and its tensor rate is capped, so none follows from its TFLOPS): derived
    # from its GH100 siblings, and the source says so
    h20 = get_gpu("h20")
    assert h20.boost_clock_mhz == get_gpu("h100-sxm").boost_clock_mhz == 1980
    assert h20.optional_sources["boost_clock_mhz"].startswith("derived:")
    for g in gpu_table().values():
        if g.boost_clock_mhz:
            assert 1000 <= g.boost_clock_mhz <= 3000 and len(g.optional_sources["boost_clock_mhz"]) >= 8
    assert (get_gpu("a100").boost_clock_mhz, get_gpu("4090").boost_clock_mhz, get_gpu("3090ti").boost_clock_mhz) == (
        1410, 2520, 1860)


@pytest.mark.parametrize("sku, want, words", [
    ("a100-sxm-40gb", "reference:nvlink3", "NVLink 3"), ("gb200", "reference:nvlink5", "NVLink 5"),
    ("h800", "reference:nvlink4", "NVLink 4"), ("h20", "reference:nvlink4", "NVLink 4"),
    ("rtx3090", "reference:pcie4-nop2p", "no P2P"), ("rtx-a6000", "reference:pcie4-p2p", "P2P allowed"),
    ("a30", "reference:pcie4-p2p", "P2P allowed"), ("rtx-6000-ada", "reference:pcie4-p2p", "P2P allowed"),
    ("rtx3090ti", "reference:pcie4-nop2p", "no P2P"), ("rtx4080", "reference:pcie4-nop2p", "no P2P"),
    ("rtx4070-ti-super", "reference:pcie4-nop2p", "no P2P"),
    ("rtx5080", "reference:pcie5-nop2p", "no P2P"),
    ("rtx5070-ti", "reference:pcie5-nop2p", "no P2P"),
    # a PCIe card's NVLink bridge joins two cards only: the box is a PCIe box
    ("a100-pcie", "reference:pcie4-p2p", "P2P allowed"), ("h100-pcie", "reference:pcie5-p2p", "P2P allowed")])
def test_the_default_comm_follows_the_interconnect_class(sku, want, words):
    spec, why = default_comm(get_gpu(sku))
    assert spec == want and words in why


def test_the_interconnect_class_is_said_in_words():
    assert get_gpu("rtx3090").interconnect_class == ("PCIe 4.0 card, no P2P (driver); NVLink bridge for pairs only "
                                                     "(112.5 GB/s)")
    assert get_gpu("h100-sxm").interconnect_class == "SXM, NVLink 4 (900 GB/s per GPU)"


# Published parameter counts (each model's Hugging Face page / report) against the shapes' sum.
PARAMS_B = {"Llama-2-70B": 69.0, "Qwen2.5-72B": 72.7, "Qwen3-8B": 8.2, "Llama-3.1-8B": 8.03,
            "Llama-3.3-70B": 70.6, "DeepSeek-R1": 671.0, "GLM-4.5": 355.0, "Kimi-K2": 1030.0,
            "Qwen3-235B-A22B": 235.0, "Qwen3-30B-A3B": 30.5, "Gemma-3-27B": 27.0}


@pytest.mark.parametrize("name", sorted(PARAMS_B))
def test_each_model_loads_and_its_weights_add_up_to_its_published_size(name):
    m = get_model(name)
    assert m.name == name and m.source.startswith("config.json of https://huggingface.co/")
    params_b = weights_per_rank(m, 1)["total"] / 2 / 1e9      # bf16: 2 bytes a parameter
    # GLM-4.5's published 355B includes its multi-token-prediction layer, left out here
    assert params_b == pytest.approx(PARAMS_B[name], rel=0.02 if name != "GLM-4.5" else 0.01)


def test_moe_shapes_of_the_new_models():
    glm, kimi = get_model("GLM-4.5"), get_model("Kimi-K2")
    assert (glm.experts, glm.top_k, glm.expert_ffn, glm.dense_layers, glm.shared_experts) == (160, 8, 1536, 3, 1)
    assert (kimi.experts, kimi.top_k, kimi.dense_layers, kimi.is_mla, kimi.q_heads) == (384, 8, 1, True, 64)
    assert get_model("deepseek-r1").to_dict() == {**get_model("DeepSeek-V3").to_dict(), "name": "DeepSeek-R1",
                                                  "source": get_model("DeepSeek-R1").source}


@pytest.mark.parametrize("model, gpu, tp, fits", [
    ("Llama-3.1-8B", "rtx3090", 1, True),          # 16.1 GB in 24 x 0.9
    ("Qwen3-8B", "a30", 1, True),                  # 16.4 GB in 24 x 0.9
    ("Llama-2-70B", "a100-sxm-40gb", 2, False),    # 69 GB per rank in 36
    ("Llama-2-70B", "a100-sxm-40gb", 4, True),     # 34.5 GB per rank in 36
    ("Qwen2.5-72B", "rtx-a6000", 2, False),        # 72.7 GB per rank in 43.2
    ("Qwen2.5-72B", "rtx-a6000", 4, True),         # 36.4 GB per rank
    ("Qwen2.5-72B", "h20", 2, True),               # 72.7 GB per rank in 86.4
    ("Kimi-K2", "h200", 8, False),                 # 257 GB per rank in bf16
    ("DeepSeek-R1", "gb200", 8, False),            # bf16: 169.6 GB per rank, just over 186 x 0.9 = 167.4
])
def test_weights_fit_where_their_bytes_say(model, gpu, tp, fits):
    rows, _, _ = predict_table(model, [gpu], [], [tp], [1], context=1024)
    w = weights_per_rank(get_model(model), tp)["total"]
    assert rows[0]["weights_fit"] is (w <= get_gpu(gpu).memory_gb * 1e9 * 0.9)
    assert rows[0]["weights_fit"] is fits


# The MoE shapes as their config.json gives them (the keys and values of the published files, named in
# each built-in entry's source): read offline by load_config, they weigh what the built-in entries weigh.
CONFIGS = {
    "GLM-4.5": {"model_type": "glm4_moe", "hidden_size": 5120, "num_hidden_layers": 92, "num_attention_heads": 96,
                "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "moe_intermediate_size": 1536,
                "n_routed_experts": 160, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
                "vocab_size": 151552, "tie_word_embeddings": False},
    "Kimi-K2": {"model_type": "kimi_k2", "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 64,
                "num_key_value_heads": 64, "intermediate_size": 18432, "moe_intermediate_size": 2048,
                "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
                "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                "v_head_dim": 128, "vocab_size": 163840, "tie_word_embeddings": False},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_moe_config_json_reads_as_the_builtin_shape(name, tmp_path):
    import json

    from commprof.model.models import load_config
    from commprof.analysis.stepmodel import kv_bytes_per_sequence_per_rank

    p = tmp_path / "config.json"
    p.write_text(json.dumps(CONFIGS[name]))
    read, built = load_config(str(p)), get_model(name)
    for tp in (1, 8):
        assert weights_per_rank(read, tp) == weights_per_rank(built, tp)
        assert kv_bytes_per_sequence_per_rank(read, tp, 4096) == kv_bytes_per_sequence_per_rank(built, tp, 4096)
    assert (read.experts, read.top_k, read.dense_layers, read.is_mla) == (built.experts, built.top_k,
                                                                          built.dense_layers, built.is_mla)
