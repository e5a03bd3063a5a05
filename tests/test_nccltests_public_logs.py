"""Excerpts of real nccl-tests output from public threads (tests/data/nccl-tests, SOURCE.md section
"Excerpts of public threads"), each copied to the neutral name ``nccl.log``, imported and judged:
the collective, rank and node counts and class as the thread describes the box, or one line refusing
it where the log cannot be one run (the separate runs of a build without MPI=1 interleaved)."""
import json
import os
import shutil

import pytest
from helpers import REPO

from commprof.ingest.nccltests import import_nccl_tests, read_nccl_tests
from commprof.model.errors import UsageError

FIXTURES = os.path.join(REPO, "tests", "data", "nccl-tests")
NOT_FAIL = ("PASS", "WARN", "INSUFFICIENT EVIDENCE")
ANY = NOT_FAIL + ("FAIL",)

# file -> (collective as imported, ranks, nodes, class, verdicts allowed), as the thread describes the box
IMPORTED = {
    # one RTX 5090, alltoall_perf: no banner, and alltoall and all_gather print the same table (taken as
    # all_gather, said in collective_from); one rank: TP=1, nothing to compare
    "rtx5090x1_alltoall_nccltests287.txt": ("all_gather", 1, 1, None, ("INSUFFICIENT EVIDENCE",)),
    # two DGX Spark, one GB10 each, the network between them (nccl-tests 2.20.0)
    "gb10x2_2node_allreduce_sparkplaybooks103.txt": ("all_reduce", 2, 2, "multinode", NOT_FAIL),
    "gb10x2_2node_allgather_sparkplaybooks25.txt": ("all_gather", 2, 2, "multinode", NOT_FAIL),
    # 2 nodes x 1 H100, no rank lines in the paste: 2 ranks from busbw/algbw; hosts not told
    "h100x2_2node_1gpu_allreduce_nccltests232.txt": ("all_reduce", 2, 1, "unknown", NOT_FAIL),
    # 2 hosts x 1 V100 PCIe, old-layout broadcast with validation off
    "v100x2_2node_broadcast_nccltests82.txt": ("broadcast", 2, 2, "multinode", NOT_FAIL),
    # 2 nodes x 4 GPUs, reduce_scatter, no rank lines, busbw 0.00 at every size: 8 ranks from size / count
    "gpux8_2node_reducescatter_nccltests128.txt": ("reduce_scatter", 8, 1, "unknown", NOT_FAIL),
    # rows of two redops (max, then min) in one table, no header: every row's busbw/algbw, read with
    # its two-decimal rounding, fits 16 ranks and no other count
    "allreduce_opall_maxmin_nccltests167.txt": ("all_reduce", 16, 1, "unknown", NOT_FAIL),
    # 8x V100 SXM2 (p3dn.24xlarge): NVLink cube-mesh, no NVSwitch (before: nvswitch). Verdict not pinned:
    # one 8 B row of a 2019 NCCL, judged by fixed proposed thresholds
    "v100x8_p3dn_allreduce_errorcol_nccl318.txt": ("all_reduce", 8, 1, "nvlink", ANY),
}
# file -> what the one-line refusal must say
REFUSED = {
    # nccl-tests built without MPI=1 under mpirun: each process is "Rank 0" of a test of its own
    "refused/v100x2_2node_nompi_allreduce_nccltests107.txt": "line 8: Rank 0 is printed by two processes",
    # the same, two 2-GPU runs on two hosts: their rows interleaved, two footers
    "refused/twohosts_allreduce_interleaved_nompi_nccltests182.txt": "line 10: a data line after the table's "
                                                             "'# Avg bus bandwidth' footer (line 7)",
    # rows of 8 B to 2 KiB, no rank lines, no header: the rank count is not in the excerpt
    "refused/gpux16_2node_allreduce_c0_aksrdma30.txt": "cannot tell the number of ranks",
    # 128 GPUs, no rank lines: 2.15/1.08 at two decimals fits any count from 88 up (before: imported as TP=216)
    "refused/gpux128_allreduce_errorcol_nccltests176.txt": "cannot tell the number of ranks",
    # a 2018 layout (no redop, no root; busbw = algbw = size / 2 / time on 2 GPUs): no collective fits
    "refused/rtx2080tix2_nvlink_oldlayout_nccltests44.txt": "cannot tell which collective this is",
}


def _neutral(tmp_path, name):
    p = tmp_path / "nccl.log"
    shutil.copy(os.path.join(FIXTURES, name), p)
    return str(p)


def test_every_public_excerpt_is_in_a_table():
    src = open(os.path.join(FIXTURES, "SOURCE.md"), encoding="utf-8").read()
    part = src.split("## Excerpts of public threads", 1)[1]
    listed = {line.split("|")[1].strip() for line in part.splitlines() if line.startswith("| ") and ".txt" in line}
    assert listed == set(IMPORTED) | set(REFUSED)


@pytest.mark.parametrize("name", sorted(IMPORTED))
def test_public_excerpt_under_a_neutral_name_is_judged_as_its_thread_says(cli_inproc, tmp_path, name):
    _, ranks, nodes, cls, verdicts = IMPORTED[name]
    out = str(tmp_path / "imp")
    import_nccl_tests([_neutral(tmp_path, name)], out)
    res = cli_inproc("check", out, "--out", str(tmp_path / "chk"))
    data = json.loads((tmp_path / "chk" / "check.json").read_text())
    ic = data["interconnect"]
    assert (ic["ranks"], ic["nodes"]) == (ranks, nodes), ic
    if cls:
        assert ic["cls"] == cls, ic
    assert data["verdict"] in verdicts, [(i["id"], i["status"], i["value"]) for i in data["items"]]
    assert {"PASS": 0, "WARN": 0, "FAIL": 8, "INSUFFICIENT EVIDENCE": 9}[data["verdict"]] == res.returncode


