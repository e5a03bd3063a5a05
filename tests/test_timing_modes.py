"""--timing per-call | back-to-back: rows and meta say which method made them, a resume never
mixes the two in one table, and flags that cannot hold together are refused."""
from conftest import results_meta, sweep_rows


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
    assert res.returncode != 0 and "timing=back-to-back" in res.stderr, res.stderr
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
