"""``commprof import nccl-tests``: nccl-tests text and -J JSON output as a sweep results dir.

The fixtures under tests/data/nccl-tests/ are real published output (each names its source on its
first line) except the JSON file, which is built to nccl-tests' -J schema and says so, and the
malformed log. The inline logs below are small layouts written for the tests, following the column
formats printed by nccl-tests' src/util.cu and older releases.
"""
import hashlib
import json
import os

import pandas as pd
import pytest
from helpers import one_line_error

from commprof.verbs import import_
from commprof.ingest import nccltests
from commprof import results
from commprof.model.errors import EXIT_USAGE, UsageError
from commprof.model.fileio import shown_path
from commprof.analysis.latency import CommTable

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "nccl-tests")
AR8 = os.path.join(DATA, "all_reduce_perf_8xA100.log")
AG2 = os.path.join(DATA, "all_gather_perf_2gpu_bf16.log")
JSON8 = os.path.join(DATA, "all_reduce_perf_8xA100_v3.json")
BAD = os.path.join(DATA, "all_reduce_perf_malformed.log")


def _import(tmp_path, *paths, name="out", **kw):
    out = str(tmp_path / name)
    assert nccltests.import_nccl_tests(list(paths), out, **kw) == out
    return out, results.load_frame(out), results.read_meta(out)


def test_all_reduce_8_gpus_text(tmp_path):
    out, df, meta = _import(tmp_path, AR8)
    assert len(df) == 12
    assert set(df["op"]) == {"all_reduce"} and set(df["tp"]) == {8} and set(df["mode"]) == {"eager"}
    assert list(df["size_bytes"]) == [2048 << k for k in range(12)]
    r = df.set_index("size_bytes")
    assert r.loc[2048, "busbw_gbps"] == 0.06 and r.loc[4194304, "busbw_gbps"] == 60.98
    assert r.loc[4194304, "algbw_gbps"] == 34.85 and r.loc[1048576, "latency_us_p50"] == 69.33
    for c in ("latency_us_mean", "latency_us_rankavg_mean"):
        assert r.loc[1048576, c] == 69.33          # the reported average
    for c in ("latency_us_p95", "latency_us_p99", "latency_us_min", "latency_us_max"):
        assert r[c].isna().all()                   # not reported: empty, never a fake percentile band
    assert set(df["latency_stat"]) == {"avg (nccl-tests)"} and meta["latency_stat"] == "avg (nccl-tests)"
    assert set(df["site"]) == {"out-of-place"} and (df["wrong"] == 0).all() and set(df["status"]) == {"ok"}
    assert set(df["wrong_out_of_place"]) == {"0"} and set(df["wrong_in_place"]) == {"0"} and meta["wrong_rows"] == []
    assert set(df["backend"]) == {"nccl"} and set(df["clock"]) == {"nccl-tests"} and set(df["dtype"]) == {"fp32"}
    assert set(df["hosts"]) == {"modal"} and set(df["iters"]) == {20} and set(df["warmup"]) == {1}
    assert meta["kind"] == "imported" and meta["backend"] == "nccl" and meta["hosts"] == ["modal"]
    assert meta["gpus"] == ["NVIDIA A100-SXM4-40GB"]
    assert meta["nccl_tests_version"] == "2.17.9" and meta["nccl_version"] == "2.29.3"
    assert "not a percentile" in meta["columns"]["latency_us_*"] and meta["start_time"] and meta["command"]
    src, = meta["source_files"]
    with open(AR8, "rb") as f:
        assert src == {"path": shown_path(AR8), "sha256": hashlib.sha256(f.read()).hexdigest(),
                       "format": "text", "runs": 1}
    run, = meta["runs"]
    assert run["tp_from"] == "rank lines; busbw/algbw agrees" and len(run["ranks"]) == 8 and run["reported_avg_busbw"] == "32.1532"
    # usable wherever a sweep is: trace --predict --comm-from
    assert CommTable(out).latency_us("all_reduce", 8, "eager", 10240) == pytest.approx(57.2, abs=0.2)


def test_in_place_rows_have_their_own_mode(tmp_path):
    _, df, meta = _import(tmp_path, AR8, in_place=True)
    assert len(df) == 24 and set(df["mode"]) == {"eager", "eager-in-place"}
    ip = df[df["mode"] == "eager-in-place"].set_index("size_bytes")
    assert ip.loc[1048576, "latency_us_p50"] == 66.46 and ip.loc[1048576, "site"] == "in-place"
    assert meta["in_place_rows"] is True


