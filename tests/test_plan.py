"""`commprof plan`: collectives of a decode step, weights and KV cache per rank, sequences that fit.

Expected values are worked out by hand from the models' shapes (their published config.json on
Hugging Face), not read back from the code.
"""
import csv
import io
import json

import pytest
from rich.console import Console

from commprof.model.errors import UsageError
from commprof.model.models import ModelShape, get_model, is_moe_layer, is_sliding
from commprof.views.plan import render_plan
from commprof.verbs import plan as planner
from commprof.verbs.plan import PlanConfig, write_plan
from commprof.analysis.stepmodel import (build_plan, decode_collectives, kv_bytes_per_sequence_per_rank,
                                kv_bytes_per_token_per_rank, step_counts, weights_per_rank)
from commprof.model.sizes import parse_sizes

GiB = 1 << 30


def ops(sites, op):
    return [s for s in sites if s.op == op]


def test_qwen25_32b_tp8_batch1_has_130_collectives_of_known_sizes():
    sites = decode_collectives(get_model("Qwen2.5-32B"), tp=8, batch=1)
    assert len(sites) == 2 * 64 + 2 == 130
    ar, ag = ops(sites, "all_reduce"), ops(sites, "all_gather")
    assert len(ar) == 129 and len(ag) == 1
    assert {s.size_bytes for s in ar} == {5120 * 2} == {10240}
    assert {s.send_bytes_per_rank for s in ar} == {10240}
    assert ag[0].size_bytes == 152064 * 2 == 304128
    assert ag[0].send_bytes_per_rank == 304128 // 8          # each rank gives vocab/tp
    # execution order: embedding, then attention-out and MLP-out per layer, logits last
    assert [(s.site, s.kind, s.layer) for s in sites[:3]] == [
        ("embedding", "embedding", None), ("layer 0 attention-out", "attn_out", 0), ("layer 0 MLP-out", "mlp_out", 0)]
    assert (sites[-2].site, sites[-1].site, sites[-1].kind) == ("layer 63 MLP-out", "logits", "logits")


@pytest.mark.parametrize("name,tp,count", [("Gemma-3-27B", 8, 126), ("Llama-3.1-70B", 8, 162),
                                           ("Qwen3-32B", 4, 130), ("Qwen3-30B-A3B", 8, 98),
                                           ("DeepSeek-V3", 8, 124)])
def test_count_per_step_is_2L_plus_2(name, tp, count):
    assert len(decode_collectives(get_model(name), tp=tp, batch=1)) == count


def test_count_does_not_depend_on_tp_and_tp1_has_none():
    m = get_model("Llama-3.1-70B")
    assert {len(decode_collectives(m, tp, 1)) for tp in (2, 4, 8, 16)} == {162}
    assert decode_collectives(m, 1, 1) == []
    p = build_plan(m, 1, 1, 4096)
    assert p.counts["collectives_per_step"] == 0 and p.counts["size_bytes_per_step"] == 0


def test_batch_scales_sizes_and_divides_per_token_count():
    m = get_model("Qwen2.5-32B")
    sites = decode_collectives(m, 8, 8)
    c = step_counts(sites, 8)
    assert c["collectives_per_step"] == 130
    assert c["collectives_per_token"] == 130 / 8
    assert {s.size_bytes for s in ops(sites, "all_reduce")} == {8 * 5120 * 2}
    assert c["size_bytes_per_step"] == 129 * 8 * 5120 * 2 + 8 * 152064 * 2
    assert c["send_bytes_per_rank_per_step"] == 129 * 8 * 5120 * 2 + 8 * 152064 * 2 // 8
    assert c["by_op"] == {"all_reduce": 129, "all_gather": 1}


def test_sizes_match_the_sweep_decode_sizes_so_rows_can_be_looked_up():
    m = get_model("Gemma-3-27B")
    for batch in (1, 3, 8):
        sweep = {(p.op, p.size_bytes) for p in parse_sizes("decode", ["all_reduce", "all_gather"], m, [batch], 2)}
        plan = {(s.op, s.size_bytes) for s in decode_collectives(m, 8, batch)}
        assert plan == sweep


