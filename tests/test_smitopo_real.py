"""Real ``nvidia-smi topo -m`` outputs from public threads (tests/data/nvidia-smi-topo-real, each with
its URL and the box the thread names in SOURCE.md): ``import nvidia-smi-topo`` reads the GPU count,
the interconnect class, the NICs and the NUMA affinity the thread's box has, and ``check`` judges it
so (C2, C3, C5, C12). Rows quoted from threads whose paste stops early are inline, with their URL."""
import os

import pytest
from helpers import shared_data

from commprof.analysis.checkitems import run_items
from commprof.analysis.evidence import gather
from commprof.analysis.thresholds import load_thresholds
from commprof.ingest.smitopo import parse_smi_topo, run_import_smi_topo
from commprof.model.errors import UsageError

REAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "nvidia-smi-topo-real")

# file, GPUs, class, NUMA nodes, NIC devices (the column name where no NIC legend names them), {NIC: GPUs at most a PCIe switch away}, C12 status
CASES = [
    ("nccl-tests320_3gpu_nv4-pair_topo-m.txt", 3, "mixed", 1, ["mlx5_0", "mlx5_1"], {}, "PASS"),
    ("nccl1617_h100x4_nv6_topo-m.txt", 4, "nvlink", 4, ["NIC0", "NIC1", "NIC2", "NIC3"],
     {"NIC0": [0], "NIC1": [1], "NIC2": [2], "NIC3": [3]}, "PASS"),
    ("nccl1264_h100x8_nv18_10nic_tabs_topo-m.txt", 8, "nvswitch", 2, [f"NIC{k}" for k in range(10)],
     {"NIC0": [0], "NIC1": [1], "NIC2": [2], "NIC5": [3], "NIC6": [4], "NIC7": [5], "NIC8": [6], "NIC9": [7]}, "PASS"),
    ("k8stestinfra371_gb200x4_nv18_topo-m.txt", 4, "nvswitch", 2, [], {}, "PASS"),
    ("club3090-1229_rtx5090x2_phb_topo-m_p2p-rw.txt", 2, "pcie-no-p2p", 1, [], {}, "PASS"),
    ("club3090-178_rtx3090x2_sys_numa-na_topo-m.txt", 2, "pcie", 1, [], {}, "WARN"),
    ("club3090-1125_rtx3090x2_node_indented_p2p-ns.txt", 2, "pcie-no-p2p", 1, [], {}, "PASS"),
    ("missalignment106_l40sx4_node-sys_topo-m.txt", 4, "pcie", 2, ["mlx5_0", "mlx5_1"], {}, "WARN"),
    ("gogpuallocator17_rtx4090x8_sys_tabs_topo-m.txt", 8, "pcie", 2, ["NIC0", "NIC1"], {}, "WARN"),
    ("nccltests273_l40sx8_node-sys_topo-m.txt", 8, "pcie", 2, ["NIC0"], {}, "WARN"),
]


@pytest.mark.parametrize("name,gpus,cls,numa,nics,near,c12", CASES, ids=[c[0].split("_")[0] for c in CASES])
def test_real_topo_outputs_import_and_judge_as_the_thread_says(tmp_path, name, gpus, cls, numa, nics, near, c12):
    t = parse_smi_topo([os.path.join(REAL, name)])
    assert (t["gpu_count"], t["interconnect_class"], t["numa_nodes"]) == (gpus, cls, numa)
    label = [x["device"] if x["device"] != "n/a" else x["name"] for x in t["nics"]]   # no NIC legend: its column
    assert label == nics
    assert {lb: x["near_gpus"] for lb, x in zip(label, t["nics"]) if x["near_gpus"]} == near
    assert all(set(x["gpu_paths"]) == {f"GPU{g}" for g in range(gpus)} for x in t["nics"])
    out = tmp_path / "smi"
    assert run_import_smi_topo([os.path.join(REAL, name)], str(out), command=["commprof"]) == 0
    by = {i.id: i for i in run_items(gather([str(out)]), load_thresholds())}
    assert by["C2"].status == "PASS" and by["C2"].value.startswith(cls + ",")
    assert by["C12"].status == c12, by["C12"].value
    if "p2p" in name:                       # a -p2p block in the file: its NS/GNS pairs WARN
        assert by["C5"].status == "WARN" and "without P2P" in by["C5"].value
        # neither paste says which -p2p mode ('topo -p2p rw' in a heading is none): read, and said so
        assert any("read as -p2p r" in n for n in t["notes"])
    else:
        assert by["C5"].status == "SKIP"


def test_the_nv4_bridge_pair_counts_links_only_where_bridged():
    t = parse_smi_topo([os.path.join(REAL, "nccl-tests320_3gpu_nv4-pair_topo-m.txt")])
    assert [g["nvlink_active_links"] for g in t["gpus"]] == [4, 4, 0]


