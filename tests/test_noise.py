"""Noise flagged (issue 34): ``sweep --repeat N`` runs each cell N times interleaved; sweep.csv
keeps each repeat's p50, their spread, the tail ratio and an ``unstable`` reason; the console marks
unstable rows and says so under the table; ``trace`` flags a batch whose ms/token falls below a
smaller batch's beyond the tokens' own spread."""
import io

import pandas as pd
import pytest
from rich.console import Console

from helpers import csv_rows

from commprof.analysis import noise
from commprof.model.errors import UsageError


def test_spread_tail_and_reason():
    # the three runs of one cell: 61,860 / 130,606 / 274,912 us
    assert noise.spread([61860, 130606, 274912]) == pytest.approx(274912 / 61860)
    assert noise.spread([5.0]) is None and noise.spread([]) is None
    assert "repeats' p50 4.4x apart" in noise.unstable_reason([61860, 130606, 274912], 130606, 140000)
    assert noise.unstable_reason([100, 150], 120, 200) == ""                 # 1.5x apart, p95 1.7x p50
    assert noise.unstable_reason([], 100, 350) == "p95 3.5x p50"
    assert noise.unstable_reason([], 100, float("nan")) == ""                # an imported average: no tail
    assert noise.parse_repeats("61860;130606;274912") == [61860, 130606, 274912]
    assert noise.parse_repeats("") == [] and noise.parse_repeats(float("nan")) == []


def test_batch_drops_beyond_noise():
    # the trace: batch 1 at 59 s/token, batch 8 at 22 s/token
    rows = [{"tp": 2, "batch": 1, "ms_per_token": 59000.0, "n": 0.05},
            {"tp": 2, "batch": 8, "ms_per_token": 22000.0, "n": 0.05},
            {"tp": 4, "batch": 1, "ms_per_token": 100.0, "n": 0.02},
            {"tp": 4, "batch": 8, "ms_per_token": 95.0, "n": 0.02}]            # 5% lower: within noise
    d = noise.batch_drops(rows, "n")
    assert [(x["tp"], x["batch_small"], x["batch_large"]) for x in d] == [(2, 1, 8)]
    assert d[0]["drop"] == pytest.approx(1 - 22 / 59)
    # the same drop inside a run whose tokens spread by half is not flagged
    wide = [dict(r, n=0.6) for r in rows[:2]]
    assert noise.batch_drops(wide, "n") == []


def test_trace_view_flags_the_slower_small_batch():
    from commprof.views.trace import batch_noise_lines

    summary = pd.DataFrame([{"tp": 2, "batch": 1, "mode": "eager", "phase": "decode", "ms_per_token": 59000.0},
                            {"tp": 2, "batch": 8, "mode": "eager", "phase": "decode", "ms_per_token": 22000.0}])
    tokens = pd.DataFrame([{"tp": 2, "batch": b, "mode": "eager", "phase": "decode", "token": t, "rank": 0,
                            "latency_us": ms * 1e3 * (1 + 0.01 * t)} for b, ms in ((1, 59000.0), (8, 22000.0))
                           for t in range(8)])
    lines = batch_noise_lines(summary, tokens)
    assert len(lines) == 1 and "TP=2 batch=8 at 22,000.000 ms/token is 63% below batch=1's 59,000.000" in lines[0]
    ok = summary.assign(ms_per_token=[20.0, 24.0])        # grows with the batch: nothing to say
    assert batch_noise_lines(ok, tokens) == []


