"""``trace --repeat N`` (issue 34, "Noise goes unflagged"): every run (TP x batch x mode) is timed N
times, the repeats interleaved; trace_repeats.csv keeps each repeat's figures; trace_summary.csv's
figures are over every repeat's tokens pooled, with the repeats' ms/token beside them and an
``unstable`` reason when they disagree by the sweep's own repeat rule (commprof.analysis.noise)."""
import json
import os

import numpy as np
import pandas as pd
import pytest

from helpers import TOY_MODEL as TOY
from helpers import csv_rows, one_line_error

from commprof.analysis import noise
from commprof.analysis.attribution import pool_repeats, slowest_token_ms
from commprof.model.errors import UsageError

TOKENS = 4
FAST = ["--model", TOY, "--context", "64", "--tokens", str(TOKENS), "--warmup", "1", "--no-charts"]


def test_repeat_reason_is_the_sweep_rule_in_other_words():
    """One rule: the sweep's reason text comes out of repeat_reason unchanged, and the trace's
    is the same rule on ms/token."""
    p50s = [61860, 130606, 274912]
    assert noise.unstable_reason(p50s) == noise.repeat_reason(p50s)
    assert noise.repeat_reason([10.0, 20.0]) == ""                       # at the limit: steady
    assert noise.repeat_reason([2.0, 4.5], "median", "ms/token", ",.3f") == (
        "repeats' median 2.000 / 4.500 ms/token, 2.25x apart (limit 2x)")


def test_trace_run_noise_by_hand():
    steady = noise.trace_run_noise([10, 10.5, 9.8, 10.2], [10.1, 10.4, 9.9])
    assert steady["repeats"] == 3 and steady["ms_per_token_repeats"] == "10.1;10.4;9.9"
    assert steady["repeat_spread"] == pytest.approx(10.4 / 9.9) and steady["unstable"] == ""
    one = noise.trace_run_noise([10, 10.5, 9.8, 10.2])                   # --repeat 1: no repeat figures
    assert one == {"repeats": 1, "ms_per_token_repeats": "", "repeat_spread": "", "unstable": ""}
    slow = noise.trace_run_noise([10, 10, 10, 10, 10, 10, 10, 10], [10.0, 31.0])
    assert slow["unstable"] == "repeats' median 10.000 / 31.000 ms/token, 3.10x apart (limit 2x)"
    # both reasons, the tokens' spread over every repeat's tokens
    both = noise.trace_run_noise([10, 20, 30, 40], [10.0, 30.0])
    assert both["unstable"].startswith("repeats' median") and "; its 4 tokens spread" in both["unstable"]


def test_pool_repeats_lays_each_rank_s_tokens_end_to_end():
    def rec(rank, lat):
        a = np.asarray(lat, dtype=float)
        return {"rank": rank, "lat": a, "offs": np.zeros((len(a), 2)), "durs": np.ones((len(a), 2)), "segments": "S"}

    pooled = pool_repeats([[rec(1, [5, 6]), rec(0, [1, 2])], [rec(0, [3, 4]), rec(1, [7, 8])]])
    assert [r["rank"] for r in pooled] == [0, 1]
    assert pooled[0]["lat"].tolist() == [1, 2, 3, 4] and pooled[1]["lat"].tolist() == [5, 6, 7, 8]
    assert pooled[1]["offs"].shape == (4, 2) and pooled[0]["segments"] == "S"
    one = [rec(0, [1])]
    assert pool_repeats([one]) is one
    att = {"tokens": [{"token": 0, "latency_us": 1000.0}, {"token": 0, "latency_us": 3000.0},
                      {"token": 1, "latency_us": 2000.0}]}
    assert slowest_token_ms(att) == [3.0, 2.0]


@pytest.mark.parametrize("bad", [0, 101, -1])
def test_repeat_refuses_a_bad_count(bad, tmp_path):
    from commprof.verbs.trace import build_config

    with pytest.raises(UsageError, match="--repeat"):
        build_config(model=TOY, tp="2", batch="1", context=64, tokens=2, warmup=1, layers=None, dtype="fp32",
                     backend="gloo", modes=None, timeout_s=60, out=str(tmp_path / "x"), argv=[], repeat=bad)


def test_repeat_zero_on_the_command_line_is_one_line_exit_2(cli_inproc, tmp_path):
    res = cli_inproc("trace", "--tp", "2", "--batch", "1", *FAST, "--repeat", "0", "--out", str(tmp_path / "x"))
    assert res.returncode == 2 and "--repeat 0" in one_line_error(res)
    assert not os.path.exists(tmp_path / "x")


