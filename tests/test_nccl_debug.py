"""commprof import nccl-debug: NCCL's own account of a box. The real logs are read from
shared/data beside the checkout (skipped, named, when absent); each expectation below was counted
in the log with grep and checked against its source's description, not taken from the reader."""
import json
import os

import pytest
from helpers import REPO, shared_data

from commprof.ingest.nccldebug import comm_rows, import_nccl_debug, pair_rows, read_logs, summary, transport_label
from commprof.analysis.ncclverdict import engine_items
from commprof.model.errors import UsageError

FRAG = os.path.join(REPO, "tests", "data", "nccl-debug", "fragment_8gpu_nvlink_written.log")


def _verdicts(path, **kw):
    acc = read_logs([path])
    info, comms, pairs = summary(acc), comm_rows(acc), pair_rows(acc)
    return info, comms, pairs, {i["id"]: i["verdict"] for i in engine_items(info, comms, pairs, **kw)}


# log -> (network, overrides that matter, {item: verdict}); counted with grep in each log
REAL = {
    "rtx5060tix2_pcie-p2p_vllm_p2pbench-on.log": ("Socket", {}, {"N1": "PASS", "N4": "PASS"}),
    "rtx5060tix2_pcie-shm-p2pdisabled_vllm_p2pbench-off.log": ("Socket", {"NCCL_P2P_DISABLE": ["1"]},
                                                               {"N1": "FAIL", "N4": "WARN"}),
    "a100x16_2node_ib_vllm_llmk8s-ib.log": ("IB", {}, {"N1": "PASS", "N2": "PASS"}),
    "a100x16_2node_socket_vllm_llmk8s-noib.log": ("Socket", {}, {"N1": "PASS", "N2": "FAIL"}),
    "h100x16_2node_roce_sglang_slurmv4.log": ("IB", {"NCCL_NVLS_ENABLE": ["0"]},
                                              {"N1": "PASS", "N2": "PASS", "N3": "INFO"}),
    "l40sx4_pcie-shm-p2plevel-nvl_torchrun-train_trainingoneks.log": ("Libfabric", {"NCCL_P2P_LEVEL": ["NVL"]},
                                                                      {"N1": "FAIL"}),
    "l40sx4_4pod_efa-libfabric_torchrun-train_trainingoneks.log": ("Libfabric", {}, {"N2": "WARN"}),
    "l40sx8_pcie_no-nccl-debug_vllm_vlmdistill.log": (None, {}, {"N0": "INSUFFICIENT", "N4": "INFO"}),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_each_real_log_gives_its_stated_account(name):
    net, env, want = REAL[name]
    info, comms, pairs, got = _verdicts(shared_data("nccl-debug", name))
    assert (sorted(info["networks"]) or [None]) == [net]
    for k, v in env.items():
        assert info["env_overrides"][k] == v
    for k, v in want.items():
        assert got.get(k) == v, (k, got)


def test_p2p_box_pairs_and_engine_lines():
    info, comms, pairs, _ = _verdicts(shared_data("nccl-debug", "rtx5060tix2_pcie-p2p_vllm_p2pbench-on.log"))
    # grep 'via P2P/CUMEM' gives 4 lines: channels 0 and 1 of 0->1 and of 1->0
    assert sorted((p["src_rank"], p["dst_rank"], p["channels"]) for p in pairs) == [(0, 1, 2), (1, 0, 2)]
    assert {p["transport"] for p in pairs} == {"P2P/CUMEM"}
    assert info["nccl_version"] == ["2.28.9"] and info["cuda_version"] == ["13.0"]
    assert info["engine"]["engine_version"] == "0.23.0" and info["engine"]["custom_all_reduce"] == "on"
    tp = [c for c in comms if c["pairs"]]
    assert tp[0]["summary"] == "TP group of 2 on 1 node: 2 of 2 pairs printed P2P/CUMEM"


def test_two_node_roce_box_counts():
    info, comms, pairs, _ = _verdicts(shared_data("nccl-debug", "h100x16_2node_roce_sglang_slurmv4.log"))
    (c,) = comms
    assert (c["nranks"], c["nnodes"], c["local_ranks"]) == (16, 2, "8")
    assert info["nccl_version"] == ["2.27.5"]
    net = [p for p in pairs if p["transport_class"] == "NET/IB"]
    assert net and all("GDRDMA" in p["transport"] for p in net)


def test_custom_allreduce_off_on_more_than_two_pcie_gpus_is_expected_not_a_fault():
    info, _, _, got = _verdicts(shared_data("nccl-debug", "l40sx8_pcie_no-nccl-debug_vllm_vlmdistill.log"))
    assert "more than two PCIe-only GPUs" in info["engine"]["custom_all_reduce_why"]
    assert info["nccl_lines"] == 0 and got["N4"] == "INFO"


def test_fragment_with_prefixes_colours_and_a_cut_line():
    info, comms, pairs, got = _verdicts(FRAG)
    (c,) = [c for c in comms if c["comm"] == "0xabc"]
    assert c["nranks"] == 8 and c["nnodes"] == 1 and c["coll_channels"] == 16 and c["nvls_channels"] == 0
    assert "(NVLink)" in c["summary"]              # the graph line says type NVL
    assert info["truncated_channel_lines"] == 1 and info["hosts"] == ["boxa"]    # the colour codes are gone
    assert got["N1"] == "PASS" and got["N3"] == "WARN"   # NVLS available, 0 nvls channels


def test_fewer_gpus_than_sold_fails():
    _, _, _, got = _verdicts(FRAG, expect_gpus=16)
    assert got["N5"] == "FAIL"
    _, _, _, got = _verdicts(FRAG, expect_gpus=8, expect_nodes=1)
    assert got["N5"] == "PASS"


def test_transport_labels():
    assert transport_label("NET/IB/3/GDRDMA") == "NET/IB/GDRDMA"
    assert transport_label("P2P/IPC/read") == "P2P/IPC"
    assert transport_label("SHM/direct/direct") == "SHM"
    assert transport_label("NET/Socket/0") == "NET/Socket"


def test_import_writes_tables_meta_and_show_reads_them(cli_inproc, tmp_path):
    out = tmp_path / "nd"
    res = cli_inproc("import", "nccl-debug", FRAG, "--out", str(out), "--expect-gpus", "8")
    assert res.returncode == 0, res.stderr
    assert "pairs printed P2P/CUMEM (NVLink)" in res.stdout
    meta = json.loads((out / "meta.json").read_text())
    assert meta["import_kind"] == "nccl-debug" and meta["nccl_debug"]["nccl_version"] == ["2.26.2"]
    assert all(not f["path"].startswith("/") or "tests/data" in f["path"] for f in meta["source_files"])
    for f in ("nccl_comms.csv", "nccl_pairs.csv", "nccl_verdict.csv"):
        assert (out / f).exists()
    res = cli_inproc("show", str(out))
    assert res.returncode == 0 and "WARN  N3" in res.stdout


def test_no_nccl_line_exits_9_with_one_line(cli_inproc, tmp_path):
    p = tmp_path / "engine.log"
    p.write_text("INFO 07-23 20:47:08 engine started\nall good\n")
    res = cli_inproc("import", "nccl-debug", str(p), "--out", str(tmp_path / "o"))
    assert res.returncode == 9
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("commprof: error:")][0].count("no NCCL INFO line") == 1


