"""The GPUs' health samples (health.json) as a few lines: one per GPU from its last sample."""
from __future__ import annotations


def health_lines(doc: dict) -> list[str]:
    samples = [s for s in (doc or {}).get("samples", []) if s.get("gpus")]
    if not samples:
        return [f"GPU health: {(doc or {}).get('not_judged') or 'no samples'}"]
    phases = ", ".join(dict.fromkeys(s.get("phase", "?") for s in samples))
    out = [f"GPU health from {doc.get('source', '?')}: {len(samples)} sample(s) ({phases})"]
    for g in samples[-1]["gpus"]:
        reasons = g.get("clocks_event_reasons")
        reasons = ", ".join(reasons) or "none" if isinstance(reasons, list) else reasons
        out.append(f"  GPU {g.get('index')} {g.get('name')}: ECC uncorrected {g.get('ecc_aggregate_uncorrected')}, "
                   f"remap pending {g.get('remapped_rows_pending')}, throttle {reasons}, "
                   f"{g.get('temperature_c')} C (slowdown {g.get('temperature_slowdown_c')} C), "
                   f"{g.get('power_w')} / {g.get('power_limit_w')} W, PCIe Gen{g.get('pcie_link_gen_current')} "
                   f"x{g.get('pcie_link_width_current')} of Gen{g.get('pcie_link_gen_max')} "
                   f"x{g.get('pcie_link_width_max')}, fabric {g.get('fabric_state')}")
    return out
