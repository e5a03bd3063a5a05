"""``commprof import nvidia-smi-topo``: the text a vendor sends becomes the topo.json ``topo`` writes,
and ``check`` judges the box by it (saying that this evidence decided).

Fixtures in tests/data/nvidia-smi/: the 8x RTX 4090 rows are real (published with the box of the
rtx4090x8 nccl-tests log in tests/data/nccl-tests, source on the file's first lines); the others are synthetic, in
nvidia-smi's layout, and say so."""
import json
import os

import pytest

from commprof.results.topo import GPU_KEYS
from commprof.analysis.checkitems import run_items
from commprof.analysis.evidence import gather
from commprof.analysis.thresholds import load_thresholds
from commprof.model.errors import UsageError
from commprof.ingest.smitopo import parse_smi_topo

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "nvidia-smi")
RTX_M = os.path.join(DATA, "rtx4090x8-sys-topo-m.txt")
RTX_P2P = os.path.join(DATA, "rtx4090x8-p2p-r-stock.txt")
H100_M = os.path.join(DATA, "h100x8-nvswitch-topo-m.txt")
A100X4_M = os.path.join(DATA, "a100x4-nvlink-topo-m.txt")
L40S = os.path.join(DATA, "l40sx4-pix-topo-m-p2p-rw.txt")
LOGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "nccl-tests")


def test_real_rtx4090_topo_m_alone_is_pcie_with_p2p_unknown():
    t = parse_smi_topo([RTX_M])
    assert t["gpu_count"] == 8 and t["interconnect_class"] == "pcie" and t["p2p"] == {}
    assert all(t["matrix"][i][j] == ("X" if i == j else "SYS") for i in range(8) for j in range(8))
    assert t["numa_nodes"] == 8 and t["gpus"][6]["cpu_affinity"] == "40-47,104-111" and t["gpus"][6]["numa_node"] == 5
    assert t["gpus"][0]["name"] == "n/a" and t["kind"] == "imported"
    assert any("-p2p r" in n for n in t["notes"])
    # the same keys commprof topo writes (views and check read both alike)
    assert set(GPU_KEYS) <= set(t["gpus"][0])


def test_with_p2p_r_the_stock_4090_box_is_pcie_no_p2p():
    t = parse_smi_topo([RTX_M, RTX_P2P])
    assert t["interconnect_class"] == "pcie-no-p2p" and t["p2p_given"] == ["read"]
    assert t["p2p"]["read"][0][1] == "GPU not supported"


@pytest.mark.parametrize("path,cls,links", [(H100_M, "nvswitch", 18), (A100X4_M, "nvlink", 12)])
def test_nvlink_boxes(path, cls, links):
    t = parse_smi_topo([path])
    assert t["interconnect_class"] == cls
    assert {g["nvlink_active_links"] for g in t["gpus"]} == {links}


def test_several_blocks_in_one_file_read_and_write():
    t = parse_smi_topo([L40S])
    assert t["matrix"][0][1] == "PIX" and t["matrix"][0][2] == "PXB"
    assert t["p2p_given"] == ["read", "write"]
    assert t["p2p"]["write"][0][3] == "chipset not supported" and t["interconnect_class"] == "mixed"


@pytest.mark.parametrize("text,needle", [
    ("hello\n", "no nvidia-smi topo matrix"),
    ("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tFOO\t X \n", "cell 'FOO' of row GPU0"),
    ("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tSYS\t X \n", "GPU0-GPU1 is PIX but GPU1-GPU0 is SYS"),
    ("\tGPU0\tGPU1\nGPU0\t X \tPIX\n", "no row for GPU1"),
    ("\tGPU0\tGPU1\nGPU0\t X \n", "row GPU0 has 1 cells"),
    (" \tGPU0\tGPU1\n GPU0\tX\tOK\n GPU1\tOK\tX\n", "only -p2p matrices"),
])
def test_bad_text_is_one_line_naming_the_file(tmp_path, text, needle):
    p = tmp_path / "topo.txt"
    p.write_text(text)
    with pytest.raises(UsageError, match=needle) as e:
        parse_smi_topo([str(p)])
    assert "topo.txt" in str(e.value) and "\n" not in str(e.value)


def test_gpu_counts_must_agree_and_files_must_exist(tmp_path):
    with pytest.raises(UsageError, match="8 GPUs, but the topo -m matrix has 4"):
        parse_smi_topo([A100X4_M, RTX_P2P])
    with pytest.raises(UsageError, match="file not found"):
        parse_smi_topo([str(tmp_path / "nope.txt")])
    with pytest.raises(UsageError, match="is a directory"):
        parse_smi_topo([str(tmp_path)])
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"\tGPU0\n\xff\n")
    with pytest.raises(UsageError, match="not UTF-8"):
        parse_smi_topo([str(bad)])


def test_import_cli_writes_topo_json_and_check_says_what_decided(cli_inproc, tmp_path):
    out = tmp_path / "smi"
    res = cli_inproc("import", "nvidia-smi-topo", RTX_M, RTX_P2P, "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "interconnect class pcie-no-p2p" in res.stdout
    t = json.loads((out / "topo.json").read_text())
    meta = json.loads((out / "meta.json").read_text())
    assert t["interconnect_class"] == "pcie-no-p2p" and meta["verb"] == "import" and meta["kind"] == "imported"
    assert len(meta["source_files"]) == 2 and meta["source_files"][0]["sha256"]
    # check on the topology alone: class decided by the imported text; P2P judged from -p2p r
    res = cli_inproc("check", str(out), "--out", str(tmp_path / "chk"))
    data = json.loads((tmp_path / "chk" / "check.json").read_text())
    by = {i["id"]: i for i in data["items"]}
    assert data["interconnect"]["cls"] == "pcie-no-p2p"
    assert data["interconnect"]["evidence"] == "topo.json (nvidia-smi topo text, imported)"
    assert by["C2"]["status"] == "PASS" and "nvidia-smi topo text" in by["C2"]["value"]
    assert by["C5"]["status"] == "WARN" and "read only" in by["C5"]["value"]
    assert by["C12"]["status"] == "WARN"                  # TP=8 across sockets on a PCIe box
    assert by["C6"]["status"] == "SKIP" and "not in nvidia-smi topo text" in by["C6"]["value"]


def test_smi_topology_plus_the_real_log_judge_the_4090_box(cli_inproc, tmp_path):
    """The vendor's topo text and its nccl-tests log together: the class from the text, the PCIe
    generation (for the busbw ceiling) from the GPU names in the log."""
    log = os.path.join(LOGS, "rtx4090x8_pcie_allreduce_chlc_blog.txt")
    assert cli_inproc("import", "nccl-tests", log, "--out", str(tmp_path / "log")).returncode == 0
    assert cli_inproc("import", "nvidia-smi-topo", RTX_M, RTX_P2P, "--out", str(tmp_path / "smi")).returncode == 0
    items = run_items(gather([str(tmp_path / "log"), str(tmp_path / "smi")]), load_thresholds())
    by = {i.id: i for i in items}
    assert by["C2"].status == "PASS" and by["C2"].value.startswith("pcie-no-p2p (pcie4), from topo.json "
                                                                   "(nvidia-smi topo text, imported) + GPU names")
    # judged against the healthy PCIe 4.0 boxes without P2P (the box itself and nccl#1530's 8x 4090)
    assert by["C9"].status == "PASS" and "healthy PCIe 4.0 without P2P boxes at TP=8" in by["C9"].threshold
    assert by["C10"].status == "PASS" and "healthy PCIe 4.0 without P2P boxes at TP=8" in by["C10"].threshold
    assert by["C12"].status == "WARN"
