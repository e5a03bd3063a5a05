"""Predict dirs in gap (box vs box per token) and report (a predict section): every figure read back
from the dirs, communication printed in ms per token beside its share."""
from __future__ import annotations

import json
import os

import pytest

from conftest import csv_rows

SERVE = os.path.join(os.path.dirname(__file__), "data", "serve-cpu")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def two_boxes(cli_inproc, tmp_path):
    dirs = []
    for name, gpu, comm in (("pcie", "rtx5090", "reference:pcie5-nop2p"), ("nvl", "h100-sxm", "reference:nvlink4")):
        d = tmp_path / name
        r = cli_inproc("predict", "--gpu", gpu, "--comm", comm, "--tp", "4,8", "--batch", "1", "--no-charts",
                       "--out", str(d))
        assert r.returncode == 0, r.stderr
        dirs.append(str(d))
    return dirs


def test_gap_sets_two_predict_dirs_side_by_side_per_token(cli_inproc, tmp_path, two_boxes):
    out = tmp_path / "g"
    r = cli_inproc("gap", *two_boxes, "--out", str(out))
    assert r.returncode == 0, r.stderr
    a = {int(x["tp"]): x for x in csv_rows(two_boxes[0], "predict.csv")}
    b = {int(x["tp"]): x for x in csv_rows(two_boxes[1], "predict.csv")}
    rows = [x for x in csv_rows(str(out), "gap_predict.csv") if x["tp"] == "8"]
    assert [x["box"].split(" (")[0] for x in rows] == ["rtx5090 + reference:pcie5-nop2p", "h100-sxm + reference:nvlink4"]
    assert float(rows[1]["ms_per_token_vs_first"]) == pytest.approx(
        float(b[8]["ms_per_token"]) / float(a[8]["ms_per_token"]), rel=1e-4)
    assert float(rows[1]["comm_ms_vs_first"]) == pytest.approx(float(b[8]["comm_ms"]) / float(a[8]["comm_ms"]), rel=1e-4)
    line = next(x for x in r.stdout.splitlines() if x.startswith("TP=8 batch 1"))
    # the absolute communication per token beside every share
    assert f"communication {float(a[8]['comm_ms']):.2f} ms/token ({float(a[8]['comm_share_pct']):.1f}%)" in line
    assert f"communication {float(b[8]['comm_ms']):.2f} ms/token ({float(b[8]['comm_share_pct']):.1f}%)" in line
    meta = json.loads((out / "meta.json").read_text())
    assert meta["verb"] == "gap" and meta["kind"] == "predicted" and len(meta["boxes"]) == 2
    import commprof

    back = commprof.load(str(out))["gap_predict"]                 # read back as a table, and shown
    assert len(back) == 4 and set(back["tp"]) == {4, 8}
    shown = cli_inproc("show", str(out))
    assert shown.returncode == 0 and "predicted per token" in shown.stdout


def test_gap_compares_the_boxes_inside_one_predict_dir(cli_inproc, tmp_path):
    d = tmp_path / "both"
    assert cli_inproc("predict", "--gpu", "rtx5090,h100-sxm", "--comm", "reference:pcie5-nop2p,reference:nvlink4",
                      "--tp", "8", "--batch", "1", "--no-charts", "--out", str(d)).returncode == 0
    r = cli_inproc("gap", str(d))
    assert r.returncode == 0, r.stderr
    assert "TP=8 batch 1 (predicted): rtx5090 + reference:pcie5-nop2p" in r.stdout and "h100-sxm" in r.stdout


def test_gap_of_one_box_or_of_a_predict_dir_with_a_sweep_is_one_line(cli_inproc, tmp_path, two_boxes):
    r = cli_inproc("gap", two_boxes[0])
    assert r.returncode == 2 and "holds one box" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli_inproc("gap", two_boxes[0], SERVE)
    assert r.returncode == 2 and "is not a commprof predict dir" in r.stderr


def test_report_gets_a_predict_section_with_its_lines_and_chart(cli_inproc, tmp_path, two_boxes):
    out = tmp_path / "r"
    r = cli_inproc("report", *two_boxes, "--out", str(out))
    assert r.returncode == 0, r.stderr
    md = (out / "report.md").read_text()
    a8 = next(x for x in csv_rows(two_boxes[0], "predict.csv") if x["tp"] == "8")
    assert md.count("## Predicted per token: Qwen2.5-32B") == 2
    assert md.index("## Box against box, per token") < md.index("## Predicted per token")
    assert "TP=8 batch 1 (predicted): rtx5090 + reference:pcie5-nop2p" in md and "the ms/token" in md
    assert f"communication {float(a8['comm_ms']):.2f} ms" in md and f"{float(a8['comm_share_pct']):.1f}% communication" in md
    assert "sequences of 4,096 tokens" in md and "4,096.0" not in md     # read back as the console prints it
    assert os.path.exists(out / "predict_1.png") and os.path.exists(out / "predict_2.png")
    assert json.loads((out / "meta.json").read_text())["kind"] == "predicted"


def test_report_of_a_serve_dir_and_a_predict_dir_has_both_sections(cli_inproc, tmp_path, two_boxes):
    out = tmp_path / "r"
    r = cli_inproc("report", SERVE, two_boxes[0], "--out", str(out))
    assert r.returncode == 0, r.stderr
    md = (out / "report.md").read_text()
    assert "## Predicted per token" in md and "erve" in md


def test_serve_profile_line_prints_the_exposed_communication_in_ms_beside_its_share():
    from commprof.views.serve import profile_lines

    got = []
    profile_lines({"concurrency": 4, "kineto_out": "kineto", "runs": [
        {"tp": 2, "batch": 4, "steps": 10, "steps_by_phase": {"decode": 10}, "collectives_per_step": 66,
         "backend": "nccl", "ms_per_step": 20.0, "comm_share_pct": 25.0}]}, "/out", echo=got.append)
    assert "communication 25.0% exposed (5.000 ms/step, 1.250 ms/token" in got[0]
