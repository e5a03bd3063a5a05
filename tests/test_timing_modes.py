"""--timing per-call | back-to-back: rows and meta say which method made them, a resume never
mixes the two in one table, and flags that cannot hold together are refused."""
from helpers import results_meta, sweep_rows, write_sweep_dir


def test_back_to_back_rows_are_marked_and_resume_keeps_the_method(cli_inproc, tmp_path):
    out = str(tmp_path / "b2b")
    res = cli_inproc("sweep", "--tp", "2", "--ops", "all_reduce", "--sizes", "4K,64K", "--iters", "3", "--warmup", "1",
                     "--timing", "back-to-back", "--loop", "5", "--out", out, "--no-charts")
    assert res.returncode == 0, res.stderr
    rows = sweep_rows(out)
    assert len(rows) == 2
    assert all(r["timing"] == "back-to-back" and r["loop"] == "5" and float(r["latency_us_p50"]) > 0 for r in rows)
    assert results_meta(out)["config"]["timing"] == "back-to-back"
    assert "back-to-back: each sample is a loop of 5 calls" in res.stdout
    # a resume with the other method would mix two measurements in one table: refused, nothing changes
    before = open(f"{out}/sweep.csv").read()
    res = cli_inproc("sweep", "--tp", "2", "--ops", "all_reduce", "--sizes", "4K,64K,1M", "--iters", "3",
                     "--out", out, "--resume", "--no-charts")
    assert res.returncode == 2 and "timing=back-to-back" in res.stderr, res.stderr
    assert open(f"{out}/sweep.csv").read() == before


def test_per_call_is_the_default_and_old_tables_read_as_per_call(cli_inproc, tmp_path):
    from commprof import results

    out = str(tmp_path / "pc")
    res = cli_inproc("sweep", "--tp", "2", "--ops", "all_reduce", "--sizes", "4K", "--iters", "3", "--warmup", "1",
                     "--out", out, "--no-charts")
    assert res.returncode == 0, res.stderr
    assert [(r["timing"], r["loop"]) for r in sweep_rows(out)] == [("per-call", "1")]
    # a table written before the column: its samples were per-call
    old = tmp_path / "old"
    old.mkdir()
    (old / "sweep.csv").write_text("op,tp,group,size_bytes,mode,latency_us_p50\nall_reduce,2,0,4096,eager,10\n")
    assert list(results.load_frame(str(old))["timing"]) == ["per-call"]


def test_flags_that_do_not_hold_together(cli_inproc, tmp_path):
    for args, needle in ((["--timing", "sometimes"], "--timing 'sometimes'"), (["--loop", "0"], "--loop 0"),
                         (["--timing", "back-to-back", "--impl", "custom", "--verify"], "--verify")):
        res = cli_inproc("sweep", "--tp", "2", "--out", str(tmp_path / "x"), *args)
        assert res.returncode in (2, 3), res.stderr
        errors = [l for l in res.stderr.splitlines() if l.startswith("commprof: error:")]
        assert len(errors) == 1, res.stderr
        assert needle in errors[0] or res.returncode == 3, errors


def test_check_gap_and_fits_judge_one_method(tmp_path):
    """A dir holding both methods is judged on its per-call rows, and says so; a dir holding only
    back-to-back averages (e.g. imported nccl-tests logs) is judged on them, labelled as such."""
    from commprof.analysis.evidence import gather
    from commprof.analysis.costmodel import fit_sweep
    from commprof.analysis.verdict import latency_stat

    def sweep_dir(name, timings):
        meta = {"kind": "measured", "backend": "nccl", "hosts": ["box"], "gpus": ["g"],
                "command": ["synthetic test data"]}
        return write_sweep_dir(tmp_path / name, meta, [
            {"op": "all_reduce", "tp": 8, "group": 0, "mode": "eager", "size_bytes": size,
             "count": 1, "iters": 1, "warmup": 0, "concurrent": 0, "timing": timing,
             "loop": 20 if timing == "back-to-back" else 1, "latency_us_p50": p50 + size / 1e4,
             "latency_us_p99": p50 * 2, "busbw_gbps": 1.0, "wrong": 0, "status": "ok"}
            for timing, p50 in timings for size in (4096, 65536)])

    both = gather([sweep_dir("both", [("per-call", 30.0), ("back-to-back", 9.0)])])
    assert set(both.sweep["timing"]) == {"per-call"} and both.sweep_timing == "per-call"
    assert any("only the per-call rows are judged" in n for n in both.notes)
    assert latency_stat(both.sweep) == "p50"
    assert all(f.alpha_us > 20 for f in fit_sweep(both.loaded[0]["sweep"]))    # fitted on per-call rows only
    only = gather([sweep_dir("b2b", [("back-to-back", 9.0)])])
    assert only.sweep_timing == "back-to-back" and not only.notes
    assert latency_stat(only.sweep) == "p50 of back-to-back loop averages"
