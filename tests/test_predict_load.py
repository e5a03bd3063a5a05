"""``commprof predict --concurrency N / --qps R`` with ``--isl/--osl`` (commprof.analysis.predictload):
the batch the engine really decodes, the prompt tokens chunked into the steps, Little's law for an
open loop, and the two per-token figures (a serving benchmark's TPOT, a latency benchmark's
end-to-end / output tokens), against hand-computed figures."""
from __future__ import annotations

import csv

import pytest

from commprof.analysis.predictload import evaluate, load_point, load_spec, sglang_chunk, split_in_flight
from commprof.analysis.predictmodel import predict_table
from commprof.model.errors import UsageError


def test_split_by_hand_when_the_prompts_fit_the_steps():
    spec = load_spec([16], [], 1024, 256, 2048)
    sp = split_in_flight(16, spec)
    # p = ceil(1024 / 2048) = 1; B = round(16 x 255 / 256) = 16; m = 16 x 1024 / 256 = 64
    assert (sp.prefill_steps, sp.decode_batch, sp.prompt_tokens, sp.chunk_tokens) == (1, 16, 64, 1024)
    assert sp.mixed_share == pytest.approx(64 * 15 / 16 / 1024)           # others' prompts: 0.0586
    alone = split_in_flight(1, spec)
    assert alone.decode_batch == 1 and alone.mixed_share == 0.0          # one user meets no other prompt


def test_split_by_hand_when_the_prompts_overrun_the_steps():
    spec = load_spec([8], [], 4096, 8, 512)
    sp = split_in_flight(8, spec)
    # p from ceil(4096/512) = 8: B = round(8 x 7 / 15) = 4, room 508: p >= ceil(8 x 4096 / 508) - 7 = 58;
    # at p = 58: B = round(8 x 7 / 65) = 1, room 511, ceil(32768 / 511) - 7 = 58: it holds
    assert (sp.prefill_steps, sp.decode_batch, sp.chunk_tokens) == (58, 1, 511)
    assert sp.prompt_tokens == round(8 * 4096 / 65)                       # 504, within the 511 of room
    assert sp.mixed_share == pytest.approx(min(1.0, 8 * 4096 / 65 * 7 / 8 / 511))


def _fake_step(kv=10_000):
    """A step of b decode and m prompt tokens costs 10 + 0.1 b + 0.01 m ms (a stand-in for predict_point);
    with a prompt, its eager prefill forward alone costs 5 + 0.02 prompt ms, 1 ms of it collectives."""
    def step_row(b, m, ctx, prompt=None):
        t = 10.0 + 0.1 * b + 0.01 * m
        row = {"batch": b, "tp": 1, "compute_ms": t, "kernel_ms": t, "floor_ms": 0.0, "gaps_ms": 0.0,
               "comm_ms": 0.0, "ms_per_token": t, "kv_max_sequences": kv, "weights_fit": True}
        if prompt:
            row.update(prefill_ms=5.0 + 0.02 * prompt, ttft_comm_ms=1.0)
        return row
    return step_row


def test_closed_loop_figures_by_hand():
    spec = load_spec([16], [], 1024, 256, 2048)
    row, fig = evaluate(_fake_step(), split_in_flight(16, spec), spec, 1152)
    t_d, t_m, f = 10 + 1.6, 10 + 1.6 + 10.24, 64 * 15 / 16 / 1024
    tpot = (1 - f) * t_d + f * t_m
    assert fig["tpot_ms"] == pytest.approx(tpot) and row["ms_per_token"] == pytest.approx(tpot)
    assert fig["ttft_load_ms"] == pytest.approx(t_m)                      # one mixed step
    e2e = t_m + 255 * tpot
    assert fig["e2e_ms"] == pytest.approx(e2e)
    assert fig["e2e_per_output_token_ms"] == pytest.approx(e2e / 256)
    assert fig["requests_s"] == pytest.approx(16e3 / e2e) and fig["output_tokens_s"] == pytest.approx(16 * 256e3 / e2e)


