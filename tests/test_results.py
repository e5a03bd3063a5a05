"""The results dir: rows survive a killed writer; a resumed table keeps its header."""
import os

import pytest

from commprof import results
from commprof.model.errors import UsageError
from commprof.model.sweepconfig import SweepRunConfig


def test_truncated_last_line_is_dropped(tmp_path):
    (tmp_path / "sweep.csv").write_text("op,tp,size_bytes,mode,latency_us_p50\n"
                                        "all_reduce,2,4096,eager,10.5\nall_reduce,2,81")
    rows = results.read_rows(str(tmp_path))
    assert rows == [{"op": "all_reduce", "tp": "2", "size_bytes": "4096", "mode": "eager", "latency_us_p50": "10.5"}]


def test_not_a_sweep_table(tmp_path):
    (tmp_path / "sweep.csv").write_text("a,b\n1,2\n")
    with pytest.raises(UsageError, match="missing column op"):
        results.read_rows(str(tmp_path))


def test_resumed_table_keeps_its_older_header(tmp_path):
    old = ["op", "tp", "group", "size_bytes", "mode", "latency_us_p50"]
    (tmp_path / "sweep.csv").write_text(",".join(old) + "\nall_reduce,2,0,4096,eager,10\n")
    cfg = SweepRunConfig(ops=["all_reduce"], tps=[2], points=[], out_dir=str(tmp_path))
    w = results.SweepWriter(str(tmp_path), cfg, {}, set())
    w.write_rows([{"op": "all_gather", "tp": 2, "group": 0, "size_bytes": 8192, "mode": "eager",
                   "latency_us_p50": 20.0, "latency_us_rankavg_mean": 15.0}])
    w._table.close()
    rows = results.read_rows(str(tmp_path))
    assert [r["op"] for r in rows] == ["all_reduce", "all_gather"] and rows[1]["latency_us_p50"] == "20"
    assert list(rows[1]) == old


def test_out_dir_rules(tmp_path):
    results.check_out_dir(str(tmp_path / "new"), resume=False)
    with pytest.raises(UsageError, match="does not exist"):
        results.check_out_dir(str(tmp_path / "new"), resume=True)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        results.check_out_dir(str(f), resume=False)
    assert os.path.exists(f)