def test_sequence_parallel_doubles_the_all_reduce_derived_count():
    m = get_model("Qwen2.5-32B")
    sites = decode_collectives(m, 8, 1, sp=True)
    assert len(sites) == 2 * 129 + 1
    assert not ops(sites, "all_reduce")
    rs, ag = ops(sites, "reduce_scatter"), ops(sites, "all_gather")
    assert len(rs) == 129 and len(ag) == 130
    assert {s.size_bytes for s in rs} == {10240} and {s.send_bytes_per_rank for s in rs} == {10240}
    hidden_ag = [s for s in ag if s.kind != "logits"]
    assert {s.size_bytes for s in hidden_ag} == {10240} and {s.send_bytes_per_rank for s in hidden_ag} == {1280}
    # reduce-scatter then all-gather at the same site
    assert [(s.site, s.op) for s in sites[2:4]] == [("layer 0 attention-out", "reduce_scatter"),
                                                    ("layer 0 attention-out", "all_gather")]


def test_expert_parallel_qwen3_30b_a3b():
    m = get_model("Qwen3-30B-A3B")
    sites = decode_collectives(m, 8, 1, moe="ep")
    dispatch = [s for s in sites if s.kind == "moe_dispatch"]
    combine = [s for s in sites if s.kind == "moe_combine"]
    assert len(dispatch) == 48 and len(combine) == 48
    assert {s.op for s in dispatch + combine} == {"all_to_all"}
    assert {s.size_bytes for s in dispatch + combine} == {1 * 8 * 2048 * 2}     # batch x top_k x hidden
    assert not [s for s in sites if s.kind == "mlp_out"]
    assert len(sites) == 1 + 48 + 96 + 1
    assert [s.site for s in sites[2:4]] == ["layer 0 MoE dispatch", "layer 0 MoE combine"]


def test_expert_parallel_deepseek_v3_keeps_3_dense_layers():
    m = get_model("DeepSeek-V3")
    assert m.dense_layers == 3 and m.shared_experts == 1
    assert [is_moe_layer(m, i) for i in (0, 2, 3, 60)] == [False, False, True, True]
    sites = decode_collectives(m, 8, 1, moe="ep")
    assert len([s for s in sites if s.kind == "moe_dispatch"]) == 58
    assert len([s for s in sites if s.kind == "moe_combine"]) == 58
    assert [s.layer for s in sites if s.kind == "mlp_out"] == [0, 1, 2]
    assert len(sites) == 1 + 61 + 3 + 2 * 58 + 1


def test_moe_mode_errors():
    with pytest.raises(UsageError, match="--moe 'xp'"):
        decode_collectives(get_model("Qwen3-30B-A3B"), 8, 1, moe="xp")
    with pytest.raises(UsageError, match="Qwen2.5-32B has no routed experts"):
        decode_collectives(get_model("Qwen2.5-32B"), 8, 1, moe="ep")


def test_tp_that_does_not_split_heads_is_a_usage_error():
    with pytest.raises(UsageError, match=r"Qwen2.5-32B: --tp 3 does not divide its 40 query heads"):
        decode_collectives(get_model("Qwen2.5-32B"), 3, 1)
    with pytest.raises(UsageError, match="Qwen2.5-32B"):
        weights_per_rank(get_model("Qwen2.5-32B"), 16, "bf16")
    odd_kv = ModelShape("odd", 2, 768, 48, 12, 16, 3072, 1000)
    with pytest.raises(UsageError, match="odd: --tp 8 does not divide its 12 KV heads"):
        build_plan(odd_kv, 8, 1, 128)
    # fewer KV heads than ranks: replicated, fine when tp is a multiple of them
    assert kv_bytes_per_token_per_rank(get_model("Llama-3.1-70B"), 16) == 80 * 2 * 1 * 128 * 2


@pytest.mark.parametrize("kwargs,msg", [
    (dict(tp=0), "--tp 0"), (dict(batch=0), "--batch 0"), (dict(context=0), "--context 0"),
    (dict(mem_util=0), "--mem-util"), (dict(mem_util=1.5), "--mem-util"), (dict(gpu_mem_bytes=0), "--gpu-mem"),
    (dict(dtype="fp7"), "--dtype 'fp7'"),
])
def test_bad_inputs(kwargs, msg):
    args = dict(model=get_model("Qwen2.5-32B"), tp=8, batch=1, context=4096, gpu_mem_bytes=80 * GiB)
    args.update(kwargs)
    with pytest.raises(UsageError, match=msg):
        build_plan(**args)


def qwen25_32b_params() -> int:
    """Qwen2.5-32B by hand: untied embedding and lm_head, GQA attention, SwiGLU MLP, 2 norms/layer."""
    h, L, vocab, ffn, hd = 5120, 64, 152064, 27648, 128
    embed = vocab * h
    attn = h * 40 * hd + 2 * h * 8 * hd + 40 * hd * h
    mlp = 3 * h * ffn
    norms = (2 * L + 1) * h
    return 2 * embed + L * (attn + mlp) + norms


