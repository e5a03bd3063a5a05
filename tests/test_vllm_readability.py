"""What a person reads after a run against a real vLLM (issue 34, "Against a real vLLM"): help and
docs name what the code uses, per-token figures beside per-step ones, bounds not written as values,
CPU traces not reported as zero compute, and medians that say they do not add."""
import dataclasses
import os
import re

from helpers import REPO

from commprof.model import registry


def _help(cls, name: str) -> str:
    return next(f for f in dataclasses.fields(cls) if f.name == name).metadata["cli"]["help"]


def test_step_marker_help_names_vllms_execute_context_marks():
    from commprof.ingest.kinetoread import STEP_RES, VLLM_STEP_RE

    help_text = _help(registry.ImportConfig, "step_marker")
    assert "execute_context_N(T)_generation_M(K)" in help_text, help_text
    assert "ProfilerStep#N" in help_text and "gpu_model_runner: forward" in help_text
    assert len(STEP_RES) == 3       # every default mark is named above
    # the example the help gives matches a real vLLM iteration mark
    example = re.search(r"--step-marker '([^']+)'", help_text).group(1)
    assert re.search(example, "execute_context_0(0)_generation_4(4)")
    assert VLLM_STEP_RE.match("execute_context_0(0)_generation_4(4)")


def test_serve_docs_usage_names_every_serve_flag():
    with open(os.path.join(REPO, "docs", "serve.md")) as f:
        text = f.read()
    usage = text.split("## Usage", 1)[1].split("```", 2)[1]
    names = [d for f in dataclasses.fields(registry.ServeFlags) if "cli" in f.metadata
             for d in f.metadata["cli"]["decls"]]
    assert "--prompt-tokens" in names and "--output-tokens" in names
    missing = [n for n in names if n not in usage]
    assert not missing, missing


VLLM_TP2 = os.path.join(REPO, "tests", "data", "vllm-cpu", "tp2-batch4")


def _import_vllm_cpu(tmp_path):
    import glob

    from commprof.ingest.kineto import import_kineto

    out = str(tmp_path / "imp")
    import_kineto(sorted(glob.glob(os.path.join(VLLM_TP2, "*.json.gz"))), out, command=["test"])
    return out


def _rows(path):
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_cpu_trace_ranks_say_compute_is_cpu_ops_not_zero_kernels(tmp_path):
    out = _import_vllm_cpu(tmp_path)
    ranks = _rows(os.path.join(out, "kineto_ranks.csv"))
    steps = _rows(os.path.join(out, "kineto_steps.csv"))
    assert len(ranks) == 2
    for r in ranks:
        # no kernels on a CPU trace: not known, so empty (was 0 and 0)
        assert r["compute_kernels"] == "" and r["compute_kernel_us"] == "" and r["hta_overlap_pct"] == ""
        assert "CPU-only" in r["na_reason"]
        assert int(r["compute_cpu_ops"]) > 100
        busy = float(r["compute_cpu_us"])
        # the steps compute: the rank's CPU compute covers at least what its steps counted as compute
        step_compute = sum(float(s["compute_us"]) for s in steps if s["rank"] == r["rank"])
        assert busy > 0 and busy >= 0.99 * step_compute, (busy, step_compute)
    with open(os.path.join(out, "meta.json")) as f:
        import json

        cols = json.load(f)["columns"]
    assert "empty on a CPU-only trace" in cols["hta_overlap_pct"]


def test_trace_summary_remainder_says_what_the_component_medians_leave(tmp_path):
    out = _import_vllm_cpu(tmp_path)
    rows = _rows(os.path.join(out, "trace_summary.csv"))
    assert rows
    for r in rows:
        parts = sum(float(r[k]) for k in ("compute_ms", "transfer_ms", "wait_ms", "gaps_ms"))
        ms = float(r["ms_per_token"])
        assert float(r["remainder_ms"]) == __import__("pytest").approx(ms - parts, rel=1e-4, abs=1e-5)
    # on this real vLLM trace the medians do not add up: the remainder is not a rounding error
    assert any(abs(float(r["remainder_ms"])) > 0.05 * float(r["ms_per_token"]) for r in rows)
    with open(os.path.join(REPO, "docs", "trace.md")) as f:
        assert "medians do not add" in f.read()
    with open(os.path.join(out, "meta.json")) as f:
        import json

        assert "medians do not add" in json.load(f)["columns"]["remainder_ms"]


