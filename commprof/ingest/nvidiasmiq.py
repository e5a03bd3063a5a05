"""``nvidia-smi -q`` text and ``nvidia-smi -q -x`` XML as a health document (``health.json``,
``health.csv``): what ``commprof check`` judges on a box it cannot run on (H1-H8), from the file a
vendor sends. Read per GPU: product name, the ECC mode and counts (volatile/aggregate, corrected/
uncorrected: the SRAM/DRAM split of newer drivers or the Single/Double Bit totals of older ones),
retired pages and their pending flag, remapped rows, clocks event (throttle) reasons and their
counters (time each held the clocks down since the driver loaded), temperatures and their shutdown/
slowdown/max-operating thresholds (absolute, or as T.Limit offsets on newer drivers), power draw and limit, the PCIe link (current and max gen
and width) and replays, fabric state and status, MIG and persistence mode; over the box: driver and CUDA
versions and the GPU count.

Format: the section names and XML elements nvidia-smi prints (driver 470-570: ``Clocks Throttle
Reasons`` became ``Clocks Event Reasons`` in 535, which added ``Clocks Event Reasons Counters``;
``Power Readings`` became ``GPU Power Readings``;
XML ``nvsmi_device_v11/12.dtd``). A field it prints as ``N/A`` is ``n/a``."""
from __future__ import annotations

import os
import re
import sys

from commprof import results
from commprof.model.errors import UsageError
from commprof.model.fileio import all_or_none
from commprof.results.health import HEALTH_JSON, HEALTH_KEYS, NA, write_health

MAX_BYTES = 32 * 1024 * 1024           # 8 GPUs of -q -x are ~0.5 MB; far above: not nvidia-smi output
_REASONS = {"idle": "gpu_idle", "gpu_idle": "gpu_idle", "applications_clocks_setting": "applications_clocks_setting",
            "sw_power_cap": "sw_power_cap", "hw_slowdown": "hw_slowdown", "hw_thermal_slowdown": "hw_thermal_slowdown",
            "hw_power_brake_slowdown": "hw_power_brake_slowdown", "sync_boost": "sync_boost",
            "sw_thermal_slowdown": "sw_thermal_slowdown", "display_clock_setting": "display_clock_setting",
            "display_clocks_setting": "display_clock_setting"}