def test_bad_input_one_line(cli_inproc, tmp_path):
    b = tmp_path / "bin.log"
    b.write_bytes(b"\x7fELF\x00\x00\x00" * 100)
    res = cli_inproc("import", "nccl-debug", str(b), "--out", str(tmp_path / "o1"))
    assert res.returncode == 2 and "binary file" in res.stderr
    res = cli_inproc("import", "nccl-debug", str(tmp_path / "missing.log"), "--out", str(tmp_path / "o2"))
    assert res.returncode == 2 and "no such file" in res.stderr
    res = cli_inproc("import", "nccl-tests", FRAG, "--expect-gpus", "8", "--out", str(tmp_path / "o3"))
    assert res.returncode == 2 and "nccl-debug" in res.stderr


def test_a_large_log_is_streamed(tmp_path):
    """50 MB of another library's lines with an NCCL fragment at the end: read line by line."""
    import resource
    import time

    p = tmp_path / "big.log"
    noise = ("2026-01-01 12:00:00 INFO worker heartbeat ok " + "x" * 60 + "\n") * 10000
    with open(p, "w") as f:
        for _ in range(50):
            f.write(noise)
        f.write(open(FRAG).read())
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    acc = read_logs([str(p)])
    assert acc.nccl_lines == 13 and acc.hosts == {"boxa"} and time.monotonic() - t0 < 60
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024   # KiB: under 200 MB more