def _frame(unstable: str, spread=2.5):
    return pd.DataFrame([{
        "op": "all_reduce", "tp": 2, "group": 0, "mode": "eager", "size_bytes": 4096, "batch": "", "iters": 5,
        "latency_us_p50": 61860.0, "latency_us_p95": 80000.0, "latency_us_p99": 90000.0, "busbw_gbps": 0.001,
        "wrong": 0, "repeats": 3, "p50_us_repeats": "61860;130606;274912", "repeat_spread": spread,
        "unstable": unstable}, {
        "op": "all_reduce", "tp": 2, "group": 0, "mode": "eager", "size_bytes": 65536, "batch": "", "iters": 5,
        "latency_us_p50": 1234.5, "latency_us_p95": 1300.0, "latency_us_p99": 1400.0, "busbw_gbps": 0.05,
        "wrong": 0, "repeats": 3, "p50_us_repeats": "1200;1234.5;1250", "repeat_spread": 1.04, "unstable": ""}])


@pytest.mark.parametrize("w", (80, 120, 200))
def test_sweep_table_marks_unstable_rows_and_says_so(w):
    from commprof.views.sweep import print_table

    c = Console(width=w, record=True, file=io.StringIO(), color_system=None)
    print_table(_frame("repeats' p50 4.4x apart"), {"hosts": ["vm"], "backend": "gloo"}, console=c)
    text = c.export_text()
    assert "61,860.0!" in text and "1,234.5!" not in text and "1,234.5" in text
    note = " ".join(ln for ln in text.splitlines() if ln.startswith("!") or not ln.startswith(("│", "┃", "┏", "┡", "└")))
    assert "1 of 2 rows unstable" in " ".join(note.split())
    assert "repeats' p50 4.4x apart" in " ".join(text.split())
    assert "…" not in text
    if w >= 120:
        assert " 15 " in text                        # samples: iters x repeats


def test_stable_table_has_no_note():
    from commprof.views.sweep import print_table

    c = Console(width=160, record=True, file=io.StringIO(), color_system=None)
    print_table(_frame(""), {"hosts": ["vm"], "backend": "gloo"}, console=c)
    text = c.export_text()
    assert "!" not in text and "unstable" not in text


def test_repeat_refuses_a_bad_count(tmp_path):
    from commprof.verbs.sweep import build_config

    for bad in (0, -1, 101, True):
        with pytest.raises(UsageError, match="--repeat"):
            build_config(tp="2", ops="all_reduce", sizes="4K", model=None, batch="1", dtype="fp32", backend="gloo",
                         modes=None, iters=3, warmup=1, concurrent=False, timeout_s=60, out=str(tmp_path / "x"),
                         resume=False, argv=[], repeat=bad)


def test_gloo_sweep_with_repeat_interleaves_and_records_each_repeat(cli, tmp_path):
    out = tmp_path / "sw"
    r = cli("sweep", "--backend", "gloo", "--tp", "2", "--ops", "all_reduce", "--sizes", "4K,16K", "--iters", "4",
            "--warmup", "1", "--repeat", "3", "--no-charts", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "2 cells x 3 repeats (interleaved)" in r.stderr
    assert "6/6 cells, done" in r.stderr                      # progress counts every repeat
    rows = csv_rows(str(out), "sweep.csv")
    assert len(rows) == 2                                     # one row per cell, after its last repeat
    for row in rows:
        p50s = [float(v) for v in row["p50_us_repeats"].split(";")]
        assert row["repeats"] == "3" and len(p50s) == 3
        # the row's p50 is over every repeat's samples: between the repeats' own medians
        assert min(p50s) * 0.999 <= float(row["latency_us_p50"]) <= max(p50s) * 1.001
        assert float(row["repeat_spread"]) == pytest.approx(max(p50s) / min(p50s), rel=1e-3)
        assert float(row["tail_ratio"]) == pytest.approx(float(row["latency_us_p95"]) / float(row["latency_us_p50"]),
                                                         rel=1e-3)
        assert row["unstable"] == noise.unstable_reason(p50s, float(row["latency_us_p50"]),
                                                        float(row["latency_us_p95"]))
    assert "spread" in r.stdout                                # the table shows the repeats' spread
    import json
    meta = json.load(open(out / "meta.json"))
    assert meta["config"]["repeat"] == 3 and "unstable" in meta["columns"]
