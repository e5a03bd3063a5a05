"""One rule for a box's interconnect class (``interconnect.classify_pairs``), whether NVML answered
(``commprof topo``) or ``nvidia-smi topo`` text was imported; fixtures: tests/data/nvml (recorded
NVML answers) and tests/data/nvidia-smi (their SOURCE lines)."""
import os

from fake_nvml import FakeNVML

from commprof.analysis.interconnect import classify_pairs
from commprof.capture.nvmltopo import collect_topology
from commprof.ingest.smitopo import parse_smi_topo

SMI = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "nvidia-smi")


def _p2p_unknown(fixture: str) -> FakeNVML:
    fake = FakeNVML(fixture)
    statuses = fake.fx["pairs"]["nvmlDeviceGetP2PStatus"]
    for idx in ("0", "1"):                         # read and write: NVML will not say
        statuses[idx] = [[None if a is None else {"error": "NotSupported"} for a in row] for row in statuses[idx]]
    return fake


def test_pcie_box_whose_p2p_nvml_will_not_tell_is_pcie_as_from_text():
    """The fabric is known (PCIe everywhere), P2P is not: ``pcie``, from NVML as from ``topo -m`` text
    given without ``-p2p`` (before, NVML's own rule said ``unknown`` here and the text's ``pcie``)."""
    nvml = collect_topology(_p2p_unknown("rtx5090-8x-pcie-2socket.json"))
    text = parse_smi_topo([os.path.join(SMI, "rtx4090x8-sys-topo-m.txt")])
    assert nvml["p2p"]["read"][0][1] == "n/a"
    assert nvml["interconnect_class"] == text["interconnect_class"] == "pcie"
    # with the statuses answered, NVML's box is judged by them
    assert collect_topology(FakeNVML("rtx5090-8x-pcie-2socket.json"))["interconnect_class"] == "pcie-no-p2p"


def test_a_pair_whose_fabric_is_unknown_makes_the_box_unknown():
    ok = {"read": [["X", "OK"], ["OK", "X"]], "write": [["X", "OK"], ["OK", "X"]]}
    assert classify_pairs([["X", "PIX"], ["PIX", "X"]], ok, False) == "pcie-p2p"
    assert classify_pairs([["X", "n/a"], ["n/a", "X"]], ok, False) == "unknown"
    three = [["X", "NV4", "n/a"], ["NV4", "X", "NV4"], ["n/a", "NV4", "X"]]
    assert classify_pairs(three, {}, True) == "unknown"        # the unknown pair may be NVLink too
    three[0][2] = three[2][0] = "SYS"
    assert classify_pairs(three, {}, True) == "mixed"
    assert classify_pairs([["X", "PIX"], ["PIX", "X"]], {}, False) == "pcie"
    assert classify_pairs([["X"]], {}, False) == "single-gpu"
