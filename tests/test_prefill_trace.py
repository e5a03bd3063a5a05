"""commprof trace --phase prefill|mixed on gloo (CPU): chunk steps attributed like decode tokens,
the time to first token and its communication; gap's TTFT lines and check's C11p from them."""
import json
import os

import pandas as pd
import pytest

from helpers import TOY_MODEL as TOY     # 8 layers, hidden 1024, 16/4 heads, vocab 8192
from helpers import one_line_error

FAST = ["--model", TOY, "--warmup", "1", "--no-charts"]
PROMPT, CHUNK = 64, 16                    # 4 chunk steps


@pytest.fixture(scope="module")
def prefill_dirs(tmp_path_factory):
    """A gloo prefill trace and a gloo sweep at the same prefill sizes (one box), TP=2."""
    from helpers import run_inproc

    base = tmp_path_factory.mktemp("prefill")
    tr, sw = str(base / "trace"), str(base / "sweep")
    res = run_inproc(["trace", "--tp", "2", "--phase", "prefill", "--prompt", str(PROMPT), "--chunk", str(CHUNK),
                      *FAST, "--out", tr], cwd=str(base))
    assert res.returncode == 0, res.stderr
    res = run_inproc(["sweep", "--tp", "2", "--backend", "gloo", "--model", TOY, "--sizes", "prefill", "--prompt",
                      "64", "--chunk", "16,32,64", "--iters", "5", "--warmup", "1", "--no-charts", "--out", sw],
                     cwd=str(base))
    assert res.returncode == 0, res.stderr
    return tr, sw, res