def test_weights_per_rank_dense():
    m = get_model("Qwen2.5-32B")
    params = qwen25_32b_params()
    assert params == pytest.approx(32.5e9, rel=0.015)
    w1 = weights_per_rank(m, 1, "bf16")
    assert w1["total"] == 2 * params
    assert w1["lm_head"] == w1["embedding"] == 152064 * 5120 * 2
    w8 = weights_per_rank(m, 8, "bf16")
    assert w8["total"] == pytest.approx(w1["total"] / 8, rel=0.001)
    assert w8["attention_per_layer"] == (5120 * 640 + 2 * 5120 * 128 + 640 * 5120) * 2
    assert weights_per_rank(m, 8, "fp32")["total"] == 2 * w8["total"]


def test_weights_tied_and_moe_and_mla():
    g = get_model("Gemma-3-27B")
    wg = weights_per_rank(g, 1)
    assert wg["lm_head"] == 0
    assert wg["total"] / 2 == pytest.approx(27.0e9, rel=0.02)          # Gemma 3 27B, tied
    ds = get_model("DeepSeek-V3")
    wd = weights_per_rank(ds, 1)
    assert wd["total"] / 2 == pytest.approx(671e9, rel=0.01)           # 671B without the MTP layer
    h, heads = 7168, 128
    mla = h * 1536 + 1536 * heads * 192 + h * (512 + 64) + 512 * heads * (128 + 128) + heads * 128 * h
    assert wd["attention_per_layer"] == mla * 2
    assert wd["moe_experts"] == 58 * 256 * 3 * h * 2048 * 2
    assert wd["moe_shared_experts"] == 58 * 1 * 3 * h * 2048 * 2
    assert wd["moe_router"] == 58 * h * 256 * 2
    assert wd["dense_mlp"] == 3 * 3 * h * 18432 * 2
    w8 = weights_per_rank(ds, 8)
    # q_a and kv_a are replicated: only the head-sharded parts shrink by 8
    assert w8["attention_per_layer"] == (h * 1536 + 1536 * 16 * 192 + h * 576 + 512 * 16 * 256 + 16 * 128 * h) * 2


def test_kv_cache_per_rank():
    q = get_model("Qwen2.5-32B")
    assert kv_bytes_per_token_per_rank(q, 8, "bf16") == 64 * 2 * 1 * 128 * 2
    assert kv_bytes_per_sequence_per_rank(q, 8, 4096, "bf16") == 4096 * 64 * 2 * 128 * 2
    assert kv_bytes_per_token_per_rank(q, 4, "bf16") == 64 * 2 * 2 * 128 * 2
    ds = get_model("DeepSeek-V3")
    assert kv_bytes_per_token_per_rank(ds, 8) == kv_bytes_per_token_per_rank(ds, 1) == 61 * (512 + 64) * 2


def test_gemma_sliding_layers_cap_at_1024_tokens():
    g = get_model("Gemma-3-27B")
    assert g.sliding_window == 1024
    assert g.global_layers == (5, 11, 17, 23, 29, 35, 41, 47, 53, 59)
    assert sum(is_sliding(g, i) for i in range(62)) == 52
    assert not is_sliding(g, 5) and is_sliding(g, 0) and is_sliding(g, 61)
    per_layer = 2 * 2 * 128 * 2                  # K and V, 16/8 heads per rank, head_dim 128, bf16
    assert kv_bytes_per_token_per_rank(g, 8) == 62 * per_layer
    assert kv_bytes_per_sequence_per_rank(g, 8, 4096) == 10 * 4096 * per_layer + 52 * 1024 * per_layer
    assert kv_bytes_per_sequence_per_rank(g, 8, 512) == 62 * 512 * per_layer
    assert json.loads(json.dumps(g.to_dict()))["global_layers"][0] == 5