def test_import_function_refuses_no_paths(tmp_path):
    with pytest.raises(UsageError):
        import_nccl_debug([], str(tmp_path / "o"))


# the logs whose channel lines each name one rank pair of one communicator once (no Ray folding, no
# line overwritten by another rank's output): what commprof reads is what grep counts, line for line
GREP_EXACT = {
    # grep -c 'via P2P/IPC' = 240, grep -c 'via NET/IB' = 64
    "h100x16_2node_roce_sglang_slurmv4.log": {"P2P": 240, "NET/IB": 64},
    "l40sx4_pcie-shm-p2plevel-nvl_torchrun-train_trainingoneks.log": {"SHM": 28},
    "l40sx4_4pod_efa-libfabric_torchrun-train_trainingoneks.log": {"NET/Libfabric": 24},
    "rtx5060tix2_pcie-p2p_vllm_p2pbench-on.log": {"P2P": 4},
    "rtx5060tix2_pcie-shm-p2pdisabled_vllm_p2pbench-off.log": {"SHM": 4},
}


@pytest.mark.parametrize("name", sorted(GREP_EXACT))
def test_channel_lines_per_transport_are_what_grep_counts(name):
    from collections import Counter

    _, _, pairs, _ = _verdicts(shared_data("nccl-debug", name))
    got = Counter()
    for p in pairs:
        got[p["transport_class"]] += p["channels"]
    assert dict(got) == GREP_EXACT[name]


def _table_pairs(comms, prefix):
    """The rank pairs the one-glance table gives a transport ('2 P2P/IPC, 1 SHM' per communicator)."""
    n = 0
    for c in comms:
        for part in (c["transports"] or "").split(", "):
            if part and part.split(" ", 1)[1].startswith(prefix):
                n += int(part.split(" ", 1)[0])
    return n


def _evidence_count(items, item_id, words):
    import re

    ev = next(i["evidence"] for i in items if i["id"] == item_id)
    return int(re.search(r"(\d+) rank pair\(s\) " + words, ev).group(1))


@pytest.mark.parametrize("name, n1, n2", [
    # 16 ranks over 2 nodes: 16 P2P/IPC pairs inside the nodes, 32 NET/IB/GDRDMA pairs between them
    ("h100x16_2node_roce_sglang_slurmv4.log", 16, 32),
    # the PP groups' NET/IB pairs: 2 + 2 + 2 in the table (11 before: one per NIC and direction line)
    ("a100x16_2node_ib_vllm_llmk8s-ib.log", None, 6),
    ("a100x16_2node_socket_vllm_llmk8s-noib.log", None, 6),
    ("l40sx4_4pod_efa-libfabric_torchrun-train_trainingoneks.log", None, 12),
])
def test_n1_and_n2_count_the_pairs_the_table_shows(name, n1, n2):
    """N1 counts the P2P/SHM pairs inside each node of a communicator that spans nodes too (the old
    reader gave the 2x8 H100 RoCE log no N1 at all), and N2 counts rank pairs as the table does."""
    acc = read_logs([shared_data("nccl-debug", name)])
    info, comms, pairs = summary(acc), comm_rows(acc), pair_rows(acc)
    items = engine_items(info, comms, pairs)
    by = {i["id"]: i for i in items}
    if n1 is not None:
        assert by["N1"]["verdict"] == "PASS"
        assert _evidence_count(items, "N1", "inside one node") == n1 == _table_pairs(comms, "P2P")
    words = "via NET/Socket" if by["N2"]["verdict"] == "FAIL" else "over the network"
    assert _evidence_count(items, "N2", words) == n2 == _table_pairs(comms, "NET/")


