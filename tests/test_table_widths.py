"""Every verb's table at 80, 120 and 200 columns: no number is ever cut.

The tables are drawn from the committed results dirs under results/ and the fixtures under
tests/data; the numbers they must show whole are read from the dirs' own CSV files (formatted as
the table formats them), not from the renderer."""
import csv
import io
import json
import os
import re

import pytest
from rich.console import Console

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RES = os.path.join(ROOT, "results")
WIDTHS = (80, 120, 200)


def console(w):
    return Console(width=w, record=True, file=io.StringIO(), color_system=None)


def text_of(c):
    return c.export_text()


def no_cut(text, w):
    assert "…" not in text, text
    for line in text.splitlines():
        assert len(line.rstrip()) <= w, line


def rows_of(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fmt(v, digits=1):
    return f"{float(v):,.{digits}f}"


@pytest.mark.parametrize("w", WIDTHS)
@pytest.mark.parametrize("d", ["sweep-default-vm", "sweep-prefill-vm", "import-a100x8-nvswitch",
                               "import-rtx5090x8-pcie5-p2p"])
def test_sweep_table_keeps_every_p50_and_busbw_whole(d, w):
    from commprof.results import load
    from commprof.views.sweep import print_table

    res = load(os.path.join(RES, d))
    c = console(w)
    print_table(res.tables["sweep"], res.meta, console=c)
    text = text_of(c)
    no_cut(text, w)
    for r in rows_of(os.path.join(RES, d, "sweep.csv")):
        if r.get("group", "0") not in ("0", "") or r["latency_us_p50"] == "":
            continue
        assert fmt(r["latency_us_p50"]) in text, (r["latency_us_p50"], w)
    if w >= 120:          # busbw is kept until the narrowest widths (it is left out at 80 only when needed)
        for r in [r for r in rows_of(os.path.join(RES, d, "sweep.csv")) if r["busbw_gbps"]][:5]:
            assert fmt(r["busbw_gbps"], 3) in text


@pytest.mark.parametrize("w", WIDTHS)
@pytest.mark.parametrize("d", ["predict-seed-rtx5090x8-gemma-3-27b", "predict-seed-rtx5090x8-qwen2-5-32b"])
def test_predict_table_keeps_ms_per_token_whole(d, w):
    from commprof.views.predict import render_predict

    rows = rows_of(os.path.join(RES, d, "predict.csv"))
    for r in rows:
        r["weights_fit"] = r["weights_fit"].lower() in ("true", "1")
        for k in ("tp", "batch", "context", "kv_max_sequences"):
            if r.get(k) not in (None, ""):
                r[k] = int(float(r[k]))
        for k in ("compute_ms", "gaps_ms", "comm_ms", "ms_per_token", "comm_share_pct", "tokens_s_per_user",
                  "tokens_s_per_box", "ttft_ms", "ttft_comm_ms", "kernel_ms", "floor_ms"):
            if k in r:
                r[k] = float(r[k]) if r[k] not in ("", None) else float("nan")
    c = console(w)
    render_predict(rows, [], "m", console=c)
    text = text_of(c)
    table = text.split("\n" + rows[0]["gpu"])[0] if rows[0].get("gpu") else text
    assert "…" not in table
    for r in rows:
        assert fmt(r["ms_per_token"], 2) in table, (r["ms_per_token"], w)


@pytest.mark.parametrize("w", WIDTHS)
def test_check_is_compact_and_whole_at_every_width(w, capsys, monkeypatch):
    from commprof.results import load
    from commprof.views.show import show

    monkeypatch.setenv("COLUMNS", str(w))
    show(load(os.path.join(RES, "check-a100x8-rtx4090x8")), charts=False)
    text = capsys.readouterr().out
    no_cut(text, w)
    doc = json.load(open(os.path.join(RES, "check-a100x8-rtx4090x8", "check.json")))
    # the verdict is the first line, whatever the width
    assert text.splitlines()[0].startswith(f"commprof check over 2 boxes: {doc['verdict']}")
    flat = " ".join(text.split())
    for i in doc["items"]:
        for num in re.findall(r"\d[\d,]*\.\d+", i["value"]):       # every figure of every value, whole
            assert num in flat, (num, w)
    if w == 80:
        assert len(text.splitlines()) <= 80       # 227 lines before


@pytest.mark.parametrize("w", WIDTHS)
@pytest.mark.parametrize("d", ["gap-a100x8-vs-rtx4090x8", "gap-prefill-vm", "serve-example-cpu",
                               "serve-vllm-cpu-tp2", os.path.join("..", "tests", "data", "moe-gloo-cpu"),
                               os.path.join("..", "tests", "data", "serve-cpu")])
def test_show_of_each_dir_cuts_nothing(d, w, capsys, monkeypatch):
    from commprof.results import load
    from commprof.views.show import show

    monkeypatch.setenv("COLUMNS", str(w))
    show(load(os.path.join(RES, d)), charts=False)
    text = capsys.readouterr().out
    table_part = "\n".join(ln for ln in text.splitlines() if ln[:1] in "┃│┏┡└(" or not ln.strip())
    assert "…" not in table_part, text
    if "serve" in d:
        levels = rows_of(os.path.join(RES, d, "serve_levels.csv"))
        for r in levels:
            assert r["status"] in text      # 'complete', never 'comple…'


@pytest.mark.parametrize("w", WIDTHS)
def test_plan_topo_p2p_tables_cut_nothing(w):
    from fake_nvml import FakeNVML

    from commprof.analysis.stepmodel import build_plan
    from commprof.capture import nvmltopo as N
    from commprof.model.models import get_model
    from commprof.views.p2p import render_p2p
    from commprof.views.plan import render_plan
    from commprof.views.topo import render_topology

    c = console(w)
    render_plan(build_plan(get_model("Qwen2.5-32B"), 8, 1, 4096), c)
    render_topology(N.collect_topology(FakeNVML("rtx5090-8x-pcie-2socket.json")), c)
    rows = [{"probe": "sm_copy", "kind": "read", "src_device": i, "dst_device": j, "gbps": 1234.5678 + i + j}
            for i in range(8) for j in range(8)]
    render_p2p(rows, 8, c)
    text = text_of(c)
    no_cut(text, w)
    for i in range(8):
        for j in range(8):
            assert f"{1234.5678 + i + j:.2f}" in text


def test_fit_table_falls_back_to_the_stacked_layout():
    from commprof.views.console import Col, fit_table

    c = console(40)
    cols = [Col("name", "left", None)] + [Col(f"metric {k} us", "right", None) for k in range(8)]
    rows = [["row-a", *(f"{123456.7 + k:,.1f}" for k in range(8))]]
    assert fit_table("t", cols, rows, console=c) == "stacked"
    text = text_of(c)
    no_cut(text, 40)
    for k in range(8):
        assert f"{123456.7 + k:,.1f}" in text
