"""The engine's collectives in service (NCCL Inspector) beside the box's back-to-back figure
(issue 32): analysis/inengine.py, and gap and check showing it. The Inspector records are written
from the plugin's format (tests/data/nccl-inspector/SOURCE.md), the sweep a real nccl-tests log:
the ratios test the arithmetic and the wiring, not a real engine."""
import json
import os

import pytest
from helpers import REPO

from commprof.analysis.inengine import engine_vs_sweep, overhead_factor, pooled
from commprof.analysis.latency import loglog_lookup
from commprof.analysis.computemodel import CALIBRATION
from commprof.analysis.stepmodel import step_collectives
from commprof.model.models import get_model

TP8 = os.path.join(REPO, "tests", "data", "nccl-inspector", "a100x8_tp8_written")
A100 = os.path.join(REPO, "tests", "data", "nccl-tests", "all_reduce_perf_8xA100.log")


def _insp(op="all_reduce", n=8, size=16384, mean=80.0, calls=10, gpu="yes", rank=0):
    return {"kind": "coll", "op": op, "nranks": n, "size_bytes": size, "calls": calls, "time_us_mean": mean,
            "time_us_p50": mean, "gpu_timed": gpu, "comm": "0x1", "rank": rank}


def _sweep(sizes_us, op="all_reduce", tp=8, mode="graph"):
    return [{"op": op, "tp": tp, "size_bytes": s, "mode": mode, "group": 0, "impl": "nccl",
             "latency_us_rankavg_mean": us, "latency_us_mean": us} for s, us in sizes_us]


def test_exact_interpolated_and_beyond():
    sweep = _sweep([(8192, 20.0), (32768, 40.0)])
    rows = engine_vs_sweep([_insp(size=8192, mean=30.0), _insp(size=16384, mean=60.0), _insp(size=1 << 20)], sweep)
    by = {r["size_bytes"]: r for r in rows}
    assert by[8192]["how"] == "exact" and by[8192]["ratio"] == pytest.approx(1.5)
    want, how = loglog_lookup([8192.0, 32768.0], [20.0, 40.0], 16384.0)
    assert by[16384]["how"] == how == "interpolated" and by[16384]["ratio"] == pytest.approx(60.0 / want)
    assert by[1 << 20]["ratio"] is None and by[1 << 20]["how"].startswith("extrapolated: not compared")
    assert overhead_factor(rows) == pytest.approx((1.5 * 10 + 60.0 / want * 10) / 20)


def test_host_timed_never_used_and_unknown_only_without_gpu_rows():
    rows = [_insp(mean=100.0, calls=10), _insp(mean=500.0, calls=10, gpu="no", rank=1),
            _insp(mean=300.0, calls=10, gpu="unknown", rank=2)]
    p = pooled(rows)[("all_reduce", 8, 16384)]
    assert p["mean"] == 100.0 and p["timing"] == "GPU-timed" and p["calls"] == 10
    p = pooled(rows[1:])[("all_reduce", 8, 16384)]
    assert p["mean"] == 300.0 and p["timing"] == "timing unknown"


def test_calls_weighted_mean_and_the_graph_mode_preferred():
    sweep = _sweep([(16384, 50.0)], mode="eager") + _sweep([(16384, 25.0)], mode="graph")
    rows = engine_vs_sweep([_insp(mean=60.0, calls=30), _insp(mean=20.0, calls=10, rank=1)], sweep)
    assert rows[0]["in_engine_us_mean"] == pytest.approx(50.0) and rows[0]["sweep_mode"] == "graph"
    assert rows[0]["ratio"] == pytest.approx(2.0)


def test_other_tp_or_op_not_compared():
    rows = engine_vs_sweep([_insp(n=4), _insp(op="all_gather")], _sweep([(16384, 50.0)]))
    assert all(r["ratio"] is None and r["how"] == "no sweep rows of this op and TP" for r in rows)


def _records_mean(size):
    ts = []
    for name in sorted(os.listdir(TP8)):
        for line in open(os.path.join(TP8, name)):
            try:
                o = json.loads(line)
            except json.JSONDecodeError:
                continue
            p = o.get("coll_perf")
            if p and p["coll"] == "AllReduce" and p["coll_msg_size_bytes"] == size and p["coll_timing_source"] == "kernel_gpu":
                ts.append(p["coll_exec_time_us"])
    return sum(ts) / len(ts), len(ts)


@pytest.fixture
def dirs(cli_inproc, tmp_path):
    # the Inspector records are written (host nodeA), the A100 log real (host modal): one box by its label
    sw, insp = tmp_path / "a100", tmp_path / "insp"
    assert cli_inproc("import", "nccl-tests", A100, "--label", "a100", "--out", str(sw)).returncode == 0
    assert cli_inproc("import", "nccl-inspector", TP8, "--label", "a100", "--out", str(insp)).returncode == 0
    return str(sw), str(insp)