def test_prefill_trace_parts_add_up(prefill_dirs):
    tr, _, _ = prefill_dirs
    tok = pd.read_csv(os.path.join(tr, "trace_tokens.csv"))
    summ = pd.read_csv(os.path.join(tr, "trace_summary.csv"))
    steps = -(-PROMPT // CHUNK)
    assert len(tok) == steps * 2 and set(tok["phase"]) == {"prefill"} and set(tok["batch"]) == {0}
    parts = tok[["compute_us", "transfer_us", "wait_us", "gaps_us"]].sum(axis=1)
    assert ((tok["latency_us"] - parts).abs() <= 0.05 * tok["latency_us"]).all()
    assert (tok["residual_us"].abs() <= 0.05 * tok["latency_us"]).all()
    assert (tok["transfer_us"] > 0).all() and (tok["compute_us"] > 0).all()
    r = summ.iloc[0]
    assert r["phase"] == "prefill" and int(r["prompt"]) == PROMPT and int(r["chunk"]) == CHUNK
    assert int(r["collectives_per_step"]) == 2 * 8 + 2
    # TTFT = the prompt's chunk steps; its communication = TTFT x the communication share
    per_step = tok.groupby("token")["latency_us"].max()
    assert r["ttft_ms"] == pytest.approx(per_step.mean() * steps / 1e3, rel=1e-4)
    assert r["ttft_comm_ms"] == pytest.approx(r["ttft_ms"] * r["ttft_comm_share_pct"] / 100, rel=1e-4)
    assert 0 < r["ttft_comm_share_pct"] < 100
    meta = json.load(open(os.path.join(tr, "meta.json")))
    assert meta["phase"] == "prefill" and meta["prompt"] == PROMPT and meta["config"]["chunk"] == CHUNK
    assert any("causal" in a for a in meta["prefill_approximations"])


def test_mixed_trace_runs_chunks_with_decode_tokens(cli_inproc, tmp_path):
    out = str(tmp_path / "mixed")
    res = cli_inproc("trace", "--tp", "2", "--batch", "2", "--phase", "mixed", "--prompt", "32", "--chunk", "16",
                     *FAST, "--out", out)
    assert res.returncode == 0, res.stderr
    summ = pd.read_csv(os.path.join(out, "trace_summary.csv"))
    r = summ.iloc[0]
    assert r["phase"] == "mixed" and int(r["batch"]) == 2 and r["ttft_ms"] > 0
    assert r["collectives_per_token"] == pytest.approx(18 / (2 + 16))
    tok = pd.read_csv(os.path.join(out, "trace_tokens.csv"))
    assert len(tok) == 2 * 2 and (tok["residual_us"].abs() <= 0.05 * tok["latency_us"]).all()
    assert "TTFT" in res.stdout


def test_prefill_predict_from_reference(cli_inproc, tmp_path):
    out = str(tmp_path / "pred")
    res = cli_inproc("trace", "--tp", "2", "--phase", "prefill", "--prompt", "32", "--chunk", "16", *FAST,
                     "--predict", "--comm-from", "reference:nvlink4", "--out", out)
    assert res.returncode == 0, res.stderr
    summ = pd.read_csv(os.path.join(out, "trace_summary.csv"))
    r = summ.iloc[0]
    assert r["kind"] == "predicted" and r["phase"] == "prefill" and r["ttft_comm_ms"] > 0
    meta = json.load(open(os.path.join(out, "meta.json")))
    ar = [x for x in meta["comm_lookups"] if x["op"] == "all_reduce"]
    assert {x["size_bytes"] for x in ar} == {16 * 1024 * 2}         # chunk x hidden, bf16
    ag = [x for x in meta["comm_lookups"] if x["op"] == "all_gather"]
    assert {x["size_bytes"] for x in ag} == {8192 * 2}               # the chunk's last token's logits


def test_gap_and_check_give_the_ttft_account(prefill_dirs, tmp_path):
    from commprof.analysis.checkitems import run_items
    from commprof.analysis.evidence import gather
    from commprof.analysis.thresholds import load_thresholds
    from commprof.analysis.boxgap import compute_gap
    from commprof.views.gap import ttft_lines

    tr, sw, _ = prefill_dirs
    g = compute_gap([sw, tr], reference="nvlink4")
    t = g.first.ttft
    assert t is not None and t["prompt"] == PROMPT and t["chunk"] == CHUNK and t["tp"] == 2
    assert t["this_comm_ms"] > 0 and t["ref_comm_ms"] > 0 and t["this_source"].startswith("trace")
    assert t["favoured_ref"]["least_chunk"] == PROMPT
    assert t["favoured_this"] is not None           # the sweep covers chunks 16-64
    text = "\n".join(ttft_lines(g.first))
    assert "TTFT" in text and "on nvlink4 (modelled)" in text and "chunk size favoured" in text
    import commprof

    assert commprof.compare([sw, tr], reference="nvlink4").attrs["ttft"]["prompt"] == PROMPT
    items = {i.id: i for i in run_items(gather([sw, tr]), load_thresholds())}
    assert items["C11p"].status == "SKIP" and "TTFT" in items["C11p"].value and "gloo" in items["C11p"].value
    assert items["C11"].status == "SKIP"            # no decode rows in this trace


def test_gap_without_prefill_trace_models_from_the_sweep(prefill_dirs):
    from commprof.analysis.boxgap import compute_gap

    _, sw, _ = prefill_dirs
    t = compute_gap([sw], reference="pcie5-nop2p").first.ttft
    # no trace: the thresholds' prompt (4096) for the sweep's model; the sweep stops at 64 tokens
    assert t["prompt"] == 4096 and t["this_source"] is None and t["ref_comm_ms"] > 0


@pytest.mark.parametrize("args,needle", [
    (["--phase", "prefill"], "needs --prompt"),
    (["--phase", "mixed", "--prompt", "64"], "needs --chunk"),
    (["--phase", "prefill", "--prompt", "64", "--chunk", "0"], "--chunk 0"),
    (["--prompt", "64"], "--phase prefill"),
    (["--phase", "nope", "--prompt", "64"], "--phase"),
])
def test_trace_bad_phase_flags(cli_inproc, tmp_path, args, needle):
    res = cli_inproc("trace", "--tp", "2", *FAST, "--out", str(tmp_path / "t"), *args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert needle in one_line_error(res)
