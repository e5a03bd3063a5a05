"""commprof import nvidia-smi-q: real nvidia-smi -q text and -q -x XML (tests/data/nvidia-smi-q/,
sources in its SOURCE.md) judged by check's health items as their sources describe."""
from __future__ import annotations

import os
import re

import pytest

from commprof.analysis.checkitems_health import health_items
from commprof.analysis.thresholds import load_thresholds
from commprof.ingest.nvidiasmiq import parse_nvidia_smi_q
from commprof.model.errors import UsageError
from commprof.results.health import read_health
from commprof.verbs.import_ import ImportConfig, run

DATA = os.path.join(os.path.dirname(__file__), "data", "nvidia-smi-q")


class _Ev:
    def __init__(self, *dirs):
        self.dirs = dirs


def _import(tmp_path, name):
    out = str(tmp_path / "imp")
    assert run(ImportConfig(kind="nvidia-smi-q", paths=[os.path.join(DATA, name)], out=out)) == 0
    return out, {i.id: i for i in health_items(_Ev(out), load_thresholds())}


def _source_rows():
    """(file, [(item, status), ...]) for every row of SOURCE.md's table: its verdict column names the
    items and their statuses ("H3 WARN (...), H4 SKIP")."""
    rows = []
    for line in open(os.path.join(DATA, "SOURCE.md"), encoding="utf-8"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("file", "---") and not cells[0].startswith("-"):
            rows.append((cells[0], re.findall(r"\b(H[0-9]) (PASS|WARN|FAIL|SKIP)\b", cells[3])))
    return rows


def test_every_fixture_has_a_source_row():
    files = sorted(f for f in os.listdir(DATA) if f != "SOURCE.md")
    rows = [f for f, _ in _source_rows()]
    assert sorted(rows) == files and all(v for _, v in _source_rows())


@pytest.mark.parametrize("name,verdicts", _source_rows(), ids=[f for f, _ in _source_rows()])
def test_source_table_verdicts(tmp_path, name, verdicts):
    """Every real output is judged as SOURCE.md says; a fault's WARN/FAIL carries a 'what now'."""
    _, items = _import(tmp_path, name)
    for item, status in verdicts:
        assert items[item].status == status, (name, item, items[item].value)
        if status in ("WARN", "FAIL"):
            assert items[item].hint.startswith("what now:")


def test_clocks_event_counters_since_driver_load(tmp_path):
    """Drivers 535+ print how long each reason held the clocks down since the driver loaded. A real
    GPU (ollama#13552) shows no reason active but 0.90 s of SW thermal slowdown: a WARN naming it;
    power-cap time alone (cubecos#312) is not a finding."""
    out, items = _import(tmp_path, "ollama-13552-counters-tlimit.txt")
    g = read_health(out)["samples"][0]["gpus"][0]
    assert g["clocks_event_reasons"] == [] and g["clocks_event_counters_us"] == {
        "sw_power_cap": 165687, "sync_boost": 0, "sw_thermal_slowdown": 903158, "hw_thermal_slowdown": 0,
        "hw_power_brake_slowdown": 0}
    assert items["H3"].status == "WARN" and "GPU 0: sw_thermal_slowdown 0.90 s" in items["H3"].value
    out, items = _import(tmp_path / "b", "cubecos-312-blackwell-counters.txt")
    d = read_health(out)
    assert d["box"]["gpu_count"] == 4 and d["box"]["driver_version"] == "580.105.06"
    assert d["samples"][0]["gpus"][0]["clocks_event_counters_us"]["sw_power_cap"] == 1202176
    assert items["H3"].status == "PASS"


def test_tlimit_offsets_become_thresholds(tmp_path):
    # ollama#13552 prints temperatures as T.Limit offsets: 81 C, 13 C below T.Limit, shutdown 5 C past it
    out, items = _import(tmp_path, "ollama-13552-counters-tlimit.txt")
    g = read_health(out)["samples"][0]["gpus"][0]
    assert (g["temperature_c"], g["temperature_shutdown_c"], g["temperature_slowdown_c"]) == (81, 99, "n/a")
    assert items["H4"].status == "SKIP"


def test_xml_counters_and_tlimit(tmp_path):
    # element names as nvidia-smi -q -x prints them (drivers 550+); values hand-set
    p = tmp_path / "q.xml"
    p.write_text("<?xml version='1.0' ?>\n<nvidia_smi_log><driver_version>570.86.15</driver_version>"
                 "<attached_gpus>1</attached_gpus><gpu id='00000000:18:00.0'><product_name>NVIDIA H100 80GB HBM3"
                 "</product_name><clocks_event_reasons><clocks_event_reason_gpu_idle>Not Active"
                 "</clocks_event_reason_gpu_idle><clocks_event_reason_hw_slowdown>Not Active"
                 "</clocks_event_reason_hw_slowdown></clocks_event_reasons><clocks_event_reasons_counters>"
                 "<clocks_event_reasons_counters_sw_power_cap>100 us</clocks_event_reasons_counters_sw_power_cap>"
                 "<clocks_event_reasons_counters_sw_therm_slowdown>0 us</clocks_event_reasons_counters_sw_therm_slowdown>"
                 "<clocks_event_reasons_counters_hw_therm_slowdown>0 us</clocks_event_reasons_counters_hw_therm_slowdown>"
                 "<clocks_event_reasons_counters_hw_power_brake>2500000 us</clocks_event_reasons_counters_hw_power_brake>"
                 "</clocks_event_reasons_counters><temperature><gpu_temp>45 C</gpu_temp><gpu_temp_tlimit>39 C"
                 "</gpu_temp_tlimit><gpu_temp_max_tlimit_threshold>-5 C</gpu_temp_max_tlimit_threshold>"
                 "<gpu_temp_slow_tlimit_threshold>-2 C</gpu_temp_slow_tlimit_threshold>"
                 "<gpu_temp_max_gpu_tlimit_threshold>0 C</gpu_temp_max_gpu_tlimit_threshold></temperature>"
                 "</gpu></nvidia_smi_log>\n")
    g = parse_nvidia_smi_q(str(p))["gpus"][0]
    assert g["clocks_event_counters_us"] == {"sw_power_cap": 100, "sw_thermal_slowdown": 0,
                                             "hw_thermal_slowdown": 0, "hw_power_brake_slowdown": 2500000}
    assert (g["temperature_slowdown_c"], g["temperature_shutdown_c"], g["temperature_max_operating_c"]) == (86, 89, 84)
    out = str(tmp_path / "imp")
    assert run(ImportConfig(kind="nvidia-smi-q", paths=[str(p)], out=out)) == 0
    items = {i.id: i for i in health_items(_Ev(out), load_thresholds())}
    assert items["H3"].status == "WARN" and "hw_power_brake_slowdown 2.50 s" in items["H3"].value
    assert items["H4"].status == "PASS" and "45 C, slowdown at 86 C" in items["H4"].value


def test_counters_growing_under_load_fail():
    from commprof.analysis.checkitems_health import item_throttle

    t = load_thresholds()["health"]

    def g(us):
        return {"index": 0, "clocks_event_reasons": [], "clocks_event_counters_us": {"hw_thermal_slowdown": us}}
    assert item_throttle({0: [("before", g(0)), ("during", g(4_000_000))]}, t).status == "FAIL"
    assert item_throttle({0: [("before", g(7)), ("during", g(7))]}, t).status == "WARN"     # old time, not grown
    assert item_throttle({0: [("before", g(0)), ("during", g(0))]}, t).status == "PASS"


def test_ecc_on_without_uncorrectable_counts_is_not_a_pass(tmp_path):
    # dcgm-exporter#16: the older Single Bit / Double Bit layout, cut before the Double Bit counts
    out, items = _import(tmp_path, "dcgm-exporter-16-ecc-single-bit.txt")
    g = read_health(out)["samples"][0]["gpus"][0]
    assert (g["ecc_mode"], g["ecc_volatile_corrected"], g["ecc_volatile_uncorrected"]) == ("enabled", 0, "n/a")
    assert items["H1"].status == "SKIP" and "uncorrectable error counts not reported" in items["H1"].value


def test_fabric_state_and_status(tmp_path):
    # azhpc-images#506: registration completed with status Insufficient Resources (a real fleet fault)
    out, items = _import(tmp_path, "azhpc-images-506-fabric-insufficient.txt")
    g = read_health(out)["samples"][0]["gpus"][0]
    assert (g["fabric_state"], g["fabric_status"]) == ("completed", "insufficient resources")
    assert items["H7"].status == "WARN" and "status insufficient resources" in items["H7"].value
    # gpu-operator#2511: still in progress (its Health rows do not shadow the state)
    out, items = _import(tmp_path / "b", "gpu-operator-2511-fabric-in-progress.txt")
    g = read_health(out)["samples"][0]["gpus"][0]
    assert (g["fabric_state"], g["fabric_status"]) == ("in progress", "n/a")
    assert items["H7"].status == "FAIL" and "GPU 0: in progress" in items["H7"].value


def test_max_operating_temperature_warns(tmp_path):
    # thermald#300: a GeForce MX330 at 56 C whose max operating temperature is 57 C (slowdown 97 C)
    out, items = _import(tmp_path, "thermald-300-max-operating.txt")
    g = read_health(out)["samples"][0]["gpus"][0]
    assert (g["temperature_c"], g["temperature_slowdown_c"], g["temperature_max_operating_c"]) == (56, 97, 57)
    assert items["H4"].status == "WARN" and "1 C below its max operating 57 C" in items["H4"].value


def test_remapped_rows_pending_fails(tmp_path):
    out, items = _import(tmp_path, "gpud-80-remapped-pending.txt")
    g = read_health(out)["samples"][0]["gpus"][0]
    assert g["remapped_rows_uncorrectable"] == 4 and g["remapped_rows_pending"] is True
    assert items["H2"].status == "FAIL" and "row remap pending" in items["H2"].value
    assert items["H2"].hint.startswith("what now:")


def test_clean_ecc_passes(tmp_path):
    out, items = _import(tmp_path, "dcgm-120-ecc-clean.txt")
    g = read_health(out)["samples"][0]["gpus"][0]
    assert g["ecc_mode"] == "enabled" and g["ecc_aggregate_uncorrected"] == 0 and g["retired_pages_dbe"] == "n/a"
    assert items["H1"].status == "PASS"
    assert items["H2"].status == "SKIP"


def test_pcie_at_max_and_no_throttle(tmp_path):
    out, items = _import(tmp_path, "hami-332-pcie-gen4-x16.txt")
    g = read_health(out)["samples"][0]["gpus"][0]
    assert (g["pcie_link_gen_current"], g["pcie_link_gen_max"], g["pcie_link_width_current"],
            g["pcie_link_width_max"], g["pcie_replay_count"]) == (4, 4, 16, 16, 0)
    assert g["pci_bus_id"] == "00000000:0B:00.0"
    assert items["H6"].status == "SKIP" and "no sample under load" in items["H6"].value  # one idle-or-unknown sample
    assert items["H3"].status == "PASS"


def test_old_throttle_section_name_idle_only(tmp_path):
    out, items = _import(tmp_path, "kubeflow-68-throttle-idle.txt")
    assert read_health(out)["samples"][0]["gpus"][0]["clocks_event_reasons"] == ["gpu_idle"]
    assert items["H3"].status == "PASS"


def test_xml_temperatures(tmp_path):
    out, items = _import(tmp_path, "netdata-10362-temps.xml")
    g = read_health(out)["samples"][0]["gpus"][0]
    assert (g["temperature_c"], g["temperature_slowdown_c"], g["temperature_shutdown_c"]) == (42, 96, 101)
    assert items["H4"].status == "PASS" and "42 C, slowdown at 96 C" in items["H4"].value
    assert items["H2"].status == "SKIP"


def test_a_real_gpu_at_its_power_cap_while_serving_warns(tmp_path):
    """A real GPU under load (ollama#6163: '-q -d POWER,TEMPERATURE,PERFORMANCE while test is running',
    P2): SW Power Cap active. The text says nothing of the load, so it is one sample of unknown load:
    a WARN naming the reason, never a PASS; 77 C with slowdown at 97 C passes H4."""
    out, items = _import(tmp_path, "ollama-6163-swpowercap-load.txt")
    g = read_health(out)["samples"][0]["gpus"][0]
    assert g["clocks_event_reasons"] == ["sw_power_cap"] and g["pci_bus_id"] == "00000000:0B:00.0"
    assert items["H3"].status == "WARN" and "GPU 0: sw_power_cap" in items["H3"].value
    assert items["H4"].status == "PASS" and "77 C, slowdown at 97 C" in items["H4"].value


def test_xml_throttle_reasons(tmp_path):
    out, items = _import(tmp_path, "telegraf-15279-throttle-xml.xml")
    assert read_health(out)["samples"][0]["gpus"][0]["clocks_event_reasons"] == ["gpu_idle"]
    assert items["H3"].status == "PASS"


def test_throttle_active_in_one_sample_is_a_warn(tmp_path):
    # the kubeflow excerpt with HW Slowdown set Active: one sample, load unknown -> WARN naming the GPU
    text = open(os.path.join(DATA, "kubeflow-68-throttle-idle.txt")).read().replace(
        "HW Slowdown                 : Not Active", "HW Slowdown                 : Active")
    p = tmp_path / "q.txt"
    p.write_text(text)
    out = str(tmp_path / "imp")
    assert run(ImportConfig(kind="nvidia-smi-q", paths=[str(p)], out=out)) == 0
    items = {i.id: i for i in health_items(_Ev(out), load_thresholds())}
    assert items["H3"].status == "WARN" and "GPU 0: hw_slowdown" in items["H3"].value


@pytest.mark.parametrize("body,msg", [("hello\nworld\n", "not 'nvidia-smi -q' output"),
                                      ("<?xml version='1.0'?><foo/>", "not nvidia-smi -q -x output"),
                                      ("<?xml version='1.0'?><nvidia_smi_log><gpu", "not well-formed XML")])
def test_bad_input_is_one_line(tmp_path, body, msg):
    p = tmp_path / "bad"
    p.write_text(body)
    with pytest.raises(UsageError, match=msg):
        parse_nvidia_smi_q(str(p))


def test_box_fields_and_two_gpus(tmp_path):
    p = tmp_path / "q.txt"
    p.write_text("==============NVSMI LOG==============\n\nTimestamp : x\nDriver Version : 535.104.05\n"
                 "CUDA Version : 12.2\n\nAttached GPUs : 2\nGPU 00000000:0A:00.0\n    Product Name : NVIDIA H100 80GB HBM3\n"
                 "    Persistence Mode : Disabled\n    MIG Mode\n        Current : Enabled\n"
                 "GPU 00000000:18:00.0\n    Product Name : NVIDIA H100 80GB HBM3\n    Persistence Mode : Enabled\n")
    d = parse_nvidia_smi_q(str(p))
    assert d["box"] == {"driver_version": "535.104.05", "cuda_version": "12.2", "gpu_count": 2, "format": "text"}
    assert [g["pci_bus_id"] for g in d["gpus"]] == ["00000000:0A:00.0", "00000000:18:00.0"]
    assert d["gpus"][0]["mig_mode"] == "enabled" and d["gpus"][0]["persistence_mode"] == "disabled"
    assert d["gpus"][1]["mig_mode"] == "n/a" and d["gpus"][1]["persistence_mode"] == "enabled"


def test_show_reads_the_imported_health(tmp_path, capsys):
    from commprof.results import load
    from commprof.views.show import show

    out, _ = _import(tmp_path, "hami-332-pcie-gen4-x16.txt")
    res = load(out)
    assert res.docs["health"]["source"] == "nvidia-smi -q"
    show(res, charts=False)
    text = capsys.readouterr().out
    assert "GPU health from nvidia-smi -q: 1 sample(s) (given)" in text and "PCIe Gen4 x16 of Gen4 x16" in text


def test_check_judges_an_imported_dir_alone(tmp_path):
    from commprof.verbs.check import CheckConfig, run as check_run

    out, _ = _import(tmp_path, "gpud-80-remapped-pending.txt")
    rc = check_run(CheckConfig(dirs=[out], out=str(tmp_path / "chk")))
    import json

    doc = json.load(open(tmp_path / "chk" / "check.json"))
    items = {i["id"]: i for i in doc["items"]}
    assert items["H2"]["status"] == "FAIL"
    assert rc != 0


def test_xml_memory_errors_and_link(tmp_path):
    # element names as nvidia-smi -q -x prints them (nvsmi_device_v12.dtd); values hand-set
    p = tmp_path / "q.xml"
    p.write_text("<?xml version='1.0' ?>\n<!DOCTYPE nvidia_smi_log SYSTEM 'nvsmi_device_v12.dtd'>\n<nvidia_smi_log>"
                 "<driver_version>550.54.15</driver_version><cuda_version>12.4</cuda_version>"
                 "<attached_gpus>1</attached_gpus><gpu id='00000000:18:00.0'>"
                 "<product_name>NVIDIA H100 80GB HBM3</product_name><persistence_mode>Enabled</persistence_mode>"
                 "<ecc_mode><current_ecc>Enabled</current_ecc></ecc_mode><ecc_errors><volatile>"
                 "<sram_correctable>0</sram_correctable><sram_uncorrectable_parity>0</sram_uncorrectable_parity>"
                 "<sram_uncorrectable_secded>2</sram_uncorrectable_secded><dram_correctable>3</dram_correctable>"
                 "<dram_uncorrectable>1</dram_uncorrectable></volatile></ecc_errors>"
                 "<remapped_rows><remapped_row_corr>0</remapped_row_corr><remapped_row_unc>2</remapped_row_unc>"
                 "<remapped_row_pending>No</remapped_row_pending><remapped_row_failure>Yes</remapped_row_failure>"
                 "</remapped_rows><pci><pci_gpu_link_info><pcie_gen><max_link_gen>5</max_link_gen>"
                 "<current_link_gen>4</current_link_gen></pcie_gen><link_widths><max_link_width>16x</max_link_width>"
                 "<current_link_width>8x</current_link_width></link_widths></pci_gpu_link_info>"
                 "<replay_counter>7</replay_counter></pci><fabric><state>Completed</state></fabric>"
                 "</gpu></nvidia_smi_log>\n")
    d = parse_nvidia_smi_q(str(p))
    g = d["gpus"][0]
    assert d["box"]["driver_version"] == "550.54.15" and d["box"]["format"] == "xml"
    assert g["name"] == "NVIDIA H100 80GB HBM3" and g["pci_bus_id"] == "00000000:18:00.0"
    assert g["ecc_volatile_uncorrected"] == 3 and g["ecc_volatile_corrected"] == 3      # 0+2 SRAM + 1 DRAM
    assert g["remapped_rows_uncorrectable"] == 2 and g["remapped_rows_failure"] is True
    assert (g["pcie_link_gen_current"], g["pcie_link_gen_max"], g["pcie_link_width_current"],
            g["pcie_link_width_max"], g["pcie_replay_count"]) == (4, 5, 8, 16, 7)
    assert g["fabric_state"] == "completed" and g["persistence_mode"] == "enabled"
    out = str(tmp_path / "imp")
    assert run(ImportConfig(kind="nvidia-smi-q", paths=[str(p)], out=out)) == 0
    items = {i.id: i for i in health_items(_Ev(out), load_thresholds())}
    assert items["H1"].status == "FAIL" and items["H2"].status == "FAIL" and "row remap failed" in items["H2"].value
    assert items["H7"].status == "PASS"


def test_deep_xml_is_refused(tmp_path):
    p = tmp_path / "deep.xml"
    p.write_text("<?xml version='1.0'?><nvidia_smi_log><gpu id='x'>" + "<a>" * 3000 + "1" + "</a>" * 3000
                 + "</gpu></nvidia_smi_log>")
    with pytest.raises(UsageError, match="nested deeper|not well-formed"):
        parse_nvidia_smi_q(str(p))


hyp = pytest.importorskip("hypothesis")


@hyp.settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(hyp.HealthCheck))
@hyp.given(data=hyp.strategies.binary(max_size=400)
           | hyp.strategies.lists(hyp.strategies.sampled_from(
               ["GPU 00000000:0B:00.0", "    ECC Mode", "        Current : Enabled", "    Remapped Rows",
                "        Pending : Yes", "<?xml version='1.0'?>", "<nvidia_smi_log>", "<gpu id='1'>", "</gpu>",
                "<temperature><gpu_temp>9e9 C</gpu_temp></temperature>", "    Temperature",
                "        GPU Current Temp : -5 C", "Attached GPUs : x"]), max_size=12).map(
               lambda ls: "\n".join(ls).encode()))
def test_any_input_parses_or_is_refused(data, tmp_path_factory):
    p = tmp_path_factory.mktemp("fz") / "q"
    p.write_bytes(data)
    try:
        d = parse_nvidia_smi_q(str(p))
    except UsageError:
        return
    assert d["gpus"]
