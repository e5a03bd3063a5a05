"""commprof topo from recorded NVML answers of real box shapes (tests/data/nvml), no GPU needed.

Each fixture names the published `nvidia-smi topo -m` output its shape comes from (``_source``);
``fake_nvml.FakeNVML`` answers the pynvml calls from it.
"""
import io
import json
import sys

import pytest
from fake_nvml import FakeNVML

from commprof.capture import nvmltopo as N
from commprof.verbs import topo as T
from commprof.results.topo import write_topology
from commprof.views.topo import render_topology
from commprof.model.errors import EXIT_NO_GPU, NoGpuError

H100 = "h100-sxm-8x-nvswitch.json"
RTX5090 = "rtx5090-8x-pcie-2socket.json"
L40S = "l40s-4x-pcie-switch.json"
GiB = 1 << 30
MiB = 1 << 20


def offdiag(m):
    return {m[i][j] for i in range(len(m)) for j in range(len(m)) if i != j}


def console():
    from rich.console import Console

    buf = io.StringIO()
    return Console(file=buf, width=220, color_system=None), buf


def test_fixtures_name_their_source():
    for name in (H100, RTX5090, L40S):
        fx = FakeNVML(name).fx
        assert "reconstructed" in fx["_source"].lower() and "#" in fx["_source"], name
        assert fx["_not_supported"], name


def test_h100_sxm_nvswitch():
    fake = FakeNVML(H100)
    t = N.collect_topology(fake)
    assert fake.initialised == 0                     # nvmlShutdown after nvmlInit
    assert t["kind"] == "measured" and t["source"].startswith("NVML via nvidia-ml-py 13.615.71")
    assert t["driver_version"] == "570.124.06" and t["gpu_count"] == 8 and len(t["gpus"]) == 8
    m = t["matrix"]
    assert all(m[i][i] == "X" for i in range(8))
    assert offdiag(m) == {"NV18"}                    # 5+4+4+5 links to the four NVSwitch chips
    for op in ("read", "write", "nvlink", "atomics"):
        assert offdiag(t["p2p"][op]) == {"OK"}
        assert all(t["p2p"][op][i][i] == "X" for i in range(8))
    assert t["interconnect_class"] == "nvswitch"
    assert t["numa_nodes"] == 2
    assert [g["numa_node"] for g in t["gpus"]] == [0] * 4 + [1] * 4
    assert [g["cpu_affinity"] for g in t["gpus"]] == ["0-55,112-167"] * 4 + ["56-111,168-223"] * 4
    for g in t["gpus"]:
        assert g["name"] == "NVIDIA H100 80GB HBM3"
        assert g["memory_total_bytes"] == 81559 * MiB and g["bar1_total_bytes"] == 128 * GiB
        assert g["nvlink_active_links"] == 18 and g["nvlink_inactive_links"] == 0
        assert g["nvlink_version"] == "4.0"
        assert (g["pcie_link_gen_max"], g["pcie_link_width_max"], g["pcie_link_gen_gpu_max"]) == (5, 16, 5)
        assert g["pcie_at_max"] is True
        # field values: the call succeeded, the recovery entry did not -> n/a, the rest summed
        assert g["nvlink_error_counters"]["recovery"] == "n/a"
    assert t["gpus"][0]["pci_bus_id"] == "00000000:18:00.0"
    assert t["gpus"][5]["nvlink_error_count"] == 2 + 0 + 3
    assert t["gpus"][5]["pcie_replay_count"] == 1
    assert t["gpus"][0]["nvlink_error_count"] == 0
    assert t["notes"] == []
    assert json.loads(json.dumps(t)) == t


