"""``commprof sweep --impl <backend>,custom``: the one-shot all-reduce beside the backend's.

The kernel needs GPUs; here the sweep's whole custom path (setup agreement across ranks, the P2P
rule, per-size refusal and fallback, --verify on every call, rows, resume, the views) runs with
gloo across real processes, with ``COMMPROF_TEST_ONESHOT`` standing a CPU emulation in for the
kernel (see ``microbench/oneshot_rank.py``). The kernel itself is compiled in test_cuda_ext.py
and run in test_gpu.py. The CLI runs in-process (``cli_inproc``); the ranks are real processes.
"""
import csv
import os

import pytest

from commprof import results
from commprof.model.errors import DeviceError, UsageError
from commprof.model.sizes import SizePoint
from commprof.verbs.sweep import parse_impls, refusal_lines
from commprof.model.sweepconfig import SweepRunConfig, plan_cells, row_key
from helpers import one_line_error
from helpers import results_meta as meta
from helpers import sweep_rows as rows

FAST = ["--iters", "3", "--warmup", "1", "--timeout", "60", "--no-charts"]


# --- planning and parsing (no ranks) ------------------------------------------------------------

def _cfg(**kw):
    pts = [SizePoint("all_reduce", 4096, None, "x"), SizePoint("all_gather", 4096, None, "x")]
    base = dict(ops=["all_reduce", "all_gather"], tps=[2], points=pts, backend="nccl", modes=["eager", "graph"])
    base.update(kw)
    return SweepRunConfig(**base)


def test_custom_cells_are_all_reduce_eager_only_and_sit_beside_the_backend_cell():
    cells = plan_cells(_cfg(impls=["nccl", "custom"]))
    labels = [(c.op, c.mode, c.impl) for c in cells]
    assert labels == [("all_reduce", "eager", ""), ("all_reduce", "eager", "custom"), ("all_reduce", "graph", ""),
                      ("all_gather", "eager", ""), ("all_gather", "graph", "")]
    keys = [c.key for c in cells]
    assert len(set(keys)) == len(keys)
    # The backend's cells keep the key they had before --impl existed (old tables resume).
    assert cells[0].key == "all_reduce|tp2|4096|eager" and cells[1].key.endswith("|custom")
    # Without --impl nothing changes.
    assert [c.impl for c in plan_cells(_cfg())] == [""] * 4


def test_row_key_maps_a_fallback_row_to_the_custom_cell():
    r = {"op": "all_reduce", "tp": "2", "size_bytes": "24", "mode": "eager"}
    assert row_key({**r, "impl": "nccl", "fallback": ""}) == "all_reduce|tp2|24|eager"
    assert row_key({**r, "impl": "nccl", "fallback": "not a multiple"}) == "all_reduce|tp2|24|eager|custom"
    assert row_key({**r, "impl": "custom", "fallback": ""}) == "all_reduce|tp2|24|eager|custom"
    assert row_key(r) == "all_reduce|tp2|24|eager"         # a table from before the impl column


def test_parse_impls_refuses_what_cannot_run(monkeypatch):
    monkeypatch.delenv("COMMPROF_TEST_ONESHOT", raising=False)
    auto = "auto: 0 CUDA GPU(s) visible"
    assert parse_impls(None, "gloo", auto, ["all_reduce"], ["eager"]) == ["gloo"]
    assert parse_impls("gloo, gloo", "gloo", auto, ["all_reduce"], ["eager"]) == ["gloo"]
    with pytest.raises(UsageError, match="unknown implementation 'ring'"):
        parse_impls("gloo,ring", "gloo", auto, ["all_reduce"], ["eager"])
    with pytest.raises(UsageError, match="empty list"):
        parse_impls(" , ", "gloo", auto, ["all_reduce"], ["eager"])
    # No GPU: asking for NCCL or the kernel is a missing device (exit 3), not a typo.
    with pytest.raises(DeviceError, match="--impl nccl: this run uses the gloo backend"):
        parse_impls("nccl,custom", "gloo", auto, ["all_reduce"], ["eager"])
    with pytest.raises(DeviceError, match="runs on NVIDIA GPUs with the nccl backend"):
        parse_impls("gloo,custom", "gloo", auto, ["all_reduce"], ["eager"])
    # An explicit --backend gloo with --impl nccl is a clash of flags.
    with pytest.raises(UsageError, match="--impl nccl"):
        parse_impls("nccl", "gloo", "requested with --backend gloo", ["all_reduce"], ["eager"])
    # On NCCL the op and mode limits are checked before any GPU is touched.
    with pytest.raises(UsageError, match="covers all_reduce only"):
        parse_impls("nccl,custom", "nccl", "auto", ["all_gather"], ["eager"])
    with pytest.raises(UsageError, match="eager mode only"):
        parse_impls("nccl,custom", "nccl", "auto", ["all_reduce"], ["graph"])


def test_refusal_lines_group_by_reason():
    refused = [{"tp": 2, "size_bytes": 24, "reason": "not a multiple of 16", "then": "only the nccl row"},
               {"tp": 2, "size_bytes": 40, "reason": "not a multiple of 16", "then": "only the nccl row"},
               {"tp": 8, "size_bytes": 4096, "reason": "P2P unverified", "then": "only the nccl row"}]
    lines = refusal_lines(refused)
    assert len(lines) == 2
    assert lines[0].startswith("custom all_reduce refused at TP=2 for 2 size(s) (24B, 40B): not a multiple")
    assert "TP=8 for 1 size(s) (4KiB): P2P unverified" in lines[1]


