"""GPU health from NVML (recorded answers of the 8x H100 topology fixture with health overlays,
tests/data/nvml/health/) and check's H items on them."""
from __future__ import annotations

import json
import os

from commprof.analysis.checkitems_health import health_items
from commprof.analysis.thresholds import load_thresholds
from commprof.capture import nvmlhealth
from commprof.capture.nvmlhealth import HealthSampler, clocks_reasons, sample, save_health
from commprof.results.health import HEALTH_KEYS, read_health
from tests.fake_nvml import FakeNVML, with_health

TOPO = "h100-sxm-8x-nvswitch.json"


class _Ev:
    def __init__(self, *dirs):
        self.dirs = dirs


def _items(tmp_path, doc):
    save_health(str(tmp_path), doc)
    return {i.id: i for i in health_items(_Ev(str(tmp_path)), load_thresholds())}


def _run(fake, tmp_path, between=None):
    """before, (edit the answers: the run), during, after."""
    fake.nvmlInit()
    samples = [sample(fake, "before")]
    if between:
        between(fake.fx)
    samples += [sample(fake, "during"), sample(fake, "after")]
    return {"kind": "health", "source": "nvml", "samples": samples}


def test_clocks_reason_bits_follow_nvml_h():
    # nvml.h: HwSlowdown 0x8, HwThermalSlowdown 0x40 -> 72; SwPowerCap 0x4; GpuIdle 0x1
    assert clocks_reasons(72) == ["hw_slowdown", "hw_thermal_slowdown"]
    assert clocks_reasons(0x5) == ["gpu_idle", "sw_power_cap"]
    assert clocks_reasons(0) == []


def test_healthy_h100_sample_fields():
    fake = FakeNVML(with_health(TOPO, "h100-healthy.json"))
    fake.nvmlInit()
    s = sample(fake, "before")
    assert len(s["gpus"]) == 8
    g = s["gpus"][0]
    assert set(g) == set(HEALTH_KEYS)
    assert g["ecc_mode"] == "enabled" and g["ecc_volatile_uncorrected"] == 0
    assert g["power_w"] == 312.0 and g["power_limit_w"] == 700.0           # milliwatts -> W
    assert g["temperature_slowdown_c"] == 90 and g["temperature_shutdown_c"] == 92
    assert g["fabric_state"] == "completed" and g["mig_mode"] == "disabled" and g["persistence_mode"] == "enabled"
    assert g["nvlink_crc_errors"] == 0 and len(g["nvlink_errors_per_link"]) == 18
    assert g["pcie_link_gen_current"] == 5 and g["pcie_link_gen_max"] == 5
    assert g["xid_errors"].startswith("n/a") and "dmesg" in g["xid_errors"]


def test_topology_only_fixture_gives_na_never_a_crash():
    # The topology fixture records no health call: a fake that answers Not Supported for them.
    fx = with_health(TOPO, "h100-healthy.json")
    for k in list(fx["all_gpus"]):
        if k in json.load(open(os.path.join(os.path.dirname(__file__), "data", "nvml", "health",
                                            "h100-healthy.json")))["all_gpus"]:
            fx["all_gpus"][k] = {"error": "NotSupported"}
    fake = FakeNVML(fx)
    fake.nvmlInit()
    g = sample(fake, "before")["gpus"][0]
    for k in ("ecc_mode", "ecc_aggregate_uncorrected", "retired_pages_sbe", "remapped_rows_pending",
              "clocks_event_reasons", "temperature_c", "power_w", "fabric_state", "mig_mode", "nvlink_crc_errors"):
        assert g[k] == "n/a", k


def test_healthy_box_passes_every_health_item(tmp_path):
    fake = FakeNVML(with_health(TOPO, "h100-healthy.json"))
    items = _items(tmp_path, _run(fake, tmp_path))
    assert {k: i.status for k, i in items.items()} == {f"H{n}": "PASS" for n in range(1, 9)}
    assert os.path.isfile(tmp_path / "health.csv")
    assert len((tmp_path / "health.csv").read_text().splitlines()) == 1 + 3 * 8
    assert read_health(str(tmp_path))["samples"][0]["phase"] == "before"