def test_all_gather_without_rank_lines(tmp_path):
    _, df, meta = _import(tmp_path, AG2)
    assert len(df) == 7 and set(df["op"]) == {"all_gather"} and set(df["dtype"]) == {"bf16"}
    assert set(df["tp"]) == {2}                     # from busbw/algbw = (n-1)/n
    assert meta["runs"][0]["tp_from"].startswith("busbw/algbw ratio")
    r = df.set_index("size_bytes")
    assert r.loc[16777216, "busbw_gbps"] == 77.10 and r.loc[117440512, "latency_us_p50"] == 490.8
    assert r.loc[16777216, "count"] == 4194304
    assert meta["hosts"] == [] and meta["gpus"][0].startswith("unknown")


def test_json_output(tmp_path):
    out, df, meta = _import(tmp_path, JSON8, in_place=True)
    oop = df[df["mode"] == "eager"].set_index("size_bytes")
    assert list(oop.index) == [2048, 4096, 8192, 16384] and set(df["tp"]) == {8}
    assert set(df["hosts"]) == {"modal"} and meta["nccl_version"] == "2.29.3"
    assert meta["runs"][0]["json_version"] == 3 and meta["source_files"][0]["format"] == "json"
    # -I per-iteration statistics where the file has them, the reported average elsewhere
    assert oop.loc[2048, "latency_us_p50"] == 55.2 and oop.loc[2048, "latency_us_p95"] == 58.9
    assert oop.loc[2048, "latency_us_p99"] == 61.3 and oop.loc[2048, "latency_us_rankavg_mean"] == 55.42
    assert oop.loc[2048, "latency_stat"] == "p50 (nccl-tests -I)"
    assert oop.loc[8192, "latency_us_p50"] == 57.13 and oop.loc[16384, "busbw_gbps"] == 0.5
    assert len(df[df["mode"] == "eager-in-place"]) == 4
    assert CommTable(out).latency_us("all_reduce", 8, "eager", 4096) == pytest.approx(56.11)


def test_several_files_into_one_dir(tmp_path):
    _, df, meta = _import(tmp_path, AR8, AG2)
    assert set(zip(df["op"], df["tp"])) == {("all_reduce", 8), ("all_gather", 2)}
    assert len(meta["source_files"]) == 2 and len(meta["runs"]) == 2


