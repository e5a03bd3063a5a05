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


def _emitted_ids() -> set:
    """Every item id ``commprof check`` can emit, read from the code that builds them."""
    import glob
    import re

    ids = set()
    for path in glob.glob(os.path.join(REPO, "commprof", "analysis", "*.py")):
        text = open(path).read()
        ids |= set(re.findall(r'\bItem\(\s*"([A-Z][A-Za-z0-9]*)"', text))
        ids |= set(re.findall(r'\b_item\(\s*"(N[0-9])"', text))
    return ids


def _ids_in_reading_your_verdict() -> set:
    import re

    page = open(os.path.join(REPO, "docs", "check.md")).read()
    section = page[page.index("## Reading your verdict"):]
    ids = set()
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith(("| item ", "|---")):
            continue
        head = line.split("|")[1]
        for prefix, lo, hi in re.findall(r"\b([A-Z]+)(\d+)-[A-Z]+(\d+)\b", head):     # a range: H1-H8
            ids |= {f"{prefix}{k}" for k in range(int(lo), int(hi) + 1)}
        ids |= set(re.findall(r"\b([A-Z]+[0-9]*[a-z]?)\b", head))
    return ids


def test_reading_your_verdict_covers_every_item_check_can_emit():
    """docs/check.md, "Reading your verdict": one row for every item id the code can emit (C12, H0,
    N0, I1 and E1 had none)."""
    emitted = _emitted_ids()
    assert {"C9", "C10n", "H0", "N0", "N5", "I1", "E1", "KV"} <= emitted      # the reader found them
    missing = emitted - _ids_in_reading_your_verdict()
    assert not missing, sorted(missing)


def test_the_engines_own_account_names_its_evidence_and_what_now(cli_inproc, tmp_path):
    """N items judged by check name what they rest on (NCCL's own log, the quote), like every other item."""
    d = str(tmp_path / "nd")
    res = cli_inproc("import", "nccl-debug", shared_data("nccl-debug", "rtx5060tix2_pcie-shm-p2pdisabled_vllm_p2pbench-off.log"),
                     "--expect-gpus", "4", "--out", d)
    assert res.returncode == 8, res.stderr
    _, data = _check(cli_inproc, tmp_path, d)
    by = {i["id"]: i for i in data["items"]}
    assert {by[k]["status"] for k in ("N1", "N4", "N5")} == {"FAIL", "WARN"}
    _all_items_carry_basis_and_what_now(data["items"])
    assert "NCCL's own log" in by["N1"]["basis"] and "--expect-gpus" in by["N5"]["basis"]


def test_in_engine_warn_says_what_to_do():
    from commprof.analysis.whatnow import basis_for, what_now_for

    assert what_now_for("I1", "WARN").startswith("Not a fault of the box by itself")
    assert "sweep" in basis_for("I1")


def test_no_fail_against_one_healthy_box_without_a_physical_bound(tmp_path):
    """4 RTX 5090 on PCIe 5.0: one healthy box of the class at TP=4 (nccl-tests#287, 32.6 us at <= 64
    KiB). A box 4x slower at decode sizes FAILed C10 against that one log; it WARNs now and says a
    FAIL needs two healthy boxes or a physical bound. Its busbw at 8% of the PCIe 5.0 ceiling FAILs
    C9 still, naming the ceiling (a physical bound) beside the healthy box."""
    log = nccl_log(str(tmp_path), "NVIDIA GeForce RTX 5090", ranks=4, alpha_us=125.0, busbw_gbps=5.0)
    d = str(tmp_path / "slow")
    import_nccl_tests([log], d)
    by = {i.id: i for i in run_items(gather([d]), load_thresholds())}
    c10, c9 = by["C10"], by["C9"]
    assert "healthy box of its class (a real log)" in c10.basis
    assert c10.status == "WARN" and "FAIL needs 2 healthy boxes of the class or a physical bound" in c10.threshold
    assert c9.status == "FAIL" and "a physical bound" in c9.value and "physical bound" in c9.basis
    assert "of the pcie5 per-direction ceiling of 63 GB/s" in c9.value


def test_e1_says_a_fail_stands_on_its_own_when_fewer_items_were_judged(cli_inproc, tmp_path):
    """An NCCL_DEBUG log alone (nodes over TCP: N2 FAIL) judges no measured item; E1 said '0 measured
    items judged (none)' and PASS, with nothing saying why."""
    d = _log_dir(cli_inproc, tmp_path, "a100x16_2node_socket_vllm_llmk8s-noib.log")
    _, data = _check(cli_inproc, tmp_path, d)
    e1 = [i for i in data["items"] if i["id"] == "E1"][0]
    assert e1["status"] == "PASS" and data["verdict"] == "FAIL"
    assert "a FAIL (N2) stands on its own: the verdict is that FAIL" in e1["value"]


def _log_dir(cli_inproc, tmp_path, name):
    d = str(tmp_path / "nd")
    res = cli_inproc("import", "nccl-debug", shared_data("nccl-debug", name), "--out", d)
    assert res.returncode in (0, 8), res.stderr
    return d


def test_a_single_gpu_log_says_its_class_is_the_gpu_models_not_a_measured_link(cli_inproc, tmp_path):
    """One rank (tests/data/nccl-tests/single_gpu_h100_handwritten.log) under a neutral name: TP=1, C2
    names the class from the GPU name and says no link between GPUs was used; no measured item but C16."""
    neutral = tmp_path / "nccl.log"
    shutil.copy(os.path.join(REPO, "tests", "data", "nccl-tests", "single_gpu_h100_handwritten.log"), neutral)
    d = str(tmp_path / "one")
    import_nccl_tests([str(neutral)], d)
    res, data = _check(cli_inproc, tmp_path, d)
    by = {i["id"]: i for i in data["items"]}
    assert "ran on one GPU (TP=1 only): no link between GPUs was used" in by["C2"]["value"]
    assert by["C10"]["status"] == by["C9"]["status"] == "SKIP" and data["verdict"] == "INSUFFICIENT EVIDENCE"
