"""The GPU table ``commprof predict`` models compute with: published figures, each with its source.

The figures live in ``commprof/data/gpus.toml`` (one entry per SKU, ``{value, source}`` per
figure). Only the standard library is imported here.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field

from commprof.model.errors import UsageError, shown

GPUS_TOML = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "gpus.toml")

#: Every figure an entry must give, with its unit.
FIGURES = {
    "mem_bandwidth_gbps": "GB/s (1e9 bytes/s)",
    "bf16_tflops": "dense TFLOP/s",
    "fp8_tflops": "dense TFLOP/s (0: no FP8 tensor cores)",
    "memory_gb": "GB (1e9 bytes)",
    "pcie_gen": "PCIe generation",
    "nvlink_gen": "NVLink generation (0: none)",
    "nvlink_gbps_per_gpu": "GB/s per GPU, both directions (0: none)",
    "sm_count": "streaming multiprocessors",
}

#: Figures an entry may give (each ``{value, source}`` too); absent ones take the default shown.
OPTIONAL_FIGURES = {
    "int8_tops": ("dense INT8 tensor TOP/s (0: not given)", 0.0),
    "form_factor": ("sxm (an NVLink baseboard) or pcie (a card in a PCIe slot; '' not given)", ""),
    "pcie_p2p": ("true when the card and its driver allow GPU-to-GPU P2P over PCIe", None),
    "nvlink_bridge_gbps": ("GB/s of an NVLink bridge joining two cards only (0: none; not a fabric)", 0.0),
    "mem_bandwidth_achievable_gbps": ("GB/s of DRAM traffic (read + write) a published device-local copy "
                                      "measured on the SKU, where it falls well short of the datasheet (0: none)", 0.0),
    "memory_type": ("the DRAM the vendor names (hbm2, hbm2e, hbm3, hbm3e, gddr6, gddr6x, gddr7; '' not given): "
                    "the compute model's roofline takes gddr_bw_frac of a GDDR card's bandwidth", ""),
    "boost_clock_mhz": ("MHz of the SMs' boost clock the vendor states (0: not given; the compute model's per-kernel "
                        "fixed work then runs at the reference A100's 1410 MHz)", 0.0),
    "arch": ("the GPU architecture where a kernel's rate depends on it (hopper: compute capability 9.0; '' not given)",
             ""),
}


@dataclass(frozen=True)
class GpuSpec:
    """One SKU's published figures (units in :data:`FIGURES`) and the source of each."""

    key: str
    name: str
    mem_bandwidth_gbps: float
    bf16_tflops: float
    fp8_tflops: float
    memory_gb: float
    pcie_gen: int
    nvlink_gen: int
    nvlink_gbps_per_gpu: float
    sm_count: int
    sources: dict = field(default_factory=dict, compare=False)
    aliases: tuple = ()
    int8_tops: float = 0.0
    form_factor: str = ""
    pcie_p2p: bool | None = None
    nvlink_bridge_gbps: float = 0.0
    mem_bandwidth_achievable_gbps: float = 0.0
    memory_type: str = ""
    boost_clock_mhz: float = 0.0
    arch: str = ""
    optional_sources: dict = field(default_factory=dict, compare=False)

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gb * 1e9)

    @property
    def is_gddr(self) -> bool:
        """True for a card on GDDR memory (memory_type gddr*), False for HBM or not given."""
        return str(self.memory_type).lower().startswith("gddr")

    @property
    def roofline_bandwidth_gbps(self) -> float:
        """The memory bandwidth the compute model's roofline starts from: the datasheet's, or a
        published measured achievable bandwidth where the SKU has one and it is lower."""
        a = float(self.mem_bandwidth_achievable_gbps or 0.0)
        return min(self.mem_bandwidth_gbps, a) if a > 0 else self.mem_bandwidth_gbps

    def peak_tflops(self, dtype: str) -> float:
        """Dense tensor TFLOP/s for weights of ``dtype`` (fp8, else the BF16/FP16 rate)."""
        return self.fp8_tflops if dtype == "fp8" and self.fp8_tflops > 0 else self.bf16_tflops

    def to_dict(self) -> dict:
        return {"key": self.key, "name": self.name, **{k: getattr(self, k) for k in FIGURES},
                **{k: getattr(self, k) for k in OPTIONAL_FIGURES if k in self.optional_sources},
                "sources": {**self.sources, **self.optional_sources}}

    @property
    def interconnect_class(self) -> str:
        """In words: how GPUs of this SKU talk to each other in a box (NVLink fabric, or PCIe with
        or without P2P, an NVLink bridge joining pairs only)."""
        if self.form_factor != "pcie" and self.nvlink_gen:
            return f"SXM, NVLink {self.nvlink_gen} ({self.nvlink_gbps_per_gpu:g} GB/s per GPU)"
        p2p = {True: ", P2P", False: ", no P2P (driver)", None: ""}[self.pcie_p2p]
        bridge = (f"; NVLink bridge for pairs only ({self.nvlink_bridge_gbps or self.nvlink_gbps_per_gpu:g} GB/s)"
                  if self.nvlink_bridge_gbps or self.nvlink_gen else "")
        return f"PCIe {self.pcie_gen}.0 card{p2p}{bridge}"


