"""What a person sees: the progress bar, the tables' numbers and the charts' data (ticks, axes,
legends), read back from the objects drawn rather than from pixels."""
from __future__ import annotations

import io
import sys


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


def test_progress_stays_off_when_stderr_is_not_a_terminal(monkeypatch):
    from commprof.views.console import progress_bar

    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    bar = progress_bar(10, "sweep")
    bar.update(4)
    bar.close()
    assert out.getvalue() == "" and err.getvalue() == ""


def test_each_verb_that_starts_ranks_labels_its_own_progress():
    from commprof.routing import MoeConfig
    from commprof.sweepconfig import SweepConfig
    from commprof.traceconfig import TraceConfig

    assert (SweepConfig.VERB, TraceConfig.VERB, MoeConfig.VERB) == ("sweep", "trace", "moe")


def _fake_repo(tmp_path, pip_rc: int):
    """A copy of scripts/setup.sh beside a fake .venv/bin/python whose pip fails (or not)."""
    import os
    import shutil
    import stat

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    (tmp_path / "scripts").mkdir()
    shutil.copy(os.path.join(root, "scripts", "setup.sh"), tmp_path / "scripts" / "setup.sh")
    py = tmp_path / ".venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\n"
                  'case "$*" in\n'
                  f'  *"pip install"*) echo "ERROR: No matching distribution found for torch==0.0.1" >&2; exit {pip_rc};;\n'
                  '  *"import torch, sys"*) exit 1;;\n'
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
    """Run a view's chart function with its ``_save`` swapped for one that keeps the figure."""
    figs = []

    def keep(fig, path, *a, **k):
        figs.append(fig)
        return path

    monkeypatch.setattr(module, "_save", keep)
    return figs


def _tick_texts(axis):
    import matplotlib.pyplot as plt

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
    from commprof.views.charts import _provenance, chart_source

    meta = {"kind": "imported", "verb": "import", "what": "nccl-tests output imported as a sweep",
            "hosts": ["localhost"], "gpus": ["A100-SXM4-40GB"], "backend": "nccl", "start_time": "t",
            "source_files": [{"path": "/x/a100.txt"}], "command": ["commprof", "import"], "label": "A100 box"}
    assert chart_source(meta) == "nccl-tests on A100-SXM4-40GB (imported) [A100 box]"
    assert _provenance(meta).startswith("imported from a100.txt, backend nccl")
    kineto = {"kind": "imported", "verb": "import", "source": "kineto", "hosts": [], "gpus": ["H100"],
              "backend": "nccl", "source_files": [{"path": "/t/trace.json"}]}
    assert chart_source(kineto) == "Kineto trace on H100 (imported)"
    assert "imported on ," not in _provenance(kineto) and "trace.json" in _provenance(kineto)
