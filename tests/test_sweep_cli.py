"""End-to-end sweeps through the CLI: real gloo ranks on CPU.

The user's run, killed and hung ranks and torchrun go through ``cli`` (commprof in a subprocess, as
a user starts it); flag checks and runs where the CLI's own process does not matter go through
``cli_inproc`` (ranks are still real processes), which saves a Python + torch start-up per call."""
import json
import os
import subprocess
import sys

import pytest

from commprof.capture import launch
from commprof.model import machine as runinfo
from helpers import REPO, one_line_error, run_inproc
from helpers import results_meta as meta
from helpers import sweep_rows as rows

SMALL = ["--sizes", "4K,64K", "--iters", "8", "--warmup", "1", "--timeout", "60"]


def test_end_to_end_tp2_tp4(cli, tmp_path):
    out = str(tmp_path / "run")
    res = cli("sweep", "--tp", "2,4", *SMALL, "--out", out)
    assert res.returncode == 0, res.stderr
    assert "backend gloo" in res.stderr
    got = rows(out)
    # ops (2) x sizes (2) x tp (2) x mode (eager) = 8 rows, one group each
    assert len(got) == 8
    assert {(r["op"], r["tp"], r["size_bytes"]) for r in got} == {
        (op, tp, sz) for op in ("all_reduce", "all_gather") for tp in ("2", "4") for sz in ("4096", "65536")}
    for r in got:
        assert r["wrong"] == "0" and r["status"] == "ok"
        assert r["backend"] == "gloo" and r["clock"] == "perf_counter" and r["mode"] == "eager"
        p = [float(r[f"latency_us_{k}"]) for k in ("min", "p50", "p95", "p99", "max")]
        assert p == sorted(p) and p[0] > 0
        n = int(r["tp"])
        factor = 2 * (n - 1) / n if r["op"] == "all_reduce" else (n - 1) / n
        algbw = int(r["size_bytes"]) / (float(r["latency_us_p50"]) * 1e-6) / 1e9
        assert float(r["algbw_gbps"]) == pytest.approx(algbw, rel=1e-3)
        assert float(r["busbw_gbps"]) == pytest.approx(algbw * factor, rel=1e-3)
    m = meta(out)
    assert m["status"] == "complete" and m["kind"] == "measured"
    assert m["backend"] == "gloo" and "auto" in m["backend_reason"]
    assert m["world_size"] == 4 and m["launch"] == "local"
    # each gloo rank commprof spawned runs on one core, round robin over the cores it may use
    cores = sorted(os.sched_getaffinity(0))
    assert [r["cpu_affinity"] for r in m["ranks"]] == [str(cores[i % len(cores)]) for i in range(4)]
    for k in ("host", "cpu", "cpu_cores"):
        assert k in m["machine"]
    for k in ("torch", "nccl", "driver", "cuda_runtime", "python"):
        assert k in m["versions"]
    assert m["command"][:2] == ["commprof", "sweep"] and m["start_time"] and m["end_time"]
    assert isinstance(m["nccl_env"], dict)
    for png in ("latency_vs_size.png", "busbw_vs_size.png"):
        path = os.path.join(out, png)
        assert os.path.getsize(path) > 10_000
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert "all_reduce" in res.stdout and "p50 us" in res.stdout

    # show re-renders table and charts from the directory alone
    for png in ("latency_vs_size.png", "busbw_vs_size.png"):
        os.remove(os.path.join(out, png))
    res2 = run_inproc(["show", out], cwd=tmp_path)
    assert res2.returncode == 0, res2.stderr
    assert "all_gather" in res2.stdout
    assert os.path.exists(os.path.join(out, "latency_vs_size.png"))


def test_decode_sizes_and_concurrent_groups(cli_inproc, tmp_path):
    out = str(tmp_path / "conc")
    res = cli_inproc("sweep", "--tp", "2,4", "--ops", "all_reduce", "--model", "Qwen3-30B-A3B", "--batch", "1,4",
                     "--iters", "5", "--warmup", "1", "--concurrent", "--out", out, "--no-charts")
    assert res.returncode == 0, res.stderr
    got = rows(out)
    tp2 = [r for r in got if r["tp"] == "2"]
    # two disjoint TP=2 groups on 4 ranks, measured at once
    assert sorted((r["group"], r["ranks"]) for r in tp2 if r["batch"] == "1") == [("0", "0-1"), ("1", "2-3")]
    assert {int(r["size_bytes"]) for r in got} == {1 * 2048 * 2, 4 * 2048 * 2}
    assert all(r["concurrent"] == "1" and r["wrong"] == "0" for r in got)


