"""What a person sees: the progress bar, the tables' numbers and the charts' data (ticks, axes,
legends), read back from the objects drawn rather than from pixels."""
from __future__ import annotations

import io
import sys

import pytest


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_drawn_on_stderr_with_the_verb_and_an_eta_when_stdout_is_redirected(monkeypatch):
    from commprof.views.console import progress_bar

    out, err = io.StringIO(), _Tty()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    bar = progress_bar(10, "trace")
    bar.update(4)
    bar._p.refresh()
    bar.close()
    assert out.getvalue() == ""
    assert "trace" in err.getvalue() and "4/10" in err.getvalue() and "ETA" in err.getvalue()


def test_progress_is_plain_lines_on_stderr_when_it_is_not_a_terminal(monkeypatch):
    from commprof.views.console import progress_bar

    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    bar = progress_bar(10, "sweep")
    bar.update(4)
    bar.close()
    assert out.getvalue() == ""                      # stdout stays the table's (or --format's)
    lines = err.getvalue().splitlines()
    assert lines and all("\x1b" not in ln for ln in lines) and "sweep: 4/10 cells" in lines[-1]


def test_each_verb_that_starts_ranks_labels_its_own_progress():
    from commprof.model.moeconfig import MoeRunConfig
    from commprof.model.sweepconfig import SweepRunConfig
    from commprof.model.traceconfig import TraceRunConfig

    assert (SweepRunConfig.VERB, TraceRunConfig.VERB, MoeRunConfig.VERB) == ("sweep", "trace", "moe")


def _fake_repo(tmp_path, pip_rc: int):
    """A copy of scripts/setup.sh beside a fake .venv/bin/python whose pip fails (or not)."""
    import os
    import shutil
    import stat

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    (tmp_path / "scripts").mkdir()
    shutil.copy(os.path.join(root, "scripts", "setup.sh"), tmp_path / "scripts" / "setup.sh")
    shutil.copy(os.path.join(root, "pyproject.toml"), tmp_path / "pyproject.toml")   # the setup stamp hashes it
    py = tmp_path / ".venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\n"
                  'case "$*" in\n'
                  f'  *"pip install"*) echo "ERROR: No matching distribution found for torch==0.0.1" >&2; exit {pip_rc};;\n'
                  '  *"import torch, sys"*) exit 1;;\n'
                  '  *"version(\'torch\')"*) exit 1;;\n'   # setup.sh asks the installed metadata: no torch
                  '  *) echo "commprof ready";;\n'
                  "esac\n")
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return tmp_path / "scripts" / "setup.sh"


def test_setup_sh_says_what_it_does_and_fails_with_pips_error_and_status(tmp_path):
    import subprocess

    script = _fake_repo(tmp_path, pip_rc=3)
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "COMMPROF_TORCH": "torch==0.0.1"})
    assert p.returncode == 3
    assert "installing torch==0.0.1" in p.stderr
    assert "No matching distribution found for torch==0.0.1" in p.stderr
    assert "failed (exit 3)" in p.stderr
    assert "ready" not in p.stdout


def test_setup_sh_announces_each_step_when_pip_succeeds(tmp_path):
    import subprocess

    script = _fake_repo(tmp_path, pip_rc=0)
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "COMMPROF_TORCH": "torch==0.0.1"})
    assert p.returncode == 0, p.stderr
    assert "installing commprof in editable mode" in p.stderr and "s so far" in p.stderr
    assert "commprof ready" in p.stdout


def _record_console():
    from rich.console import Console

    return Console(record=True, width=200, file=io.StringIO())


