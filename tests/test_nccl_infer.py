"""nccl-tests logs under any file name: the collective told from the table itself (redop, root,
count vs size, busbw/algbw), one-GPU logs as TP=1, algbw cross-checked against size / time, and a
file that is not nccl-tests output refused before it is read whole (10 M rows too)."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from helpers import REPO, shared_data

from commprof.ingest.nccltests import MAX_ROWS, SNIFF_BYTES, import_nccl_tests, parse_text, read_nccl_tests
from commprof.model.errors import UsageError

FIXTURES = os.path.join(REPO, "tests", "data", "nccl-tests")

# file -> (nccl-tests collective, ranks), as the shared SOURCE.md says of each box
SHARED_LOGS = {
    "a100x8_dgx_allgather_superbench_legacy.txt": ("all_gather", 8),
    "a100x8_dgx_allreduce_superbench_legacy.txt": ("all_reduce", 8),
    "b200x16_2node_a4_allgather_dranet.txt": ("all_gather", 16),
    "b200x2_2node_1gpu_allgather_dranet.txt": ("all_gather", 2),
    "b200x2_nvlink5_allgather_dranet_trimmed.txt": ("all_gather", 2),
    "gb200x72_nvl72_rack_allreduce_coreweave.txt": ("all_reduce", 72),
    "h100x16_2node_allreduce_a3mega.txt": ("all_reduce", 16),
    "h100x8_sxm_nvls_allreduce_nccltests290.txt": ("all_reduce", 8),
    "h200x2_2node_1gpu_allreduce_dranet.txt": ("all_reduce", 2),
    "rtx4090x2_pcie_allreduce_kalavai.txt": ("all_reduce", 2),
    "rtx4090x4_pcie_allreduce_kalavai.txt": ("all_reduce", 4),
    "rtx4090x8_pcie_allreduce_chlc_blog.txt": ("all_reduce", 8),
    "rtx5090x4_pcie5_nop2p_allreduce_nccltests287.txt": ("all_reduce", 4),
    "rtx5090x8_pcie5_p2p_allreduce_aikitoria.txt": ("all_reduce", 8),
}


def _shared(name):
    return shared_data("nccl-tests", name)


def _run_info(d):
    m = json.loads(open(os.path.join(d, "meta.json")).read())
    (run,) = m["runs"]
    return run, m


@pytest.mark.parametrize("name", sorted(SHARED_LOGS))
def test_real_log_under_a_neutral_name_is_read_as_under_its_own(tmp_path, name):
    src = _shared(name)
    neutral = tmp_path / "nccl.log"
    shutil.copy(src, neutral)
    import_nccl_tests([src], str(tmp_path / "own"))
    import_nccl_tests([str(neutral)], str(tmp_path / "neutral"))
    own, _ = _run_info(tmp_path / "own")
    neu, meta = _run_info(tmp_path / "neutral")
    op, n = SHARED_LOGS[name]
    assert (neu["nccl_tests_binary"], neu["tp"]) == (f"{op}_perf", n)
    assert (own["nccl_tests_binary"], own["tp"]) == (neu["nccl_tests_binary"], neu["tp"])
    assert neu["collective_from"].startswith(("from the table", "the banner"))
    assert meta["collective_from"]


@pytest.mark.parametrize("name", ["all_reduce_perf_8xA100.log", "h100x8_sxm_nvls_allreduce_nccltests290.txt",
                                  "rtx4090x8_pcie_allreduce_chlc_blog.txt", "all_reduce_perf_8xA100_v3.json"])
def test_committed_logs_under_a_neutral_name(tmp_path, name):
    neutral = tmp_path / ("nccl.json" if name.endswith(".json") else "nccl.log")
    shutil.copy(os.path.join(FIXTURES, name), neutral)
    (sec,) = read_nccl_tests(str(neutral))
    assert sec.op_name == "all_reduce"


def _table(rows, header="size count type redop root time algbw busbw #wrong time algbw busbw #wrong", ranks=()):
    lines = [f"#  Rank {i:2d} Group  0 Pid {100 + i} on host-a device {i:2d} [0x{i:02x}] NVIDIA H100" for i in ranks]
    return "\n".join(lines + ["# " + header] + rows) + "\n"


def test_collective_from_the_table_alone():
    # 4 ranks, 1 MiB float: all_gather prints count per rank (65536 x 4 B x 4 = 1 MiB), busbw 3/4 of algbw
    ag = _table(["1048576 65536 float none -1 20.00 52.43 39.32 0 20.00 52.43 39.32 0"], ranks=range(4))
    assert parse_text("x.log", ag)[0].op_name == "all_gather"
    # reduce_scatter: a reduction with a count per rank
    rs = _table(["1048576 65536 float sum -1 20.00 52.43 39.32 0 20.00 52.43 39.32 0"], ranks=range(4))
    assert parse_text("x.log", rs)[0].op_name == "reduce_scatter"
    # all_reduce: whole-buffer count, busbw 2(n-1)/n = 1.5 x algbw
    ar = _table(["1048576 262144 float sum -1 20.00 52.43 78.64 0 20.00 52.43 78.64 0"], ranks=range(4))
    assert parse_text("x.log", ar)[0].op_name == "all_reduce"
    # broadcast: root 0, no reduction, busbw = algbw
    bc = _table(["1048576 262144 float none 0 20.00 52.43 52.43 0 20.00 52.43 52.43 0"], ranks=range(4))
    assert parse_text("x.log", bc)[0].op_name == "broadcast"
    # reduce: root 0 and a reduction
    rd = _table(["1048576 262144 float sum 0 20.00 52.43 52.43 0 20.00 52.43 52.43 0"], ranks=range(4))
    assert parse_text("x.log", rd)[0].op_name == "reduce"


def test_a_banner_the_table_contradicts_is_refused():
    text = "# Collective test starting: all_gather_perf\n" + _table(
        ["1048576 262144 float sum -1 20.00 52.43 78.64 0 20.00 52.43 78.64 0"], ranks=range(4))
    with pytest.raises(UsageError, match="says all_gather_perf but the table is all_reduce"):
        parse_text("x.log", text)


def test_a_table_that_fits_no_collective_says_what_it_saw(tmp_path):
    # a reduction with a count per rank but busbw = 1.5 x algbw: no collective prints that
    p = tmp_path / "nccl.log"
    p.write_text(_table(["1048576 65536 float sum -1 20.00 52.43 78.64 0 20.00 52.43 78.64 0"], ranks=range(4)))
    with pytest.raises(UsageError, match="cannot tell which collective this is: the table's columns fit no"):
        import_nccl_tests([str(p)], str(tmp_path / "out"))


def test_single_gpu_log_imports_as_tp1_with_its_huge_in_place_algbw(tmp_path, capsys):
    p = tmp_path / "nccl.log"
    shutil.copy(os.path.join(FIXTURES, "single_gpu_h100_handwritten.log"), p)
    out = import_nccl_tests([str(p)], str(tmp_path / "one"), in_place=True)
    run, _ = _run_info(out)
    assert run["tp"] == 1 and run["nccl_tests_binary"] == "all_reduce_perf"
    assert "nothing to compare" in run["one_rank"]
    err = capsys.readouterr().err
    assert err.count("nothing to compare") == 1
    # one rank beyond 100,000 GB/s in-place (as nccl-tests prints on one GPU) is kept too
    text = _table(["536870912 134217728 float sum -1 445.1 1206.20 0.00 0 4.90 109565.49 0.00 0"], ranks=[0])
    (sec,) = parse_text("nccl.log", text)
    assert sec.rows[0]["in-place"]["algbw"] == pytest.approx(109565.49)


def test_a_row_whose_algbw_is_not_size_over_time_is_flagged_with_its_line(tmp_path, capsys):
    good = "1048576 262144 float sum -1 20.00 52.43 78.64 0 20.00 52.43 78.64 0"
    bad = "2097152 524288 float sum -1 20.00 52.43 78.64 0 40.00 52.43 78.64 0"     # 2 MiB in 20 us is 104.86 GB/s
    p = tmp_path / "nccl.log"
    p.write_text(_table([good, bad], ranks=range(4)))
    out = import_nccl_tests([str(p)], str(tmp_path / "o"))
    run, meta = _run_info(out)
    (flag,) = meta["algbw_mismatch_rows"]
    assert flag.startswith("'nccl.log' line 7: out-of-place algbw 52.43 GB/s is not size / time") and "104.9" in flag
    assert "algbw is not size / time" in capsys.readouterr().err


def test_rounding_of_the_printed_digits_is_not_a_mismatch():
    # 1806.7 us for 512 MiB: 297.16 GB/s printed (the GB200 rack log): within the rounding
    text = _table(["536870912 134217728 float sum -1 1806.7 297.16 586.06 0 1835.9 292.43 576.74 0"],
                  ranks=[71])
    (sec,) = parse_text("nccl.log", text)
    assert "algbw_mismatch" not in sec.rows[0]["out-of-place"]


def test_not_nccl_tests_output_is_refused_before_it_is_read_whole():
    consumed = [0]

    def junk():
        while True:                                  # a file without end: must stop on its own
            consumed[0] += 1
            yield "x" * 99

    with pytest.raises(UsageError, match="not nccl-tests output .*nothing in its first 4 MiB"):
        parse_text("big.txt", junk())
    assert consumed[0] * 99 <= SNIFF_BYTES + 200


def test_a_long_line_without_newline_is_refused(tmp_path):
    p = tmp_path / "blob.log"
    p.write_bytes(b"1" * (3 << 20))
    with pytest.raises(UsageError, match="longer than"):
        read_nccl_tests(str(p))


def _gen(path, n):
    head = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
            "validation: 1 graph: 0\n"
            "#  Rank  0 Group  0 Pid 1 on host-a device  0 [0000:04:00] NVIDIA H100 80GB HBM3\n"
            "#  Rank  1 Group  0 Pid 2 on host-a device  1 [0000:05:00] NVIDIA H100 80GB HBM3\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
            "busbw #wrong\n")
    line = "     1048576        262144     float     sum      -1    20.00   52.43   52.43      0    20.00   52.43   52.43      0\n"
    with open(path, "w") as f:
        f.write(head)
        block = line * 10000
        for _ in range(n // 10000):
            f.write(block)


def test_a_million_row_log_is_refused_early_in_bounded_memory_and_time(tmp_path):
    """Once 1 M rows took 92 s and 3.5 GB. Now refused at row MAX_ROWS + 1, read line by line."""
    p = tmp_path / "big.log"
    _gen(p, 1_000_000)
    code = ("import resource, sys\n"
            "from commprof.ingest.nccltests import read_nccl_tests\n"
            "from commprof.model.errors import UsageError\n"
            "try:\n    read_nccl_tests(sys.argv[1])\nexcept UsageError as e:\n    print(e)\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": REPO})
    took = time.monotonic() - t0
    msg, rss_kb = res.stdout.strip().splitlines()
    assert f"more than {MAX_ROWS:,} data rows in one file" in msg and f"line {MAX_ROWS + 5}:" in msg
    assert int(rss_kb) < 1 << 20                     # under 1 GiB
    assert took < 60