def test_other_ops_are_correct(cli_inproc, tmp_path):
    # one launch for the three ops: each row has its own correctness check
    ops = ("reduce_scatter", "all_to_all", "broadcast")
    out = str(tmp_path / "ops")
    res = cli_inproc("sweep", "--tp", "2", "--ops", ",".join(ops), "--sizes", "1K,3000", "--dtype", "fp32",
                     "--iters", "3", "--warmup", "1", "--out", out, "--no-charts")
    assert res.returncode == 0, res.stderr
    got = rows(out)
    assert sorted((r["op"], r["size_bytes"]) for r in got) == sorted((op, sz) for op in ops for sz in ("1024", "3000"))
    assert all(r["wrong"] == "0" and r["status"] == "ok" and r["dtype"] == "fp32" for r in got)


def test_corrupted_reduction_is_caught(cli_inproc, tmp_path):
    out = str(tmp_path / "bad")
    res = cli_inproc("sweep", "--tp", "2", *SMALL, "--out", out, "--no-charts",
                     env={"COMMPROF_TEST_FAULT": "corrupt:rank=1,op=all_reduce"})
    assert res.returncode == 1
    assert "failed the correctness check" in one_line_error(res)
    got = rows(out)
    assert len(got) == 4
    for r in got:
        if r["op"] == "all_reduce":
            assert r["wrong"] == "1" and r["status"] == "WRONG"
        else:
            assert r["wrong"] == "0" and r["status"] == "ok"


def test_killed_rank_keeps_rows_and_resume_finishes(cli, tmp_path):
    # A real process: rank 1 SIGKILLs itself at its first all_gather (cells run all_reduce first).
    out = str(tmp_path / "die")
    res = cli("sweep", "--tp", "2", *SMALL, "--out", out, "--no-charts",
              env={"COMMPROF_TEST_FAULT": "die:rank=1,op=all_gather,tp=2"})
    assert res.returncode == 4, res.stderr
    line = one_line_error(res)
    assert "rank=1" in line and "SIGKILL" in line and "all_gather tp=2" in line
    before = rows(out)
    # every all_reduce cell finished before the all_gather that died
    assert len(before) == 2 and {r["op"] for r in before} == {"all_reduce"}
    assert meta(out)["status"] == "failed"

    res = run_inproc(["sweep", "--tp", "2", *SMALL, "--out", out, "--no-charts", "--resume"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    after = rows(out)
    assert len(after) == 4
    assert after[:2] == before                     # finished rows were not redone
    keys = [(r["op"], r["tp"], r["size_bytes"], r["mode"]) for r in after]
    assert len(set(keys)) == 4
    m = meta(out)
    assert m["status"] == "complete" and len(m["runs"]) == 2


def test_hung_rank_is_named_and_stopped(cli, tmp_path):
    out = str(tmp_path / "hang")
    res = cli("sweep", "--tp", "2", *SMALL[:-2], "--timeout", "4", "--out", out, "--no-charts",
              env={"COMMPROF_TEST_FAULT": "hang:rank=1,op=all_gather,iter=2"}, timeout=120)
    assert res.returncode == 5, res.stderr
    line = one_line_error(res)
    assert "rank=1" in line and "all_gather" in line and "--timeout" in line
    got = rows(out)
    assert len(got) == 2 and {r["op"] for r in got} == {"all_reduce"}
    assert meta(out)["status"] == "failed"


@pytest.mark.parametrize("args,code,needle", [
    (["--backend", "nccl"], 3, "needs NVIDIA GPUs"),
    (["--tp", "2,100"], 3, "at most 64"),
    (["--tp", "2,x"], 2, "--tp"),
    (["--model", "gpt-17"], 2, "unknown model 'gpt-17'"),
    (["--sizes", "pow2:64K-4K"], 2, "--sizes"),
    (["--sizes", "4K,oops"], 2, "--sizes"),
    (["--ops", "all_reduce,allreduce"], 2, "unknown op 'allreduce'"),
    (["--modes", "graph"], 2, "graph"),
    (["--dtype", "int8"], 2, "--dtype"),
    (["--batch", "0"], 2, "--batch"),
    (["--iters", "0"], 2, "--iters"),
])
def test_bad_input_one_line(cli_inproc, tmp_path, args, code, needle):
    res = cli_inproc("sweep", "--tp", "2", *args, "--out", str(tmp_path / "x"))
    assert res.returncode == code, res.stderr
    assert needle in one_line_error(res)
    assert not os.path.exists(tmp_path / "x")


@pytest.mark.parametrize("args,needle", [
    (["sweep", "--iters", "abc"], "--iters"),
    (["sweep", "--bogus"], "--bogus"),
    (["frobnicate"], "frobnicate"),
])
def test_flag_errors_are_one_line(cli_inproc, args, needle):
    res = cli_inproc(*args)
    assert res.returncode == 2
    assert needle in one_line_error(res)
    assert len(res.stderr.strip().splitlines()) == 1


def test_flag_error_from_a_real_process_is_one_line(cli):
    # python -m commprof -> main -> exit status, with click's own usage text mapped to one line
    res = cli("sweep", "--bogus")
    assert res.returncode == 2
    assert "--bogus" in one_line_error(res) and "commprof sweep --help" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stdout == ""


def test_bad_config_file(cli_inproc, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 4096, "num_hidden_layers": 2}))
    res = cli_inproc("sweep", "--tp", "2", "--model", str(cfg), "--out", str(tmp_path / "x"))
    assert res.returncode == 2
    assert "missing field 'vocab_size'" in one_line_error(res) and str(cfg) in res.stderr