SERVE_VLLM = os.path.join(REPO, "results", "serve-vllm-cpu-tp2")     # a committed real vLLM serve run


def _render(levels, meta, tmp_path, width, monkeypatch, capsys):
    from commprof.views import serve as view

    monkeypatch.setenv("COLUMNS", str(width))
    view.render(levels, meta, str(tmp_path), charts=False)
    return capsys.readouterr().out


def test_a_burst_level_is_marked_in_its_own_row_of_the_table(tmp_path, monkeypatch, capsys):
    import json

    import pandas as pd

    levels = pd.read_csv(os.path.join(SERVE_VLLM, "serve_levels.csv"))
    meta = json.load(open(os.path.join(SERVE_VLLM, "meta.json")))
    burst = {int(r["concurrency"]): f"{int(r['burst_requests'])}/{int(r['ok'])}"
             for r in levels.to_dict("records") if r["mode"] == "closed" and r["burst_requests"] > 0}
    assert burst == {1: "2/33", 4: "2/101"}           # the real run: 2 requests in one burst at 1 and 4
    for w in (80, 120, 200):
        text = _render(levels, meta, tmp_path, w, monkeypatch, capsys)
        table = text.split("latency and throughput per level", 1)[0]
        assert "burst" in table
        rows = [ln for ln in table.splitlines() if ln.startswith("│ closed")]
        for ln in rows:
            conc = int(ln.split("│")[2])
            if conc in burst:
                assert burst[conc] in [cell.strip() for cell in ln.split("│")], (w, ln)
            else:
                assert burst[1] not in ln and burst[4] not in ln
    from commprof.results import load
    from commprof.views.report import serve_section

    sec = serve_section(load(SERVE_VLLM), str(tmp_path / "report"))
    t = sec.tables[0]
    col = t.headers.index("burst")
    assert [row[col] for row in t.rows] == ["2/33", "2/101", "", ""]


def test_queue_percentiles_in_the_first_bucket_are_bounds_not_values(tmp_path, monkeypatch, capsys):
    import math

    import pandas as pd

    from commprof.capture.servescrape import queue_figures
    from commprof.ingest.servermetrics import Histogram
    from commprof.model.serveconfig import LEVEL_COLUMNS
    from commprof.views.serve import queue_ms_text

    name = "vllm:request_queue_time_seconds"
    before = Histogram(name, {0.3: 0.0, 0.5: 0.0, float("inf"): 0.0}, 0.0, 0.0)
    after = Histogram(name, {0.3: 10.0, 0.5: 10.0, float("inf"): 10.0}, 0.0002, 10.0)   # vLLM's first bucket: 0.3 s
    got = queue_figures(before, after)
    for p in ("p50", "p90", "p99"):
        assert math.isnan(got[f"queue_ms_{p}"])            # not 300: that is a bound
        assert got[f"queue_ms_{p}_le"] == 300.0
        assert f"queue_ms_{p}_le" in LEVEL_COLUMNS and f"queue_ms_{p}_ge" in LEVEL_COLUMNS
    assert got["queue_ms_mean"] == __import__("pytest").approx(0.02)
    # above the last finite bound: only ">= 500" is known
    top = queue_figures(before, Histogram(name, {0.3: 0.0, 0.5: 0.0, float("inf"): 10.0}, 9.0, 10.0))
    assert math.isnan(top["queue_ms_p99"]) and top["queue_ms_p99_ge"] == 500.0
    # the view and the report read the bound columns as "<= 300" ...
    row = {"queue_ms_p99": float("nan"), "queue_ms_p99_le": 300, "queue_first_bucket_ms": 300.0}
    assert queue_ms_text(row, "queue_ms_p99") == "<= 300"
    assert queue_ms_text({"queue_ms_p99": float("nan"), "queue_ms_p99_ge": 500.0}, "queue_ms_p99") == ">= 500"
    # ... and a dir written before them (the bound in the value column) reads the same
    assert queue_ms_text({"queue_ms_p99": 300.0, "queue_first_bucket_ms": 300.0}, "queue_ms_p99") == "<= 300"
    # the committed real vLLM run, in the bound columns: empty values, 300 as the bound, read back as "<= 300"
    levels = pd.read_csv(os.path.join(SERVE_VLLM, "serve_levels.csv"))
    closed = levels[levels["mode"] == "closed"]
    assert closed["queue_ms_p99"].isna().all() and (closed["queue_ms_p99_le"] == 300).all()
    import json

    meta = json.load(open(os.path.join(SERVE_VLLM, "meta.json")))
    text = _render(levels, meta, tmp_path, 200, monkeypatch, capsys)
    assert text.count("<= 300") >= 3 and "p99 <= 300 ms: in the first histogram bucket" in text
    from commprof.results import load
    from commprof.views.report import serve_section

    t = serve_section(load(SERVE_VLLM), str(tmp_path / "report")).tables[0]
    assert [row[t.headers.index("queue p99 ms")] for row in t.rows] == ["<= 300"] * 3 + [""]


