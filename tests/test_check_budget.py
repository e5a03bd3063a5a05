"""``commprof check`` within a time budget, and a headline that says what the verdict stands on
(issue 33): with no dirs on a machine without GPUs it finishes in seconds and says what it could
not judge; ``--budget`` bounds every measuring step; the headline counts the judged items and names
the areas not judged."""
import json
import os
import time

import pytest
from helpers import REPO, run_cli

from commprof.ingest.nccltests import import_nccl_tests

CHLC = os.path.join(REPO, "tests", "data", "nccl-tests", "rtx4090x8_pcie_allreduce_chlc_blog.txt")


def _no_gpu_here():
    from commprof.capture.nvmlhealth import sample_once

    if sample_once().get("samples"):
        pytest.skip("an NVIDIA GPU is here: check with no dirs measures it (up to its 900 s budget)")


def test_check_with_no_dirs_on_a_cpu_machine_takes_seconds_and_says_what_it_could_not(tmp_path):
    _no_gpu_here()
    out = tmp_path / "chk"
    t0 = time.monotonic()
    res = run_cli(["check", "--out", str(out)], cwd=str(tmp_path), timeout=120)
    took = time.monotonic() - t0
    assert took < 30, took                                   # it ran a sweep for 8 minutes before
    assert res.returncode == 9, res.stderr
    assert "could not: sweep, trace, topology, host-GPU bandwidth and GPU health: no NVIDIA GPU" in res.stderr
    assert "--budget 120" in res.stderr
    data = json.loads((out / "check.json").read_text())
    assert data["could_not"] and data["verdict"] == "INSUFFICIENT EVIDENCE"
    assert data["headline"].startswith("INSUFFICIENT EVIDENCE on 0 of ")
    assert "not judged: interconnect, GPU inventory, GPU health" in data["headline"]
    assert "## Not measured" in (out / "check.md").read_text()
    assert "commprof check: INSUFFICIENT EVIDENCE on 0 of" in res.stdout


def test_the_budget_stops_a_step_with_its_children_and_says_so(monkeypatch, tmp_path, cli_inproc):
    """A step still running when the budget runs out (here: the CPU sweep, stood in for by a process
    that starts a child and sleeps, as a sweep starts its ranks) is stopped with its whole process
    group; the trace is not started; both are said."""
    _no_gpu_here()
    import sys

    from commprof.capture import checkmeasure as check

    pidfile = tmp_path / "child.pid"
    slow = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; "
            f"time.sleep(120)']); open({str(pidfile)!r}, 'w').write(str(c.pid)); time.sleep(120)")
    real_run = check._run_within
    monkeypatch.setattr(check, "GLOO_SWEEP_MIN_S", 1.0)
    monkeypatch.setattr(check, "_run_within", lambda cmd, seconds: real_run([sys.executable, "-c", slow], seconds))
    t0 = time.monotonic()
    res = cli_inproc("check", "--budget", "6", "--out", str(tmp_path / "chk"))
    took = time.monotonic() - t0
    assert took < 40, took
    data = json.loads((tmp_path / "chk" / "check.json").read_text())
    lines = data["could_not"]
    assert any(x.startswith("sweep: stopped when the 6 s budget ran out") for x in lines), lines
    assert any(x.startswith("trace: not started: the 6 s budget was spent") for x in lines), lines
    assert res.returncode == 9
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        try:
            with open(f"/proc/{child}/stat") as f:      # a zombie waiting for its reaper is dead too
                if f.read().split()[2] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the step's child {child} outlived the budget")


@pytest.mark.parametrize("budget", ["0", "-5", "nan"])
def test_a_budget_that_is_no_time_is_refused(cli_inproc, tmp_path, budget):
    res = cli_inproc("check", "--budget", budget, "--out", str(tmp_path / "c"))
    assert res.returncode == 2
    assert "--budget" in (res.stderr or res.stdout)


def test_the_headline_counts_the_judged_items_and_names_what_was_not_judged(cli_inproc, tmp_path):
    d = str(tmp_path / "imp")
    import_nccl_tests([CHLC], d)
    res = cli_inproc("check", d, "--out", str(tmp_path / "chk"))
    assert res.returncode == 0, res.stderr
    data = json.loads((tmp_path / "chk" / "check.json").read_text())
    judged = [i for i in data["items"] if i["id"] != "E1" and i["status"] in ("PASS", "WARN", "FAIL")]
    listed = [i for i in data["items"] if i["id"] != "E1"]
    want = f"PASS on {len(judged)} of {len(listed)} items (interconnect only; not judged: GPU inventory"
    assert data["headline"].startswith(want), data["headline"]
    assert "TTFT" in data["headline"] and "serving SLOs" in data["headline"]
    assert data["scope"]["judged"] == len(judged) and data["scope"]["areas"] == ["interconnect"]
    assert f"commprof check: {want}" in res.stdout
    assert (tmp_path / "chk" / "check.md").read_text().startswith(f"# commprof check: {want}")
