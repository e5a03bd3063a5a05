"""Every check item says what it was judged against (``basis``: the healthy boxes of its class, a
published figure, a modelled reference profile, a physical bound, a proposed threshold) and what a
buyer does next (``what_now``), in check.json and on the console; no line claims healthy boxes
where the comparison was a modelled profile (issue 33)."""
import json
import os
import shutil

import pytest
from helpers import REPO, nccl_log, shared_data

from commprof.analysis.checkitems import run_items
from commprof.analysis.evidence import gather
from commprof.analysis.thresholds import load_thresholds
from commprof.ingest.nccltests import import_nccl_tests

SMI_Q = os.path.join(REPO, "tests", "data", "nvidia-smi-q")


def _check(cli_inproc, tmp_path, d):
    res = cli_inproc("check", d, "--out", str(tmp_path / "chk"))
    assert res.returncode in (0, 8, 9), res.stderr
    return res, json.loads((tmp_path / "chk" / "check.json").read_text())


def _all_items_carry_basis_and_what_now(items):
    for i in items:
        assert i["what_now"], i
        if i["status"] in ("FAIL", "WARN"):
            assert i["basis"], i


def test_a_fail_against_a_modelled_profile_says_modelled_never_healthy_boxes(cli_inproc, tmp_path):
    """4x RTX 4090 (kalavai): no healthy 4-GPU PCIe 4.0 box, so C9 compares with the modelled profiles;
    its FAIL names them and never 'the healthy boxes of its class'."""
    neutral = tmp_path / "nccl.log"
    shutil.copy(shared_data("nccl-tests", "rtx4090x4_pcie_allreduce_kalavai.txt"), neutral)
    d = str(tmp_path / "imp")
    import_nccl_tests([str(neutral)], d)
    res, data = _check(cli_inproc, tmp_path, d)
    by = {i["id"]: i for i in data["items"]}
    c9 = by["C9"]
    assert c9["status"] == "FAIL" and c9["source"].startswith("modelled")
    for text in (c9["value"], c9["hint"], c9["basis"]):
        assert "healthy boxes of its class" not in text and "slowest healthy box" not in text
    assert "modelled" in c9["basis"] and "reference profile pcie4" in c9["basis"]
    assert "modelled value of the reference profile" in c9["value"]
    assert c9["what_now"].startswith("Do not accept") and "all_reduce_perf" in c9["what_now"]
    _all_items_carry_basis_and_what_now(data["items"])
    assert "C9 FAIL what now: Do not accept" in res.stdout
    md = (tmp_path / "chk" / "check.md").read_text()
    assert "| against |" in md and "| what now |" in md


def test_a_comparison_with_real_logs_names_them(tmp_path):
    """8x A100 NVSwitch judged by the healthy A100 logs: the basis names healthy boxes and real logs;
    a box 3x slower FAILs and says against what."""
    log = nccl_log(str(tmp_path), "NVIDIA A100-SXM4-40GB", ranks=8, alpha_us=150.0, busbw_gbps=60.0)
    d = str(tmp_path / "slow")
    import_nccl_tests([log], d)
    by = {i.id: i for i in run_items(gather([d]), load_thresholds())}
    assert by["C10"].status == "FAIL" and "healthy box" in by["C10"].basis and "real log" in by["C10"].basis
    assert "healthy box of its class" in by["C10"].hint
    assert by["C10"].what_now.startswith("Do not accept")


@pytest.mark.parametrize("name", ["gpud-80-remapped-pending.txt", "dcgm-120-ecc-clean.txt",
                                  "kubeflow-68-throttle-idle.txt"])
def test_health_items_carry_what_now(cli_inproc, tmp_path, name):
    d = str(tmp_path / "q")
    res = cli_inproc("import", "nvidia-smi-q", os.path.join(SMI_Q, name), "--out", d)
    assert res.returncode == 0, res.stderr
    res, data = _check(cli_inproc, tmp_path, d)
    hs = [i for i in data["items"] if i["id"].startswith("H")]
    assert hs
    _all_items_carry_basis_and_what_now(data["items"])
    for i in hs:
        assert not i["hint"].startswith("what now")          # moved into its own field
    if name.startswith("gpud"):                              # remapped rows pending: reject or RMA
        h2 = [i for i in hs if i["id"] == "H2"][0]
        assert h2["status"] == "FAIL" and "reject" in h2["what_now"].lower()
        assert "H2 FAIL what now: A pending retirement" in res.stdout


def test_nccl_account_items_carry_what_now(tmp_path):
    from commprof.ingest.nccldebug import import_nccl_debug

    src = os.path.join(REPO, "tests", "data", "nccl-debug", "fragment_8gpu_nvlink_written.log")
    import_nccl_debug([src], str(tmp_path / "acct"), expect_gpus=8, command=["test"])
    import csv

    rows = list(csv.DictReader(open(tmp_path / "acct" / "nccl_verdict.csv")))
    assert rows and all(r["what_now"] for r in rows)
    assert {r["id"][0] for r in rows} == {"N"}


def test_every_item_of_a_gloo_run_and_a_skip_says_how_to_judge_it(tmp_path):
    """With only a sweep of one rank, the SKIP items say what would judge them."""
    log = nccl_log(str(tmp_path), "NVIDIA L40S", ranks=4)
    d = str(tmp_path / "imp")
    import_nccl_tests([log], d)
    items = run_items(gather([d]), load_thresholds())
    skips = [i for i in items if i.status == "SKIP"]
    assert skips and all(i.what_now.startswith("Not judged") for i in skips)
    assert all(i.what_now for i in items)