def test_serve_profile_gives_communication_per_step_and_per_token(tmp_path):
    import glob

    from commprof.analysis.servestats import profile_comm
    from commprof.ingest.kineto import import_kineto
    from commprof.views.serve import profile_lines

    got = import_kineto(sorted(glob.glob(os.path.join(VLLM_TP2, "*.json.gz"))), str(tmp_path / "k"), command=["t"])
    run = got["runs"][0]
    c = profile_comm(run)
    assert c["decode_tokens_per_step"] == run["batch"] == 4       # vLLM's marks: 4 decode requests a step
    assert c["comm_ms_per_step"] == __import__("pytest").approx(run["ms_per_step"] * run["comm_share_pct"] / 100)
    assert c["comm_ms_per_token"] == __import__("pytest").approx(c["comm_ms_per_step"] / 4)
    lines = []
    profile = {"error": "", "concurrency": 4, "kineto_out": "kineto",
               "runs": [{**{k: run[k] for k in ("tp", "batch", "steps", "steps_by_phase", "collectives_per_step",
                                                 "backend", "comm_share_pct", "ms_per_step")}, **c}]}
    profile_lines(profile, str(tmp_path), echo=lines.append)
    assert f"{c['comm_ms_per_step']:.3f} ms/step" in lines[0]
    assert f"{c['comm_ms_per_token']:.3f} ms/token over the 4 tokens each decode step decoded" in lines[0]
    # a meta.json written before the per-token figures reads the same
    old = {**profile, "runs": [{k: v for k, v in profile["runs"][0].items() if not k.startswith(("comm_ms", "decode_"))}]}
    again = []
    profile_lines(old, str(tmp_path), echo=again.append)
    assert again == lines
    from commprof.model.serveconfig import LEVEL_COLUMNS

    assert {"comm_ms_per_step", "comm_ms_per_token", "decode_tokens_per_step"} <= set(LEVEL_COLUMNS)


def _copy_script(tmp_path, name):
    """scripts/NAME copied under tmp_path/scripts, so its ROOT is tmp_path (no venv of this checkout)."""
    import shutil

    d = tmp_path / "root" / "scripts"
    d.mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "scripts", name), d / name)
    return str(d / name)