def test_gap_sets_the_engine_beside_the_nccl_tests_log(cli_inproc, dirs):
    res = cli_inproc("gap", *dirs)
    assert res.returncode == 0, res.stderr
    mean16, n16 = _records_mean(16384)
    # nccl-tests' out-of-place time at 16384 B in the log: 57.38 us
    want = mean16 / 57.38
    line = next(ln for ln in res.stdout.splitlines() if "all_reduce 16KiB TP=8" in ln)
    assert f"{n16} calls" in line and f"{want:.2f}x" in line and "back-to-back" in line
    assert "all_gather 32KiB TP=8: 40 calls" in res.stdout and "no sweep rows of this op and TP" in res.stdout


def test_check_item_i1_and_its_threshold(cli_inproc, dirs, tmp_path):
    out = tmp_path / "chk"
    cli_inproc("check", *dirs, "--out", str(out))
    items = {i["id"]: i for i in json.loads((out / "check.json").read_text())["items"]}
    m16, n16 = _records_mean(16384)
    m64, n64 = _records_mean(65536)
    factor = (m16 / 57.38 * n16 + m64 / 58.10 * n64) / (n16 + n64)
    assert items["I1"]["status"] == ("WARN" if factor > 1.5 else "PASS")
    assert f"{factor:.2f}x calls-weighted" in items["I1"]["value"]
    th = tmp_path / "th.toml"
    th.write_text("[in_engine]\nwarn_ratio = 3.0\n")
    cli_inproc("check", *dirs, "--thresholds", str(th), "--out", str(tmp_path / "chk2"))
    items = {i["id"]: i for i in json.loads((tmp_path / "chk2" / "check.json").read_text())["items"]}
    assert items["I1"]["status"] == "PASS"


def test_check_inspector_without_sweep_skips(cli_inproc, dirs, tmp_path):
    out = tmp_path / "chk"
    cli_inproc("check", dirs[1], "--out", str(out))
    items = {i["id"]: i for i in json.loads((out / "check.json").read_text())["items"]}
    assert items["I1"]["status"] == "SKIP" and "no sweep of this box" in items["I1"]["value"]


def _predict(cli_inproc, *args):
    res = cli_inproc("predict", "--gpu", "a100-sxm", "--tp", "8", "--batch", "1,8", "--json", *args)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_predict_multiplies_the_collectives_by_the_engine_factor(cli_inproc, dirs):
    sw, insp = dirs
    plain = _predict(cli_inproc, "--comm", sw)
    scaled = _predict(cli_inproc, "--comm", sw, "--comm-overhead-from", insp)
    m16, n16 = _records_mean(16384)
    m64, n64 = _records_mean(65536)
    factor = (m16 / 57.38 * n16 + m64 / 58.10 * n64) / (n16 + n64)
    per_call_ms = CALIBRATION["coll_graph_us"] / 1e3     # the engine term a back-to-back sweep gets, not in-service times
    for a, b in zip(plain["rows"], scaled["rows"]):
        loop_ms = a["comm_ms"] - a["collectives_per_step"] * per_call_ms
        assert b["comm_ms"] == pytest.approx(loop_ms * factor, rel=1e-9)
        assert b["compute_ms"] == a["compute_ms"] and b["comm"].endswith(f"x{factor:.2f} in-engine")
    assert any(n.startswith(f"--comm-overhead-from: {os.path.basename(sw)}'s collective prices x{factor:.2f}")
               for n in scaled["notes"])
    assert scaled["boxes"][0]["comm"]["in_engine_factor"] == pytest.approx(factor)


def test_predict_overhead_against_a_reference_profile(cli_inproc, dirs):
    from commprof.analysis.commsource import comm_source
    from commprof.analysis.inengine import factor_against, inspector_rows

    ref = comm_source("reference:nvlink3")
    f, rows = factor_against(inspector_rows(dirs[1]), ref, "graph")
    price = ref.price(8, "graph")
    ar = [r for r in rows if r["op"] == "all_reduce"]
    assert all(r["ratio"] == pytest.approx(r["in_engine_us_mean"] / price("all_reduce", r["size_bytes"])) for r in ar)
    scaled = _predict(cli_inproc, "--comm", "reference:nvlink3", "--comm-overhead-from", dirs[1])
    # in-service prices: the profile's times the factor, no custom all-reduce or per-call term on top
    row = scaled["rows"][0]
    sites = step_collectives(get_model(scaled["model"]["name"]), 8, row["batch"], row["batch"], "bf16")
    assert row["comm_ms"] == pytest.approx(sum(price(s.op, s.size_bytes) for s in sites) * f / 1e3, rel=1e-9)


def test_predict_overhead_from_a_wrong_dir_one_line(cli_inproc, dirs):
    res = cli_inproc("predict", "--gpu", "a100-sxm", "--comm", dirs[0], "--tp", "8", "--comm-overhead-from", dirs[0])
    assert res.returncode == 2 and "not an 'import nccl-inspector' dir" in res.stderr
