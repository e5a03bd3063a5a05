"""Huge inputs to ``commprof import``: refused early by a row or byte cap (one line naming the file
and the limit), never read whole, in memory that does not grow with the file. The 10-million-row
case is scripts/bench_huge_import.py (results/bench/huge_import.md); here smaller files show the
bound: peak memory of a refusal is the same for 150,000 rows as for 600,000."""
import json
import os
import subprocess
import sys

import pytest

from commprof.ingest import nccltests
from commprof.model.errors import UsageError
from helpers import REPO

sys.path.insert(0, os.path.join(REPO, "scripts"))
from bench_huge_import import log_parts, make_log as write_big_log, peak_run  # noqa: E402  the bench's generator and runner

NCCL_LOG = os.path.join(REPO, "tests", "data", "nccl-tests")


def _import_peak(*args, timeout=300):
    """Run ``commprof ARGS`` in a fresh interpreter; (its figures, its stderr)."""
    fig, _, err = peak_run(list(args), timeout=timeout)
    return fig, err


def test_huge_text_log_is_refused_at_the_row_cap_in_memory_that_does_not_grow(tmp_path):
    peaks = {}
    for rows in (150_000, 600_000):
        p = tmp_path / f"big_{rows}.log"
        write_big_log(p, rows)
        fig, err = _import_peak("import", "nccl-tests", str(p), "--out", str(tmp_path / f"o{rows}"))
        assert fig["rc"] == 2, err
        msg = [ln for ln in err.splitlines() if ln.startswith("commprof: error:")]
        assert len(msg) == 1 and f"big_{rows}.log" in msg[0] and f"{nccltests.MAX_ROWS:,} data rows" in msg[0], err
        assert not (tmp_path / f"o{rows}").exists()
        assert fig["wall_s"] < 120                      # ~4 s on a quiet machine: generous for a loaded one
        peaks[rows] = fig["peak_mb"]
    assert peaks[600_000] < 1024                        # the bound: under 1 GB
    # read line by line and refused at row 100,001: four times the file, the same memory (the old
    # whole-file reader grew ~3.5 GB per million rows)
    assert peaks[600_000] < peaks[150_000] + 60, peaks


def test_rows_past_the_cap_across_files_are_refused(tmp_path, monkeypatch):
    head, block, foot, n = log_parts()
    a, b = tmp_path / "a_all_reduce.log", tmp_path / "b_all_reduce.log"
    for p in (a, b):
        p.write_text(head + block + foot)
    monkeypatch.setattr(nccltests, "MAX_ROWS", n + n // 2)    # each file under it, both together over
    nccltests.read_nccl_tests(str(a))
    with pytest.raises(UsageError, match=r"more than .* data rows in these files .*'b_all_reduce.log'"):
        nccltests.import_nccl_tests([str(a), str(b)], str(tmp_path / "o"), command=["t"])
    assert not (tmp_path / "o").exists()


def test_huge_json_is_refused_by_its_size_before_it_is_parsed(tmp_path):
    p = tmp_path / "all_reduce.json"
    with open(p, "wb") as f:
        f.write(b'{"results": [')
    os.truncate(p, nccltests.MAX_JSON_BYTES + 1)       # sparse: no disk, no time to write it
    fig, err = _import_peak("import", "nccl-tests", str(p), "--out", str(tmp_path / "o"), timeout=120)
    assert fig["rc"] == 2 and "all_reduce.json" in err and f"{nccltests.MAX_JSON_BYTES >> 20} MiB" in err, err
    assert fig["wall_s"] < 30 and fig["peak_mb"] < 1000, fig   # never read: 0.4 s; the interpreter's memory (~600 MB with imports on a loaded CI box), under the 1 GB


def test_json_with_more_results_than_the_cap_is_refused(tmp_path, monkeypatch):
    doc = json.load(open(os.path.join(NCCL_LOG, "all_reduce_perf_8xA100_v3.json")))
    doc["results"] = doc["results"] * 3
    p = tmp_path / "all_reduce_perf.json"
    p.write_text(json.dumps(doc))
    monkeypatch.setattr(nccltests, "MAX_ROWS", 10)
    with pytest.raises(UsageError, match=r"'all_reduce_perf.json': field results: 12 entries, more than the 10"):
        nccltests.read_nccl_tests(str(p))


def test_huge_topo_text_is_refused_by_its_size(tmp_path, cli_inproc):
    from commprof.ingest.smitopo import MAX_TOPO_BYTES

    p = tmp_path / "topo.txt"
    with open(p, "wb") as f:
        f.write(b"\tGPU0\tGPU1\nGPU0\t X \tNV4\n")
    os.truncate(p, MAX_TOPO_BYTES + 1)
    res = cli_inproc("import", "nvidia-smi-topo", str(p), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "topo.txt" in res.stderr and "larger than 4 MiB" in res.stderr, res.stderr


@pytest.mark.parametrize("kind", ["nccl-debug", "nccl-inspector", "nccl-tests", "nvidia-smi-topo", "kineto"])
def test_a_fifo_is_refused_not_waited_on(tmp_path, kind):
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    env = dict(os.environ, PYTHONPATH=REPO)
    # opening a FIFO for reading waits for a writer: the old nccl-debug and Inspector readers hung here
    res = subprocess.run([sys.executable, "-m", "commprof", "import", kind, str(fifo), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert res.returncode == 2 and "FIFO" in res.stderr, res.stderr


def test_an_over_long_nccl_debug_line_is_cut_and_the_next_line_read(tmp_path):
    from commprof.ingest import nccldebug

    p = tmp_path / "rank0.log"
    p.write_bytes(b"x" * (3 * nccldebug.MAX_LINE + 17) + b"\nhost:1:2 [0] NCCL INFO Bootstrap : Using eth0\n")
    lines = list(nccldebug._lines(str(p)))
    assert len(lines) == 2 and len(lines[0]) == nccldebug.MAX_LINE and "NCCL INFO Bootstrap" in lines[1]
