"""commprof predict --serve DIR: the measured scheduling account (queue, TTFT under load, served TPOT)
beside the modelled rows, from the committed serve dir tests/data/serve-cpu (see its SOURCE.md)."""
from __future__ import annotations

import json
import os

import pytest

from conftest import csv_rows

SERVE = os.path.join(os.path.dirname(__file__), "data", "serve-cpu")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))


def _levels():
    return {int(r["level"]): r for r in csv_rows(SERVE, "serve_levels.csv")}


def test_each_row_gets_the_closed_level_of_its_batch_measured_beside_the_modelled(cli_inproc, tmp_path):
    out = tmp_path / "p"
    r = cli_inproc("predict", "--model", "Llama-3.1-70B", "--gpu", "h100-sxm", "--comm", "reference:nvlink4",
                   "--tp", "2", "--batch", "2,32", "--prompt", "128", "--serve", SERVE, "--no-charts", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = {int(x["batch"]): x for x in csv_rows(str(out), "predict.csv")}
    lv = _levels()
    # batch 2 matches the closed level at concurrency 2 (level 1); batch 32 has none: the first closed level
    assert rows[2]["serve_level"] == "1" and rows[2]["serve_match"] == "batch"
    assert rows[32]["serve_level"] == "0" and rows[32]["serve_match"] == "first closed level"
    assert float(rows[2]["served_tpot_ms_p50"]) == pytest.approx(float(lv[1]["tpot_ms_p50"]), rel=1e-5)
    assert float(rows[2]["served_ttft_ms_p50"]) == pytest.approx(float(lv[1]["ttft_ms_p50"]), rel=1e-5)
    assert float(rows[2]["tpot_modelled_vs_served"]) == pytest.approx(
        float(rows[2]["ms_per_token"]) / float(lv[1]["tpot_ms_p50"]), rel=1e-4)
    assert float(rows[2]["ttft_modelled_vs_served"]) == pytest.approx(
        float(rows[2]["ttft_ms"]) / float(lv[1]["ttft_ms_p50"]), rel=1e-4)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["column_kinds"]["served_tpot_ms_p50"] == "measured"
    assert meta["column_kinds"]["ms_per_token"] == "predicted"
    assert meta["serve"]["kind"] == "measured" and meta["serve"]["dir"].endswith("serve-cpu")
    assert meta["serve"]["levels"] == [0, 1, 2, 3]              # the open-loop level 4 is not a batch
    line = next(x for x in r.stdout.splitlines() if "served (measured, level 1" in x)
    assert f"TPOT {float(lv[1]['tpot_ms_p50']):.2f} ms vs" in line and "ms/token modelled" in line
    shown = cli_inproc("show", str(out))                          # read back: the same line
    assert shown.returncode == 0 and line in shown.stdout
    rep = cli_inproc("report", str(out), "--out", str(tmp_path / "r"))   # and in the report's predict section
    assert rep.returncode == 0, rep.stderr
    assert "served (measured, level 1" in (tmp_path / "r" / "report.md").read_text()


@pytest.mark.parametrize("make, expected", [
    (lambda p: p.mkdir(), "no meta.json"),
    (lambda p: (p.mkdir(), (p / "meta.json").write_text(json.dumps({"verb": "sweep", "kind": "measured"}))),
     "not a dir written by commprof serve"),
    (lambda p: (p.mkdir(), (p / "meta.json").write_text(json.dumps({"verb": "serve", "kind": "measured"}))),
     "no serve_levels.csv"),
    (lambda p: (p.mkdir(), (p / "meta.json").write_text(json.dumps({"verb": "serve", "kind": "measured"})),
                (p / "serve_levels.csv").write_text("level,mode,concurrency,status,tpot_ms_p50\n0,open,8,complete,5\n")),
     "no complete closed-loop level"),
])
def test_a_bad_serve_dir_is_one_line_and_exit_2(cli_inproc, tmp_path, make, expected):
    bad = tmp_path / "bad"
    make(bad)
    out = tmp_path / "p"
    r = cli_inproc("predict", "--gpu", "h100-sxm", "--comm", "reference:nvlink4", "--tp", "2", "--batch", "1",
                   "--serve", str(bad), "--no-charts", "--out", str(out))
    assert r.returncode == 2
    assert expected in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()                  # nothing half-written


def test_the_engine_queue_time_comes_through_where_the_serve_dir_has_it(cli_inproc, tmp_path):
    """A serve dir whose server exposed its queue metric (queue_ms_mean per level, as commprof serve
    writes from vLLM's /metrics): the row carries it and its line says it."""
    d = tmp_path / "served"
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({"verb": "serve", "kind": "measured", "model": "m", "prompt_tokens": 512}))
    (d / "serve_levels.csv").write_text("level,mode,concurrency,status,ttft_ms_p50,tpot_ms_p50,queue_ms_mean\n"
                                        "0,closed,4,complete,120.5,21.5,7.25\n")
    out = tmp_path / "p"
    r = cli_inproc("predict", "--gpu", "h100-sxm", "--comm", "reference:nvlink4", "--tp", "2", "--batch", "4",
                   "--prompt", "128", "--serve", str(d), "--no-charts", "--out", str(out))
    assert r.returncode == 0, r.stderr
    row = csv_rows(str(out), "predict.csv")[0]
    assert float(row["served_queue_ms_mean"]) == 7.25 and row["serve_match"] == "batch"
    assert "queue 7.25 ms, TPOT 21.50 ms vs" in r.stdout
    # its requests had 512 prompt tokens, --prompt is 128: said, not hidden
    assert "512 prompt tokens, --prompt is 128" in r.stdout