def test_rtx5090_pcie_two_sockets_p2p_off():
    t = N.collect_topology(FakeNVML(RTX5090))
    m = t["matrix"]
    for i in range(8):
        for j in range(8):
            want = "X" if i == j else "NODE" if i // 4 == j // 4 else "SYS"
            assert m[i][j] == want, (i, j)
    assert offdiag(t["p2p"]["read"]) == offdiag(t["p2p"]["write"]) == {"GPU not supported"}
    assert offdiag(t["p2p"]["nvlink"]) == {"not supported"}
    assert t["interconnect_class"] == "pcie-no-p2p"
    assert t["numa_nodes"] == 2
    for g in t["gpus"]:
        # no NVLink: NVML says Not Supported, which is n/a, not a crash and not 0
        assert g["nvlink_active_links"] == "n/a" and g["nvlink_version"] == "n/a"
        assert g["nvlink_inactive_links"] == "n/a" and g["nvlink_error_count"] == "n/a"
        assert set(g["nvlink_error_counters"].values()) == {"n/a"}
        assert g["bar1_total_bytes"] == 32 * GiB
        # idle link at Gen1 is reported, but judged on max values only
        assert (g["pcie_link_gen_current"], g["pcie_link_gen_max"], g["pcie_link_gen_gpu_max"]) == (1, 5, 5)
        assert g["pcie_at_max"] is True and "idle" in g["pcie_note"]
    assert t["gpus"][6]["pcie_replay_count"] == 3
    notes = " ".join(t["notes"])
    assert "SHM" in notes and "SYS" in notes


def test_l40s_behind_one_pcie_switch():
    t = N.collect_topology(FakeNVML(L40S))
    assert t["gpu_count"] == 4
    assert offdiag(t["matrix"]) == {"PIX"}
    assert offdiag(t["p2p"]["read"]) == offdiag(t["p2p"]["write"]) == {"OK"}
    assert offdiag(t["p2p"]["atomics"]) == {"not supported"}
    assert t["interconnect_class"] == "pcie-p2p"
    assert t["numa_nodes"] == 1
    for g in t["gpus"]:
        assert (g["pcie_link_gen_max"], g["pcie_link_width_max"], g["pcie_link_gen_gpu_max"]) == (4, 16, 4)
        assert g["pcie_at_max"] is True
        assert g["nvlink_active_links"] == "n/a" and g["nvlink_error_count"] == "n/a"
        assert g["numa_node"] == 0 and g["cpu_affinity"] == "0-35,72-107"
    assert t["notes"] == []


def test_gen5_gpu_in_gen4_slot_is_not_at_max():
    fake = FakeNVML(RTX5090)
    fake.fx["gpus"][3]["nvmlDeviceGetMaxPcieLinkGeneration"] = 4
    t = N.collect_topology(fake)
    assert [g["pcie_at_max"] for g in t["gpus"]] == [True] * 3 + [False] + [True] * 4
    assert "below the GPU's own Gen5" in t["gpus"][3]["pcie_note"]
    assert any("GPU3" in n and "PCIe" in n for n in t["notes"])


def test_unknown_max_generation_is_not_judged():
    fake = FakeNVML(L40S)
    fake.fx["gpus"][1]["nvmlDeviceGetGpuMaxPcieLinkGeneration"] = {"error": "NotSupported"}
    fake.fx["gpus"][2]["nvmlDeviceGetMaxPcieLinkWidth"] = 8
    t = N.collect_topology(fake)
    assert t["gpus"][1]["pcie_link_gen_gpu_max"] == "n/a" and t["gpus"][1]["pcie_at_max"] == "n/a"
    assert t["gpus"][2]["pcie_at_max"] is True and "x8" in t["gpus"][2]["pcie_note"]


def test_field_values_failing_as_a_whole_falls_back_to_probing_links():
    fake = FakeNVML(H100)
    fake.fx["all_gpus"]["nvmlDeviceGetFieldValues"] = {"error": "NotSupported"}
    del fake.fx["gpus"][5]["nvmlDeviceGetFieldValues"]
    t = N.collect_topology(fake)
    assert offdiag(t["matrix"]) == {"NV18"}
    for g in t["gpus"]:
        assert g["nvlink_active_links"] == 18       # probed link by link up to Invalid Argument
        assert g["nvlink_error_count"] == "n/a"


def test_nvlink_version_is_an_enum_not_a_generation():
    fake = FakeNVML(H100)
    fake.fx["all_gpus"]["nvmlDeviceGetNvLinkVersion"] = [5] * 18      # what an A100 answers
    t = N.collect_topology(fake)
    assert {g["nvlink_version"] for g in t["gpus"]} == {"3.1"}


def test_inactive_nvlinks_are_counted_and_noted():
    fake = FakeNVML(H100)
    fake.fx["gpus"][2]["nvmlDeviceGetNvLinkState"] = [1] * 16 + [0, 0]   # the last two go to switch 08
    t = N.collect_topology(fake)
    assert t["gpus"][2]["nvlink_active_links"] == 16 and t["gpus"][2]["nvlink_inactive_links"] == 2
    assert t["matrix"][2][0] == t["matrix"][0][2] == "NV16"
    assert t["matrix"][0][1] == "NV18"
    assert t["interconnect_class"] == "nvswitch"
    assert any("inactive NVLinks" in n and "GPU2 (2)" in n for n in t["notes"])


