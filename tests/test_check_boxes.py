"""Verdicts a buyer can trust: every box judged by its own interconnect, several boxes
side by side, wrong results never pass, labels that say what a number is.

Two kinds of input: the real nccl-tests logs in tests/data/nccl-tests (8x A100 SXM on NVSwitch,
8x and 2x RTX 4090 on PCIe; see its SOURCE.md), and synthetic logs written here in nccl-tests'
2.1x layout for boxes not at hand (H100, B200, L40S, RTX 5090, an unknown GPU, 16 ranks on 2 nodes,
wrong results). The synthetic figures are made up to land on a chosen side of a threshold; only
the rank-line GPU names are the products' real names."""
import csv
import json
import os

import pytest
from helpers import REPO, corpus_log, nccl_log, one_line_error, write_sweep_dir

from commprof.analysis.checkitems import run_items
from commprof.analysis.evidence import gather
from commprof.analysis.interconnect import parse_interconnect, resolve_interconnect
from commprof.analysis.thresholds import load_thresholds
from commprof.model.errors import UsageError
from commprof.ingest.nccltests import import_nccl_tests

LOGS = os.path.join(REPO, "tests", "data", "nccl-tests")
A100_LOG = "a100x8_dgx_allreduce_superbench_legacy.txt"     # out of a repository snapshot: corpus_log
RTX8 = os.path.join(LOGS, "rtx4090x8_pcie_allreduce_chlc_blog.txt")
RTX2_LOG = "rtx4090x2_pcie_allreduce_kalavai.txt"


def imported(tmp_path, name, *logs):
    out = str(tmp_path / name)
    import_nccl_tests(list(logs), out)
    return out


def items_of(*dirs, interconnect=None, th=None):
    ev = gather(list(dirs))
    return {i.id: i for i in run_items(ev, th or load_thresholds(), None, interconnect)}, ev


# --- each box by its own interconnect: the real logs ------------------------------------------------

def test_real_a100_nvswitch_box_is_judged_on_nvlink(tmp_path):
    """37.8 us at 64 KiB FAILed under one NVLink threshold anchored on H100 graph figures; judged
    against the healthy NVLink 3 NVSwitch boxes measured the same way (nccl-tests, eager) it passes,
    and the verdict says what it compared."""
    d = imported(tmp_path, "a100", corpus_log(A100_LOG))
    by, ev = items_of(d)
    ic = ev.interconnect
    assert (ic.cls, ic.link) == ("nvswitch", "nvlink3")
    assert ic.evidence == "GPU names in the nccl-tests header (A100-SXM4-40GB)"
    assert by["C2"].status == "PASS" and "from GPU names in the nccl-tests header" in by["C2"].value
    assert by["C10"].status == "PASS"
    assert by["C10"].value.startswith("37.8 us avg (nccl-tests, eager) at TP=8")
    assert by["C10"].threshold.startswith("vs 37.8-58.1 us for healthy NVLink 3 NVSwitch boxes at TP=8 "
                                          "(back-to-back avg, eager) (2 logs)")
    assert "superbenchmark" in by["C10"].source and "CS244C" in by["C10"].source
    assert "(graph mode)" not in by["C10"].item and "eager mode, nccl-tests loop" in by["C10"].item
    assert by["C9"].status == "PASS" and by["C9"].value.startswith("TP=8: 235.3 GB/s busbw")
    # validation: 0 in the header, N/A in every #wrong cell: unknown, not 0
    assert by["C16"].status == "SKIP" and "N/A (validation off) on all 32 rows" in by["C16"].value