def test_separate_prefill_steps_by_hand():
    """SGLang's default: a prompt chunk is its own forward (the whole budget its own), the running
    requests wait: T_m = T_d + T_p(c), TPOT = T_d + f T_p, TTFT = p T_p."""
    spec = load_spec([16], [], 1024, 256, 2048, "separate")
    sp = split_in_flight(16, spec)
    assert (sp.prefill_steps, sp.decode_batch, sp.chunk_tokens) == (1, 16, 1024)
    f = 64 * 15 / 16 / 1024
    assert sp.mixed_share == pytest.approx(f)
    row, fig = evaluate(_fake_step(), sp, spec, 1152)
    t_d, t_p = 10 + 1.6, 5 + 0.02 * 1024
    assert fig["tpot_ms"] == pytest.approx(t_d + f * t_p) and row["comm_ms"] == pytest.approx(f * 1.0)
    assert fig["ttft_load_ms"] == pytest.approx(t_p)
    # the budget is the prefill's alone: a 2048-token prompt is one chunk (mixed: 2048 - B = 2032 a step)
    assert split_in_flight(16, load_spec([16], [], 2048, 256, 2048, "separate")).prefill_steps == 1
    assert split_in_flight(16, load_spec([16], [], 2048, 256, 2048)).prefill_steps == 2
    r = load_point(_fake_step(), spec, "concurrency", 16)
    assert r["prefill_steps_policy"] == "separate" and r["tpot_ms"] == pytest.approx(fig["tpot_ms"])


def test_sglang_chunk_follows_gpu_memory():
    # server_args.py: under 35 GB 2048, under 160 GB 8192, else 16384
    assert [sglang_chunk(g) for g in (24, 32, 80, 96, 141, 180)] == [2048, 2048, 8192, 8192, 8192, 16384]


def test_the_real_model_with_separate_prefill_steps():
    """On the real model, the separate policy's step carrying a prompt is the decode step plus
    predict's own prefill of the chunk (its TTFT prefill at --prompt c, less the decode step)."""
    spec = load_spec([16], [], 1024, 256, 8192, "separate")
    (r,), notes, _ = predict_table("Qwen3-8B", ["h100-sxm"], [], [2], [1], load=spec)
    sp = split_in_flight(16, spec)
    (d,), _, _ = predict_table("Qwen3-8B", ["h100-sxm"], [], [2], [sp.decode_batch], context=1152, prompt=1024)
    t_p = d["ttft_ms"] - d["ms_per_token"]
    assert r["tpot_ms"] == pytest.approx(d["ms_per_token"] + sp.mixed_share * t_p, rel=1e-9)
    assert r["ttft_load_ms"] == pytest.approx(t_p, rel=1e-9)
    assert any("its own eager forward" in n for n in notes)
    assert not any("SGLang's default chunk" in n for n in notes)       # --chunk 8192 is SGLang's on an H100
    _, said, _ = predict_table("Qwen3-8B", ["h100-sxm"], [], [2], [1], load=load_spec([16], [], 1024, 256, 2048,
                                                                                       "separate"))
    assert any(n.startswith("h100-sxm: SGLang's default chunk on a GPU of 80 GB is 8192 tokens") for n in said)
    (m,), _, _ = predict_table("Qwen3-8B", ["h100-sxm"], [], [2], [1], load=load_spec([16], [], 1024, 256, 8192))
    assert r["tpot_ms"] > m["tpot_ms"]         # a separate prefill stalls the decode batch longer than a mixed chunk


def test_open_loop_satisfies_littles_law():
    spec = load_spec([], [5.0], 1024, 256, 2048)
    r = load_point(_fake_step(), spec, "qps", 5.0)
    assert r["requests_in_flight"] == pytest.approx(5.0 * r["e2e_ms"] / 1e3, rel=2e-2)   # L = R x e2e
    assert r["requests_s"] == pytest.approx(5.0, rel=2e-2) and r["load_note"] == ""
    assert r["load"] == "qps 5" and r["qps"] == 5.0


def test_open_loop_over_capacity_is_said_and_bounded():
    spec = load_spec([], [1e5], 1024, 256, 2048)
    r = load_point(_fake_step(kv=50), spec, "qps", 1e5)
    assert r["load_note"].startswith("over capacity: 100000 requests/s is more than the box serves")
    assert r["requests_in_flight"] == 50 and r["decode_batch"] == round(50 * 255 / 256)
    c = load_point(_fake_step(kv=50), load_spec([80], [], 1024, 256, 2048), "concurrency", 80)
    assert "80 users but the KV cache holds 50" in c["load_note"] and c["requests_in_flight"] == 50


