"""commprof trace and plan through the CLI: real gloo ranks on CPU, tiny shapes.

The CLI runs in-process here (``cli_inproc``); the ranks it launches are real processes. How close
a prediction lands to a live trace is timed, so it is measured by scripts/validate_predict.py,
not asserted here; the prediction's plumbing is tested below.
"""
import json
import os

import pandas as pd
import pytest

from helpers import TOY_MODEL as TOY     # 8 layers, 16/4 heads
from helpers import one_line_error

TOKENS = 4
FAST = ["--model", TOY, "--context", "64", "--tokens", str(TOKENS), "--warmup", "1", "--no-charts"]


def test_trace_end_to_end_attribution(cli_inproc, tmp_path):
    out = str(tmp_path / "tr")
    res = cli_inproc("trace", "--tp", "2,4", "--batch", "1,2", *FAST[:-1], "--out", out)
    assert res.returncode == 0, res.stderr
    tok = pd.read_csv(os.path.join(out, "trace_tokens.csv"))
    lay = pd.read_csv(os.path.join(out, "trace_layers.csv"))
    summ = pd.read_csv(os.path.join(out, "trace_summary.csv"))
    # rows: per (tp, batch) tokens x ranks of the group
    assert len(tok) == TOKENS * (2 + 2 + 4 + 4)
    assert set(tok["kind"]) == {"measured"} and set(tok["scaled"]) == {0}
    # the parts add up to the measured token latency within 5%
    parts = tok[["compute_us", "transfer_us", "wait_us", "gaps_us"]].sum(axis=1)
    assert ((tok["latency_us"] - parts).abs() <= 0.05 * tok["latency_us"]).all()
    assert (tok["residual_us"].abs() <= 0.05 * tok["latency_us"]).all()
    assert (tok["wait_us"] >= 0).all() and (tok["compute_us"] > 0).all() and (tok["transfer_us"] > 0).all()
    # transfer is one number per collective, shared by every rank of the group
    assert (tok.groupby(["tp", "batch", "token"])["transfer_us"].nunique() == 1).all()
    # every collective has exactly one straggler
    per = lay.groupby(["tp", "batch", "layer"]).agg(s=("straggler_count", "sum"), c=("collectives", "first"))
    assert (per["s"] == per["c"]).all()
    # counts: 2L + 2 per step, as the plan says
    from commprof.model.models import get_model
    from commprof.analysis.stepmodel import decode_collectives
    n = len(decode_collectives(get_model(TOY), 2, 1))
    assert n == 18 and set(summ["collectives_per_step"]) == {18}
    assert set(summ["collectives_per_token"]) == {18.0, 9.0}
    m = json.load(open(os.path.join(out, "meta.json")))
    assert m["kind"] == "measured" and m["status"] == "complete" and m["scaled"] is False
    for png in ("trace_tokens.png", "trace_layers_heatmap.png", "trace_share_vs_tp.png"):
        assert os.path.getsize(os.path.join(out, png)) > 5000
    for tp in (2, 4):
        assert any(l.startswith(f"TP={tp} batch=1 eager:") and "ms/token" in l and "collectives/step" in l
                   and "communication" in l for l in res.stdout.splitlines())
    res = cli_inproc("show", out, "--no-charts")
    assert res.returncode == 0 and "TP=4 batch=2 eager" in res.stdout


def test_injected_delay_shows_as_wait_and_straggler(cli_inproc, tmp_path):
    out = str(tmp_path / "delay")
    res = cli_inproc("trace", "--tp", "2", "--batch", "1", *FAST, "--out", out,
                     env={"COMMPROF_TEST_FAULT": "sleep:rank=1,ms=15"})
    assert res.returncode == 0, res.stderr
    lay = pd.read_csv(os.path.join(out, "trace_layers.csv"))
    r0, r1 = lay[lay["rank"] == 0], lay[lay["rank"] == 1]
    # rank 1 sleeps 15 ms before each attention: rank 0 waits for it at each attention-out
    assert (r0["wait_us"].to_numpy() > 10_000).all()
    assert (r1["wait_us"].to_numpy() < r0["wait_us"].to_numpy() / 3).all()
    # and rank 1 is the straggler of (at least) every attention-out all-reduce
    assert (r1["straggler_count"].to_numpy() >= TOKENS).all()
    tok = pd.read_csv(os.path.join(out, "trace_tokens.csv"))
    w = tok.groupby("rank")["wait_us"].mean()
    assert w[0] > 8 * 10_000 and w[0] > 5 * w[1]


def test_layers_scaled_to_model_depth(cli_inproc, tmp_path):
    out = str(tmp_path / "scaled")
    res = cli_inproc("trace", "--tp", "2", "--batch", "1", *FAST, "--layers", "2", "--out", out)
    assert res.returncode == 0, res.stderr
    tok = pd.read_csv(os.path.join(out, "trace_tokens.csv"))
    assert set(tok["scaled"]) == {1} and set(tok["layers_run"]) == {2} and set(tok["layers_model"]) == {8}
    assert (tok["latency_us"] > tok["latency_us_measured"]).all()
    summ = pd.read_csv(os.path.join(out, "trace_summary.csv"))
    assert int(summ["collectives_per_step"].iloc[0]) == 18
    assert "scaled from 2 of 8 layers" in res.stdout
    assert "2 of 8 layers" in json.load(open(os.path.join(out, "meta.json")))["scaling"]