def test_real_4090_boxes_are_judged_on_pcie(tmp_path):
    """The 8x RTX 4090 box without P2P (45.7 us) WARNed on a fixed PCIe threshold: it is as fast as
    the healthy boxes of its class. The 2x box's 2.2 GB/s busbw is 1/8 of the class's profile: FAIL."""
    by8, ev8 = items_of(imported(tmp_path, "r8", RTX8))
    assert (ev8.interconnect.cls, ev8.interconnect.link) == ("pcie", "pcie4")
    assert by8["C10"].status == "PASS" and "healthy PCIe 4.0 (P2P not known) boxes at TP=8" in by8["C10"].threshold
    assert by8["C10"].value.startswith("45.7 us avg (nccl-tests, eager)")
    assert by8["C9"].status == "PASS" and by8["C9"].value.startswith("TP=8: 14.8 GB/s busbw")
    assert by8["C16"].status == "PASS" and by8["C16"].value == "0 wrong elements in 25 checked rows"
    by2, _ = items_of(imported(tmp_path, "r2", corpus_log(RTX2_LOG)))
    assert by2["C9"].status == "FAIL" and by2["C9"].value.startswith("TP=2: 2.2 GB/s busbw")
    assert by2["C10"].status == "PASS" and "sizes <= 4KiB" in by2["C10"].value      # its decode reference stops at 4 KiB


def test_real_logs_exit_codes_and_check_json(cli_inproc, tmp_path):
    a, r8 = imported(tmp_path, "a100", corpus_log(A100_LOG)), imported(tmp_path, "r8", RTX8)
    res = cli_inproc("check", r8, "--out", str(tmp_path / "c1"))
    assert res.returncode == 0, res.stderr
    slow = imported(tmp_path, "slow", nccl_log(str(tmp_path), "NVIDIA A100-SXM4-80GB", alpha_us=160.0, busbw_gbps=230.0))
    res = cli_inproc("check", a, r8, slow, "--out", str(tmp_path / "c2"))
    assert res.returncode == 8                              # the slow A100 box FAILs C10 (160 us > 2.5 x 58.1)
    data = json.loads((tmp_path / "c2" / "check.json").read_text())
    assert [b["box"] for b in data["boxes"]] == ["a100", "r8", "slow"]
    assert [b["verdict"] for b in data["boxes"]] == ["PASS", "PASS", "FAIL"]
    assert data["boxes"][0]["interconnect_evidence"].startswith("GPU names in the nccl-tests header")
    assert {i["box"] for i in data["items"]} == {"a100", "r8", "slow"} and data["verdict"] == "FAIL"
    assert "interconnect: nvswitch (nvlink3), decided by GPU names" in res.stdout
    md = (tmp_path / "c2" / "check.md").read_text()
    assert "## a100: PASS" in md and "## r8: PASS" in md and "## slow: FAIL" in md


# --- synthetic headers of other GPUs ------------------------------------------------------------------

@pytest.mark.parametrize("gpu,ranks,alpha,bus,cls,link,c10,c9", [
    ("NVIDIA H100 80GB HBM3", 8, 12.0, 370.0, "nvswitch", "nvlink4", "PASS", "PASS"),
    # one healthy figure (8x H20, 16.7 us) stands behind NVLink 4 at TP=8: PASS up to its 1.6x
    ("NVIDIA H100 80GB HBM3", 8, 22.0, 370.0, "nvswitch", "nvlink4", "PASS", "PASS"),
    ("NVIDIA H100 80GB HBM3", 8, 28.0, 120.0, "nvswitch", "nvlink4", "WARN", "FAIL"),
    ("NVIDIA B200", 8, 10.0, 680.0, "nvswitch", "nvlink5", "PASS", "PASS"),
    # 2.7x and 4.7x the nvlink4 profile at TP=4, a figure derived from other boxes: a modelled profile
    # alone never FAILs (a FAIL needs two healthy boxes of the class or a physical bound, issue 33)
    ("NVIDIA H200", 4, 40.0, 370.0, "nvlink", "nvlink4", "WARN", "PASS"),
    ("NVIDIA H200", 4, 70.0, 370.0, "nvlink", "nvlink4", "WARN", "PASS"),
    ("NVIDIA GeForce RTX 5090", 8, 30.0, 20.0, "pcie", "pcie5", "PASS", "WARN"),
    ("NVIDIA GeForce RTX 5090", 8, 30.0, 10.0, "pcie", "pcie5", "PASS", "FAIL"),
    ("NVIDIA L40S", 4, 50.0, 12.0, "pcie", "pcie4", "WARN", "WARN"),
    ("NVIDIA A100 80GB PCIe", 4, 25.0, 25.0, "pcie", "pcie4", "PASS", "PASS"),
])
def test_synthetic_boxes_class_and_verdicts(tmp_path, gpu, ranks, alpha, bus, cls, link, c10, c9):
    d = imported(tmp_path, "box", nccl_log(str(tmp_path), gpu, ranks=ranks, alpha_us=alpha, busbw_gbps=bus))
    by, ev = items_of(d)
    assert (ev.interconnect.cls, ev.interconnect.link) == (cls, link)
    assert (by["C10"].status, by["C9"].status, by["C16"].status) == (c10, c9, "PASS")
    assert ("NVLink" if link.startswith("nvlink") else "PCIe") in by["C10"].threshold