def test_the_real_model_under_load():
    kw = dict(load=load_spec([1, 16], [], 1024, 256, 2048))
    rows, notes, meta = predict_table("Llama-3.1-8B", ["h100-sxm"], [], [1], [1], **kw)
    one, sixteen = rows
    # one user alone: its TPOT is the pure decode step at batch 1, context 1024 + 128
    (plain,), _, _ = predict_table("Llama-3.1-8B", ["h100-sxm"], [], [1], [1], context=1152)
    assert one["tpot_ms"] == pytest.approx(plain["ms_per_token"]) and one["batch"] == 1
    # end-to-end / output tokens carries the prompt: above the TPOT
    assert one["e2e_per_output_token_ms"] > one["tpot_ms"]
    (plain16,), _, _ = predict_table("Llama-3.1-8B", ["h100-sxm"], [], [1], [16], context=1152)
    assert sixteen["batch"] == 16 and sixteen["tpot_ms"] > plain16["ms_per_token"]    # others' prompts in its steps
    assert meta["load"]["isl"] == 1024 and meta["csv_columns"][-3:] == ["requests_s", "output_tokens_s", "load_note"]
    assert any(n.startswith("load: ISL 1024, OSL 256") for n in notes)


def test_load_with_expert_parallelism():
    rows, notes, meta = predict_table("Qwen3-30B-A3B", ["h100-sxm"], [], [4], [1], ep=4,
                                      load=load_spec([8], [], 512, 128, 2048))
    r = rows[0]
    assert r["ep"] == 4 and r["decode_batch"] == 8 and r["tpot_ms"] > 0
    assert {"moe_a2a_ms", "e2e_per_output_token_ms"} <= set(meta["csv_columns"])


def test_cli_writes_the_load_columns(cli_inproc, tmp_path):
    r = cli_inproc("predict", "--model", "Qwen3-8B", "--gpu", "l40s", "--tp", "2", "--concurrency", "4",
                   "--qps", "0.5", "--isl", "512", "--osl", "64", "--prefill-steps", "separate",
                   "--out", str(tmp_path / "p"), "--no-charts")
    assert r.returncode == 0, r.stderr
    assert "TPOT/ITL (serving benchmark)" in r.stdout and "end-to-end / output tokens (latency benchmark)" in r.stdout
    with open(tmp_path / "p" / "predict.csv", newline="") as fh:
        got = list(csv.DictReader(fh))
    assert [g["load"] for g in got] == ["concurrency 4", "qps 0.5"]
    assert float(got[0]["e2e_per_output_token_ms"]) > 0 and got[0]["decode_batch"] == "4"
    assert {g["prefill_steps_policy"] for g in got} == {"separate"}


@pytest.mark.parametrize("args, words", [
    (["--qps", "fast"], "--qps 'fast'"), (["--qps", "-1"], "--qps '-1'"), (["--concurrency", "0"], "--concurrency"),
    (["--concurrency", "4", "--osl", "0"], "--osl"),
    (["--concurrency", "4", "--prefill-steps", "both"], "--prefill-steps 'both'")])
def test_bad_load_input_is_one_line_and_exit_2(cli_inproc, args, words):
    r = cli_inproc("predict", "--model", "Qwen3-8B", "--gpu", "l40s", "--tp", "1", *args)
    assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_load_spec_needs_a_level():
    with pytest.raises(UsageError, match="--concurrency N or --qps R"):
        load_spec([], [], 1024, 256, 2048)


def test_the_api_takes_the_load_and_ep():
    import commprof

    df = commprof.predict("Qwen3-30B-A3B", gpu="h100-sxm", tp=4, ep=4, concurrency=[1, 8], isl=512, osl=64)
    rows, _, _ = predict_table("Qwen3-30B-A3B", ["h100-sxm"], [], [4], [1], ep=4,
                               load=load_spec([1, 8], [], 512, 64, 2048))
    assert list(df["load"]) == ["concurrency 1", "concurrency 8"]
    assert list(df["tpot_ms"]) == pytest.approx([r["tpot_ms"] for r in rows])
    assert list(df["ep"]) == [4, 4]


def test_the_api_takes_the_prefill_policy():
    import commprof

    df = commprof.predict("Qwen3-8B", gpu="h100-sxm", tp=2, concurrency=16, isl=1024, osl=256, chunk=8192,
                          prefill_steps="separate")
    rows, _, _ = predict_table("Qwen3-8B", ["h100-sxm"], [], [2], [1],
                               load=load_spec([16], [], 1024, 256, 8192, "separate"))
    assert list(df["prefill_steps_policy"]) == ["separate"]
    assert list(df["tpot_ms"]) == pytest.approx([r["tpot_ms"] for r in rows])
    with pytest.raises(UsageError, match="--prefill-steps 'both'"):
        commprof.predict("Qwen3-8B", gpu="h100-sxm", tp=2, concurrency=16, prefill_steps="both")