def test_bridged_pairs_count_direct_links_and_make_a_mixed_box():
    # Four PCIe cards, NVLink bridges joining GPU0-GPU1 and GPU2-GPU3 (4 links each).
    fake = FakeNVML(L40S)
    bus = [g["nvmlDeviceGetPciInfo"]["busId"] for g in fake.fx["gpus"]]
    for i, peer in ((0, 1), (1, 0), (2, 3), (3, 2)):
        g = fake.fx["gpus"][i]
        g["nvmlDeviceGetFieldValues"] = {"91": {"valueType": 1, "value": 4}}
        g["nvmlDeviceGetNvLinkState"] = [1] * 4
        g["nvmlDeviceGetNvLinkVersion"] = [4] * 4
        g["nvmlDeviceGetNvLinkRemoteDeviceType"] = [0] * 4
        g["nvmlDeviceGetNvLinkRemotePciInfo"] = [bus[peer].replace("00000000:", "0000:")] * 4  # other spelling
    t = N.collect_topology(fake)
    assert t["matrix"][0][1] == t["matrix"][1][0] == "NV4" and t["matrix"][2][3] == "NV4"
    assert t["matrix"][0][2] == "PIX"
    assert t["interconnect_class"] == "mixed"
    assert t["gpus"][0]["nvlink_version"] == "3.0"
    # the fields for the error totals were not recorded: per-entry Not Supported -> n/a
    assert t["gpus"][0]["nvlink_error_count"] == "n/a"


def test_mixed_p2p_and_p2p_disabled_by_driver():
    fake = FakeNVML(L40S)
    for op in ("0", "1"):
        fake.fx["pairs"]["nvmlDeviceGetP2PStatus"][op][0][3] = 4        # disabled by regkey, one direction
    t = N.collect_topology(fake)
    assert t["p2p"]["read"][0][3] == "disabled by driver" and t["p2p"]["read"][3][0] == "OK"
    assert t["interconnect_class"] == "mixed"


def test_lost_gpu_and_unanswered_calls_become_na():
    fake = FakeNVML(L40S)
    fake.fx["gpus"][2]["nvmlDeviceGetHandleByIndex"] = {"error": "GpuIsLost"}
    fake.fx["gpus"][1]["nvmlDeviceGetBAR1MemoryInfo"] = {"error": "Unknown"}
    fake.fx["gpus"][1]["nvmlDeviceGetCpuAffinity"] = {"error": "NotSupported"}
    fake.fx["gpus"][1]["nvmlDeviceGetMemoryAffinity"] = {"error": "NoPermission"}
    fake.fx["pairs"]["nvmlDeviceGetTopologyCommonAncestor"][0][3] = {"error": "NotSupported"}
    t = N.collect_topology(fake)
    lost = t["gpus"][2]
    assert lost["index"] == 2 and lost["name"] == "n/a" and lost["pcie_at_max"] == "n/a"
    assert [t["matrix"][2][j] for j in range(4)] == ["n/a", "n/a", "X", "n/a"]
    assert t["p2p"]["read"][0][2] == "n/a"
    assert t["gpus"][1]["bar1_total_bytes"] == "n/a"
    assert t["gpus"][1]["cpu_affinity"] == "n/a" and t["gpus"][1]["numa_node"] == "n/a"
    assert t["matrix"][0][3] == "n/a"       # ancestor asked once per pair (0, 3): mirrored
    assert t["numa_nodes"] == 1
    assert t["interconnect_class"] == "unknown"
    json.dumps(t)


def test_single_gpu():
    fake = FakeNVML(L40S)
    fake.fx["nvmlDeviceGetCount"] = 1
    t = N.collect_topology(fake)
    assert t["matrix"] == [["X"]] and t["p2p"]["read"] == [["X"]]
    assert t["interconnect_class"] == "single-gpu"


def test_p2p_index_constants_are_passed_as_integers():
    fake = FakeNVML(L40S)
    h0, h1 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(TypeError):
        fake.nvmlDeviceGetP2PStatus(h0, h1, (0,))      # the binding's NVML_P2P_CAPS_INDEX_READ
    assert all(type(v) is int for v in N.P2P_INDEX.values())