def _entry(key: str, d: dict) -> GpuSpec:
    vals, srcs = {}, {}
    for fig in FIGURES:
        item = d.get(fig)
        if not isinstance(item, dict) or "value" not in item or not item.get("source"):
            raise UsageError(f"{GPUS_TOML}: gpu '{key}' figure '{fig}' needs {{value, source}}")
        vals[fig], srcs[fig] = item["value"], item["source"]
    opt_srcs = {}
    for fig, (_, default) in OPTIONAL_FIGURES.items():
        item = d.get(fig)
        if item is None:
            continue
        if not isinstance(item, dict) or "value" not in item or not item.get("source"):
            raise UsageError(f"{GPUS_TOML}: gpu '{key}' figure '{fig}' needs {{value, source}}")
        vals[fig], opt_srcs[fig] = item["value"], item["source"]
    if vals.get("form_factor", "") not in ("", "sxm", "pcie"):
        raise UsageError(f"{GPUS_TOML}: gpu '{key}' form_factor must be sxm or pcie")
    return GpuSpec(key=key, name=str(d.get("name", key)), sources=srcs, optional_sources=opt_srcs,
                   aliases=tuple(str(a).lower() for a in d.get("aliases", ())), **vals)


_TABLE: dict | None = None


def gpu_table() -> dict[str, GpuSpec]:
    """Every SKU of the table, by key (read once)."""
    global _TABLE
    if _TABLE is None:
        with open(GPUS_TOML, "rb") as f:
            doc = tomllib.load(f)
        _TABLE = {k: _entry(k, v) for k, v in doc["gpus"].items()}
    return _TABLE


def sibling_forms(g: GpuSpec) -> list[GpuSpec]:
    """The same chip in its other form factors (``a100-sxm`` -> ``a100-pcie``: the table's entries of the
    same family and memory whose ``form_factor`` differs); empty for a card sold in one form."""
    if not g.form_factor:
        return []
    family = g.key.split("-")[0]
    return [o for o in gpu_table().values() if o.key != g.key and o.key.split("-")[0] == family
            and o.form_factor and o.form_factor != g.form_factor and o.memory_gb == g.memory_gb]


def other_forms(spec: str) -> list[GpuSpec]:
    """:func:`sibling_forms` of the card ``spec`` names when ``spec`` is a bare alias that does not
    say which form (``a100``, ``h100``: the same chip sold as an SXM module and as a PCIe card), empty
    when it names one (a key, or an alias with sxm/pcie/nvl in it)."""
    s = str(spec).strip().lower()
    g = get_gpu(s)
    if s == g.key or any(w in s for w in ("sxm", "pcie", "nvl")):
        return []
    return sibling_forms(g)


def get_gpu(spec: str) -> GpuSpec:
    """The SKU named by ``spec`` (its key or an alias, any case); UsageError lists the keys."""
    s = str(spec).strip().lower()
    for g in gpu_table().values():
        if s == g.key or s in g.aliases:
            return g
    raise UsageError(f"--gpu {shown(spec)}: unknown GPU (known: {', '.join(gpu_table())})")