def test_vllm_cpu_model_without_a_venv_says_what_is_missing_in_one_line(tmp_path):
    import subprocess

    script = _copy_script(tmp_path, "vllm_cpu.sh")
    env = {k: v for k, v in os.environ.items() if k not in ("COMMPROF_PY", "COMMPROF_VLLM_VENV")}
    env["COMMPROF_VLLM_VENV"] = str(tmp_path / "no-venv")
    r = subprocess.run(["bash", script, "model", str(tmp_path / "m")], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr)          # was 127 (command not found)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no python with torch and transformers" in lines[0] and "setup" in lines[0]
    # a python that cannot build it: its last error line, exit 1
    fake = tmp_path / "py"
    fake.write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n"
                    "echo \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    r = subprocess.run(["bash", script, "model", str(tmp_path / "m")], capture_output=True, text=True,
                       env={**env, "COMMPROF_PY": str(fake)}, timeout=60)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        f"vllm_cpu.sh model: {fake} scripts/tiny_llama.py failed: ModuleNotFoundError: No module named 'torch'"]
    r = subprocess.run(["bash", script, "start", str(tmp_path / "m"), "1", "1"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "no vLLM venv" in r.stderr


def _bench_module():
    import importlib.util
    import sys

    sys.path.insert(0, os.path.join(REPO, "scripts"))
    spec = importlib.util.spec_from_file_location("bench_serve_vllm", os.path.join(REPO, "scripts", "bench_serve_vllm.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_serve_vllm_tp_out_dir_and_one_verdict(tmp_path, capsys):
    import pytest

    b = _bench_module()
    ap = b.build_parser()
    # a running server named by --url: its TP is not known unless --tp names it (was labelled TP=1)
    args = ap.parse_args(["--url", "http://127.0.0.1:8000"])
    assert args.tp is None and "TP unknown" in b.tp_text(args) and "TP=1" not in b.tp_text(args)
    assert b.tp_text(ap.parse_args(["--url", "http://127.0.0.1:8000", "--tp", "2"])) == "TP=2"
    assert b.tp_text(ap.parse_args([])) == "TP=1"          # the vLLM it starts itself
    # the default out dir is a new one outside the committed results (was results/bench)
    assert ap.parse_args([]).out is None
    out = b.default_out()
    committed = os.path.join(REPO, "results", "bench")
    assert os.path.join("results", "runs") in out and not out.startswith(committed)
    assert os.path.exists(os.path.join(committed, "serve_vs_vllm_bench.md"))
    with pytest.raises(SystemExit) as e:                   # the committed result is never overwritten by accident
        b.check_out(committed, overwrite=False)
    assert "already holds serve_vs_vllm_bench.md" in str(e.value) and "--overwrite" in str(e.value)
    b.check_out(committed, overwrite=True)
    b.check_out(str(tmp_path / "fresh"), overwrite=False)
    # one verdict: "cannot be judged" is not printed beside "NOT met"
    assert b.verdict(False, True, False) == (b.verdict(True, True, False)[0], 9)
    assert "cannot be judged" in b.verdict(False, True, False)[0]
    assert b.verdict(False, True, True) == ("NOT met", 1) and b.verdict(True, False, False) == ("met", 0)
    from benchfile import write_result

    said, _ = b.verdict(False, True, False)
    res = {"what": "x", "command": "python scripts/bench_serve_vllm.py", "start_time": "t",
           "machine": {"host": "h", "cpu": "c", "cpu_cores": 2}, "versions": {"torch": "2"},
           "target": "within 10%", "met": None, "verdict": said}
    write_result(str(tmp_path / "o"), "serve_vs_vllm_bench", "t", res, ["| a |"])
    md = (tmp_path / "o" / "serve_vs_vllm_bench.md").read_text()
    assert "NOT met" not in md and md.count("Target within 10%: cannot be judged") == 1
    capsys.readouterr()


def test_piped_serve_table_cuts_no_status_cell(tmp_path, monkeypatch, capsys):
    """Without a terminal and without $COLUMNS the serve table of a real vLLM run keeps every cell
    whole (it showed 'comple…'); already so on this base (views/console.fit_table), kept here."""
    import json

    import pandas as pd

    from commprof.views import serve as view

    monkeypatch.delenv("COLUMNS", raising=False)
    levels = pd.read_csv(os.path.join(SERVE_VLLM, "serve_levels.csv"))
    view.render(levels, json.load(open(os.path.join(SERVE_VLLM, "meta.json"))), str(tmp_path), charts=False)
    text = capsys.readouterr().out
    table = text.split("latency and throughput per level", 1)[0]
    assert "…" not in table
    rows = [ln for ln in table.splitlines() if ln.startswith("│ closed") or ln.startswith("│ profiled")]
    assert len(rows) == len(levels) and all("complete" in ln for ln in rows)