def test_sweep_table_shows_samples_the_rank_average_mean_algbw_and_nccl_tests_avg_busbw(gloo_sweep):
    from commprof.results import load
    from commprof.views.sweep import avg_busbw, print_table

    res = load(gloo_sweep)
    df, c = res.tables["sweep"], _record_console()
    print_table(df, res.meta, console=c)
    text = c.export_text()
    for header in (" n ", "rank-avg mean us", "algbw GB/s", "busbw GB/s"):
        assert header in text
    d0 = df[(df["group"] == 0) & (df["op"] == "all_reduce")]
    want = d0["busbw_gbps"].mean()
    assert f"# Avg bus bandwidth: {want:.3f} GB/s  (all_reduce TP=2 eager, mean busbw over its {d0['size_bytes'].nunique()} sizes" in text
    assert "p99 over 3 samples is the largest one" in text        # the fixture times --iters 3
    avg = avg_busbw(df)
    assert set(avg["op"]) == set(df["op"]) and (avg["sizes"] == 2).all()   # --batch 1,8: two sizes per op


def _captured_figures(monkeypatch, module):
    """Run a view's chart function with its ``save_chart`` swapped for one that keeps the figure."""
    figs = []

    def keep(fig, path, *a, **k):
        figs.append(fig)
        return path

    monkeypatch.setattr(module, "save_chart", keep)
    return figs


def _tick_texts(axis):
    axis.axes.figure.canvas.draw()
    return [t.get_text() for t in axis.get_ticklabels() if t.get_text()]


def test_sweep_charts_label_batches_draw_p95_whiskers_and_plain_log_ticks(gloo_sweep, monkeypatch, tmp_path):
    import commprof.views.sweep as view
    from commprof.results import load

    res = load(gloo_sweep)
    figs = _captured_figures(monkeypatch, view)
    view.charts(res.tables["sweep"], res.meta, str(tmp_path))
    lat, bus = figs
    ax = lat.axes[0]
    assert {t.get_text() for t in ax.texts} == {"b=1", "b=8"}
    assert len(ax.containers) == 1                          # one TP: one set of p50->p95 whiskers
    for f in figs:
        for a in f.axes:
            labels = _tick_texts(a.yaxis)
            assert labels and not any("times" in t or "^" in t for t in labels), labels   # no 6x10^-1
            assert [t.get_text() for t in a.yaxis.get_minorticklabels() if t.get_text()] == []
    assert lat._suptitle.get_text().startswith("commprof sweep on ")


def test_imported_charts_are_titled_by_the_tool_and_file_they_came_from(tmp_path):
    from commprof.views.charts import chart_provenance, chart_source

    meta = {"kind": "imported", "verb": "import", "what": "nccl-tests output imported as a sweep",
            "hosts": ["localhost"], "gpus": ["A100-SXM4-40GB"], "backend": "nccl", "start_time": "t",
            "source_files": [{"path": "/x/a100.txt"}], "command": ["commprof", "import"], "label": "A100 box"}
    assert chart_source(meta) == "nccl-tests on A100-SXM4-40GB (imported) [A100 box]"
    assert chart_provenance(meta).startswith("imported from a100.txt, backend nccl")
    kineto = {"kind": "imported", "verb": "import", "source": "kineto", "hosts": [], "gpus": ["H100"],
              "backend": "nccl", "source_files": [{"path": "/t/trace.json"}]}
    assert chart_source(kineto) == "Kineto trace on H100 (imported)"
    assert "imported on ," not in chart_provenance(kineto) and "trace.json" in chart_provenance(kineto)


def test_frame_table_prints_fixed_decimals_per_column_with_thousands_separators():
    import pandas as pd

    from commprof.views.console import frame_table

    c = _record_console()
    frame_table(pd.DataFrame({"conc": [1, 16], "TTFT p50 ms": [40.7007, 19312.5], "jitter": [1.4172, 1.0]}), "t",
                console=c)
    text = c.export_text()
    assert "e+" not in text and "19,312" in text and "41" in text and "1.42" in text and "1.00" in text


def test_serve_latency_columns_that_run_into_thousands_of_ms_are_shown_in_seconds():
    import pandas as pd

    from commprof.views.serve import in_seconds

    t = in_seconds(pd.DataFrame({"TTFT p99 ms": [83.5, 19312.0], "TPOT p99 ms": [11.0, 30.4]}))
    assert list(t.columns) == ["TTFT p99 s", "TPOT p99 ms"]
    assert t["TTFT p99 s"].tolist() == [0.0835, 19.312]