def test_nvml_numbers_match_the_installed_binding():
    pynvml = pytest.importorskip("pynvml")
    read = pynvml.NVML_P2P_CAPS_INDEX_READ
    assert (read[0] if isinstance(read, tuple) else read) == N.P2P_INDEX["read"]
    assert pynvml.NVML_P2P_CAPS_INDEX_WRITE == N.P2P_INDEX["write"]
    assert pynvml.NVML_P2P_CAPS_INDEX_NVLINK == N.P2P_INDEX["nvlink"]
    assert pynvml.NVML_P2P_CAPS_INDEX_ATOMICS == N.P2P_INDEX["atomics"]
    assert pynvml.NVML_P2P_STATUS_OK == 0 and pynvml.NVML_P2P_STATUS_DISABLED_BY_REGKEY == 4
    assert pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED == 2 and pynvml.NVML_P2P_STATUS_UNKNOWN == 6
    assert (pynvml.NVML_TOPOLOGY_SINGLE, pynvml.NVML_TOPOLOGY_MULTIPLE, pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
            pynvml.NVML_TOPOLOGY_NODE, pynvml.NVML_TOPOLOGY_SYSTEM) == (10, 20, 30, 40, 50)
    assert pynvml.NVML_NVLINK_VERSION_3_1 == 5 and pynvml.NVML_NVLINK_VERSION_4_0 == 6
    assert pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT == N.FI_NVLINK_LINK_COUNT
    assert pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL == N.NVLINK_ERROR_FIELDS["crc_flit"]
    assert pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL == N.NVLINK_ERROR_FIELDS["crc_data"]
    assert pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL == N.NVLINK_ERROR_FIELDS["replay"]
    assert pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL == N.NVLINK_ERROR_FIELDS["recovery"]
    assert pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG == 3 and pynvml.NVML_AFFINITY_SCOPE_NODE == 0
    for name in ("nvmlDeviceGetGpuMaxPcieLinkGeneration", "nvmlDeviceGetNvLinkRemotePciInfo",
                 "nvmlDeviceGetNvLinkRemoteDeviceType", "nvmlDeviceGetMemoryAffinity", "nvmlDeviceGetFieldValues"):
        assert callable(getattr(pynvml, name))


def test_cpu_list_formatting():
    assert N._cpu_list([0b1011]) == "0-1,3"
    assert N._cpu_list([0, 1]) == "64"
    assert N._cpu_list([0]) == "n/a"


# --- no GPU, no driver, no bindings --------------------------------------------------------------

def test_no_driver_raises_no_gpu_error_with_exit_code_7():
    with pytest.raises(NoGpuError) as e:
        N.collect_topology(FakeNVML(H100, init_error="LibraryNotFound"))
    assert e.value.exit_code == EXIT_NO_GPU == 7
    msg = str(e.value)
    assert "no NVIDIA driver: nvmlInit failed (NVML Shared Library Not Found); " \
           "install the NVIDIA driver or run on a GPU machine" in msg
    assert "\n" not in msg and msg.startswith("host=")


def test_driver_not_loaded_and_mismatch_say_the_fix():
    with pytest.raises(NoGpuError, match=r"Driver Not Loaded.*modprobe nvidia"):
        N.collect_topology(FakeNVML(H100, init_error="DriverNotLoaded"))
    with pytest.raises(NoGpuError, match=r"do not match.*reboot"):
        N.collect_topology(FakeNVML(H100, init_error="LibRmVersionMismatch"))


def test_zero_devices_raises_and_shuts_nvml_down():
    fake = FakeNVML(L40S)
    fake.fx["nvmlDeviceGetCount"] = 0
    with pytest.raises(NoGpuError, match="reports 0 devices") as e:
        N.collect_topology(fake)
    assert e.value.exit_code == 7
    assert fake.initialised == 0


def test_missing_bindings_raise_no_gpu_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)      # import pynvml now raises ImportError
    with pytest.raises(NoGpuError, match=r"cannot import pynvml.*pip install nvidia-ml-py") as e:
        N.collect_topology()
    assert e.value.exit_code == 7
    assert N.try_collect_topology() is None


def test_try_collect_topology():
    assert N.try_collect_topology(FakeNVML(H100, init_error="LibraryNotFound")) is None
    t = N.try_collect_topology(FakeNVML(L40S))
    assert t is not None and t["interconnect_class"] == "pcie-p2p"