def test_malformed_log_names_file_and_line(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(UsageError) as e:
        nccltests.import_nccl_tests([BAD], str(out))
    assert str(e.value).startswith("'all_reduce_perf_malformed.log' line 12: not nccl-tests output "
                                   "(expected a data line with size, count, type")
    assert e.value.exit_code == EXIT_USAGE and not out.exists()


@pytest.mark.parametrize("text, line", [
    ("size,latency_us\n1024,3.2\n", 1),
    ("# just a comment\n\nhello world\n", 3),
    ("", 1),
])
def test_not_nccl_tests_output(tmp_path, text, line):
    p = tmp_path / "x.log"
    p.write_text(text)
    with pytest.raises(UsageError, match=rf"^'x.log' line {line}: not nccl-tests output"):
        nccltests.import_nccl_tests([str(p)], str(tmp_path / "out"))


def test_refuses_an_output_dir_with_files(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(UsageError, match="already holds files"):
        nccltests.import_nccl_tests([AR8], str(out))
    with pytest.raises(UsageError, match="file not found"):
        nccltests.import_nccl_tests([str(tmp_path / "missing.log")], str(tmp_path / "o2"))


def test_run_import_prints_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert import_.run(import_.ImportConfig("nccl-tests", [AR8, AG2])) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("imported 19 rows (all_gather, all_reduce; tp 2, 8; eager) from 2 file(s) into results/runs")
    made, = os.listdir(tmp_path / "results" / "runs")
    assert made.endswith("-import-nccl-tests")
    with pytest.raises(UsageError, match="unknown kind 'rccl-tests'"):
        import_.run(import_.ImportConfig("rccl-tests", [AR8], str(tmp_path / "o")))


# --- layouts of other nccl-tests versions and launchers (small inline logs) -------------------------

def _one(tmp_path, text, name="log.txt", **kw):
    p = tmp_path / name
    p.write_text(text)
    return _import(tmp_path, str(p), name="out-" + name, **kw)


def test_old_layout_without_root_and_error_column(tmp_path):
    text = """# nThread 1 nGpus 2 minBytes 8 maxBytes 65536 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  12345 on      node1 device  0 [0x1a] Tesla V100-SXM2-16GB
#   Rank  1 Pid  12345 on      node1 device  1 [0x1b] Tesla V100-SXM2-16GB
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        4096          1024   float     sum    12.35    0.33    0.33  0e+00    12.11    0.34    0.34  0e+00
       65536         16384   float     sum    15.02    4.36    4.36  5e-07    14.80    4.43    4.43  5e-07
"""
    _, df, meta = _one(tmp_path, text, name="all_reduce_v100.txt")
    assert list(df["size_bytes"]) == [4096, 65536] and set(df["tp"]) == {2} and set(df["op"]) == {"all_reduce"}
    # an old 'error' column is a deviation, not a count: without the footer the rows stay unchecked
    assert df["wrong"].isna().all() and "a deviation, not a count" in df["site"].iloc[1]     # unknown, never 0
    assert set(df["status"]) == {"unchecked"} and set(df["wrong_out_of_place"]) == {""}
    assert meta["gpus"] == ["Tesla V100-SXM2-16GB"]


def test_mpirun_tags_nccl_info_lines_graph_and_several_runs(tmp_path):
    text = """[1,0]<stdout>:# nccl-tests version 2.19.6 nccl-headers=22705 nccl-library=22705
[1,0]<stdout>:# Collective test starting: all_reduce_perf_mpi
[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 5 iters: 100 agg iters: 1 validation: 1 graph: 10
[1,0]<stdout>:#  Rank  0 Group  0 Pid   2001 on      boxA device  0 [0000:18:00] NVIDIA H100 80GB HBM3
[1,0]<stdout>:#  Rank  1 Group  0 Pid   2002 on      boxA device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
boxA:2001:2001 [0] NCCL INFO NCCL version 2.27.5+cuda12.9
[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
[1,0]<stdout>:        1024           256     float     sum      -1     5.81    0.18    0.18      0     5.79    0.18    0.18      0
[1,0]<stdout>:        2048           512     float     sum      -1     5.86    0.35    0.35      0     5.84    0.35    0.35      0
[1,0]<stdout>:# Collective test concluded: all_reduce_perf_mpi
 0: # Collective test starting: alltoall_perf
 0: # nThread 1 nGpus 2 minBytes 4096 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
 0: #  Rank  0 Group  0 Pid   3001 on      boxA device  0 [0000:18:00] NVIDIA H100 80GB HBM3
 0: #  Rank  1 Group  0 Pid   3001 on      boxA device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
 0: #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
 0:         4096           512     float    none      -1    10.40    0.39    0.20      0    10.38    0.39    0.20    N/A
"""
    _, df, meta = _one(tmp_path, text, in_place=True)
    ar = df[df["op"] == "all_reduce"]
    assert set(ar["mode"]) == {"graph", "graph-in-place"} and set(ar["tp"]) == {2}
    a2a = df[df["op"] == "all_to_all"]
    assert set(a2a["mode"]) == {"eager", "eager-in-place"} and set(a2a["tp"]) == {2}
    ip = a2a[a2a["mode"] == "eager-in-place"].iloc[0]
    assert ip["wrong"] != ip["wrong"] and "N/A" in ip["site"] and ip["status"] == "unchecked"    # NaN: unknown
    assert ip["wrong_in_place"] == ""
    oop = a2a[a2a["mode"] == "eager"].iloc[0]
    assert oop["status"] == "ok" and oop["wrong_out_of_place"] == "0" and oop["wrong_in_place"] == ""
    assert [r["nccl_tests_binary"] for r in meta["runs"]] == ["all_reduce_perf", "alltoall_perf"]
    assert meta["runs"][0]["graph_launches"] == 10 and meta["nccl_version"] == "2.27.5"


def test_per_iteration_columns_and_timestamps(tmp_path):
    text = """# Collective test starting: broadcast_perf
# nThread 1 nGpus 4 minBytes 8192 maxBytes 8192 step: 2(factor) warmup iters: 1 iters: 50 agg iters: 1 validation: 1 graph: 0 unalign: 0
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%
        8192          2048     float    none       0    14.20    0.58    0.58       0    13.10    21.40    19.80     7.21    14.05    0.58    0.58       0    13.00    20.90    19.10     6.80
"""
    _, df, _ = _one(tmp_path, text)
    r = df.iloc[0]
    assert r["op"] == "broadcast" and r["tp"] == 4            # nThread x nGpus, no rank lines
    assert (r["latency_us_p50"], r["latency_us_min"], r["latency_us_max"], r["latency_us_p99"]) == (14.2, 13.1, 21.4, 19.8)
    assert r["latency_us_rankavg_mean"] == 14.2

    text2 = """# Collective test starting: reduce_scatter_perf
#  Rank  0 Group  0 Pid 11 on h device  0 [0000:01:00] NVIDIA L40S
#  Rank  1 Group  0 Pid 11 on h device  1 [0000:02:00] NVIDIA L40S
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong            timestamp
        8192          1024     float     sum      -1    20.10    0.41    0.20       0    19.90    0.41    0.21       0  2026-03-01 10:11:12
"""
    _, df, _ = _one(tmp_path, text2, name="t2.txt")
    assert df.iloc[0]["op"] == "reduce_scatter" and df.iloc[0]["latency_us_p50"] == 20.1


def test_unsupported_or_unnamed_collective(tmp_path):
    line = "     1048576        262144     float     sum      -1    20.00   52.43   52.43      0    20.00   52.43   52.43      0\n"
    p = tmp_path / "s.log"
    p.write_text("# Collective test starting: sendrecv_perf\n" + line)
    with pytest.raises(UsageError, match="sendrecv_perf is not imported"):
        nccltests.import_nccl_tests([str(p)], str(tmp_path / "o1"))
    p = tmp_path / "mystery.log"                               # the table tells it: sum, root -1, whole count
    p.write_text(line)
    _, df, meta = _import(tmp_path, str(p), name="o2")
    assert set(df["op"]) == {"all_reduce"} and meta["runs"][0]["collective_from"].startswith("from the table")
    p = tmp_path / "mystery2.log"                              # an unknown type: all_reduce or reduce_scatter
    p.write_text(line.replace("float", "fp4x2").replace("52.43   52.43", " 0.40    0.40"))
    with pytest.raises(UsageError, match="cannot tell which collective.*all_reduce or reduce_scatter"):
        nccltests.import_nccl_tests([str(p)], str(tmp_path / "o2b"))
    p = tmp_path / "h100_allreduce.log"                        # a file name is enough of a hint
    p.write_text(line)
    _, df, meta = _import(tmp_path, str(p), name="o3")
    assert set(df["op"]) == {"all_reduce"} and set(df["tp"]) == {2}


def _rank_log(tmp_path, rank_lines, ranks, name="all_reduce_perf_rack.log", nthreads=1, ngpus=1,
              points=((1048576, 20.0), (1073741824, 600.0))):
    """A 2.1x log whose busbw/algbw says ``ranks``, printing only ``rank_lines``."""
    factor = 2 * (ranks - 1) / ranks
    lines = [f"# nThread {nthreads} nGpus {ngpus} minBytes 1048576 maxBytes 1073741824 step: 1024(factor) warmup iters: 5 "
             "iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {9000 + r:6d} on    rack-n{r // 4:02d} device {r % 4:2d} [0x01] NVIDIA GB200"
              for r in rank_lines]
    lines += ["#", "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
              "busbw #wrong"]
    for size, alg in points:
        t = size / alg / 1e3
        lines.append(f"{size:12d} {size // 4:13d}     float     sum      -1 {t:8.2f} {alg:7.2f} {alg * factor:7.2f}      0 "
                     f"{t:8.2f} {alg:7.2f} {alg * factor:7.2f}      0")
    p = tmp_path / name
    p.write_text("\n".join(lines + ["# Out of bounds values : 0 OK", "#"]) + "\n")
    return str(p)


def test_a_log_with_only_its_last_rank_line_is_not_tp1(tmp_path):
    """A GB200 NVL72 rack log prints only 'Rank 71': the highest rank index + 1 and busbw/algbw
    both say 72 ranks."""
    out = str(tmp_path / "o")
    nccltests.import_nccl_tests([_rank_log(tmp_path, [71], 72)], out)
    df = pd.read_csv(os.path.join(out, "sweep.csv"))
    assert set(df["tp"]) == {72}
    run = json.loads(open(os.path.join(out, "meta.json")).read())["runs"][0]
    assert run["tp_from"].startswith("highest rank index + 1 (the log prints 1 of its 72 rank lines")
    assert "busbw/algbw agrees" in run["tp_from"]


@pytest.mark.parametrize("rank_lines,ranks,nthreads,ngpus,says", [
    ([0, 1, 2, 3], 8, 1, 1, "the rank lines say 4 ranks, busbw/algbw says 8"),
    ([0, 1, 2, 3, 4, 5], 6, 1, 4, "not a multiple of nThread x nGpus = 4"),
])
def test_rank_signals_that_disagree_are_refused(cli_inproc, tmp_path, rank_lines, ranks, nthreads, ngpus, says):
    log = _rank_log(tmp_path, rank_lines, ranks, nthreads=nthreads, ngpus=ngpus)
    res = cli_inproc("import", "nccl-tests", log, "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "the rank count is ambiguous" in one_line_error(res) and says in res.stderr
