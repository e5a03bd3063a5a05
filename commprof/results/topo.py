"""A topology document: ``topo.json``, written by ``commprof topo`` (NVML on the box), by a sweep
or trace that found NVML, and by ``commprof import nvidia-smi-topo`` (the same keys from
``nvidia-smi topo`` text). Anything the source cannot tell is the string :data:`NA`."""
from __future__ import annotations

import os

from commprof.model.fileio import write_json

TOPO_JSON = "topo.json"
NA = "n/a"
# Every GPU entry of topo.json carries these keys (an importer fills what its text cannot tell with NA).
GPU_KEYS = ("name", "pci_bus_id", "memory_total_bytes", "bar1_total_bytes", "pcie_link_gen_current",
            "pcie_link_width_current", "pcie_link_gen_max", "pcie_link_width_max", "pcie_link_gen_gpu_max",
            "pcie_at_max", "pcie_note", "numa_node", "cpu_affinity", "nvlink_active_links", "nvlink_inactive_links",
            "nvlink_version", "pcie_replay_count", "nvlink_error_count", "nvlink_error_counters")


def write_topology(topo: dict, path: str) -> str:
    """Write ``topo`` as JSON to ``path`` (its folder is created); returns the path."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    return write_json(path, topo)
