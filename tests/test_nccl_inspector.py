"""commprof import nccl-inspector (issue 32): NCCL Inspector's JSON records as rows. The fixtures
are written from the plugin's documented format (tests/data/nccl-inspector/SOURCE.md): these tests
check that the reader is consistent with that format, not what any real box does."""
import gzip
import json
import os

import pytest
from helpers import REPO

from commprof.ingest.ncclinspector import (MAX_OBJECT, comm_rows, import_nccl_inspector, nccl_tests_size,
                                           read_inspector, rows)
from commprof.model.errors import UsageError

DATA = os.path.join(REPO, "tests", "data", "nccl-inspector")
TP8 = os.path.join(DATA, "a100x8_tp8_written")


def _records(path):
    for name in sorted(os.listdir(path)):
        for line in open(os.path.join(path, name)):
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                pass


def test_dir_rows_match_a_plain_count_of_the_records():
    acc = read_inspector([TP8])
    table = rows(acc)
    recs = list(_records(TP8))
    assert acc.records == len(recs) == 8 * 35 + 2 and acc.truncated == 1 and acc.p2p_records == 1
    ar16 = [r for r in table if r["op"] == "all_reduce" and r["msg_size_bytes"] == 16384 and r["gpu_timed"] == "yes"]
    assert len(ar16) == 8 and all(r["calls"] == 20 and r["nranks"] == 8 for r in ar16)
    # rank 3's median, from the records themselves
    t3 = sorted(o["coll_perf"]["coll_exec_time_us"] for o in recs if "coll_perf" in o and o["header"]["rank"] == 3
                and o["coll_perf"]["coll"] == "AllReduce" and o["coll_perf"]["coll_msg_size_bytes"] == 16384)
    r3 = next(r for r in ar16 if r["rank"] == 3)
    assert r3["time_us_p50"] == (t3[9] + t3[10]) / 2 and r3["time_us_min"] == t3[0] and r3["time_us_max"] == t3[-1]
    # the one host-timed call is its own row, said so
    cpu = [r for r in table if r["timing_source"] == "kernel_cpu"]
    assert len(cpu) == 1 and cpu[0]["gpu_timed"] == "no" and cpu[0]["calls"] == 1 and cpu[0]["rank"] == 0
    # all_gather: NCCL counts one rank's part; size_bytes is nccl-tests' gathered total
    ag = [r for r in table if r["op"] == "all_gather"]
    assert {r["msg_size_bytes"] for r in ag} == {4096} and {r["size_bytes"] for r in ag} == {32768}
    send = [r for r in table if r["kind"] == "p2p"]
    assert len(send) == 1 and send[0]["op"] == "send" and send[0]["peer"] == 1


def test_bandwidths_are_the_records_own_and_agree_with_the_bus_factor():
    for r in rows(read_inspector([TP8])):
        if r["kind"] == "coll" and r["op"] == "all_reduce":
            assert r["busbw_gbps_p50"] == pytest.approx(r["algbw_gbps_p50"] * 2 * 7 / 8, rel=1e-5)


def test_comm_rows_one_line_per_communicator():
    comms = comm_rows(rows(read_inspector([TP8])))
    assert len(comms) == 1
    c = comms[0]
    assert c["ranks_seen"] == 8 and c["nranks"] == 8 and c["collectives"] == 8 * 35 + 1
    assert c["summary"].startswith("communicator 0x5a1e0c0ffee8 'TP group 0' of 8 rank(s) on 1 node(s): 8 rank(s)")
    assert "241 all_reduce" in c["summary"] and "40 all_gather" in c["summary"]


def test_pretty_printed_older_records_without_timing_source():
    table = rows(read_inspector([os.path.join(DATA, "pretty_no_timing_source.json")]))
    assert len(table) == 1
    r = table[0]
    assert r["calls"] == 2 and r["timing_source"] == "unknown" and r["gpu_timed"] == "unknown"
    assert r["comm_name"] == "" and r["size_bytes"] == 1 << 34 and r["time_us_p50"] == (61974 + 62010) / 2


