"""A GPU-health document: ``health.json`` (every sample, every field) and ``health.csv`` (one row per
GPU per sample), written by ``commprof topo``/``sweep`` from NVML and by ``commprof import nvidia-smi-q``
from ``nvidia-smi -q`` text or XML. Anything the source cannot tell is the string :data:`NA`."""
from __future__ import annotations

import os

from commprof.model.fileio import write_json

HEALTH_JSON = "health.json"
HEALTH_CSV = "health.csv"
NA = "n/a"
# Every GPU entry of a health sample carries these keys (units in the names).
HEALTH_KEYS = ("index", "name", "pci_bus_id", "ecc_mode", "ecc_volatile_corrected", "ecc_volatile_uncorrected",
               "ecc_aggregate_corrected", "ecc_aggregate_uncorrected", "retired_pages_sbe", "retired_pages_dbe",
               "retired_pages_pending", "remapped_rows_correctable", "remapped_rows_uncorrectable",
               "remapped_rows_pending", "remapped_rows_failure", "xid_errors", "clocks_event_reasons",
               "clocks_event_counters_us", "temperature_c", "temperature_slowdown_c", "temperature_shutdown_c",
               "temperature_max_operating_c", "power_w", "power_limit_w",
               "nvlink_crc_errors", "nvlink_replay_errors", "nvlink_recovery_errors", "nvlink_errors_per_link",
               "pcie_replay_count", "pcie_link_gen_current", "pcie_link_gen_max", "pcie_link_width_current",
               "pcie_link_width_max", "fabric_state", "fabric_status", "mig_mode", "persistence_mode")


def write_health(doc: dict, out_dir: str) -> tuple[str, str]:
    """Write ``doc`` (``{"source": ..., "samples": [{"phase", "time", "gpus": [...]}, ...]}``) as
    health.json and health.csv in ``out_dir``; returns both paths."""
    os.makedirs(out_dir, exist_ok=True)
    jpath = write_json(os.path.join(out_dir, HEALTH_JSON), doc)
    cpath = os.path.join(out_dir, HEALTH_CSV)
    cols = ("phase", "time") + HEALTH_KEYS
    lines = [",".join(cols)]
    for s in doc.get("samples", []):
        for g in s.get("gpus", []):
            row = [s.get("phase", NA), s.get("time", NA)] + [g.get(k, NA) for k in HEALTH_KEYS]
            lines.append(",".join(_cell(v) for v in row))
    with open(cpath, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return jpath, cpath


def _cell(v) -> str:
    if isinstance(v, (list, tuple)):
        v = ";".join(str(x) for x in v)
    elif isinstance(v, dict):
        v = ";".join(f"{k}={x}" for k, x in v.items())
    s = str(v)
    return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\n') else s


def read_health(out_dir: str) -> dict | None:
    """The dir's health.json, or None when it has none."""
    import json

    p = os.path.join(out_dir, HEALTH_JSON)
    if not os.path.isfile(p):
        return None
    with open(p, encoding="utf-8") as f:
        return json.load(f)
