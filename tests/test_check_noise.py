"""``check`` reads column ``unstable`` (issue 34, "Noise goes unflagged"): an item judged from sweep
cells (or trace runs) their run flagged unstable cannot PASS on them: it is INSUFFICIENT EVIDENCE
(exit 9) naming the cells and saying to rerun with ``--repeat 5`` on a quiet machine, unless it
FAILs by more than the cells' spread. Dirs from before the column are judged as before.

The dirs are hand-built (synthetic figures on a chosen side of a threshold, the GPU name real)."""
import csv
import json
import os

import pytest

from helpers import write_sweep_dir

from commprof.analysis.checkitems import run_items
from commprof.analysis.checknoise import unstable_cells
from commprof.analysis.evidence import gather
from commprof.analysis.thresholds import load_thresholds
from commprof.results import COLUMNS

META = {"kind": "measured", "backend": "nccl", "hosts": ["h"], "gpus": ["NVIDIA H100 80GB HBM3"], "command": ["t"]}
WHY = "repeats' p50 9.0 / 27.0 / 10.0 us, 3.00x apart (limit 2x)"
NOISE = ("repeats", "p50_us_repeats", "repeat_spread", "tail_ratio", "unstable")


def _rows(p50, unstable="", spread=3.0):
    """An H100 TP=8 graph sweep: 4 KiB (the cell C10 stands on) and 16 KiB; the 4 KiB cell flagged."""
    return [{"op": "all_reduce", "tp": 8, "group": 0, "mode": "graph", "size_bytes": s, "count": 1, "iters": 40,
             "warmup": 0, "concurrent": 0, "latency_us_p50": p50, "latency_us_p95": p50 * 1.1,
             "latency_us_p99": p50 * 1.2, "busbw_gbps": 1.0, "wrong": 0, "status": "ok", "hosts": "h", "repeats": 3,
             "repeat_spread": spread if s == 4096 else 1.1, "tail_ratio": 1.1,
             "unstable": unstable if s == 4096 else ""} for s in (4096, 16384)]


def _items(d):
    return {i.id: i for i in run_items(gather([d]), load_thresholds(), None, None)}


def test_an_unstable_passing_cell_is_insufficient_evidence_and_says_what_to_do(cli_inproc, tmp_path):
    d = write_sweep_dir(tmp_path / "noisy", META, _rows(9.0, WHY))
    by = _items(d)
    c10 = by["C10"]
    assert c10.status == "INSUFFICIENT"
    assert "all_reduce TP=8 4KiB graph" in c10.basis and "would be PASS" in c10.basis
    assert WHY in c10.value and "1 of the 1 cells it stands on unstable" in c10.value
    assert "rerun with `commprof sweep --repeat 5` on a quiet machine" in c10.what_now
    assert by["E1"].status == "INSUFFICIENT" and "steady figures for C10" in by["E1"].hint
    res = cli_inproc("check", d, "--out", str(tmp_path / "c"))
    assert res.returncode == 9, res.stderr
    assert "commprof check: INSUFFICIENT EVIDENCE:" in res.stderr
    assert "rerun with `commprof sweep --repeat 5` on a quiet machine" in res.stderr
    doc = json.loads((tmp_path / "c" / "check.json").read_text())
    assert [i["status"] for i in doc["items"] if i["id"] == "C10"] == ["INSUFFICIENT"]
    # the same cells steady: a PASS, as before the column
    assert _items(write_sweep_dir(tmp_path / "steady", META, _rows(9.0)))["C10"].status == "PASS"


def test_a_clear_fail_stays_fail_a_marginal_one_does_not(tmp_path):
    # the buyer's own thresholds (a --thresholds file: PASS <= 20 us, WARN <= 41.7 us), so a FAIL can stand
    # (against the modelled nvlink4 profile alone an H100 TP=8 graph cell only WARNs: a FAIL needs two
    # healthy boxes of the class or a physical bound)
    f = tmp_path / "t.toml"
    f.write_text("[allreduce_latency]\nnvlink_pass_us = 20.0\nnvlink_warn_us = 41.7\n")
    th = load_thresholds(str(f))

    def c10(d):
        return {i.id: i for i in run_items(gather([d]), th, None, None)}["C10"]

    # 500 us against the 41.7 us FAIL bound: even / 3 (the cell's spread) it fails
    clear = c10(write_sweep_dir(tmp_path / "clear", META, _rows(500.0, WHY)))
    assert clear.status == "FAIL"
    assert "a FAIL all the same" in clear.basis and "3.00x spread" in clear.basis and "4KiB" in clear.basis
    # 60 us: past 41.7 us, but not by 3x: noise could have made it
    near = c10(write_sweep_dir(tmp_path / "near", META, _rows(60.0, WHY)))
    assert near.status == "INSUFFICIENT" and "would be FAIL" in near.basis
    # a WARN on an unstable cell is not a verdict either
    assert c10(write_sweep_dir(tmp_path / "warn", META, _rows(30.0, WHY))).status == "INSUFFICIENT"
    # by the default thresholds (the modelled profile alone) the clear case is a WARN on an unstable
    # cell: not a verdict
    assert _items(write_sweep_dir(tmp_path / "clear2", META, _rows(500.0, WHY)))["C10"].status == "INSUFFICIENT"