def test_unknown_gpu_stays_unknown_and_says_what_would_decide(cli_inproc, tmp_path):
    d = imported(tmp_path, "box", nccl_log(str(tmp_path), "Mystery Accelerator 9000", alpha_us=35.0, busbw_gbps=20.0))
    by, ev = items_of(d)
    assert ev.interconnect.cls == "unknown" and ev.interconnect.evidence == ""
    for key in ("C2", "C10", "C9"):
        assert by[key].status == "SKIP", key
        assert "nvidia-smi-topo" in by[key].hint and "--interconnect" in by[key].hint
    assert by["C10"].threshold == "NVLink or PCIe thresholds"          # neither applied: never PCIe by default
    # the flag decides, and says so
    by, ev = items_of(d, interconnect="pcie4")
    assert ev.interconnect.evidence == "the --interconnect flag" and ev.interconnect.link == "pcie4"
    assert by["C10"].status == "PASS" and by["C9"].status == "PASS"        # 20 GB/s vs the 4090 box's 14.8
    res = cli_inproc("check", d, "--interconnect", "nvlink4", "--out", str(tmp_path / "c"))
    assert res.returncode == 8
    data = json.loads((tmp_path / "c" / "check.json").read_text())
    got = {i["id"]: i["status"] for i in data["items"]}
    assert got["C10"] == "WARN" and got["C9"] == "FAIL"     # 35 us: 2.1x the H20 box's 16.7; 20 GB/s vs Ring 370
    assert data["interconnect"]["evidence"] == "the --interconnect flag" and data["interconnect"]["link"] == "nvlink4"


@pytest.mark.parametrize("spec,want", [
    ("nvswitch", [("nvswitch", "")]), ("nvlink3", [("nvswitch", "nvlink3")]), ("pcie5-no-p2p", [("pcie-no-p2p", "pcie5")]),
    ("pcie-p2p", [("pcie-p2p", "")]), ("reference:pcie4-nop2p", [("pcie-no-p2p", "pcie4")]),
    ("nvlink4,pcie4", [("nvswitch", "nvlink4"), ("pcie", "pcie4")]),
])
def test_interconnect_flag_values(spec, want):
    assert parse_interconnect(spec) == want