def test_faulty_box_names_each_gpu(tmp_path):
    fake = FakeNVML(with_health(TOPO, "h100-faulty.json"))

    def run(fx):   # during the run: GPU 6 link 3 counts 250 CRC flit errors, GPU 1 40 PCIe replays
        fx["gpus"][6]["nvmlDeviceGetNvLinkErrorCounter"] = [[0, 0, 0, 0]] * 3 + [[0, 0, 250, 0]] + [[0, 0, 0, 0]] * 14
        fx["gpus"][1]["nvmlDeviceGetPcieReplayCounter"] = 40

    items = _items(tmp_path, _run(fake, tmp_path, run))
    st = {k: i.status for k, i in items.items()}
    assert st["H1"] == "FAIL" and "GPU 3" in items["H1"].value
    assert st["H2"] == "FAIL" and "GPU 3: row remap pending" in items["H2"].value
    assert st["H3"] == "FAIL" and "GPU 5: hw_slowdown, hw_thermal_slowdown under load" in items["H3"].value
    assert st["H4"] == "WARN" and "GPU 5: 88 C, slowdown at 90 C" in items["H4"].value
    assert st["H5"] == "FAIL" and "GPU 6: CRC 250" in items["H5"].value
    assert st["H6"] == "FAIL" and "GPU 6: Gen4 x16 of Gen5 x16 under load" in items["H6"].value
    assert st["H7"] == "FAIL" and "GPU 7: in progress" in items["H7"].value
    assert st["H8"] == "WARN" and "GPU 2" in items["H8"].value and "persistence off" in items["H8"].value
    for k in ("H1", "H2", "H3", "H5", "H6", "H7"):
        assert items[k].hint.startswith("what now:"), k


def test_sampler_thread_before_during_after():
    fake = FakeNVML(with_health(TOPO, "h100-healthy.json"))
    s = HealthSampler(nvml=fake, period_s=0.05)
    s.start()
    import time

    time.sleep(0.3)
    doc = s.stop()
    phases = [x["phase"] for x in doc["samples"]]
    assert phases[0] == "before" and phases[-1] == "after" and "during" in phases
    assert fake.initialised == 0


def test_no_driver_is_not_judged(tmp_path):
    s = HealthSampler(nvml=FakeNVML(TOPO, init_error="DriverNotLoaded"))
    assert not s.available
    doc = s.start().stop()
    assert doc["samples"] == [] and "no NVIDIA GPU/driver" in doc["not_judged"]
    from commprof.model.fileio import write_json

    write_json(str(tmp_path / "health.json"), doc)
    items = health_items(_Ev(str(tmp_path)), load_thresholds())
    assert [(i.id, i.status) for i in items] == [("H0", "SKIP")]
    assert "not judged" in items[0].value


def test_no_health_json_adds_no_items(tmp_path):
    assert health_items(_Ev(str(tmp_path)), load_thresholds()) == []
    assert nvmlhealth.save_health(str(tmp_path), {"samples": []}) is False


def test_topo_out_writes_health(tmp_path):
    from commprof.verbs.topo import TopoConfig, run

    assert run(TopoConfig(out=str(tmp_path)), nvml=FakeNVML(with_health(TOPO, "h100-faulty.json"))) == 0
    doc = read_health(str(tmp_path))
    assert [s["phase"] for s in doc["samples"]] == ["before"]
    assert doc["samples"][0]["gpus"][3]["remapped_rows_pending"] is True
    # one sample, no load: a throttle reason is a WARN (load unknown), not a FAIL
    items = {i.id: i for i in health_items(_Ev(str(tmp_path)), load_thresholds())}
    assert items["H3"].status == "WARN" and "load unknown" in items["H3"].value


def test_topo_on_a_topology_only_fixture_samples_na(tmp_path):
    from commprof.verbs.topo import TopoConfig, run

    assert run(TopoConfig(out=str(tmp_path)), nvml=FakeNVML(TOPO)) == 0
    g = read_health(str(tmp_path))["samples"][0]["gpus"][0]
    assert g["ecc_mode"] == "n/a" and g["pcie_link_gen_max"] == 5


def test_sweep_records_health_before_during_after(cli_inproc, tmp_path, monkeypatch):
    # the sweep's sampler answering from the recorded H100 (a gloo sweep on CPU; NVML faked)
    import commprof.verbs.sweep as sweep_verb

    fake = FakeNVML(with_health(TOPO, "h100-healthy.json"))
    monkeypatch.setattr(sweep_verb, "HealthSampler", lambda: HealthSampler(nvml=fake, period_s=0.05))
    monkeypatch.setattr(sweep_verb, "save_topology", lambda out: False)
    out = str(tmp_path / "sw")
    res = cli_inproc("sweep", "--tp", "2", "--sizes", "4K", "--iters", "4", "--warmup", "1", "--timeout", "60",
                     "--no-charts", "--out", out)
    assert res.returncode == 0, res.stderr
    doc = read_health(out)
    phases = [s["phase"] for s in doc["samples"]]
    assert phases[0] == "before" and phases[-1] == "after"
    assert len(doc["samples"][0]["gpus"]) == 8
    items = {i.id: i.status for i in health_items(_Ev(out), load_thresholds())}
    assert items["H1"] == "PASS" and items["H3"] == "PASS"
