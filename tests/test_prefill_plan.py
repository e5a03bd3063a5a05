"""commprof plan --phase prefill|mixed and sweep --sizes prefill: counts and sizes computed by hand
for a dense model (Qwen2.5-32B) and a sliding-window one (Gemma-3-27B), and their bad flags."""
import json

import pytest

from helpers import one_line_error

import commprof
from commprof.model.errors import UsageError
from commprof.model.models import get_model
from commprof.analysis.stepmodel import (build_plan, favoured_chunk, prefill_chunks, prefill_comm_us, step_collectives)

BF16 = 2


def _by_op(sites):
    out = {}
    for s in sites:
        out.setdefault(s.op, set()).add((s.size_bytes, s.send_bytes_per_rank))
    return out


def test_prefill_chunks_split_the_prompt():
    assert prefill_chunks(4096, 512) == [512] * 8
    assert prefill_chunks(4096, 1000) == [1000] * 4 + [96]
    assert prefill_chunks(100, 4096) == [100]


def test_qwen_prefill_in_chunks_by_hand():
    # Qwen2.5-32B: 64 layers, hidden 5120, vocab 152064 (its config.json); TP=8, a 4096-token prompt in chunks of 512
    p = build_plan(get_model("Qwen2.5-32B"), 8, 1, 4096, phase="prefill", prompt=4096, chunk=512)
    assert p.phase == "prefill" and len(p.sites) == 2 * 64 + 2 == 130
    ops = _by_op(p.sites)
    ar = 512 * 5120 * BF16                                  # 5 MiB: chunk x hidden
    assert ops["all_reduce"] == {(ar, ar)}                  # one rank sends its whole buffer
    assert ops["all_gather"] == {(152064 * BF16, 152064 // 8 * BF16)}     # 1 token's logits, vocab/8 per rank
    pf = p.prefill
    assert pf["steps"] == 8 and pf["last_chunk_tokens"] == 512
    assert pf["total"]["collectives"] == 8 * 130
    assert pf["total"]["by_op"] == {"all_reduce": 8 * 129, "all_gather": 8}
    assert pf["total"]["size_bytes"] == 8 * (129 * ar + 152064 * BF16)
    assert pf["total"]["send_bytes_per_rank"] == 8 * (129 * ar + 152064 // 8 * BF16)
    # one step's activations per rank: 3 x T x h, the MLP's 3 x T x ffn/8 (above attention's
    # T x (2 x 40/8 + 2 x 1) x 128), 1 token's logits (vocab/8 local + vocab gathered)
    T = 512
    elems = 3 * T * 5120 + 3 * T * (27648 // 8) + (152064 // 8 + 152064)
    assert pf["activation_bytes_per_rank"]["total"] == elems * BF16
    # the prompt's KV cache: 64 layers x 2 (K, V) x 1 KV head per rank x 128 x 4096 tokens
    assert pf["kv_bytes_prompt_per_rank"] == 64 * 2 * 1 * 128 * BF16 * 4096
    assert p.context == 4096


def test_qwen_prefill_uneven_last_chunk():
    p = build_plan(get_model("Qwen2.5-32B"), 8, 1, 4096, phase="prefill", prompt=4096, chunk=1000)
    pf = p.prefill
    assert pf["steps"] == 5 and pf["last_chunk_tokens"] == 96
    sizes = {r["chunk_tokens"]: r for r in pf["per_chunk_size"]}
    assert sizes[1000]["steps"] == 4 and sizes[96]["steps"] == 1
    assert pf["total"]["size_bytes"] == (4 * (129 * 1000 * 5120 * BF16 + 152064 * BF16)
                                         + 129 * 96 * 5120 * BF16 + 152064 * BF16)


def test_gemma_prefill_unchunked_by_hand():
    # Gemma-3-27B: 62 layers (52 sliding-window of 1024 tokens, 10 global), hidden 5376, vocab 262208
    p = build_plan(get_model("Gemma-3-27B"), 8, 1, 4096, phase="prefill", prompt=4096)
    assert len(p.sites) == 2 * 62 + 2 == 126 and p.prefill["steps"] == 1
    ops = _by_op(p.sites)
    assert ops["all_reduce"] == {(4096 * 5376 * BF16, 4096 * 5376 * BF16)}         # 42 MiB each, 125 of them
    assert sum(1 for s in p.sites if s.op == "all_reduce") == 125
    assert ops["all_gather"] == {(262208 * BF16, 262208 // 8 * BF16)}
    per_tok_layer = 2 * (16 // 8) * 128 * BF16
    assert p.prefill["kv_bytes_prompt_per_rank"] == per_tok_layer * (10 * 4096 + 52 * 1024)


def test_mixed_step_by_hand():
    # one scheduler step: a 256-token chunk of a 2048-token prompt + 8 decode tokens, Qwen2.5-32B TP=4
    p = build_plan(get_model("Qwen2.5-32B"), 4, 8, 4096, phase="mixed", prompt=2048, chunk=256)
    ops = _by_op(p.sites)
    assert len(p.sites) == 130
    assert ops["all_reduce"] == {((8 + 256) * 5120 * BF16, (8 + 256) * 5120 * BF16)}
    assert ops["all_gather"] == {((8 + 1) * 152064 * BF16, (8 + 1) * 152064 // 4 * BF16)}
    assert p.prefill["steps"] == 8 and p.prefill["decode_tokens"] == 8
    assert p.counts["collectives_per_token"] == pytest.approx(130 / 264)
    # Gemma mixed: 62 layers -> 126 per step, chunk 512 + batch 4
    g = build_plan(get_model("Gemma-3-27B"), 8, 4, 2048, phase="mixed", prompt=4096, chunk=512)
    assert len(g.sites) == 126
    assert _by_op(g.sites)["all_reduce"] == {(516 * 5376 * BF16, 516 * 5376 * BF16)}
    assert _by_op(g.sites)["all_gather"] == {(5 * 262208 * BF16, 5 * 262208 // 8 * BF16)}
    assert g.prefill["steps"] == 8 and g.context == 2048      # decode sequences' context stays --context


def test_decode_plan_unchanged_by_step_collectives():
    m = get_model("Qwen2.5-32B")
    assert [s.to_dict() for s in step_collectives(m, 8, 4, 4)] == \
        [s.to_dict() for s in build_plan(m, 8, 4, 4096).sites]
    assert build_plan(m, 8, 4, 4096).phase == "decode" and build_plan(m, 8, 4, 4096).prefill is None


def test_chunking_costs_communication_under_alpha_beta():
    m = get_model("Gemma-3-27B")
    price = lambda op, size: 20.0 + size / 25e3  # noqa: E731 - 20 us + 25 GB/s
    whole = prefill_comm_us(m, 8, 4096, 4096, price)
    assert whole == pytest.approx(125 * (20.0 + 4096 * 5376 * BF16 / 25e3) + (20.0 + 262208 * BF16 / 25e3))
    assert prefill_comm_us(m, 8, 4096, 512, price) > whole
    fav = favoured_chunk(m, 8, 4096, price)
    assert fav["least_chunk"] == 4096
    assert fav["favoured_comm_us"] <= 1.05 * fav["least_comm_us"] and fav["favoured_chunk"] <= 4096


def test_api_plan_prefill():
    df = commprof.plan("Gemma-3-27B", tp=8, phase="prefill", prompt=4096, chunk=1024)
    assert len(df) == 126 and df.attrs["phase"] == "prefill"
    assert df.attrs["prefill"]["steps"] == 4 and df.attrs["prefill"]["total"]["collectives"] == 4 * 126


def test_plan_cli_prefill_json(cli_inproc):
    res = cli_inproc("plan", "--model", "Qwen2.5-32B", "--tp", "8", "--phase", "prefill", "--prompt", "4096",
                     "--chunk", "512", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["phase"] == "prefill" and doc["prefill"]["steps"] == 8
    res = cli_inproc("plan", "--model", "Gemma-3-27B", "--tp", "8", "--phase", "mixed", "--prompt", "4096",
                     "--chunk", "512", "--batch", "8")
    assert res.returncode == 0, res.stderr
    assert "mixed step" in res.stdout and "whole prompt (4096 tokens): 8 step(s)" in res.stdout


@pytest.mark.parametrize("args,needle", [
    (["--phase", "prefill"], "needs --prompt"),
    (["--phase", "bogus", "--prompt", "10"], "--phase"),
    (["--phase", "prefill", "--prompt", "0"], "--prompt 0"),
    (["--phase", "prefill", "--prompt", "4096", "--chunk", "0"], "--chunk 0"),
    (["--phase", "prefill", "--prompt", "4096", "--chunk", "-5"], "--chunk -5"),
    (["--phase", "prefill", "--prompt", str(1 << 25)], "--prompt"),
    (["--prompt", "4096"], "--phase prefill"),
    (["--chunk", "512"], "--phase prefill"),
    (["--phase", "mixed", "--prompt", "4096"], "needs --chunk"),
    (["--phase", "prefill", "--prompt", "abc"], "prompt"),
])
def test_plan_bad_phase_flags(cli_inproc, args, needle):
    res = cli_inproc("plan", "--model", "Qwen2.5-32B", *args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert needle in one_line_error(res)


def test_sweep_prefill_sizes():
    from commprof.model.sizes import parse_sizes

    m = get_model("Qwen2.5-32B")
    pts = parse_sizes("prefill", ["all_reduce", "all_gather"], m, [1], BF16, prompts=[512, 2048, 8192])
    ar = [p.size_bytes for p in pts if p.op == "all_reduce"]
    assert ar == [512 * 5120 * 2, 2048 * 5120 * 2, 8192 * 5120 * 2]
    assert [p.size_bytes for p in pts if p.op == "all_gather"] == [152064 * 2]     # 1 token's logits, once
    pts = parse_sizes("prefill", ["all_reduce"], m, [1], BF16, prompts=[512, 8192], chunks=[1024, 4096])
    # chunks cap at the prompt: 512 (prompt 512), 1024 and 4096 (prompt 8192)
    assert sorted(p.size_bytes for p in pts) == [512 * 10240, 1024 * 10240, 4096 * 10240]
    with pytest.raises(UsageError, match="--prompt"):
        parse_sizes("prefill", ["all_reduce"], m, [1], BF16)


@pytest.mark.parametrize("args,needle", [
    (["--sizes", "prefill"], "needs --prompt"),
    (["--prompt", "512"], "add --sizes prefill"),
    (["--sizes", "decode", "--chunk", "512"], "add --sizes prefill"),
    (["--sizes", "prefill", "--prompt", "0"], "--prompt"),
    (["--sizes", "prefill", "--prompt", "512,,1024"], "element 2 is empty"),
    (["--sizes", "prefill", "--prompt", "512", "--chunk", "x"], "--chunk"),
])
def test_sweep_bad_prefill_flags(cli_inproc, tmp_path, args, needle):
    res = cli_inproc("sweep", "--tp", "2", "--backend", "gloo", "--out", str(tmp_path / "s"), *args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert needle in one_line_error(res)