def test_gloo_trace_with_repeat_interleaves_pools_and_flags_a_slowed_repeat(cli_inproc, tmp_path):
    """Real gloo ranks: 2 runs x 3 repeats. Rank 1 sleeps 40 ms before every attention of every
    token of repeat 2 only (8 layers: about 320 ms more per token), so repeat 2's ms/token is far
    more than 2x the others' whatever the machine's load: both runs are flagged, in the CSV, on
    their summary line and under it. Before --repeat the flag was refused (exit 2)."""
    out = tmp_path / "tr"
    res = cli_inproc("trace", "--tp", "2", "--batch", "1,2", *FAST, "--repeat", "3", "--out", str(out),
                     env={"COMMPROF_TEST_FAULT": "sleep:rank=1,ms=40,repeat=2"})
    assert res.returncode == 0, res.stderr
    assert "6/6 cells, done" in res.stderr                            # progress counts every repeat
    reps = csv_rows(str(out), "trace_repeats.csv")
    assert len(reps) == 6 and sorted({r["repeat"] for r in reps}) == ["1", "2", "3"]
    # interleaved: every run's repeat 1 started before any run's repeat 2, and so on
    start = {k: [float(r["start_s"]) for r in reps if r["repeat"] == k] for k in ("1", "2", "3")}
    assert max(start["1"]) < min(start["2"]) and max(start["2"]) < min(start["3"])
    summ = csv_rows(str(out), "trace_summary.csv")
    tok = pd.read_csv(out / "trace_tokens.csv")
    assert len(summ) == 2
    for row in summ:
        own = [float(r["ms_per_token"]) for r in reps if r["batch"] == row["batch"]]
        assert [float(v) for v in row["ms_per_token_repeats"].split(";")] == pytest.approx(own, rel=1e-5)
        assert own[1] > 2 * max(own[0], own[2])                       # the slowed repeat
        assert float(row["repeat_spread"]) == pytest.approx(max(own) / min(own), rel=1e-3)
        assert row["repeats"] == "3" and row["tokens"] == str(3 * TOKENS)
        # the summary is over every repeat's tokens pooled: the median of each token's slowest rank
        g = tok[tok["batch"] == int(row["batch"])]
        assert sorted(g["token"].unique()) == list(range(3 * TOKENS))
        assert float(row["ms_per_token"]) == pytest.approx(g.groupby("token")["latency_us"].max().median() / 1e3,
                                                           rel=1e-4)
        assert row["unstable"].startswith("repeats' median ") and "x apart (limit 2x)" in row["unstable"]
    lines = res.stdout.splitlines()
    for b in (1, 2):
        line = next(x for x in lines if x.startswith(f"TP=2 batch={b} eager:"))
        assert "over 3 repeats' tokens" in line and line.endswith("[measured]") and " ! [" in line
        assert any(x.startswith(f"!: unstable: TP=2 batch={b} eager at ") and "repeats' median" in x for x in lines)
    meta = json.load(open(out / "meta.json"))
    assert meta["config"]["repeat"] == 3 and "start_s" in meta["repeat_columns"] and "unstable" in meta["columns"]
    # show reads it back the same way, and the repeats table is a result table of the trace kind
    shown = cli_inproc("show", str(out), "--no-charts")
    assert shown.returncode == 0 and "!: unstable: TP=2 batch=1 eager" in shown.stdout
    from commprof import results
    assert len(results.load(str(out)).tables["trace_repeats"]) == 6


def test_predict_with_repeat_writes_each_repeat_and_pools_them(cli_inproc, tmp_path):
    """trace --predict takes --repeat too: the compute measured here is what repeats."""
    out = tmp_path / "pr"
    res = cli_inproc("trace", "--tp", "2", "--batch", "1", *FAST, "--repeat", "2", "--predict",
                     "--comm-from", "reference:nvlink4", "--out", str(out))
    assert res.returncode == 0, res.stderr
    reps = csv_rows(str(out), "trace_repeats.csv")
    assert [r["repeat"] for r in reps] == ["1", "2"] and {r["kind"] for r in reps} == {"predicted"}
    (row,) = csv_rows(str(out), "trace_summary.csv")
    assert row["repeats"] == "2" and row["tokens"] == str(2 * TOKENS) and len(row["ms_per_token_repeats"].split(";")) == 2


def test_summary_line_of_a_hand_built_unstable_run_and_of_an_old_dir():
    """The line says the repeats and marks an unstable run; a summary from before the columns
    reads as it did."""
    from commprof.views.trace import noise_lines, summary_lines

    base = {"kind": "measured", "scaled": 0, "tp": 2, "batch": 1, "mode": "eager", "ms_per_token": 20.0,
            "tokens_per_s": 50.0, "collectives_per_step": 18, "collectives_per_token": 18.0, "comm_share_pct": 40.0,
            "transfer_share_pct": 30.0, "wait_share_pct": 10.0, "phase": "decode"}
    old = pd.DataFrame([base])
    (line,) = summary_lines(old)
    assert line.endswith("wait 10.0%) [measured]") and noise_lines(old) == []
    why = "repeats' median 10.000 / 31.000 ms/token, 3.10x apart (limit 2x)"
    new = pd.DataFrame([{**base, "repeats": 2, "ms_per_token_repeats": "10;31", "repeat_spread": 3.1, "unstable": why}])
    (line,) = summary_lines(new)
    assert "; over 2 repeats' tokens (10.000 / 31.000 ms/token, 3.10x apart) ! [measured]" in line
    assert noise_lines(new) == [f"!: unstable: TP=2 batch=1 eager at 20.000 ms/token: {why}; rerun it on a quiet machine"]
    steady = pd.DataFrame([{**base, "repeats": 1, "ms_per_token_repeats": float("nan"), "repeat_spread": float("nan"),
                            "unstable": float("nan")}])
    assert summary_lines(steady) == summary_lines(old) and noise_lines(steady) == []
