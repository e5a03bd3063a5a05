import json

import pytest

from commprof.model.errors import UsageError
from commprof.model.models import BUILTIN, get_model
from commprof.model.sizes import parse_sizes
from commprof.model.units import human_bytes, parse_bytes


def test_builtin_models_from_facts():
    for name in ("Qwen2.5-32B", "Qwen3-32B", "Llama-3.1-70B", "Gemma-3-27B", "Qwen3-30B-A3B", "DeepSeek-V3"):
        assert get_model(name).name == name
    q = get_model("qwen2.5-32b")
    assert (q.layers, q.hidden, q.vocab, q.kv_heads) == (64, 5120, 152064, 8)
    g = get_model("Gemma-3-27B")
    assert (g.layers, g.hidden, g.vocab) == (62, 5376, 262208)
    assert all(m.source for m in BUILTIN.values())


def test_decode_sizes_are_batch_times_hidden_and_vocab():
    m = get_model("Qwen2.5-32B")
    pts = parse_sizes("decode", ["all_reduce", "all_gather"], m, [1, 8], 2)
    ar = [p.size_bytes for p in pts if p.op == "all_reduce"]
    ag = [p.size_bytes for p in pts if p.op == "all_gather"]
    assert ar == [1 * 5120 * 2, 8 * 5120 * 2]
    assert ag == [1 * 152064 * 2, 8 * 152064 * 2]
    assert [p.batch for p in pts if p.op == "all_reduce"] == [1, 8]


def test_pow2_and_explicit_lists():
    pts = parse_sizes("pow2:4K-64K", ["all_reduce"], None, [1], 2)
    assert [p.size_bytes for p in pts] == [4096, 8192, 16384, 32768, 65536]
    pts = parse_sizes("1K,3000,2M", ["broadcast"], None, [1], 2)
    assert [p.size_bytes for p in pts] == [1024, 3000, 2 << 20]
    assert parse_bytes("1.5K") == 1536
    assert human_bytes(10240) == "10KiB" and human_bytes(1536) == "1.5KiB"


@pytest.mark.parametrize("spec", ["pow2:4K", "pow2:64K-4K", "4K,,x", "pow2:4Q-8K", "0", "-4K", ""])
def test_malformed_sizes(spec):
    with pytest.raises(UsageError, match="--sizes"):
        parse_sizes(spec, ["all_reduce"], None, [1], 2)


def test_config_json_offline(tmp_path):
    cfg = {"model_type": "gemma3", "text_config": {"hidden_size": 5376, "num_hidden_layers": 62,
                                                  "num_attention_heads": 32, "num_key_value_heads": 16,
                                                  "head_dim": 128, "intermediate_size": 21504,
                                                  "vocab_size": 262208}}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = get_model(str(p))
    assert (m.hidden, m.layers, m.kv_heads, m.vocab) == (5376, 62, 16, 262208)
    assert get_model(str(tmp_path)).hidden == 5376          # a model folder works too
    assert "config.json" in m.source


def test_bad_models(tmp_path):
    with pytest.raises(UsageError, match="unknown model 'gpt-17'"):
        get_model("gpt-17")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="not valid JSON"):
        get_model(str(bad))
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"hidden_size": 4096}))
    with pytest.raises(UsageError, match="missing field 'vocab_size'"):
        get_model(str(partial))
    neg = tmp_path / "neg.json"
    neg.write_text(json.dumps({"hidden_size": -1, "vocab_size": 10, "num_hidden_layers": 2,
                               "num_attention_heads": 2}))
    with pytest.raises(UsageError, match="positive integer"):
        get_model(str(neg))