def test_load_frame_keeps_custom_rows_out_of_the_baseline(tmp_path):
    cols = results.COLUMNS
    base = {c: "" for c in cols}
    base.update(op="all_reduce", tp="2", group="0", mode="eager", backend="nccl", size_bytes="4096", count="2048",
                iters="5", warmup="1", concurrent="0", wrong="0", latency_us_p50="10")
    with open(tmp_path / "sweep.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerow({**base, "impl": "nccl"})
        w.writerow({**base, "impl": "custom", "latency_us_p50": "4"})
    assert list(results.load_frame(str(tmp_path))["impl"]) == ["nccl"]
    assert list(results.load_frame(str(tmp_path), impl="custom")["latency_us_p50"]) == [4.0]
    assert len(results.load_frame(str(tmp_path), impl="all")) == 2
    # A table from before the impl column: every row is the backend's.
    old = [c for c in cols if c not in ("impl", "fallback")]
    with open(tmp_path / "sweep.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=old, extrasaction="ignore")
        w.writeheader()
        w.writerow(base)
    assert len(results.load_frame(str(tmp_path))) == 1
    assert results.load_frame(str(tmp_path), impl="custom").empty


# --- end to end: real gloo ranks, the kernel emulated --------------------------------------------

def test_side_by_side_with_refusals_verify_resume_and_views(cli_inproc, tmp_path):
    out = str(tmp_path / "run")
    env = {"COMMPROF_TEST_ONESHOT": "emulate:p2p_fail=4"}
    args = ["sweep", "--tp", "2,4", "--ops", "all_reduce", "--sizes", "16,24,4K", "--impl", "gloo,custom",
            "--verify", *FAST, "--out", out]
    res = cli_inproc(*args, env=env)
    assert res.returncode == 0, res.stderr
    got = rows(out)
    by = {(r["tp"], r["size_bytes"], r["impl"]) for r in got}
    # TP=2: custom runs at 16 B and 4 KiB; 24 B is not a multiple of 16 bytes, so only gloo's row.
    # TP=4: the probe found a bad pair, so no custom row at all; gloo's rows stand.
    assert by == {("2", "16", "gloo"), ("2", "16", "custom"), ("2", "24", "gloo"), ("2", "4096", "gloo"),
                  ("2", "4096", "custom"), ("4", "16", "gloo"), ("4", "24", "gloo"), ("4", "4096", "gloo")}
    assert all(r["wrong"] == "0" and r["fallback"] == "" for r in got)
    # Side by side: each custom row right after the backend's row of the same size.
    order = [(r["tp"], r["size_bytes"], r["impl"]) for r in got]
    assert order.index(("2", "16", "custom")) == order.index(("2", "16", "gloo")) + 1
    refused = meta(out)["custom_refused"]
    assert {(r["tp"], r["size_bytes"]) for r in refused} == {(2, 24), (4, 16), (4, 24), (4, 4096)}
    assert all(r["then"] == "only the gloo row" for r in refused)
    tp4 = next(r for r in refused if r["tp"] == 4)
    assert "group 0 (ranks 0-3)" in tp4["reason"] and "read back wrong data" in tp4["reason"]
    assert "not a multiple of 16 bytes" in next(r for r in refused if r["tp"] == 2)["reason"]
    assert "custom all_reduce refused at TP=4 for 3 size(s)" in res.stderr
    assert "custom" in res.stdout      # the table names the implementation

    # Resume: nothing left to measure (refused cells are re-decided, not re-measured).
    res = cli_inproc(*args, "--resume", env=env)
    assert res.returncode == 0, res.stderr
    assert len(rows(out)) == len(got)

    # Views: the baseline stays the backend's; gap and report put custom beside it.
    res = cli_inproc("gap", out)
    assert res.returncode == 0, res.stderr
    assert "custom one-shot vs gloo all_reduce TP=2 (eager, same sweep)" in res.stdout
    rep = str(tmp_path / "rep")
    res = cli_inproc("report", out, "--out", rep)
    assert res.returncode == 0, res.stderr
    md = open(os.path.join(rep, "report.md")).read()
    assert "custom one-shot vs gloo all_reduce TP=2" in md and os.path.exists(os.path.join(rep, "wire_vs_nccl.png"))


def test_custom_only_falls_back_per_size_and_verify_catches_every_wrong_call(cli_inproc, tmp_path):
    out = str(tmp_path / "run")
    res = cli_inproc("sweep", "--tp", "2", "--ops", "all_reduce", "--sizes", "24,4K", "--impl", "custom", "--verify",
                     *FAST, "--out", out, env={"COMMPROF_TEST_ONESHOT": "emulate:corrupt_rank=1"})
    # Rank 1's emulated results are off by one element on every call: 3 timed calls + the check.
    assert res.returncode == 1, res.stderr
    assert "failed the correctness check" in one_line_error(res)
    got = {r["size_bytes"]: r for r in rows(out)}
    assert got["4096"]["impl"] == "custom" and got["4096"]["wrong"] == "4" and got["4096"]["status"] == "WRONG"
    # 24 B: refused, so measured with gloo and marked why.
    assert got["24"]["impl"] == "gloo" and got["24"]["wrong"] == "0"
    assert "not a multiple of 16 bytes" in got["24"]["fallback"]
    assert meta(out)["custom_refused"][0]["then"] == "measured with gloo (column fallback)"
    assert "(custom refused)" in res.stdout


def test_impl_custom_without_a_gpu_is_one_line(cli_inproc, tmp_path):
    res = cli_inproc("sweep", "--tp", "2", "--impl", "nccl,custom", "--out", str(tmp_path / "x"))
    assert res.returncode == 3
    assert "--impl nccl: this run uses the gloo backend" in one_line_error(res)
    assert not os.path.exists(tmp_path / "x")
    res = cli_inproc("sweep", "--tp", "2", "--verify", "--out", str(tmp_path / "x"))
    assert res.returncode == 2 and "add --impl custom" in one_line_error(res)