@pytest.mark.parametrize("doc, after, name", [
    ("nccl-debug.md", "## One real log", "rtx5060tix2_pcie-shm-p2pdisabled_vllm_p2pbench-off.log"),
    ("import.md", "## nccl-debug", "h100x16_2node_roce_sglang_slurmv4.log"),
])
def test_the_docs_show_a_real_logs_table_and_verdicts_as_the_tool_prints_them(cli_inproc, tmp_path, doc, after, name):
    page = open(os.path.join(REPO, "docs", doc)).read()
    at = page.index("```\n", page.index(after)) + 4
    shown = page[at:page.index("```\n", at)].splitlines()
    res = cli_inproc("import", "nccl-debug", shared_data("nccl-debug", name), "--out", str(tmp_path / "nd"))
    assert res.returncode in (0, 8), res.stderr
    printed = [ln for ln in res.stdout.splitlines() if not ln.startswith("imported ")]
    assert shown == printed


def test_an_empty_log_says_it_is_empty(cli_inproc, tmp_path):
    p = tmp_path / "nccl.log"
    p.write_text("")
    res = cli_inproc("import", "nccl-debug", str(p), "--out", str(tmp_path / "o"))
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("commprof: error:")]
    assert res.returncode == 9 and len(errors) == 1 and "(the file is empty)" in errors[0], res.stderr


@pytest.mark.parametrize("name, nics, layers, none_on", [
    # grep 'NET/IB : Using': 8 mlx5 devices per host, '/IB' on both hosts of the IB run, '/RoCE' on the one
    # host of the RoCE run; grep 'NET/IB : No device found': both hosts of the run without IB in the pods
    ("a100x16_2node_ib_vllm_llmk8s-ib.log", {"deepseek-v2-5-0": 8, "deepseek-v2-5-0-1": 8}, ["IB"], 0),
    ("h100x16_2node_roce_sglang_slurmv4.log", {"tpgds-aihub0008": 8}, ["RoCE"], 0),
    ("a100x16_2node_socket_vllm_llmk8s-noib.log", {}, [], 2),
])
def test_rdma_devices_nccl_listed_are_read_and_named_in_n2(name, nics, layers, none_on):
    info, _, _, _ = _verdicts(shared_data("nccl-debug", name))
    assert {h: len(v) for h, v in info["rdma_nics"].items()} == nics
    assert info["rdma_link_layers"] == layers and len(info["ib_no_device_on"]) == none_on
    items = {i["id"]: i for i in engine_items(info, comm_rows(read_logs([shared_data("nccl-debug", name)])),
                                              pair_rows(read_logs([shared_data("nccl-debug", name)])))}
    if none_on:
        assert items["N2"]["verdict"] == "FAIL" and "found no RDMA device on 2 host(s)" in items["N2"]["evidence"]
    else:
        assert f"link layer {layers[0]}" in items["N2"]["evidence"]


@pytest.mark.parametrize("name, version", [
    # vLLM under Ray: NCCL's VERSION line has no prefix ('(RayWorkerWrapper pid=..) NCCL version 2.21.5+cuda12.4');
    # the source says NCCL 2.21.5 (the reader gave no version before)
    ("a100x16_2node_ib_vllm_llmk8s-ib.log", "2.21.5"),
    ("a100x16_2node_socket_vllm_llmk8s-noib.log", "2.21.5"),
])
def test_the_bare_version_line_under_ray_is_read(name, version):
    info = summary(read_logs([shared_data("nccl-debug", name)]))
    assert info["nccl_version"] == [version] and info["cuda_version"] == ["12.4"]


def test_nccl_ib_hca_printed_set_to_is_an_override():
    # grep 'NCCL_IB_HCA set to' in the 2x8 H100 RoCE log: net_ib's plain form, missed before
    info = summary(read_logs([shared_data("nccl-debug", "h100x16_2node_roce_sglang_slurmv4.log")]))
    assert info["env_overrides"]["NCCL_IB_HCA"] == ["mlx5_0,mlx5_1,mlx5_2,mlx5_5,mlx5_6,mlx5_7,mlx5_8,mlx5_11"]


def test_an_hgx_h100_fabric_is_read_and_not_taken_for_a_rack():
    # grep 'fabric UUID 0.0' in the 2x8 H100 RoCE log: 8 GPUs of one host, state 3, no multi-node domain
    info = summary(read_logs([shared_data("nccl-debug", "h100x16_2node_roce_sglang_slurmv4.log")]))
    assert info["nvlink_fabric"]["gpus"] == 8 and info["nvlink_fabric"]["multi_node_domain_gpus"] == 0