def test_memory_guard_refuses_with_numbers(cli_inproc, tmp_path):
    res = cli_inproc("trace", "--model", "Llama-3.1-70B", "--tp", "2", "--out", str(tmp_path / "big"))
    assert res.returncode == 2
    line = one_line_error(res)
    assert "GB per rank" in line and "available" in line and "--layers" in line
    assert not os.path.exists(tmp_path / "big")


@pytest.mark.parametrize("args,needle", [
    (["--model", "gpt-17"], "unknown model"),
    (["--model", TOY, "--tp", "3"], "does not divide its 16 query heads"),
    (["--model", TOY, "--batch", "0"], "--batch"),
    (["--model", TOY, "--context", "0"], "--context"),
    (["--model", TOY, "--tokens", "-1"], "--tokens"),
    (["--model", TOY, "--layers", "9"], "--layers"),
    (["--model", TOY, "--predict"], "--comm-from"),
    (["--model", TOY, "--modes", "graph"], "graph"),
])
def test_trace_bad_input(cli_inproc, tmp_path, args, needle):
    res = cli_inproc("trace", "--tp", "2", *args, "--out", str(tmp_path / "x"))
    assert res.returncode == 2, res.stderr
    assert needle in one_line_error(res)
    assert not os.path.exists(tmp_path / "x")


def test_trace_config_missing_fields(cli_inproc, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 64, "vocab_size": 100, "num_hidden_layers": 2}))
    res = cli_inproc("trace", "--tp", "2", "--model", str(cfg), "--out", str(tmp_path / "x"))
    assert res.returncode == 2 and "missing field 'num_attention_heads'" in one_line_error(res)


def test_predict_on_nccl_without_cuda_is_one_line_exit_3(cli_inproc, tmp_path):
    """It was exit 70 ("unexpected AssertionError: Torch not compiled with CUDA enabled"): predict
    skipped the backend check that a live run makes."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    res = cli_inproc("trace", "--predict", "--comm-from", "reference:nvlink4", "--backend", "nccl", "--tp", "2",
                     *FAST, "--out", str(tmp_path / "x"))
    assert res.returncode == 3, res.stderr
    assert "--backend nccl needs NVIDIA GPUs" in one_line_error(res)
    assert not os.path.exists(tmp_path / "x")


def test_predict_from_corrupt_dir(cli_inproc, tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    (d / "meta.json").write_text("{")
    res = cli_inproc("trace", "--tp", "2", *FAST, "--predict", "--comm-from", str(d), "--out", str(tmp_path / "x"))
    assert res.returncode == 2 and "not valid JSON" in one_line_error(res)
    assert not os.path.exists(tmp_path / "x")


def test_predict_from_a_gloo_sweep_is_labelled_and_names_both_inputs(cli_inproc, gloo_sweep, tmp_path):
    """trace --predict from a real gloo sweep: every row says predicted, meta names the compute
    (measured here) and the communication source (that sweep), and each collective was looked up
    inside the sweep's sizes. How close it lands to a live trace: scripts/validate_predict.py."""
    out = tmp_path / "pred"
    res = cli_inproc("trace", "--predict", "--comm-from", gloo_sweep, "--tp", "2", *FAST, "--batch", "1",
                     "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "[predicted]" in res.stdout
    for table in ("trace_tokens.csv", "trace_layers.csv", "trace_summary.csv"):
        assert set(pd.read_csv(out / table)["kind"]) == {"predicted"}, table
    pred = json.load(open(out / "meta.json"))
    assert pred["kind"] == "predicted"
    assert set(pred["inputs"]) == {"compute", "communication"}
    assert "measured here" in pred["inputs"]["compute"]
    comm = pred["inputs"]["communication"]
    # a dir outside the run's working dir (tmp_path) is recorded absolute; one below it, relative
    # (shown_path, the one rule for recorded input paths: tests/test_recorded_paths.py)
    assert comm["results_dir"] == os.path.abspath(gloo_sweep)
    assert comm["backend"] == "gloo" and comm["kind"] == "measured"
    # embedding, attention-out and MLP-out all-reduces, the logits all-gather: all at TP=2
    assert {(l["op"], l["tp"]) for l in pred["comm_lookups"]} == {("all_reduce", 2), ("all_gather", 2)}
    assert all(l["how"] in ("exact", "interpolated", "single point") for l in pred["comm_lookups"])


def test_plan_cli(cli_inproc, tmp_path):
    out = tmp_path / "plan"
    res = cli_inproc("plan", "--model", "Qwen2.5-32B", "--tp", "8", "--batch", "1", "--context", "4096",
                     "--gpu-mem", "80G", "--out", str(out))
    assert res.returncode == 0, res.stderr
    rows = pd.read_csv(out / "plan.csv")
    assert len(rows) == 130 and set(rows["op"]) == {"all_reduce", "all_gather"}
    assert "130" in res.stdout
    res = cli_inproc("plan", "--model", "Gemma-3-27B", "--tp", "8", "--json")
    assert res.returncode == 0
    data = json.loads(res.stdout)
    assert data["kind"] == "modelled"
    res = cli_inproc("plan", "--model", "Qwen2.5-32B", "--tp", "3")
    assert res.returncode == 2 and "does not divide" in one_line_error(res)