def test_output_dir_with_other_content_is_refused(cli_inproc, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    res = cli_inproc("sweep", "--tp", "2", *SMALL, "--out", str(out))
    assert res.returncode == 2
    assert "already holds files (notes.txt)" in one_line_error(res)
    assert os.listdir(out) == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"
    res = cli_inproc("sweep", "--tp", "2", *SMALL, "--out", str(out), "--resume")
    assert res.returncode == 2 and "not a commprof results dir" in one_line_error(res)


def test_show_on_corrupt_dir(cli_inproc, tmp_path):
    d = tmp_path / "corrupt"
    d.mkdir()
    (d / "meta.json").write_text("{oops")
    res = cli_inproc("show", str(d))
    assert res.returncode == 2 and "meta.json: not valid JSON" in one_line_error(res)
    (d / "meta.json").write_text("{}")
    (d / "sweep.csv").write_text("op,tp,size_bytes,mode,latency_us_p50\nall_reduce,2\n")
    res = cli_inproc("show", str(d))
    assert res.returncode == 2 and "line 2" in one_line_error(res)


def test_shared_core_note_under_torchrun(monkeypatch):
    trun = {"rank": 0, "world": 4, "local_rank": 0, "local_world": 4}
    monkeypatch.setattr(launch.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(launch, "autogroup_on", lambda: True)
    note = launch.shared_core_note("gloo", trun)
    assert note.startswith("note: 4 gloo ranks under torchrun share 2 core(s)") and "Where CPU ranks run" in note
    assert launch.shared_core_note("nccl", trun) is None                 # GPU ranks: one per GPU
    assert launch.shared_core_note("gloo", None) is None                 # commprof's own launcher
    assert launch.shared_core_note("gloo", {**trun, "local_world": 2}) is None     # a core each
    monkeypatch.setattr(launch, "autogroup_on", lambda: False)
    assert launch.shared_core_note("gloo", trun) is None


def test_torchrun_uses_given_ranks(tmp_path):
    out = str(tmp_path / "tr")
    env = dict(os.environ, PYTHONPATH=REPO)
    env.pop("COMMPROF_TEST_FAULT", None)
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "commprof", "sweep", "--tp", "2", "--ops", "all_reduce", *SMALL,
                          "--out", out, "--no-charts"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    got = rows(out)
    assert len(got) == 2 and all(r["wrong"] == "0" for r in got)
    m = meta(out)
    assert m["launch"] == "torchrun" and m["world_size"] == 2
    # ranks under torchrun keep the affinity they were given
    assert {r["cpu_affinity"] for r in m["ranks"]} == {runinfo.cpu_affinity()}
    assert ("share" in res.stderr) == (len(os.sched_getaffinity(0)) < 2 and launch.autogroup_on())
    # asking for more ranks than torchrun started is refused on every rank
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "commprof", "sweep", "--tp", "4", "--out", str(tmp_path / "tr4")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    ours = [l for l in res.stderr.splitlines() if l.startswith("commprof: error:")]
    # Each rank that gets to print says it in one line; torchrun may stop the second rank first.
    assert 1 <= len(ours) <= 2 and all("WORLD_SIZE=2" in l for l in ours), res.stderr
    # torchrun prints its own launcher traceback; none of commprof's frames may show
    assert os.path.join(REPO, "commprof") not in res.stderr