# sglang-project/sglang#7888: an 8x NV18 box whose GPUs' NUMA Affinity is "0-1" (the first row, as
# quoted there; the rest of the box cut to two GPUs). Refused before ("neither a node number nor N/A").
NUMA_RANGE = ("        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity     GPU NUMA ID\n"
              "GPU0     X      NV18    PIX     0-187   0-1      N/A\n"
              "GPU1    NV18     X      PHB     0-187   0-1      N/A\n"
              "NIC0    PIX     PHB      X\n")


@pytest.mark.parametrize("affinity,node,count", [("0-1", "0-1", 2), ("0,2", "0,2", 2), ("3", 3, 1)])
def test_numa_affinity_may_be_a_node_list(tmp_path, affinity, node, count):
    p = tmp_path / "topo.txt"
    p.write_text(NUMA_RANGE.replace("0-1 ", affinity + " "))
    t = parse_smi_topo([str(p)])
    assert t["gpus"][0]["numa_node"] == node and t["numa_nodes"] == count


@pytest.mark.parametrize("affinity", ["0-99999999", "3-1", "1024"])
def test_a_numa_affinity_past_linux_nodes_is_one_line(tmp_path, affinity):
    p = tmp_path / "topo.txt"
    p.write_text(NUMA_RANGE.replace("0-1 ", affinity + " "))
    with pytest.raises(UsageError, match="is no NUMA node") as e:
        parse_smi_topo([str(p)])
    assert "\n" not in str(e.value)


# deepseek-ai/DeepEP#202: 'nvidia-smi topo -mp' of an 8x H20 box (NVLink inside) shows NODE/SYS only,
# as quoted there (four of its eight GPUs here). Judged 'pcie' with a SYS WARN before.
TOPO_MP = ("#### nvidia-smi topo -mp\n```\n"
           "        GPU0    GPU1    GPU2    GPU3    CPU Affinity    NUMA Affinity   GPU NUMA ID\n"
           "GPU0     X      NODE    SYS     SYS     0-47,96-143     0               N/A\n"
           "GPU1    NODE     X      SYS     SYS     0-47,96-143     0               N/A\n"
           "GPU2    SYS     SYS      X      NODE    48-95,144-191   1               N/A\n"
           "GPU3    SYS     SYS     NODE     X      48-95,144-191   1               N/A\n```\n")


def test_topo_mp_hides_nvlink_so_the_class_is_unknown_not_pcie(tmp_path):
    p = tmp_path / "h20.txt"
    p.write_text(TOPO_MP)
    t = parse_smi_topo([str(p)])
    assert t["interconnect_class"] == "unknown" and "-mp" in t["source"]
    assert any("topo -mp" in n and "topo -m'" in n for n in t["notes"])
    assert {g["nvlink_active_links"] for g in t["gpus"]} == {"n/a"}
    run_import_smi_topo([str(p)], str(tmp_path / "smi"), command=["commprof"])
    by = {i.id: i for i in run_items(gather([str(tmp_path / "smi")]), load_thresholds())}
    assert by["C2"].status == "SKIP" and "topo.json does not tell" in by["C2"].value
    assert by["C12"].status == "SKIP" and "not known" in by["C12"].value
    # the -m matrix given beside it decides
    m = tmp_path / "m.txt"
    m.write_text("nvidia-smi topo -m\n" + TOPO_MP.split("```\n")[1].replace("NODE", "NV18").replace("SYS ", "NV18"))
    both = parse_smi_topo([str(p), str(m)])
    assert both["interconnect_class"] == "nvswitch" and "-mp" not in both["source"]


def test_shared_b200_topo_lists_its_eight_rdma_nics():
    path = shared_data("nccl-tests", "b200x8_a4_nvidia-smi-topo-m_dranet.txt")
    t = parse_smi_topo([path])
    assert t["interconnect_class"] == "nvswitch" and t["numa_nodes"] == 2
    assert [x["device"] for x in t["nics"]] == [f"mlx5_{k}" for k in range(8)]
    assert t["nics"][0]["near_gpus"] == [0, 1] and t["nics"][7]["near_gpus"] == [6, 7]


def test_a_nic_row_cut_short_in_a_paste_is_no_refusal(tmp_path):
    """nccl#1264's paste as the search copy ends: mid NIC3 row. The GPU rows hold every path read."""
    text = open(os.path.join(REAL, "nccl1264_h100x8_nv18_10nic_tabs_topo-m.txt")).read()
    p = tmp_path / "cut.txt"
    p.write_text(text + "NIC3\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\n")
    t = parse_smi_topo([str(p)])
    assert t["interconnect_class"] == "nvswitch" and len(t["nics"]) == 10
