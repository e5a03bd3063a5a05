"""Edge cases of the verbs (a hung gloo rank, the default dirs, one-line results, chart titles and
bars, refusals before a dir is made, the all-gather stand-in), each with a test that fails on the
old behaviour."""
import os
import subprocess
import sys

from helpers import cli_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_gloo_timeout_under_load_is_a_hung_rank_with_a_hint():
    from commprof.capture.launch import _failure
    from commprof.model.errors import EXIT_RANK_HUNG

    class P:
        pid = 1

    msg = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
           "150000ms for recv operation to complete")
    errors = {0: ("all_reduce 4KiB", msg, ""), 1: ("all_reduce 4KiB", msg, "")}
    e = _failure("vm", [P(), P()], [6, 6], errors, None, "sweep", 120.0)
    assert e.exit_code == EXIT_RANK_HUNG
    text = str(e)
    assert "--timeout" in text and "150 s" in text and "Timed out waiting 150000ms" in text
    assert "e.g. --timeout 240" in text
    # a rank's own error (not a timeout) stays a rank error
    errors = {0: ("x", "ValueError: bad", ""), 1: ("x", msg, "")}
    assert _failure("vm", [P(), P()], [6, 6], errors, None, "sweep", 120.0).exit_code == 6


def test_default_results_dir_is_gitignored():
    from commprof import results
    from commprof.verbs.import_ import default_import_dir

    d = results.default_out_dir()
    assert d.startswith(os.path.join("results", "runs") + os.sep)
    assert default_import_dir("nccl-tests").startswith(os.path.join("results", "runs") + os.sep)
    if os.path.isdir(os.path.join(ROOT, ".git")) or os.path.isfile(os.path.join(ROOT, ".git")):
        res = subprocess.run(["git", "check-ignore", "-q", os.path.join(d, "sweep.csv")], cwd=ROOT)
        assert res.returncode == 0, "results/runs/ is not ignored by git"


def test_check_writes_its_own_dir_not_its_first_input(cli_inproc, tmp_path):
    import shutil

    box = tmp_path / "box"
    shutil.copytree(os.path.join(ROOT, "results", "import-a100x8-nvswitch"), box)
    before = sorted(os.listdir(box))
    res = cli_inproc("check", str(box))
    assert res.returncode in (0, 8, 9), res.stderr
    assert sorted(os.listdir(box)) == before           # the input dir is left as it was
    runs = tmp_path / "results" / "runs"
    made = [d for d in os.listdir(runs) if d.endswith("-check")]
    assert len(made) == 1 and (runs / made[0] / "check.json").exists()


def test_loaded_results_print_as_one_line():
    import commprof

    r = commprof.load(os.path.join(ROOT, "results", "sweep-default-vm"))
    text = str(r)
    assert "\n" not in text and len(text) < 300
    assert "sweep (24 rows)" in text and "start_time" not in text
    assert repr(r) == text


def test_report_prints_its_verdict(cli_inproc, tmp_path):
    res = cli_inproc("report", os.path.join(ROOT, "results", "import-a100x8-nvswitch"),
                     os.path.join(ROOT, "results", "import-rtx4090x8-pcie"), "--out", str(tmp_path / "rep"))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "commprof report: checklist verdict PASS over 2 boxes"
    assert "  import-a100x8-nvswitch: PASS" in lines and any(ln.startswith("wrote ") for ln in lines)


