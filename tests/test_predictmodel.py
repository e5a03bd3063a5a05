"""commprof predict's model below the verb (commprof.analysis.predictmodel, commsource): the API
returns what the CLI writes, reference profiles price in memory (nothing under $HOME), and one
call imports no torch."""
from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_api_predict_is_the_clis_predict_csv(cli_inproc, tmp_path):
    import commprof

    out = tmp_path / "p"
    args = ["--model", "Qwen2.5-32B", "--gpu", "h100-sxm", "--comm", "reference:nvlink4", "--tp", "2,8",
            "--batch", "1,16", "--prompt", "512", "--no-charts"]
    assert cli_inproc("predict", *args, "--out", str(out)).returncode == 0
    with open(out / "predict.csv", newline="") as fh:
        cli_rows = list(csv.DictReader(fh))
    df = commprof.predict("Qwen2.5-32B", gpu="h100-sxm", comm="reference:nvlink4", tp=[2, 8], batch=[1, 16],
                          prompt=512)
    assert list(df.columns) == list(cli_rows[0].keys())
    assert len(df) == len(cli_rows) == 4
    for want, (_, got) in zip(cli_rows, df.iterrows()):
        for col, text in want.items():
            v = got[col]
            if isinstance(v, float):
                assert float(text) == pytest.approx(v, rel=1e-5), col
            elif isinstance(v, bool):
                assert text == str(v), col
            else:
                assert text == str(v), col
    assert df.attrs["kind"] == "predicted" and df.attrs["boxes"][0]["comm"]["profile"] == "nvlink4"


def test_reference_profile_is_priced_in_memory_at_the_exact_size():
    from commprof.analysis.commsource import ProfileComm, comm_source
    from commprof.analysis.costmodel import profile_latency_us

    c = comm_source("reference:pcie5-nop2p")
    assert isinstance(c, ProfileComm) and c.kind == "modelled" and c.tps() == [2, 4, 8]
    price = c.price(8, "graph")          # the profile has eager parameters only here: eager is used
    assert price("all_reduce", 10752) == profile_latency_us("pcie5-nop2p", "all_reduce", 8, 10752, "eager")
    assert c.describe()["results_dir"] is None


def _run_predict(home, code):
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": ROOT}
    env.pop("COMMPROF_CACHE_DIR", None)
    env.pop("XDG_CACHE_HOME", None)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                          cwd=str(home))


def test_predict_writes_nothing_under_home_and_imports_no_torch(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    code = ("import sys\n"
            "from commprof.cli import main\n"
            "try:\n"
            "    sys.argv = ['commprof', 'predict', '--gpu', 'rtx5090', '--comm', 'reference:pcie5-nop2p', '--tp', '2,4,8', '--json']\n    main()\n"
            "except SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "print('TORCH', 'torch' in sys.modules, file=sys.stderr)\n")
    r = _run_predict(home, code)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "TORCH False" in r.stderr
    assert [p for p in home.rglob("*")] == []          # nothing written under $HOME, hidden files included


@pytest.mark.parametrize("gpu, want", [("h100-sxm", "reference:nvlink4"), ("a100-sxm", "reference:nvlink3"),
                                       ("b200", "reference:nvlink5"), ("rtx5090", "reference:pcie5-nop2p"),
                                       ("rtx4090", "reference:pcie4-nop2p"), ("rtx-pro-6000", "reference:pcie5-p2p"),
                                       ("l40s", "reference:pcie4-p2p"), ("l20", "reference:pcie4-p2p")])
def test_default_comm_follows_the_gpus_class_and_says_so(gpu, want):
    from commprof.analysis.predictmodel import predict_table

    rows, notes, meta = predict_table("Qwen2.5-32B", [gpu], [], [8], [1])
    assert rows[0]["comm"] == want
    assert notes[0].startswith(f"no --comm: {want} chosen for {gpu} (")


def test_a_bare_card_name_sold_in_two_forms_says_which_was_taken_and_how_to_price_both():
    """--gpu a100 / h100 name a chip sold as an SXM module and as a PCIe card: the SXM one is taken and
    a note says so and how to price both (the form moves a TP=8 step by 1.5x: a100-sxm on NVLink 3
    against a100-pcie on PCIe 4.0); a key, or an alias that names the form, says nothing."""
    from commprof.analysis.predictmodel import predict_table
    from commprof.model.gpus import other_forms

    assert [g.key for g in other_forms("a100")] == ["a100-pcie"]
    assert [g.key for g in other_forms("H100")] == ["h100-pcie"]
    for named in ("a100-sxm", "a100-pcie", "a100_sxm", "h100-pcie-80gb", "a100-40gb", "rtx5090", "4090", "b200"):
        assert other_forms(named) == [], named
    rows, notes, _ = predict_table("QwQ-32B", ["a100"], [], [8], [1])
    note = next(n for n in notes if n.startswith("--gpu a100:"))
    assert "taken as a100-sxm" in note and "a100-pcie" in note and "--gpu a100-sxm,a100-pcie" in note
    rows, notes, _ = predict_table("QwQ-32B", ["a100-sxm", "a100-pcie"], [], [8], [1])
    assert not any(n.startswith("--gpu") for n in notes)
    sxm, pcie = (next(r for r in rows if r["gpu"] == g) for g in ("a100-sxm", "a100-pcie"))
    assert sxm["comm"] == "reference:nvlink3" and pcie["comm"] == "reference:pcie4-p2p"
    assert pcie["ms_per_token"] > 1.3 * sxm["ms_per_token"]
