"""The lines ``gap`` (and the report) print for an engine's collectives beside its box's sweep."""
from __future__ import annotations

from commprof.model.units import human_bytes


def inengine_lines(label: str, rows: list[dict], factor) -> list[str]:
    out = [f"{label}: the engine's collectives (NCCL Inspector) against the box's sweep at the same op, TP and size"]
    for r in rows:
        head = f"  {r['op']} {human_bytes(int(r['size_bytes']))} TP={r['tp']}: {r['calls']:,} calls, "
        if r["ratio"] is None:
            out.append(head + f"in-engine {r['in_engine_us_mean']:.1f} us ({r['timing']}); {r['how']}")
        else:
            out.append(head + f"in-engine {r['in_engine_us_mean']:.1f} us ({r['timing']}) vs sweep "
                       f"{r['back_to_back_us']:.1f} us ({r['sweep_timing']}, {r['sweep_mode']}, {r['how']}): "
                       f"{r['ratio']:.2f}x")
    if factor is not None:
        out.append(f"  in-engine / sweep, calls-weighted: {factor:.2f}x (the factor on the sweep's price of these "
                   "collectives in service)")
    return out
