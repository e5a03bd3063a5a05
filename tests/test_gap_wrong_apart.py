"""gap box against box (issue 33): a size either box marks wrong (nccl-tests #wrong > 0) is left
empty, never interpolated from its neighbours; boxes that ran an op at no common TP degree are
listed apart, never set against each other as ratios."""
import csv
import os

from helpers import REPO, nccl_log

from commprof.analysis.boxgap import compute_gap
from commprof.ingest.nccltests import import_nccl_tests

SRC = os.path.join(REPO, "tests", "data", "nccl-tests", "rtx5090x8_pcie5_p2p_allreduce_aikitoria.txt")


def _imp(tmp_path, name, log):
    d = str(tmp_path / name)
    import_nccl_tests([log], d)
    return d


def _wrong_at(tmp_path, size_tok: str, name="all_reduce_perf_wrong.txt"):
    """The committed 8x RTX 5090 log with its in-place #wrong at one size set to 7 (our change)."""
    lines = open(SRC).read().splitlines()
    k = next(i for i, ln in enumerate(lines) if ln.split()[:1] == [size_tok])
    head, last = lines[k].rsplit(None, 1)
    lines[k] = f"{head}      7"
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def test_a_size_the_first_box_marks_wrong_is_left_empty(cli_inproc, tmp_path):
    bad = _imp(tmp_path, "bad", _wrong_at(tmp_path, "1048576"))
    good = _imp(tmp_path, "good", SRC)
    g = compute_gap([bad, good])
    at = g.pairs[g.pairs["size_bytes"] == 1048576]
    assert len(at) == 1 and at["ratio"].isna().all() and at["a"].isna().all()
    assert "left empty: bad returned wrong data" in at["matched"].iloc[0]
    assert not (g.pairs["matched"] == "interpolated").any() or 1048576 not in set(
        g.pairs[g.pairs["matched"] == "interpolated"]["size_bytes"])
    # every other size keeps its ratio, and the summary counts the empty size
    assert g.pairs[g.pairs["size_bytes"] != 1048576]["ratio"].notna().all()
    mid = [s for s in g.summaries if s["metric"] == "latency-mid"]
    assert mid and mid[0]["left_empty"] == 1
    out = tmp_path / "gapout"
    res = cli_inproc("gap", bad, good, "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "1 left empty: wrong data" in res.stdout
    rows = [r for r in csv.DictReader(open(out / "gap_boxes.csv")) if r["size_bytes"] == "1048576"]
    assert rows and rows[0]["ratio"] == "" and rows[0]["b"] == "" and rows[0]["matched"].startswith("left empty")
    assert "left empty: bad returned wrong data at this size" in (out / "gap.md").read_text()


def test_boxes_without_a_common_tp_degree_are_listed_apart_not_as_ratios(cli_inproc, tmp_path):
    eight = _imp(tmp_path, "eight", SRC)
    two = _imp(tmp_path, "two", nccl_log(str(tmp_path), "NVIDIA GeForce RTX 5090", ranks=2, alpha_us=12.0,
                                         busbw_gbps=20.0))
    g = compute_gap([eight, two])
    assert not len(g.pairs)                                   # no "TP=8 vs TP=2 ... 0.51x"
    assert g.apart == [{"box_a": "eight", "box_b": "two", "op": "all_reduce", "tps_a": [8], "tps_b": [2]}]
    res = cli_inproc("gap", eight, two, "--out", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr
    assert "no common TP degree (eight at TP=8; two at TP=2): listed apart, not compared as ratios" in res.stdout
    assert "TP=8 vs TP=2" not in res.stdout and "vs TP=" not in res.stdout
    md = (tmp_path / "o" / "gap.md").read_text()
    assert "## Boxes listed apart (no common TP degree)" in md
    # each box still stands against its own reference
    assert len(g.boxes[0].table) and len(g.boxes[1].table)
    rep = tmp_path / "rep"
    res = cli_inproc("report", eight, two, "--out", str(rep))
    assert res.returncode in (0, 8, 9), res.stderr
    assert "listed apart, not compared as ratios" in (rep / "report.md").read_text()