def test_check_serve_titles_name_the_concurrency_actually_judged():
    from types import SimpleNamespace

    import pandas as pd

    from commprof.analysis.checkitems import serve_items
    from commprof.analysis.thresholds import load_thresholds

    levels = pd.DataFrame([{"mode": "closed", "concurrency": c, "ok": 8, "errors": 0, "requests": 8,
                            "ttft_ms_p50": 50.0, "ttft_ms_p99": 90.0, "tpot_ms_p50": 8.0, "tpot_ms_p99": 12.0,
                            "output_tokens_per_s": 100.0 * c, "requests_per_s": 3.0 * c,
                            "jitter_tpot_p99_p50": 1.5, "jitter_growth": 1.0} for c in (1, 2, 4)])
    th = load_thresholds()
    assert th["serve"]["concurrency"] != 4           # the thresholds ask for another level than the dir's top
    items = serve_items(SimpleNamespace(serve=levels, serve_meta={"kind": "measured"}), th)
    assert [i.item.rsplit(" ", 1)[-1] for i in items] == ["4", "4", "4"]
    assert "(the dir's nearest level, not" in items[0].value


def test_plan_says_input_buffers_and_bytes_on_the_wire_apart():
    from commprof.model.models import get_model
    from commprof.analysis.stepmodel import build_plan
    from commprof.views.plan import wire_bytes_per_rank

    plan = build_plan(get_model("Qwen2.5-32B"), tp=4, batch=1, context=4096)
    ar = [s for s in plan.sites if s.op == "all_reduce"]
    assert wire_bytes_per_rank(ar, 4) == round(sum(s.size_bytes for s in ar) * 1.5)   # 2(n-1)/n at n=4
    ag = [s for s in plan.sites if s.op == "all_gather"]
    assert wire_bytes_per_rank(ag, 4) == round(sum(s.size_bytes for s in ag) * 0.75)  # (n-1)/n of the output


def _moe():
    import os

    from commprof.results import load

    return load(os.path.join(os.path.dirname(__file__), "data", "moe-gloo-cpu"))


def test_moe_summary_is_a_table_and_marks_slowdowns_below_1x_as_noise():
    from commprof.views.moe import summary_lines, summary_table

    steps = _moe().tables["moe_steps"]
    table = summary_table(steps)
    assert len(table) == steps.groupby(["ep", "tokens", "skew"]).ngroups
    assert list(table.columns[:4]) == ["ep", "tokens", "skew", "imbalance"] and "rebal. slowdown" in table.columns
    below = int((steps["slowdown"] < 1).sum())
    cells = table[["slowdown", "rebal. slowdown"]].to_numpy().ravel()
    assert below > 0 and sum(str(c).endswith("(noise)") for c in cells) == below
    lines = summary_lines(steps)
    assert lines[0].startswith("commprof moe:") and any(l.startswith(f"{below} slowdown(s) below 1x") for l in lines)


def test_moe_latency_chart_pairs_each_token_counts_colours_on_a_log_axis(monkeypatch, tmp_path):
    import matplotlib.colors as mc

    import commprof.views.moe as view

    res = _moe()
    figs = _captured_figures(monkeypatch, view)
    view.charts(res.tables["moe_steps"], res.tables["moe_ranks"], res.meta, str(tmp_path))
    ax = figs[1].axes[0]
    assert ax.get_yscale() == "log"
    lines = {l.get_label(): mc.to_hex(l.get_color()) for l in ax.get_lines()}
    assert len(set(lines.values())) == len(lines) == 4
    for tok in (1, 16):               # contiguous and rebalanced of one token count: one hue, two shades
        a = mc.rgb_to_hsv(mc.to_rgb(lines[f"{tok} tok, contiguous"]))
        b = mc.rgb_to_hsv(mc.to_rgb(lines[f"{tok} tok, rebalanced"]))
        assert abs(a[0] - b[0]) < 0.05 and b[1] < a[1]