def _key(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", s.strip().lower()).strip("_")


# --- text ---------------------------------------------------------------------------------------
def _parse_text(text: str, path: str) -> tuple[dict, list[dict]]:
    """-> (box fields, one flat {"section/key": value} dict per GPU)."""
    box, gpus, stack = {}, [], []
    cur = None
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("====="):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        m = re.match(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$", line)
        if m and indent == 0:
            cur = {"pci_bus_id": m.group(1)}
            gpus.append(cur)
            stack = []
            continue
        stack = [(i, k) for i, k in stack if i < indent]
        if ":" in line:
            k, v = line.split(":", 1)
            key = "/".join([s for _, s in stack] + [_key(k)])
            (cur if cur is not None else box)[key] = v.strip()
        else:
            stack.append((indent, _key(line)))
    if not gpus:
        raise UsageError(f"{path}: no 'GPU 0000xxxx:xx:xx.x' section: not 'nvidia-smi -q' output")
    return box, gpus


def _get(d: dict, *suffixes):
    """The first value whose path ends with one of ``suffixes`` (tried in order)."""
    for suf in suffixes:
        for k, v in d.items():
            if k == suf or k.endswith("/" + suf):
                return v
    return None


def _num(v):
    if v is None:
        return NA
    m = re.match(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)", str(v))
    if not m:
        return NA
    x = float(m.group(1))
    return int(x) if x.is_integer() and "." not in m.group(1) else x


def _yes(v):
    if v is None:
        return NA
    s = str(v).strip().lower()
    return True if s in ("yes", "active", "true") else False if s in ("no", "not active", "false") else NA


def _mode(v):
    if v is None:
        return NA
    s = str(v).strip().lower()
    return "enabled" if s == "enabled" else "disabled" if s == "disabled" else NA


def _sum(*vals):
    nums = [v for v in vals if v is not NA]
    return sum(nums) if nums else NA


def _ecc(d: dict, kind: str, err: str):
    # newer drivers: SRAM/DRAM Correctable/Uncorrectable; older: Single Bit / Double Bit ... Total
    sram = _num(_get(d, f"ecc_errors/{kind}/sram_{err}"))
    if sram is NA:      # drivers 550+: the SRAM count split into parity and SEC-DED
        sram = _sum(_num(_get(d, f"ecc_errors/{kind}/sram_{err}_parity")),
                    _num(_get(d, f"ecc_errors/{kind}/sram_{err}_secded")))
    dram = _num(_get(d, f"ecc_errors/{kind}/dram_{err}"))
    if sram is not NA or dram is not NA:
        return _sum(sram, dram)
    bits = "single_bit" if err == "correctable" else "double_bit"
    return _num(_get(d, f"ecc_errors/{kind}/{bits}/total", f"{kind}/{bits}/total"))


# "Clocks Event Reasons Counters" (drivers 535+): microseconds each reason held the clocks down since
# the driver loaded; text rows and XML elements (clocks_event_reasons_counters_<x>) -> reason names.
_COUNTERS = {"sw_power_capping": "sw_power_cap", "sw_power_cap": "sw_power_cap", "sync_boost": "sync_boost",
             "sw_thermal_slowdown": "sw_thermal_slowdown", "sw_therm_slowdown": "sw_thermal_slowdown",
             "hw_thermal_slowdown": "hw_thermal_slowdown", "hw_therm_slowdown": "hw_thermal_slowdown",
             "hw_power_braking": "hw_power_brake_slowdown", "hw_power_brake": "hw_power_brake_slowdown",
             "hw_power_brake_slowdown": "hw_power_brake_slowdown"}


def _counters(d: dict):
    out = {}
    for k, v in d.items():
        parts = k.split("/")
        if len(parts) >= 2 and parts[-2] in ("clocks_event_reasons_counters", "clocks_throttle_reasons_counters"):
            name = _COUNTERS.get(re.sub(r"^clocks_(event|throttle)_reasons_counters_", "", parts[-1]))
            n = _num(v)
            if name and n is not NA:
                out[name] = n
    return out or NA


def _temperatures(d: dict) -> dict:
    """Current temperature and the slowdown / shutdown / max-operating thresholds in C. Drivers that print
    the thresholds as T.Limit offsets (text "GPU T.Limit Temp" and "GPU <x> T.Limit Temp", XML
    gpu_temp_tlimit and gpu_temp_<x>_tlimit_threshold) give the margin to T.Limit and each threshold's
    offset from it: threshold = current + margin - offset."""
    temp = _num(_get(d, "temperature/gpu_current_temp", "temperature/gpu_temp"))
    out = {"temperature_c": temp,
           "temperature_slowdown_c": _num(_get(d, "temperature/gpu_slowdown_temp", "temperature/gpu_temp_slow_threshold")),
           "temperature_shutdown_c": _num(_get(d, "temperature/gpu_shutdown_temp", "temperature/gpu_temp_max_threshold")),
           "temperature_max_operating_c": _num(_get(d, "temperature/gpu_max_operating_temp",
                                                    "temperature/gpu_temp_max_gpu_threshold"))}
    margin = _num(_get(d, "temperature/gpu_t_limit_temp", "temperature/gpu_temp_tlimit"))
    if temp is NA or margin is NA:
        return out
    for key, text, xml in (("temperature_slowdown_c", "gpu_slowdown_t_limit_temp", "gpu_temp_slow_tlimit_threshold"),
                           ("temperature_shutdown_c", "gpu_shutdown_t_limit_temp", "gpu_temp_max_tlimit_threshold"),
                           ("temperature_max_operating_c", "gpu_max_operating_t_limit_temp",
                            "gpu_temp_max_gpu_tlimit_threshold")):
        off = _num(_get(d, f"temperature/{text}", f"temperature/{xml}"))
        if out[key] is NA and off is not NA:
            out[key] = temp + margin - off
    return out


def _gpu_from_flat(i: int, d: dict, xml: bool) -> dict:
    g = {k: NA for k in HEALTH_KEYS}
    g["index"] = i
    g["name"] = _get(d, "product_name") or NA
    g["pci_bus_id"] = d.get("pci_bus_id", NA)
    g["ecc_mode"] = _mode(_get(d, "ecc_mode/current", "ecc_mode/current_ecc"))
    for kind in ("volatile", "aggregate"):
        g[f"ecc_{kind}_corrected"] = _ecc(d, kind, "correctable")
        g[f"ecc_{kind}_uncorrected"] = _ecc(d, kind, "uncorrectable")
    g["retired_pages_sbe"] = _num(_get(d, "retired_pages/single_bit_ecc",
                                       "retired_pages/multiple_single_bit_retirement/retired_count"))
    g["retired_pages_dbe"] = _num(_get(d, "retired_pages/double_bit_ecc",
                                       "retired_pages/double_bit_retirement/retired_count"))
    g["retired_pages_pending"] = _yes(_get(d, "retired_pages/pending_page_blacklist", "retired_pages/pending",
                                           "retired_pages/pending_retirement", "retired_pages/pending_blacklist"))
    g["remapped_rows_correctable"] = _num(_get(d, "remapped_rows/correctable_error", "remapped_rows/remapped_row_corr"))
    g["remapped_rows_uncorrectable"] = _num(_get(d, "remapped_rows/uncorrectable_error",
                                                 "remapped_rows/remapped_row_unc"))
    g["remapped_rows_pending"] = _yes(_get(d, "remapped_rows/pending", "remapped_rows/remapped_row_pending"))
    g["remapped_rows_failure"] = _yes(_get(d, "remapped_rows/remapping_failure_occurred",
                                           "remapped_rows/remapped_row_failure"))
    g["xid_errors"] = "n/a: not in nvidia-smi -q; ask for the kernel log (dmesg | grep -i xid)"
    reasons, seen = [], False
    for k, v in d.items():
        parts = k.split("/")
        if len(parts) >= 2 and parts[0] in ("clocks_event_reasons", "clocks_throttle_reasons"):
            name = re.sub(r"^clocks_(event|throttle)_reason_", "", parts[-1])
            if name in _REASONS:
                seen = seen or _yes(v) is not NA
                if _yes(v) is True:
                    reasons.append(_REASONS[name])
    g["clocks_event_reasons"] = sorted(set(reasons)) if seen else NA
    g["clocks_event_counters_us"] = _counters(d)
    g.update(_temperatures(d))
    g["power_w"] = _num(_get(d, "gpu_power_readings/power_draw", "power_readings/power_draw",
                             "gpu_power_readings/instant_power_draw"))
    g["power_limit_w"] = _num(_get(d, "gpu_power_readings/current_power_limit", "power_readings/power_limit",
                                   "gpu_power_readings/current_power_limit", "power_readings/enforced_power_limit",
                                   "gpu_power_readings/enforced_power_limit"))
    g["pcie_replay_count"] = _num(_get(d, "pci/replays_since_reset", "pci/replay_counter"))
    g["pcie_link_gen_current"] = _num(_get(d, "pcie_generation/device_current", "pcie_generation/current",
                                           "pcie_gen/device_current_link_gen", "pcie_gen/current_link_gen"))
    g["pcie_link_gen_max"] = _num(_get(d, "pcie_generation/device_max", "pcie_generation/max",
                                       "pcie_gen/max_device_link_gen", "pcie_gen/max_link_gen"))
    g["pcie_link_width_current"] = _num(_get(d, "link_width/current", "link_widths/current_link_width"))
    g["pcie_link_width_max"] = _num(_get(d, "link_width/max", "link_widths/max_link_width"))
    fab = _get(d, "fabric/state")
    g["fabric_state"] = NA if fab in (None, "N/A") else str(fab).strip().lower()
    st = _get(d, "fabric/status")          # the probe's error status, meaningful once the state is completed
    g["fabric_status"] = NA if st in (None, "N/A", "") else str(st).strip().lower()
    g["mig_mode"] = _mode(_get(d, "mig_mode/current", "mig_mode/current_mig"))
    g["persistence_mode"] = _mode(_get(d, "persistence_mode"))
    return g


# --- XML ----------------------------------------------------------------------------------------
MAX_DEPTH = 16                         # nvidia-smi's XML nests 5 deep


def _flatten(el, prefix="", out=None, depth=0) -> dict:
    out = {} if out is None else out
    if depth > MAX_DEPTH:
        raise UsageError(f"XML nested deeper than {MAX_DEPTH} levels at <{prefix}>: not nvidia-smi -q -x output")
    for c in el:
        k = f"{prefix}/{c.tag}" if prefix else c.tag
        if len(c):
            _flatten(c, k, out, depth + 1)
        else:
            out[k] = (c.text or "").strip()
    return out


def _parse_xml(text: str, path: str) -> tuple[dict, list[dict]]:
    import xml.etree.ElementTree as ET

    if "<!ENTITY" in text:
        raise UsageError(f"{path}: XML declares entities: not nvidia-smi -q -x output")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise UsageError(f"{path}: not well-formed XML ({e})") from None
    if root.tag != "nvidia_smi_log":
        raise UsageError(f"{path}: XML root <{root.tag}>, not <nvidia_smi_log>: not nvidia-smi -q -x output")
    box = {c.tag: (c.text or "").strip() for c in root if not len(c)}
    gpus = []
    for el in root.findall("gpu"):
        d = _flatten(el)
        d["pci_bus_id"] = el.get("id", NA)
        gpus.append(d)
    if not gpus:
        raise UsageError(f"{path}: no <gpu> element in <nvidia_smi_log>")
    return box, gpus


# --- both ---------------------------------------------------------------------------------------
def parse_nvidia_smi_q(path: str) -> dict:
    """One file -> ``{"box": {...}, "gpus": [health fields ...]}``; bad input: one UsageError line."""
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise UsageError(f"{path}: {size} bytes: too large for nvidia-smi -q output (at most {MAX_BYTES})")
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise UsageError(f"{path}: cannot read ({e.strerror or e})") from None
    head = text.lstrip()[:200]
    xml = head.startswith("<?xml") or head.startswith("<!DOCTYPE") or head.startswith("<nvidia_smi_log")
    box, flat = (_parse_xml if xml else _parse_text)(text, path)
    gpus = [_gpu_from_flat(i, d, xml) for i, d in enumerate(flat)]
    driver = box.get("driver_version") or NA
    cuda = box.get("cuda_version") or NA
    attached = _num(box.get("attached_gpus"))
    return {"box": {"driver_version": driver, "cuda_version": cuda,
                    "gpu_count": attached if attached is not NA else len(gpus), "format": "xml" if xml else "text"},
            "gpus": gpus}


def run_import_nvidia_smi_q(paths: list[str], out_dir: str, command=None) -> int:
    """Parse each file (one per host or per moment), write health.json/health.csv and meta.json
    into a new ``out_dir``, print one line; exit code."""
    if not paths:
        raise UsageError("import nvidia-smi-q: give the file of 'nvidia-smi -q' (or -q -x) output")
    parsed = [(p, parse_nvidia_smi_q(p)) for p in paths]
    samples = [{"phase": "given", "time": NA, "file": os.path.basename(p), "gpus": d["gpus"]} for p, d in parsed]
    box = parsed[0][1]["box"]
    doc = {"kind": "health", "source": "nvidia-smi -q" + (" -x" if box["format"] == "xml" else ""),
           "box": box, "samples": samples}
    results.check_out_dir(out_dir, resume=False)
    names = [g["name"] for g in parsed[0][1]["gpus"]]
    with all_or_none(os.path.join(out_dir, HEALTH_JSON), os.path.join(out_dir, results.META_JSON)):
        write_health(doc, out_dir)
        results.write_meta(out_dir, results.provenance(
            "import", "imported", "nvidia-smi -q output imported as health.json (commprof import nvidia-smi-q)",
            status="complete", command=list(command) if command is not None else list(sys.argv), hosts=[],
            gpus=names, source_files=[{"path": os.path.basename(p), "sha256": results.file_sha256(p)} for p in paths],
            driver_version=box["driver_version"], cuda_version=box["cuda_version"]))
    print(f"imported nvidia-smi -q: {len(names)} GPU(s) ({', '.join(dict.fromkeys(names))}), driver "
          f"{box['driver_version']}, CUDA {box['cuda_version']} into {out_dir}")
    return 0