def test_single_panel_chart_title_fits_the_figure(tmp_path):
    """A one-panel sweep chart with a labelled imported source: its title stays inside the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import shutil

    import matplotlib.pyplot as plt

    from commprof.results import load
    from commprof.views import sweep as sv

    d = tmp_path / "d"
    shutil.copytree(os.path.join(ROOT, "results", "import-rtx5090x8-pcie5-p2p"), d)
    res = load(str(d))
    meta = dict(res.meta, label="5090x8")
    seen = {}
    real_save = sv.save_chart

    def spy(fig, path, *a, **k):
        fig.canvas.draw()
        bb = fig._suptitle.get_window_extent(fig.canvas.get_renderer())
        seen[os.path.basename(path)] = (bb.x0, bb.x1, fig.bbox.width)
        return real_save(fig, path, *a, **k)

    sv.save_chart = spy
    try:
        sv.charts(res.tables["sweep"], meta, str(d))
    finally:
        sv.save_chart = real_save
        plt.close("all")
    assert seen
    for name, (x0, x1, w) in seen.items():
        assert x0 >= 0 and x1 <= w, (name, x0, x1, w)


def test_predict_chart_draws_no_bar_where_the_weights_do_not_fit(monkeypatch, tmp_path):
    import csv

    from commprof.views import predict as predict_view
    from commprof.views.predict import predict_chart

    rows = list(csv.DictReader(open(os.path.join(ROOT, "results", "predict-seed-rtx5090x8-qwen2-5-32b",
                                                 "predict.csv"))))[:2]
    for r in rows:
        for k in ("kernel_ms", "floor_ms", "gaps_ms", "comm_ms", "comm_share_pct"):
            r[k] = float(r[k])
    rows[0]["weights_fit"] = "False"          # as predict.csv writes a TP whose weights do not fit
    rows[1]["weights_fit"] = "True"
    got = {}

    def keep(fig, path, *a, **k):
        got["fig"] = fig
        return path

    monkeypatch.setattr(predict_view, "save_chart", keep)
    predict_chart(rows, str(tmp_path / "p.png"), {})
    ax = got["fig"].axes[0]
    at0 = [p.get_height() for p in ax.patches if abs(p.get_x() + p.get_width() / 2) < 1e-9]
    at1 = [p.get_height() for p in ax.patches if abs(p.get_x() + p.get_width() / 2 - 1) < 1e-9]
    assert at0 and all(h == 0 for h in at0)
    assert sum(at1) > 0
    assert any("do not fit" in t.get_text() for t in ax.texts)


def test_trace_predict_refuses_before_it_makes_a_dir(cli_inproc, tmp_path):
    """A comm dir with no all_reduce rows at the TP asked for is refused with one line, and no
    results dir (meta.json, empty CSVs) is left behind."""
    src = os.path.join(ROOT, "tests", "data", "nccl-tests", "all_gather_perf_2gpu_bf16.log")
    comm = tmp_path / "ag"
    res = cli_inproc("import", "nccl-tests", src, "--out", str(comm))
    assert res.returncode == 0, res.stderr
    out = tmp_path / "pred"
    res = cli_inproc("trace", "--predict", "--comm-from", str(comm), "--tp", "2", "--layers", "1",
                     "--tokens", "2", "--out", str(out))
    assert res.returncode == 2, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("commprof: error:")]
    assert len(errors) == 1 and "no all_reduce rows at tp=2" in errors[0]
    assert not out.exists()


def test_one_rule_for_a_missing_all_gather():
    from commprof.analysis.latency import ALL_GATHER_STAND_IN, stand_in_op

    have = {("all_reduce", 2)}
    op, note = stand_in_op("all_gather", 2, have)
    assert op == "all_reduce" and note == ALL_GATHER_STAND_IN.format(tp=2) and "upper bound" in note
    assert stand_in_op("all_gather", 2, have | {("all_gather", 2)}) == ("all_gather", None)
    assert stand_in_op("all_gather", 4, have) == ("all_gather", None)     # nothing to stand in: refused later



def test_show_keeps_stdout_and_stderr_lines_whole_in_one_pipe(tmp_path):
    """`commprof show DIR 2>&1 | less`: a chart line (stderr) never lands in the middle of a summary
    line (stdout, block-buffered in a pipe): each note flushes stdout first."""
    res = subprocess.run([sys.executable, "-m", "commprof", "show", os.path.join(ROOT, "results", "trace-qwen2.5-32b-vm")],
                         cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout
    lines = res.stdout.splitlines()
    assert any(line.startswith("chart: ") for line in lines), res.stdout
    assert not [line for line in lines if "chart: " in line and not line.startswith("chart: ")], res.stdout
    assert lines.index(next(x for x in lines if x.startswith("chart: "))) > max(
        i for i, x in enumerate(lines) if "ms/token" in x), res.stdout
