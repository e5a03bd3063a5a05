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


# --- every committed results dir, every verb's --format (issue 34, second pass) ----------------

#: Every results dir committed under results/ (results/bench holds benchmarks, not a results dir),
#: and the fixtures of the verbs that need a GPU or a server to run (moe on gloo, serve on CPU).
COMMITTED = sorted(d for d in os.listdir(RES) if os.path.exists(os.path.join(RES, d, "meta.json")))
FIXTURES = [os.path.join("..", "tests", "data", "moe-gloo-cpu"), os.path.join("..", "tests", "data", "serve-cpu")]
TABLE_EDGES = "┏┃┡│└"


def shown(d, w, capsys, monkeypatch):
    from commprof.results import load
    from commprof.views.show import show

    monkeypatch.setenv("COLUMNS", str(w))
    show(load(os.path.join(RES, d)), charts=False)
    return capsys.readouterr().out


def test_every_committed_dir_is_listed():
    """The dirs below are every results dir in results/ (a new one is covered without a change here)."""
    assert {"sweep-default-vm", "trace-qwen2.5-32b-vm", "predict-seed-rtx5090x8-qwen2-5-32b", "check-corpus",
            "import-h100x8-nvls", "serve-vllm-cpu-tp2", "report-vm"} <= set(COMMITTED)


@pytest.mark.parametrize("w", WIDTHS)
@pytest.mark.parametrize("d", COMMITTED + FIXTURES)
def test_show_of_every_committed_dir_fits_and_cuts_nothing(d, w, capsys, monkeypatch):
    """``show`` of each dir at 80/120/200 columns: nothing cut with "…", and every table line within
    the width (a table drawn wider than the terminal wraps into a jumble: moe's was 150 wide)."""
    text = shown(d, w, capsys, monkeypatch)
    assert text.strip(), d
    assert "…" not in text, text
    for line in text.splitlines():
        if line[:1] in TABLE_EDGES:
            assert len(line) <= w, (d, w, line)


@pytest.mark.parametrize("w", WIDTHS)
@pytest.mark.parametrize("d", [d for d in COMMITTED if os.path.exists(os.path.join(RES, d, "sweep.csv"))])
def test_every_committed_sweep_keeps_each_p50_whole_one_line_per_row(d, w, capsys, monkeypatch):
    """Every p50 of every committed sweep/import, whole, and one line per row: an imported log's
    rows (no batch, validation off) fit 80 columns without folding (they took two lines each:
    an empty batch column kept and 'n/a (not checked)' folded in every row)."""
    text = shown(d, w, capsys, monkeypatch)
    rows = rows_of(os.path.join(RES, d, "sweep.csv"))
    for r in rows:
        if r["latency_us_p50"] != "":
            assert fmt(r["latency_us_p50"]) in text, (r["latency_us_p50"], w)
    table = text.split("┡", 1)[1].split("└", 1)[0]
    body = [ln for ln in table.splitlines() if ln.startswith("│")]
    assert len(body) == len(rows), (d, w, len(body), len(rows))
    if all(r.get("status") == "unchecked" for r in rows):
        assert "wrong n/a: not checked" in text


@pytest.mark.parametrize("w", WIDTHS)
@pytest.mark.parametrize("d", [d for d in COMMITTED if d.startswith("predict-")])
def test_show_of_a_predict_dir_draws_predict_s_table(d, w, capsys, monkeypatch):
    """``show`` of a predict dir draws the table ``predict`` printed (it gave only the long lines),
    every ms/token whole in it, the lines and the run's notes under it."""
    text = shown(d, w, capsys, monkeypatch)
    assert "┃" in text and "ms/token" in text.split("┡")[0]
    table = text.split("┡", 1)[1].split("└", 1)[0]
    rows = rows_of(os.path.join(RES, d, "predict.csv"))
    for r in rows:
        assert fmt(r["ms_per_token"], 2) in table, (r["ms_per_token"], w)
    assert sum(ln.startswith(f"{rows[0]['gpu']} TP=") for ln in text.splitlines()) == len(rows)
    assert any(ln.startswith("note: ") for ln in text.splitlines())


@pytest.mark.parametrize("w", WIDTHS)
def test_moe_table_is_fit_to_the_terminal(w, capsys, monkeypatch):
    """The moe verb's table (and show's) at the terminal's width with ep, tokens, skew and every
    contiguous p50 whole; the columns left out are named."""
    from commprof.results import load
    from commprof.views.moe import print_summary

    monkeypatch.setenv("COLUMNS", str(w))
    steps = load(os.path.join(ROOT, "tests", "data", "moe-gloo-cpu")).tables["moe_steps"]
    print_summary(steps)
    text = capsys.readouterr().out
    for line in text.splitlines():
        if line[:1] in TABLE_EDGES:
            assert len(line) <= w, line
    for v in steps[steps["placement"] == "contiguous"]["latency_us_p50"]:
        assert f"{v:,.1f}" in text
    if w == 80:
        assert "(left out at 80 columns: rebal. p50 us" in text
    elif w == 200:
        assert "left out" not in text and "rebal. slowdown" in text


@pytest.mark.parametrize("fmt_", ["csv", "json"])
@pytest.mark.parametrize("d", COMMITTED + FIXTURES)
def test_format_of_show_of_every_dir_is_machine_readable(d, fmt_, capsys):
    """``show DIR --format csv|json`` of every committed dir: stdout is only the tables, parseable."""
    from commprof.results import load
    from commprof.views.console import tables_as
    from commprof.views.show import show

    with tables_as(fmt_):
        show(load(os.path.join(RES, d)), charts=False)
    out = capsys.readouterr().out
    if d == "report-vm":                  # a report dir holds no table: nothing on stdout
        assert out == ""
        return
    if fmt_ == "json":
        doc = json.loads(out)
        docs = doc if isinstance(doc, list) else [doc]
        assert docs and all(t["rows"] for t in docs)
        if os.path.exists(os.path.join(RES, d, "gap.csv")):       # the values themselves, not the rounded cells
            want = [float(r["ratio"]) for r in rows_of(os.path.join(RES, d, "gap.csv"))]
            assert [r["ratio"] for r in docs[0]["rows"]] == pytest.approx(want, rel=1e-9)
    else:
        rows = list(csv.reader(io.StringIO(out.split("\n\n")[0])))
        assert len(rows) >= 2 and all(len(r) == len(rows[0]) for r in rows)
        assert "┃" not in out and "│" not in out


def test_topo_and_p2p_tables_under_format_csv(capsys):
    """topo and p2p (which need a GPU to run) give their tables under --format as the others do."""
    from fake_nvml import FakeNVML

    from commprof.capture import nvmltopo as N
    from commprof.views.console import tables_as
    from commprof.views.p2p import render_p2p
    from commprof.views.topo import render_topology

    with tables_as("csv"):
        render_topology(N.collect_topology(FakeNVML("rtx5090-8x-pcie-2socket.json")))
        render_p2p([{"probe": "sm_copy", "kind": "read", "src_device": i, "dst_device": j, "gbps": 10.0 * i + j}
                    for i in range(2) for j in range(2)], 2)
    out = capsys.readouterr().out
    blocks = out.strip().split("\n\n")
    assert len(blocks) >= 3 and "│" not in out
    assert blocks[0].splitlines()[0].startswith("GPU,name,memory")
    assert any(b.splitlines()[-1] == "GPU1,1.0,11.0" for b in blocks)    # row reads column: GPU1 reads GPU0 at 1.0
