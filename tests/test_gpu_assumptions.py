"""scripts/gpu_assumptions.py, the GPU check's verdicts, judged on CPU: every check that needs only
torch.cuda's event and graph API runs on tests/fake_cuda.py and must say *confirmed* where the fake
models CUDA as it is and *refuted* where a fake is made to behave otherwise (so a check can fail);
without a GPU every check says *not reached* with why, and the summary names each assumption once."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from fake_cuda import FakeGpu, FakeTorch

sys.path.insert(0, os.path.join(REPO, "scripts"))
import gpu_assumptions as ga  # noqa: E402

SCRIPT = os.path.join(REPO, "scripts", "gpu_assumptions.py")
EVENT_CHECKS = ["event-never-recorded", "elapsed-before-complete", "graph-events-time", "graph-events-mixed",
                "sync-in-capture"]


def _run(key, gpu, tmp_path=None):
    _, _, statement, fn, box = next(c for c in ga.CHECKS if c[0] == key)
    return ga.run_check(ga.Context(FakeTorch(gpu)), key, statement, fn, box, str(tmp_path) if tmp_path else None)


@pytest.mark.parametrize("key", EVENT_CHECKS)
def test_event_checks_confirm_on_a_fake_as_strict_as_cuda(key):
    rec = _run(key, FakeGpu())
    assert rec["status"] == "confirmed", rec


@pytest.mark.parametrize("key,gpu,what", [
    ("graph-events-mixed", FakeGpu(mixed_graph_events=False), "falls back"),
    ("graph-events-time", FakeGpu(graph_event_timing=False), "cuda_event_spin_outer"),
    ("graph-events-time", FakeGpu(external_events=False), "external=True"),
])
def test_event_checks_refute_when_the_gpu_behaves_otherwise(key, gpu, what):
    rec = _run(key, gpu)
    assert rec["status"] == "refuted" and what in rec["detail"], rec


def test_a_lax_fake_is_refuted(monkeypatch):
    """The fake before it was made strict: query() False on a never-recorded event, elapsed_time
    that waits; the checks would have caught both on a GPU."""
    gpu = FakeGpu()
    monkeypatch.setattr(gpu.Event, "query", lambda self: self.t is not None)
    assert _run("event-never-recorded", gpu)["status"] == "refuted"
    gpu = FakeGpu()
    real = gpu.Event.elapsed_time

    def waits(self, other):
        other.synchronize()
        return real(self, other)
    monkeypatch.setattr(gpu.Event, "elapsed_time", waits)
    assert _run("elapsed-before-complete", gpu)["status"] == "refuted"


def test_spin_clock_check_sees_a_ramp_and_says_when_it_sees_none():
    rec = _run("spin-clock", FakeGpu(clock_hz=1.98e9, idle_clock_hz=0.345e9, ramp_s=0.03))
    assert rec["status"] == "confirmed", rec
    assert rec["data"]["warm_cycles_per_us"] == pytest.approx(1980, rel=0.05)
    assert rec["data"]["cold_cycles_per_us"][-1] == pytest.approx(345, rel=0.05)
    rec = _run("spin-clock", FakeGpu(clock_hz=1.98e9))
    assert rec["status"] == "refuted" and "no clock ramp" in rec["detail"]


def test_a_crash_or_a_timeout_is_not_a_verdict(tmp_path):
    def crash(ctx):
        raise KeyError("boom")

    def slow(ctx):
        import time
        time.sleep(5)
    rec = ga.run_check(ga.Context(FakeTorch(FakeGpu())), "x", "x", crash, 5, str(tmp_path))
    assert rec["status"] == "not reached" and "KeyError" in rec["detail"]
    rec = ga.run_check(ga.Context(FakeTorch(FakeGpu())), "y", "y", slow, 1, str(tmp_path))
    assert rec["status"] == "not reached" and "timed out" in rec["detail"] and rec["seconds"] < 3
    assert json.load(open(tmp_path / "y.json"))["status"] == "not reached"


def test_without_a_gpu_every_check_is_not_reached_and_the_summary_names_each(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = tmp_path / "a"
    res = subprocess.run([sys.executable, SCRIPT, str(out), "--group", "events"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 1, res.stderr
    events = [c[0] for c in ga.CHECKS if c[1] == "events"]
    assert sorted(p[:-5] for p in os.listdir(out)) == sorted(events)
    (out / "sweep-path.json").write_text(json.dumps({"status": "running", "time_box_s": 60}))
    lines = subprocess.run([sys.executable, SCRIPT, "--summarize", str(out)], capture_output=True, text=True,
                           timeout=60).stdout.splitlines()
    assert [ln.split(":")[0].split()[-1] for ln in lines] == [c[0] for c in ga.CHECKS]
    assert all(ln.startswith("not reached") for ln in lines)
    by = {c[0]: ln for c, ln in zip(ga.CHECKS, lines)}
    assert "no CUDA GPU visible" in by["spin-clock"]
    assert "killed while running (time box 60 s)" in by["sweep-path"]
    assert "its step (trace) did not run" in by["trace-full-model"]


def test_list_and_bad_usage():
    res = subprocess.run([sys.executable, SCRIPT, "--list"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and len(res.stdout.splitlines()) == len(ga.CHECKS)
    res = subprocess.run([sys.executable, SCRIPT, "/tmp/x", "--only", "nosuch"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and "nosuch" in res.stderr