def test_real_nvml_answers_or_says_what_is_missing():
    """On this machine's real binding: either a topology (a GPU box) or exit code 7, never a crash."""
    try:
        t = N.collect_topology()
    except NoGpuError as e:
        assert e.exit_code == 7 and ("NVIDIA" in str(e) or "pynvml" in str(e))
    else:
        assert t["gpu_count"] >= 1


# --- outputs -------------------------------------------------------------------------------------

def test_run_topo_json_to_stdout_and_topo_json(tmp_path, capsys):
    out = tmp_path / "new" / "dir"
    assert T.run(T.TopoConfig(as_json=True, out=str(out)), nvml=FakeNVML(L40S)) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    saved = json.loads((out / "topo.json").read_text())
    assert printed == saved and saved["interconnect_class"] == "pcie-p2p"
    assert "topo.json" in captured.err


def test_run_topo_tables(capsys):
    con, buf = console()
    assert T.run(T.TopoConfig(), nvml=FakeNVML(H100), console=con) == 0
    text = buf.getvalue()
    assert "NV18" in text and "interconnect class: nvswitch" in text and "GPU7" in text
    assert "00000000:AB:00.0" in text          # not an emoji
    assert capsys.readouterr().out == ""


def test_render_shows_p2p_codes_and_notes():
    con, buf = console()
    render_topology(N.collect_topology(FakeNVML(RTX5090)), con)
    text = buf.getvalue()
    assert "GNS" in text and "SYS" in text and "NODE" in text
    assert "P2P read" in text and "P2P write" in text
    assert "interconnect class: pcie-no-p2p" in text and "note:" in text


def test_write_topology(tmp_path):
    t = N.collect_topology(FakeNVML(H100))
    path = write_topology(t, str(tmp_path / "sweep" / "topo.json"))
    assert json.loads(open(path).read()) == t


# --- a real GPU ----------------------------------------------------------------------------------

@pytest.mark.gpu
def test_real_nvml_on_a_gpu_box():
    t = N.collect_topology()
    n = t["gpu_count"]
    assert n >= 1 and len(t["gpus"]) == n and len(t["matrix"]) == n
    assert t["source"].startswith("NVML via nvidia-ml-py") and t["driver_version"] != "n/a"
    g = t["gpus"][0]
    assert g["name"] != "n/a" and g["memory_total_bytes"] > 0
    assert ":" in g["pci_bus_id"]
    assert isinstance(g["pcie_link_gen_max"], int) and g["pcie_link_gen_max"] >= 1
    assert all(t["matrix"][i][i] == "X" for i in range(n))
    assert t["interconnect_class"] in {"single-gpu", "nvswitch", "nvlink", "pcie-p2p", "pcie-no-p2p",
                                       "mixed", "unknown"}
    json.dumps(t)


def test_an_imported_topo_text_draws_no_column_of_n_a():
    """``import nvidia-smi-topo`` knows no GPU name, memory, bus id, link or error count: the GPUs
    table drew eleven columns of n/a (and at 80 columns left out CPU affinity, which it has); now
    those are named once and the columns with answers drawn."""
    import os

    from rich.console import Console

    from commprof.ingest.smitopo import parse_smi_topo

    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "nvidia-smi")
    topo = parse_smi_topo([os.path.join(data, "h100x8-nvswitch-topo-m.txt")])
    con = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    render_topology(topo, con)
    text = con.export_text()
    table = text.split("┏", 1)[1].split("└", 1)[0]           # the GPUs table
    heads = table.split("┡", 1)[0]
    for head in ("GPU", "NUMA", "CPU affinity", "NVLinks"):
        assert head in heads
    assert "name" not in heads and "n/a" not in table
    assert "n/a for every GPU (no answer), not shown: name, memory, bus id," in " ".join(text.split())
    assert "0-55,112-167" in text and "PCIe 'at max'" not in text
    con, buf = console()                      # NVML's answers: every column, the note on 'at max'
    render_topology(N.collect_topology(FakeNVML(RTX5090)), con)
    assert "not shown: NVLinks, NVLink ver, NVLink errors\n" in buf.getvalue()          # a GeForce card
    assert "PCIe 'at max' compares" in buf.getvalue() and "Gen5 x16" in buf.getvalue()