def test_gz_file_reads_the_same(tmp_path):
    src = os.path.join(TP8, "nodeA-pid41002.log")
    gz = tmp_path / "nodeA-pid41002.log.gz"
    gz.write_bytes(gzip.compress(open(src, "rb").read()))
    assert rows(read_inspector([str(gz)])) == rows(read_inspector([src]))


def test_nccl_tests_size_convention():
    assert nccl_tests_size("all_reduce", 16384, 8) == 16384
    assert nccl_tests_size("reduce_scatter", 2048, 4) == 8192


def test_cli_import_show_and_files(cli_inproc, tmp_path):
    out = tmp_path / "insp"
    res = cli_inproc("import", "nccl-inspector", TP8, "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "all_reduce 16KiB on 8 rank(s): 160 calls over 8 rank dump(s)" in res.stdout
    assert "all_reduce 16KiB on 8 rank(s): 1 calls over 1 rank dump(s), median 140 us" in res.stdout
    assert "281 of 282 record(s) GPU-timed" in res.stdout
    assert "1 unfinished record(s)" in res.stdout
    meta = json.loads((out / "meta.json").read_text())
    assert meta["import_kind"] == "nccl-inspector" and meta["nccl_inspector"]["records"] == 282
    assert len(meta["source_files"]) == 8
    res = cli_inproc("show", str(out))
    assert res.returncode == 0 and "communicator 0x5a1e0c0ffee8" in res.stdout
    from commprof.results import load

    t = load(str(out)).tables["nccl_inspector"]
    assert set(t["comm"]) == {"0x5a1e0c0ffee8"} and t["calls"].sum() == 282


def test_bad_input_one_line(cli_inproc, tmp_path):
    b = tmp_path / "bin.log"
    b.write_bytes(b"\x7fELF\x00\x00\x00" * 100)
    res = cli_inproc("import", "nccl-inspector", str(b), "--out", str(tmp_path / "o1"))
    assert res.returncode == 2 and "binary file" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = cli_inproc("import", "nccl-inspector", os.path.join(DATA, "other_tool_kineto_like.json"),
                     "--out", str(tmp_path / "o2"))
    assert res.returncode == 2 and "not NCCL Inspector records" in res.stderr and "traceEvents" in res.stderr
    t = tmp_path / "nccl.log"
    t.write_text("host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n")
    res = cli_inproc("import", "nccl-inspector", str(t), "--out", str(tmp_path / "o3"))
    assert res.returncode == 2 and "not JSON" in res.stderr
    empty = tmp_path / "emptydir"
    empty.mkdir()
    res = cli_inproc("import", "nccl-inspector", str(empty), "--out", str(tmp_path / "o4"))
    assert res.returncode == 2 and "no NCCL Inspector file" in res.stderr
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_no_record_exits_9(cli_inproc, tmp_path):
    p = tmp_path / "host-pid1.log"
    p.write_text("\n\n")
    res = cli_inproc("import", "nccl-inspector", str(p), "--out", str(tmp_path / "o"))
    assert res.returncode == 9 and "no NCCL Inspector record" in res.stderr


def test_huge_single_value_refused_bounded(tmp_path):
    p = tmp_path / "big.json"
    with open(p, "w") as f:
        f.write('{"traceEvents": [\n')
        for i in range(MAX_OBJECT // 40 + 10):
            f.write(f'  {{"ph": "X", "name": "k{i}", "dur": 1}},\n')
        f.write('  {}\n]}\n')
    with pytest.raises(UsageError, match="longer than 1 MiB"):
        read_inspector([str(p)])


def test_a_large_dump_is_streamed(tmp_path):
    """~60 MB of records (200k): aggregated as they come, memory bounded."""
    import resource

    line = open(os.path.join(TP8, "nodeA-pid41001.log")).readline()
    p = tmp_path / "host-pid9.log"
    with open(p, "w") as f:
        for _ in range(200):
            f.write(line * 1000)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    acc = read_inspector([str(p)])
    assert acc.records == 200_000 and len(acc.rows) == 1
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024


def test_import_function_refuses_no_paths(tmp_path):
    with pytest.raises(UsageError):
        import_nccl_inspector([], str(tmp_path / "o"))