@pytest.mark.parametrize("verb", ["check", "gap", "report"])
def test_bad_interconnect_flag_is_exit_2(cli_inproc, tmp_path, verb):
    d = imported(tmp_path, "box", nccl_log(str(tmp_path), "NVIDIA L40S", ranks=4))
    res = cli_inproc(verb, d, "--interconnect", "nvlink9", "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "--interconnect 'nvlink9': unknown" in one_line_error(res)


def test_sxm_names_with_a_pcie_topology_fail_c2(tmp_path):
    """GPU names say NVLink modules, the topology shows none: NVLink down, or not the box quoted."""
    from commprof.ingest.smitopo import parse_smi_topo
    from commprof.results.topo import write_topology

    d = imported(tmp_path, "box", nccl_log(str(tmp_path), "NVIDIA H100 80GB HBM3"))
    write_topology(parse_smi_topo([os.path.join(REPO, "tests", "data", "nvidia-smi", "rtx4090x8-sys-topo-m.txt")]),
                   os.path.join(d, "topo.json"))
    by, ev = items_of(d)
    assert ev.interconnect.cls == "pcie" and ev.interconnect.evidence.startswith("topo.json (nvidia-smi topo text")
    assert by["C2"].status == "FAIL" and "NVLink modules" in by["C2"].value


# --- multi-node ----------------------------------------------------------------------------------------

def test_two_node_h100_run_is_judged_by_the_network_and_gap_answers(cli_inproc, tmp_path):
    log = nccl_log(str(tmp_path), "NVIDIA H100 80GB HBM3", ranks=16, hosts=("node1", "node2"), alpha_us=45.0,
                   busbw_gbps=180.0)
    d = imported(tmp_path, "two", log)
    by, ev = items_of(d)
    ic = ev.interconnect
    # its own class: the network between the nodes, the link inside a node beside it (never "nvlink")
    assert ic.nodes == 2 and ic.hosts == ["node1", "node2"] and (ic.cls, ic.link) == ("multinode", "network")
    assert (ic.ranks, ic.intra_cls, ic.intra_link) == (16, "nvswitch", "nvlink4")
    assert "16 ranks on 2 nodes" in by["C2"].value and "the network between the nodes decides" in by["C2"].value
    assert "inside a node: nvswitch (nvlink4)" in by["C2"].value
    assert by["C10"].status == "SKIP" and "spans hosts" in by["C10"].value          # no PCIe/NVLink guess
    assert by["C9"].status == "SKIP"
    assert by["C10n"].status == "PASS" and "healthy multi-node (TP group across hosts) boxes at TP=16" in by["C10n"].threshold
    assert "nccl/issues/1244" in by["C10n"].source
    assert by["C9n"].status == "SKIP" and "busbw_pass_gbps" in by["C9n"].hint
    f = tmp_path / "net.toml"
    f.write_text("[multinode]\nbusbw_pass_gbps = 150.0\nbusbw_warn_gbps = 50.0\n")
    by, _ = items_of(d, th=load_thresholds(str(f)))
    assert by["C9n"].status == "PASS"
    res = cli_inproc("gap", d)
    assert res.returncode == 0, res.stderr
    assert "stands at TP=8 (one node)" in res.stdout and "vs nvlink4" in res.stdout
    assert "16 │ eager │ 8KiB" in res.stdout or "16 " in res.stdout


# --- wrong results never pass ---------------------------------------------------------------------------

def test_wrong_results_make_import_exit_1_and_check_fail(cli_inproc, tmp_path):
    log = nccl_log(str(tmp_path), "NVIDIA L40S", ranks=4, wrong={8192: (0, 5)})
    out = tmp_path / "imp"
    res = cli_inproc("import", "nccl-tests", log, "--out", str(out))
    assert res.returncode == 1
    line = one_line_error(res)
    assert "in-place #wrong = 5 at 8192 B" in line and "all_reduce_perf.log' line" in line and str(out) in line
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    bad = [r for r in rows if r["size_bytes"] == "8192"][0]
    assert (bad["status"], bad["wrong"], bad["wrong_out_of_place"], bad["wrong_in_place"]) == ("WRONG", "5", "0", "5")
    res = cli_inproc("check", str(out), "--out", str(tmp_path / "c"))
    assert res.returncode == 8
    item = [i for i in json.loads((tmp_path / "c" / "check.json").read_text())["items"] if i["id"] == "C16"][0]
    assert item["status"] == "FAIL" and "1 of 16 rows WRONG" in item["value"] and "8KiB" in item["value"]


def test_measured_wrong_row_fails_check(tmp_path):
    meta = {"kind": "measured", "backend": "nccl", "hosts": ["h"], "gpus": ["NVIDIA H100 80GB HBM3"],
            "command": ["test"]}
    d = write_sweep_dir(tmp_path / "sweep", meta, [
        {"op": "all_reduce", "tp": 8, "group": 0, "mode": "graph", "size_bytes": size, "count": 1,
         "iters": 1, "warmup": 0, "concurrent": 0, "latency_us_p50": 9.0, "latency_us_p99": 10.0,
         "busbw_gbps": 1.0, "wrong": wrong, "status": "WRONG" if wrong else "ok", "hosts": "h"}
        for size, wrong in ((4096, 0), (16384, 3))])
    by, _ = items_of(d)
    assert by["C16"].status == "FAIL" and by["C10"].status == "PASS" and by["C10"].item.endswith("(graph mode)")


def test_validation_off_is_unknown_not_zero(tmp_path):
    d = imported(tmp_path, "na", nccl_log(str(tmp_path), "NVIDIA L40S", ranks=4, validation=False))
    rows = list(csv.DictReader(open(os.path.join(d, "sweep.csv"))))
    assert {r["status"] for r in rows} == {"unchecked"} and {r["wrong_out_of_place"] for r in rows} == {""}
    by, _ = items_of(d)
    assert by["C16"].status == "SKIP" and "validation on" in by["C16"].hint


# --- one dir, one box ----------------------------------------------------------------------------------

def test_import_refuses_logs_of_different_boxes(tmp_path):
    a = nccl_log(str(tmp_path / "a_all_reduce.log"), "NVIDIA H100 80GB HBM3", hosts=("hgx1",))
    b = nccl_log(str(tmp_path / "b_all_reduce.log"), "NVIDIA GeForce RTX 4090", hosts=("gamer",))
    with pytest.raises(UsageError) as e:
        import_nccl_tests([a, b], str(tmp_path / "o"))
    msg = str(e.value)
    assert "2 different boxes" in msg and "8x NVIDIA H100 80GB HBM3 on hgx1 ('a_all_reduce.log')" in msg and "gamer" in msg
    assert "\n" not in msg and not (tmp_path / "o").exists()
    # the same box's other collective may join it; the same collective twice may not
    c = nccl_log(str(tmp_path / "c_all_gather.log"), "NVIDIA H100 80GB HBM3", hosts=("hgx1",), op="all_gather")
    with open(c) as f:
        text = f.read().replace("# nThread", "# Collective test starting: all_gather_perf\n# nThread", 1)
    with open(c, "w") as f:
        f.write(text)
    out = import_nccl_tests([a, c], str(tmp_path / "same"))
    assert os.path.isdir(out)
    d = nccl_log(str(tmp_path / "d_all_reduce.log"), "NVIDIA H100 80GB HBM3", hosts=("hgx1",))
    with pytest.raises(UsageError, match="'a_all_reduce.log' and 'd_all_reduce.log' both measure all_reduce on 8 ranks"):
        import_nccl_tests([a, d], str(tmp_path / "dup"))


def test_real_logs_of_two_boxes_are_refused_in_one_dir(cli_inproc, tmp_path):
    res = cli_inproc("import", "nccl-tests", corpus_log(A100_LOG), RTX8, "--out", str(tmp_path / "o"))
    assert res.returncode == 2
    line = one_line_error(res)
    assert "8x A100-SXM4-40GB on localhost" in line and "8x NVIDIA GeForce RTX 4090 on <REDACTED>" in line


# --- several boxes side by side ------------------------------------------------------------------------

def test_gap_of_two_real_boxes_side_by_side(cli_inproc, tmp_path):
    a, r8 = imported(tmp_path, "a100", corpus_log(A100_LOG)), imported(tmp_path, "r8", RTX8)
    out = tmp_path / "gap"
    res = cli_inproc("gap", a, r8, "--out", str(out))
    assert res.returncode == 0, res.stderr
    # each box against its own reference (the other kind), then the boxes against each other
    assert "box 'a100' vs pcie5-nop2p" in res.stdout and "box 'r8' vs nvlink4" in res.stdout
    assert ("r8 vs a100, all_reduce TP=8 eager, decode sizes 8B-64KiB (14 sizes): latency (avg (nccl-tests)) "
            "1.21x") in res.stdout
    assert "r8 vs a100, all_reduce TP=8 eager, large sizes 64MiB-128MiB (2 sizes): busbw 0.07x" in res.stdout
    pairs = list(csv.DictReader(open(out / "gap_boxes.csv")))
    one_mib = [p for p in pairs if p["size_bytes"] == str(1 << 20)][0]
    assert (float(one_mib["a"]), float(one_mib["b"]), one_mib["matched"]) == (74.78, 222.8, "exact")
    meta = json.loads((out / "meta.json").read_text())
    assert [b["box"] for b in meta["boxes"]] == ["a100", "r8"] and meta["boxes"][0]["latency_stat"] == "avg (nccl-tests)"
    md = (out / "gap.md").read_text()
    assert "Alpha-beta fit of this box" in md and "| 1MiB |" in md and "![gap](gap.png)" in md
    assert (out / "gap.png").stat().st_size > 10000
    # the alpha-beta fit of each box, sizes in binary units
    assert "fit all_reduce tp=8 eager: latency = " in res.stdout and "sizes 4B-8GiB)" in res.stdout


def test_report_of_two_real_boxes(cli_inproc, tmp_path):
    a, r8 = imported(tmp_path, "a100", corpus_log(A100_LOG)), imported(tmp_path, "r8", RTX8)
    out = tmp_path / "rep"
    res = cli_inproc("report", a, r8, "--out", str(out))
    assert res.returncode == 0, res.stderr
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert "# commprof report: a100 vs r8" in md
    assert "## Boxes side by side (A = a100; ratio = B / A)" in md
    assert "## Box 1: a100" in md and "## Box 2: r8" in md and "### a100: Checklist: PASS" in md
    assert "### r8: Checklist: PASS" in md
    assert "| op | tp | mode | size | avg (nccl-tests) us | busbw GB/s | wrong |" in md     # no fake p50/p99
    assert "p99 us" not in md
    assert "| a100 | A100-SXM4-40GB | localhost | imported | nvswitch (nvlink3) |" in md
    for png in ("boxes_latency_vs_size.png", "boxes_busbw_vs_size.png", "gap.png", "gap_box1.png", "gap_box2.png"):
        assert (out / png).stat().st_size > 10000, png
    assert html.count("data:image/png;base64,") == 9      # 2 side by side + gap, and per box 2 sweep + gap
    assert '<h3 id="a100-checklist">a100: Checklist' in html         # each heading has its contents anchor


@pytest.mark.parametrize("verb", ["gap", "report"])
def test_bogus_reference_exits_2(cli_inproc, tmp_path, verb):
    d = imported(tmp_path, "box", nccl_log(str(tmp_path), "NVIDIA L40S", ranks=4))
    res = cli_inproc(verb, d, "--reference", "bogus", "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "--reference 'bogus': unknown" in one_line_error(res)


def test_graph_mode_label_only_for_graph_runs(tmp_path):
    d = imported(tmp_path, "g", nccl_log(str(tmp_path), "NVIDIA H100 80GB HBM3", graph=10, alpha_us=8.0))
    by, _ = items_of(d)
    assert by["C10"].item == "all-reduce latency at decode sizes (graph mode)" and by["C10"].status == "PASS"
    assert "measured without CUDA graphs" not in by["C10"].hint


# --- thresholds files -------------------------------------------------------------------------

@pytest.mark.parametrize("content,needle", [
    (b"[busbw]\npass_fraction = -0.5\n", "key 'busbw.pass_fraction' = -0.5: must be a finite number >= 0"),
    (b"[busbw]\npass_fraction = nan\n", "key 'busbw.pass_fraction' = nan"),
    (b"[allreduce_latency]\npcie_pass_us = inf\n", "key 'allreduce_latency.pcie_pass_us' = inf"),
    (b"[allreduce_latency]\npcie_pass_us = -1\n", "key 'allreduce_latency.pcie_pass_us' = -1"),
    (b"[inventory]\nexpected_gpus = -8\n", "key 'inventory.expected_gpus' = -8"),
    (b"# caf\xe9\n[busbw]\n", "is not UTF-8"),
])
def test_bad_thresholds_files(cli_inproc, tmp_path, content, needle):
    f = tmp_path / "t.toml"
    f.write_bytes(content)
    with pytest.raises(UsageError, match=needle.replace("(", r"\(").replace(")", r"\)")) as e:
        load_thresholds(str(f))
    assert str(f) in str(e.value) and "\n" not in str(e.value)
    d = imported(tmp_path, "box", nccl_log(str(tmp_path), "NVIDIA L40S", ranks=4))
    res = cli_inproc("check", d, "--thresholds", str(f), "--out", str(tmp_path / "c"))
    assert res.returncode == 2 and str(f) in one_line_error(res)


def test_thresholds_file_that_is_a_directory(tmp_path):
    with pytest.raises(UsageError, match="is a directory"):
        load_thresholds(str(tmp_path))


def test_resolve_interconnect_of_a_cpu_sweep_is_cpu(gloo_sweep):
    ev = gather([gloo_sweep])
    assert resolve_interconnect(ev).cls == "cpu"