def test_trace_memory_guard_shares_cpu_memory_among_the_ranks_that_build_engines_only(monkeypatch):
    import commprof.verbs.trace as T
    from commprof.model.models import get_model

    model = get_model("Qwen2.5-32B").to_dict()
    need = {tp: T.engine_bytes_per_rank(model, tp, 1, 4096, 2, "bf16")["total_bytes"] for tp in (2, 4, 8)}
    machine = int(max(tp * n for tp, n in need.items()) * 1.01)
    assert machine / 8 < need[2]            # dividing by all 8 ranks started would refuse TP=2
    monkeypatch.setattr(T, "available_bytes_per_rank", lambda backend, n: (machine // n, f"test: {n} ranks"))
    layers, report = T.memory_guard(model, [2, 4, 8], [1], 4096, 2, "bf16", "gloo", ranks_on_node=8)
    assert layers == 2 and report["needed_bytes_per_rank"] <= report["available_bytes_per_rank"]

    from commprof.model.errors import UsageError

    monkeypatch.setattr(T, "available_bytes_per_rank", lambda backend, n: (machine // (2 * n), f"test: {n} ranks"))
    with pytest.raises(UsageError, match=r"at tp=\d+ needs .* per rank for 2 layers"):
        T.memory_guard(model, [2, 4, 8], [1], 4096, 2, "bf16", "gloo", ranks_on_node=8)


def test_trace_charts_integral_ticks_seconds_past_a_thousand_ms_and_legend_off_the_bars(gloo_trace, monkeypatch,
                                                                                        tmp_path):
    import commprof.views.trace as view
    from commprof.results import load

    res = load(gloo_trace)
    t = res.tables
    figs = _captured_figures(monkeypatch, view)
    view.trace_charts(t["trace_tokens"], t["trace_layers"], t["trace_summary"], res.meta, str(tmp_path))
    tokens, heat = figs[0], figs[1]
    for ax in tokens.axes:
        if ax.get_visible() and ax.has_data():
            assert ax.get_legend() is None                   # the legend sits above the panels
            assert all(float(v).is_integer() for v in ax.get_xticks()), ax.get_xticks()
    assert [x.get_text() for x in tokens.legends[0].get_texts()] == ["compute", "transfer", "wait", "gaps"]
    hax = heat.axes[0]
    assert [x.get_text() for x in hax.get_yticklabels()] == ["0", "1"]      # --layers 2: two whole layers
    assert "(2 of 8 layers run)" in hax.get_title()
    scaled = t["trace_tokens"].copy()
    for c in ("compute_us", "transfer_us", "wait_us", "gaps_us"):
        scaled[c] = scaled[c] * 1e4                       # tokens of seconds: the axis says s
    figs.clear()
    view.trace_charts(scaled, t["trace_layers"], t["trace_summary"], res.meta, str(tmp_path))
    assert figs[0].axes[0].get_ylabel().startswith("s per token")
    assert view.time_unit(999.0) == (1.0, "ms") and view.time_unit(1000.0) == (1e3, "s")


def test_import_kineto_reads_what_commprofs_own_trace_json_says_about_itself(gloo_trace, tmp_path):
    import json
    import os

    from commprof.ingest.kineto import import_kineto

    head = json.load(open(os.path.join(gloo_trace, "trace.json")))["commprof"]
    assert (head["layers_run"], head["layers_model"]) == (2, 8) and head["model_shape"]["layers"] == 8
    acc = import_kineto([os.path.join(gloo_trace, "trace.json")], str(tmp_path / "k"))   # no --model given
    run = acc["runs"][0]
    assert run["plan_collectives_per_step"] == 1 + 2 * 2 + 1 and run["matches_plan"]   # embed, 2 x 2 layers, logits
    assert run["notes"][0].startswith("a commprof trace timeline of 2 of 8 layers")
    meta = json.load(open(tmp_path / "k" / "meta.json"))
    assert meta["model"]["layers"] == 8 and "not scaled" in meta["scaling"]


def test_serve_charts_ttft_on_a_log_axis_and_each_rate_on_its_own_scale(monkeypatch, tmp_path):
    import os

    import commprof.views.serve as view
    from commprof.results import load

    res = load(os.path.join(os.path.dirname(__file__), "data", "serve-cpu"))
    figs = _captured_figures(monkeypatch, view)
    view.serve_charts(res.tables["serve_levels"], res.meta, str(tmp_path))
    lat, thr = figs
    assert lat.axes[0].get_yscale() == "log" and lat.axes[1].get_yscale() == "linear"
    tok, req = thr.axes
    assert tok.get_ylabel() == "output tokens/s" and req.get_ylabel() == "requests/s"
    levels = res.tables["serve_levels"]
    closed = levels[levels["mode"] == "closed"]
    for ax, col in ((tok, "output_tokens_per_s"), (req, "requests_per_s")):
        assert abs(ax.get_ylim()[1] - closed[col].max() * 1.15) < 1e-6     # scaled to its own series
    assert tok.get_ylim()[1] > 10 * req.get_ylim()[1]


def test_gap_chart_draws_references_in_greys_apart_from_the_boxes_with_short_legends(tmp_path, monkeypatch):
    import os

    import matplotlib.colors as mc

    import commprof.views.gap as view
    from commprof.analysis.boxgap import compute_gap
    from helpers import run_inproc

    dirs = []
    for name, log in (("a", "all_reduce_perf_8xA100.log"), ("b", "all_reduce_perf_8xA100_v3.json")):
        out = str(tmp_path / name)
        assert run_inproc(["import", "nccl-tests", os.path.join(os.path.dirname(__file__), "data", "nccl-tests", log),
                           "--out", out], cwd=tmp_path).returncode == 0
        dirs.append(out)
    vm = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "sweep-default-vm")
    g = compute_gap(dirs + [vm], "nvlink4", labels="A100,A100 v3,vm")     # the vm box: TP 2, 4 and 8
    figs = _captured_figures(monkeypatch, view)
    view.gap_chart(g, str(tmp_path / "gap.png"), "prov")
    ax = figs[0].axes[0]
    lines = {l.get_label(): l for l in ax.get_lines()}
    refs = [l for name, l in lines.items() if name.startswith("ref ")]
    boxes = [l for name, l in lines.items() if name.startswith(("A100 TP", "A100 v3 TP"))]
    assert len(boxes) == 2
    # one curve per reference and TP degree, drawn once however many boxes meet it, each its own style
    assert sorted(name for name in lines if name.startswith("ref ")) == [
        f"ref nvlink4 TP={tp} (modelled)" for tp in (2, 4, 8)]
    assert len({(l.get_color(), str(l.get_linestyle())) for l in refs}) == 3
    r, gr, b = mc.to_rgb(refs[0].get_color())
    assert r == gr == b                                  # a grey
    assert all(len(set(mc.to_rgb(l.get_color()))) > 1 for l in boxes)   # the boxes in colour
    assert all(len(name) < 45 for name in lines)


def test_dir_commprof_lists_the_api_for_tab_completion():
    import commprof

    names = dir(commprof)
    for name in ("load", "plan", "fit", "compare", "checklist", "reference", "import_kineto", "Results",
                 "__version__"):
        assert name in names
    assert set(commprof.__all__) <= set(names) and callable(commprof.plan)


def test_meta_json_records_commprofs_own_commit_and_the_run_environment(monkeypatch):
    import os
    import re
    import subprocess

    from commprof import results

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    m = results.provenance("sweep", "measured", "x", command=["commprof"])
    assert m["env"]["OMP_NUM_THREADS"] == "3" and m["env"]["CUDA_VISIBLE_DEVICES"] == "1,0"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    commit = m["versions"]["commprof_commit"]
    if os.path.exists(os.path.join(root, ".git")):
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        assert re.fullmatch(r"[0-9a-f]{40}( \+ local changes)?", commit) and commit.startswith(head)
    else:
        assert commit.startswith("n/a")
    assert results.normalize({"kind": "measured"}, "sweep")["env"] == {}     # an older dir loads with {}


def test_box_labels_come_from_label_then_import_label_then_the_dir_name(tmp_path):
    import os


    from commprof.analysis.evidence import gather_boxes
    from commprof.model.errors import UsageError
    from helpers import run_inproc

    log = os.path.join(os.path.dirname(__file__), "data", "nccl-tests", "all_reduce_perf_8xA100.log")
    a, b = str(tmp_path / "import-a100-long-dir-name"), str(tmp_path / "b")
    assert run_inproc(["import", "nccl-tests", log, "--out", a, "--label", "A100"], cwd=tmp_path).returncode == 0
    assert run_inproc(["import", "nccl-tests", log, "--out", b], cwd=tmp_path).returncode == 0
    assert [x.label for x in gather_boxes([a, b])] == ["A100", "b"]
    assert [x.label for x in gather_boxes([a, b], "one,two")] == ["one", "two"]
    with pytest.raises(UsageError, match="3 names for 2 box"):
        gather_boxes([a, b], "x,y,z")
    res = run_inproc(["gap", a, b, "--label", "x,x"], cwd=tmp_path)
    assert res.returncode == 2 and "the same name twice" in res.stderr


def test_trace_tokens_chart_marks_where_each_repeat_begins_and_an_unstable_run(gloo_trace, monkeypatch, tmp_path):
    """``trace --repeat``: the per-token chart's x axis holds every repeat's tokens end to end; a
    dashed line and a label mark where each repeat begins, and the panel's title says the repeats
    and that the run is unstable (the chart gave 0..N-1 tokens with no word of either)."""
    import commprof.views.trace as view
    from commprof.results import load

    res = load(gloo_trace)
    t = res.tables
    figs = _captured_figures(monkeypatch, view)
    summ = t["trace_summary"].copy()
    summ["repeats"], summ["unstable"] = 2, "repeats' median 10.000 / 31.000 ms/token, 3.10x apart (limit 2x)"
    view.trace_charts(t["trace_tokens"], t["trace_layers"], summ, res.meta, str(tmp_path))
    ax = figs[0].axes[0]
    assert ax.get_title() == "TP=2 batch=1 eager, 2 repeats (unstable)"
    assert ax.get_xlabel() == "token (timed step), the repeats end to end"
    vlines = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert [ln.get_xdata()[0] for ln in vlines] == [1.5]                  # 4 tokens: repeat 2 begins at token 2
    assert [a.get_text() for a in ax.texts] == ["repeat 2"]
    figs.clear()
    steady = t["trace_summary"].copy()
    steady["repeats"], steady["unstable"] = 1, ""        # one run, steady (the gloo run's own may not be)
    view.trace_charts(t["trace_tokens"], t["trace_layers"], steady, res.meta, str(tmp_path))
    ax = figs[0].axes[0]
    assert ax.get_title() == "TP=2 batch=1 eager" and not ax.texts
    assert not [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]


def test_a_footer_taller_than_its_share_makes_the_chart_taller_instead_of_running_over_the_panels():
    """predict's one-box chart carries the whole calibration source: at 6 x 4.6 in its footer needs more
    than the 40% of the height a footer may take, so the figure grows by the footer's height (the panels
    keep theirs) and the returned share holds every line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from commprof.views.charts import FOOTER_MAX_SHARE, footer

    plt.close("all")          # figures other tests left open (matplotlib warns past 20)
    fig = plt.figure(figsize=(6, 4.6))
    short = footer(fig, "measured on host-a, commprof sweep --tp 2", fontsize=7)
    assert tuple(fig.get_size_inches()) == (6, 4.6) and short < FOOTER_MAX_SHARE
    plt.close(fig)
    fig = plt.figure(figsize=(6, 4.6))
    text = " ".join(f"source{i} https://example.org/figures/{i}" for i in range(120))
    share = footer(fig, text, fontsize=7)
    w, h = fig.get_size_inches()
    lines = len(fig.texts[0].get_text().splitlines())
    need_in = (lines * 7 * 1.35 + 4) / 72
    assert w == 6 and h == pytest.approx(4.6 + need_in) and share == pytest.approx(need_in / h)
    assert h - share * h == pytest.approx(4.6)          # the panels keep their 4.6 inches
    plt.close(fig)