@pytest.mark.parametrize("name", sorted(IMPORTED))
def test_public_excerpt_collective(tmp_path, name):
    op = IMPORTED[name][0]
    secs = read_nccl_tests(_neutral(tmp_path, name))
    assert [s.op_name for s in secs] == [op]


def test_reduce_scatter_without_rank_lines_takes_its_ranks_from_size_over_count(tmp_path):
    """busbw/algbw is 0.00/0.00 at every size of the nccl-tests#128 excerpt, and it has no rank lines:
    its count per rank (128 B, 4 floats) says 8 ranks (before: refused, 'cannot tell the number of ranks')."""
    out = str(tmp_path / "imp")
    import_nccl_tests([_neutral(tmp_path, "gpux8_2node_reducescatter_nccltests128.txt")], out)
    assert "size / (count x type size)" in open(os.path.join(out, "meta.json")).read()


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_separate_runs_interleaved_are_refused_in_one_line_naming_why(cli_inproc, tmp_path, name):
    """Before: nccl-tests#182 imported as one TP=2 run of 4 rows mixing two hosts' runs (two rows per
    size); nccl-tests#107 refused as 'not nccl-tests output'."""
    with pytest.raises(UsageError) as e:
        import_nccl_tests([_neutral(tmp_path, name)], str(tmp_path / "imp"))
    msg = str(e.value)
    assert REFUSED[name] in msg and "\n" not in msg
    if "nompi" in name:
        assert "without MPI=1" in msg and "not nccl-tests output" not in msg
    res = cli_inproc("import", "nccl-tests", str(tmp_path / "nccl.log"), "--out", str(tmp_path / "imp2"))
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_busbw_over_algbw_gives_a_rank_count_only_where_the_rounding_leaves_one():
    """nccl-tests prints algbw and busbw to two decimals: 2.15/1.08 (nccl-tests#176, 128 GPUs) is
    2(n-1)/n for every n from 88 up; the old reading took the point value and said 216 ranks."""
    from commprof.ingest.nccltests import _ranks_from_ratio

    def row(a, b):
        return {"out-of-place": {"algbw": a, "busbw": b, "time": 1.0}}

    assert _ranks_from_ratio("all_reduce", [row(1.08, 2.15)]) is None
    assert _ranks_from_ratio("all_reduce", [row(100.0, 175.0)]) == 8          # 2 x 7/8
    assert _ranks_from_ratio("all_reduce", [row(18.53, 18.53)]) == 2
    assert _ranks_from_ratio("all_gather", [row(37.87, 18.94)]) == 2
    assert _ranks_from_ratio("all_reduce", [row(0.04, 0.09)]) is None           # too coarse


def test_old_error_column_without_a_footer_is_not_called_validation_off(cli_inproc, tmp_path):
    """nccl#318's excerpt ran with validation on (header 'validation: 1'); its old 'error' column is a
    deviation that only the (cut) '# Out of bounds values' footer judges. Before: import and C16 said
    '#wrong N/A: validation off'."""
    name = "v100x8_p3dn_allreduce_errorcol_nccl318.txt"
    res = cli_inproc("import", "nccl-tests", _neutral(tmp_path, name), "--out", str(tmp_path / "imp"))
    assert "validation off" not in res.stdout and "old-layout 'error' column" in res.stdout, res.stdout
    cli_inproc("check", str(tmp_path / "imp"), "--out", str(tmp_path / "chk"))
    c16 = [i for i in json.loads((tmp_path / "chk" / "check.json").read_text())["items"] if i["id"] == "C16"][0]
    assert c16["status"] == "SKIP" and "validation off" not in c16["value"] and "footer" in c16["value"]


def test_proposed_fixed_thresholds_alone_warn_a_slow_box_they_do_not_fail_it(cli_inproc, tmp_path):
    """nccl#318's 8x V100 SXM2 (NVLink 2, no healthy box or reference profile of its class): 60 us at
    decode sizes is past the proposed NVLink thresholds, which are neither healthy boxes nor a
    physical bound (issue 33): C10 WARNs and says what a FAIL needs; before, C10 FAILed and E1 made
    the whole box a FAIL on it. The buyer's own --thresholds file still FAILs it."""
    name = "v100x8_p3dn_allreduce_errorcol_nccl318.txt"
    cli_inproc("import", "nccl-tests", _neutral(tmp_path, name), "--out", str(tmp_path / "imp"))
    cli_inproc("check", str(tmp_path / "imp"), "--out", str(tmp_path / "chk"))
    doc = json.loads((tmp_path / "chk" / "check.json").read_text())
    c10 = [i for i in doc["items"] if i["id"] == "C10"][0]
    assert c10["status"] == "WARN", c10
    assert "fixed, proposed" in c10["threshold"] and "FAIL needs 2 healthy boxes" in c10["threshold"]
    th = tmp_path / "t.toml"
    th.write_text("[allreduce_latency]\nnvlink_pass_us = 20.0\nnvlink_warn_us = 40.0\n")
    cli_inproc("check", str(tmp_path / "imp"), "--thresholds", str(th), "--out", str(tmp_path / "chk2"))
    doc2 = json.loads((tmp_path / "chk2" / "check.json").read_text())
    assert [i for i in doc2["items"] if i["id"] == "C10"][0]["status"] == "FAIL"