def test_max_sequences_by_hand():
    p = build_plan(get_model("Qwen2.5-32B"), 8, 1, 4096, gpu_mem_bytes=80 * GiB, mem_util=0.9)
    embed = 19008 * 5120                          # 152064 / 8 rows
    attn = 64 * (5120 * 640 + 2 * 5120 * 128 + 640 * 5120)
    mlp = 64 * 3 * 5120 * (27648 // 8)
    norms = 129 * 5120
    weights = 2 * (2 * embed + attn + mlp + norms)
    assert p.weights["total"] == weights == 8_192_010_240
    usable = 77_309_411_328                       # 80 GiB x 0.9
    kv_seq = 4096 * 32768
    assert p.usable_bytes == usable and p.kv_bytes_per_sequence_per_rank == kv_seq
    assert p.max_sequences == (usable - weights) // kv_seq == 514
    assert p.weights_fit is True
    assert p.to_dict()["memory"]["batch_fits"] is True


def test_weights_that_do_not_fit_give_zero_sequences_and_a_flag():
    p = build_plan(get_model("DeepSeek-V3"), 8, 1, 4096, gpu_mem_bytes=80 * GiB)
    assert p.weights_fit is False and p.max_sequences == 0 and p.kv_budget_bytes < 0
    out = io.StringIO()
    render_plan(p, Console(file=out, width=200))
    assert "does not fit" in out.getvalue()
    assert build_plan(get_model("DeepSeek-V3"), 8, 1, 4096).max_sequences is None


def test_plan_dict_is_json_and_complete():
    p = build_plan(get_model("Gemma-3-27B"), 8, 2, 4096, gpu_mem_bytes=32 * GiB, sp=True)
    d = json.loads(json.dumps(p.to_dict()))
    assert d["kind"] == "modelled" and d["source"] == "config.json of https://huggingface.co/google/gemma-3-27b-it"
    assert (d["tp"], d["batch"], d["context"], d["dtype"], d["sp"], d["moe"], d["mem_util"]) == \
        (8, 2, 4096, "bf16", True, "tp", 0.9)
    assert d["gpu_mem_bytes"] == 32 * GiB
    assert d["counts"]["collectives_per_step"] == len(d["collectives"]) == 2 * 125 + 1
    assert any("activations" in a for a in d["assumptions"])
    assert d["collectives"][0] == {"site": "embedding", "kind": "embedding", "layer": None, "op": "reduce_scatter",
                                   "size_bytes": 2 * 5376 * 2, "send_bytes_per_rank": 2 * 5376 * 2}


def test_render_groups_layers():
    out = io.StringIO()
    render_plan(build_plan(get_model("Qwen2.5-32B"), 8, 1, 4096, gpu_mem_bytes=80 * GiB), Console(file=out, width=200))
    text = out.getvalue()
    assert "layers 0-63 attention-out" in text and "layers 0-63 MLP-out" in text
    assert "x64" in text and "10KiB" in text and "297KiB" in text
    assert "modelled from" in text and "130 collectives" in text
    assert "fits 514 sequences" in text
    out = io.StringIO()
    render_plan(build_plan(get_model("DeepSeek-V3"), 8, 1, 4096, moe="ep"), Console(file=out, width=200))
    assert "layers 0-2 MLP-out" in out.getvalue() and "layers 3-60 MoE dispatch" in out.getvalue()


def test_write_plan(tmp_path):
    p = build_plan(get_model("Qwen2.5-32B"), 8, 1, 4096)
    out = tmp_path / "new"
    write_plan(p, str(out))
    assert json.loads((out / "plan.json").read_text())["kind"] == "modelled"
    with open(out / "plan.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 130
    assert list(rows[0]) == ["site", "kind", "layer", "op", "size_bytes", "send_bytes_per_rank"]
    assert rows[0]["layer"] == "" and rows[1]["layer"] == "0" and rows[-1]["size_bytes"] == "304128"
    with pytest.raises(UsageError, match="already holds files"):
        write_plan(p, str(out))
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        write_plan(p, str(tmp_path / "f"))


def test_run_plan_json_and_errors(tmp_path, capsys):
    assert planner.run(PlanConfig("Qwen2.5-32B", 8, 1, 4096, gpu_mem="80G", as_json=True, out=str(tmp_path / "o"))) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["memory"]["max_sequences"] == 514
    assert (tmp_path / "o" / "plan.csv").exists()
    with pytest.raises(UsageError, match="--gpu-mem"):
        planner.run(PlanConfig("Qwen2.5-32B", 8, 1, 4096, gpu_mem="lots"))
    with pytest.raises(UsageError, match="--moe"):
        planner.run(PlanConfig("Qwen2.5-32B", 8, 1, 4096, moe="dp"))
    with pytest.raises(UsageError, match="unknown model"):
        planner.run(PlanConfig("gpt-17", 8, 1, 4096))


def test_config_json_sliding_moe_mla_fields(tmp_path):
    base = {"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
            "intermediate_size": 4096, "vocab_size": 32000}

    def load(**extra):
        p = tmp_path / "config.json"
        p.write_text(json.dumps({**base, **extra}))
        return get_model(str(p))

    m = load(sliding_window=512, tie_word_embeddings=False, layer_types=[
        "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"])
    assert (m.sliding_window, m.global_layers, m.tie_word_embeddings) == (512, (3,), False)
    assert [is_sliding(m, i) for i in range(4)] == [True, True, True, False]
    assert kv_bytes_per_sequence_per_rank(m, 2, 2048) == 3 * 512 * (2 * 2 * 128 * 2) + 2048 * (2 * 2 * 128 * 2)

    assert load(sliding_window=512, sliding_window_pattern=2).global_layers == (1, 3)
    assert load(sliding_window=4096).global_layers == ()                   # every layer slides
    assert load(sliding_window=4096).tie_word_embeddings is True           # absent key, no model_type: True
    assert load(model_type="llama").tie_word_embeddings is False           # LlamaConfig's own default
    assert load(model_type="qwen2").tie_word_embeddings is False
    assert load(model_type="gemma2").tie_word_embeddings is True
    assert load(model_type="llama", tie_word_embeddings=True).tie_word_embeddings is True   # the key wins
    qwen2 = load(sliding_window=131072, use_sliding_window=False, max_window_layers=4)
    assert qwen2.sliding_window == 0 and not is_sliding(qwen2, 0)

    ds = load(n_routed_experts=16, num_experts_per_tok=2, moe_intermediate_size=256, first_k_dense_replace=1,
              n_shared_experts=2, q_lora_rank=384, kv_lora_rank=128, qk_rope_head_dim=32,
              qk_nope_head_dim=64, v_head_dim=64)
    assert (ds.experts, ds.dense_layers, ds.shared_experts) == (16, 1, 2)
    assert (ds.q_lora_rank, ds.kv_lora_rank, ds.qk_rope_head_dim, ds.qk_nope_head_dim, ds.v_head_dim) == \
        (384, 128, 32, 64, 64)
    assert ds.is_mla and ds.head_dim == 64
    assert [is_moe_layer(ds, i) for i in range(4)] == [False, True, True, True]
    assert kv_bytes_per_token_per_rank(ds, 2) == 4 * (128 + 32) * 2

    qmoe = load(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=256,
                shared_expert_intermediate_size=1024)
    assert (qmoe.shared_experts, qmoe.shared_expert_ffn) == (1, 1024)

    with pytest.raises(UsageError, match="layer_types"):
        load(sliding_window=512, layer_types=["full_attention"])
    with pytest.raises(UsageError, match="first_k_dense_replace"):
        load(num_experts=8, first_k_dense_replace=-1)


def test_gemma3_multimodal_config_with_pattern(tmp_path):
    cfg = {"model_type": "gemma3", "text_config": {
        "hidden_size": 5376, "num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 16,
        "head_dim": 128, "intermediate_size": 21504, "vocab_size": 262208, "sliding_window": 1024,
        "sliding_window_pattern": 6}}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = get_model(str(p))
    b = get_model("Gemma-3-27B")
    assert (m.sliding_window, m.global_layers, m.tie_word_embeddings) == (b.sliding_window, b.global_layers, True)
    assert len(decode_collectives(m, 8, 1)) == 126


def test_llama_405b_config_counts_its_lm_head_and_is_named_from_the_config(tmp_path):
    """Llama's config.json leaves tie_word_embeddings out (LlamaConfig's default is False): its
    lm_head counts (0.5 GB per rank at TP=8 in bf16 is what was lost); the label comes from the
    config, not from the folder it sits in."""
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16384,
           "intermediate_size": 53248, "num_attention_heads": 128, "num_hidden_layers": 126,
           "num_key_value_heads": 8, "vocab_size": 128256}     # Llama-3.1-405B's published shapes
    folder = tmp_path / "configs"
    folder.mkdir()
    p = folder / "llama-405b.json"
    p.write_text(json.dumps(cfg))
    m = get_model(str(p))
    assert m.tie_word_embeddings is False and m.name == "llama (llama-405b.json)"
    assert "model_type 'llama'" in m.extra["tie_word_embeddings_source"]
    plan = build_plan(m, 8, 1, 4096)
    lm_head = plan.weights["lm_head"]
    assert lm_head == 128256 // 8 * 16384 * 2 and lm_head > 0.5e9
    assert any("lm_head has its own weights" in a and "model_type 'llama'" in a for a in plan.assumptions)
    p.write_text(json.dumps({**cfg, "_name_or_path": "meta-llama/Llama-3.1-405B"}))
    assert get_model(str(p)).name == "meta-llama/Llama-3.1-405B"
    p.write_text(json.dumps({k: v for k, v in cfg.items() if k != "model_type"}))
    assert get_model(str(p)).name == "llama-405b.json"