def test_a_dir_without_the_column_is_judged_as_before(tmp_path):
    """A sweep.csv from before the noise columns (its header lacks them) gives the same items."""
    old = [c for c in COLUMNS if c not in NOISE]
    d = tmp_path / "old"
    write_sweep_dir(d, META, [])
    with open(os.path.join(d, "sweep.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=old, extrasaction="ignore")
        w.writeheader()
        w.writerows(_rows(9.0, WHY))           # its reason has no column to go in
    by = _items(str(d))
    new = _items(write_sweep_dir(tmp_path / "new", META, _rows(9.0)))
    for k in ("C10", "C9", "C16", "E1"):
        assert (by[k].status, by[k].value, by[k].basis) == (new[k].status, new[k].value, new[k].basis)
    assert by["C10"].status == "PASS"


def test_unstable_trace_run_makes_c11_insufficient(tmp_path):
    d = write_sweep_dir(tmp_path / "box", META, _rows(9.0))
    head = "kind,scaled,tp,batch,mode,ms_per_token,comm_share_pct,repeats,ms_per_token_repeats,repeat_spread,unstable\n"
    why = "repeats' median 10.000 / 31.000 ms/token, 3.10x apart (limit 2x)"
    (tmp_path / "box" / "trace_summary.csv").write_text(head + f'measured,0,8,1,graph,20.0,10.0,2,10;31,3.1,"{why}"\n')
    c11 = _items(d)["C11"]
    assert c11.status == "INSUFFICIENT" and "TP=8 batch=1 graph" in c11.basis and why in c11.value
    assert "commprof trace --repeat 5" in c11.what_now
    (tmp_path / "box" / "trace_summary.csv").write_text(head + "measured,0,8,1,graph,20.0,10.0,1,,,\n")
    assert _items(d)["C11"].status == "PASS"


@pytest.mark.parametrize("frame_cols", [("unstable",), ()])
def test_unstable_cells_by_hand(frame_cols):
    import pandas as pd

    row = {"op": "all_reduce", "tp": 2, "size_bytes": 4096, "mode": "eager", "repeat_spread": 2.5, "tail_ratio": 4.0}
    df = pd.DataFrame([{**row, **({"unstable": "x"} if frame_cols else {})}, {**row, "size_bytes": 8192,
                        **({"unstable": float("nan")} if frame_cols else {})}])
    got = unstable_cells(df)
    assert got == ([("all_reduce TP=2 4KiB eager", "x", 4.0)] if frame_cols else [])


def test_unstable_prefill_run_makes_c11p_insufficient(tmp_path):
    d = write_sweep_dir(tmp_path / "box", META, _rows(9.0))
    head = ("kind,scaled,tp,batch,mode,ms_per_token,comm_share_pct,phase,prompt,chunk,ttft_ms,ttft_comm_ms,"
            "ttft_comm_share_pct,repeats,ms_per_token_repeats,repeat_spread,unstable\n")
    why = "repeats' median 10.000 / 31.000 ms/token, 3.10x apart (limit 2x)"
    path = tmp_path / "box" / "trace_summary.csv"
    path.write_text(head + f'measured,0,8,0,graph,20.0,5.0,prefill,2048,2048,20.0,1.0,5.0,2,10;31,3.1,"{why}"\n')
    c11p = _items(d)["C11p"]
    assert c11p.status == "INSUFFICIENT" and why in c11p.value and "commprof trace --repeat 5" in c11p.hint
    path.write_text(head + "measured,0,8,0,graph,20.0,5.0,prefill,2048,2048,20.0,1.0,5.0,1,,,\n")
    assert _items(d)["C11p"].status == "PASS"
