"""What ``commprof import nccl-inspector`` shows: the communicators, then the collectives the
engine ran most (across ranks: calls, median time, bus bandwidth, how they were timed)."""
from __future__ import annotations

from commprof.model.units import finite_float as _f, human_bytes

#: collective lines shown (the most-called first); the table holds them all
SHOWN = 12


def collective_lines(rows: list[dict], shown: int = SHOWN) -> list[str]:
    """One line per communicator size, collective, size and timing (GPU-timed, host-timed or
    unknown: never pooled), the ranks pooled (the median of the ranks' medians), most calls first."""
    groups = {}
    for r in rows:
        if r.get("kind") != "coll":
            continue
        k = (int(float(r["nranks"])), r["op"], int(float(r["size_bytes"])), r.get("gpu_timed") or "unknown")
        g = groups.setdefault(k, {"calls": 0, "p50": [], "bus": [], "gpu": set(), "ranks": set(), "comms": set()})
        g["calls"] += int(float(r["calls"]))
        for key, col in (("p50", "time_us_p50"), ("bus", "busbw_gbps_p50")):
            if _f(r.get(col)) is not None:
                g[key].append(_f(r[col]))
        g["gpu"].add(r.get("gpu_timed") or "unknown")
        g["ranks"].add((r["comm"], r["rank"]))
        g["comms"].add(r["comm"])
    out = []
    for (n, op, size, _), g in sorted(groups.items(), key=lambda kv: -kv[1]["calls"])[:shown]:
        p50 = sorted(g["p50"])[len(g["p50"]) // 2] if g["p50"] else None
        bus = sorted(g["bus"])[len(g["bus"]) // 2] if g["bus"] else None
        timed = "GPU-timed" if g["gpu"] == {"yes"} else ("host-timed" if g["gpu"] == {"no"} else
                                                           "timing: " + "/".join(sorted(g["gpu"])))
        out.append(f"{op} {human_bytes(size)} on {n} rank(s): {g['calls']:,} calls over {len(g['ranks'])} rank dump(s), "
                   f"median {p50:g} us" if p50 is not None else f"{op} {human_bytes(size)} on {n} rank(s): {g['calls']:,} calls")
        out[-1] += (f", busbw {bus:.3g} GB/s" if bus is not None else "") + f" ({timed})"
    if len(groups) > shown:
        out.append(f"... {len(groups) - shown} more (collective, size) rows in nccl_inspector.csv")
    return out


def inspector_lines(meta: dict, comms: list[dict], rows: list[dict]) -> list[str]:
    info = meta.get("nccl_inspector", {})
    out = [c["summary"] for c in comms]
    out += collective_lines(rows)
    if info.get("timing_sources"):
        out.append("timing: " + ", ".join(f"{k} {v:,}" for k, v in info["timing_sources"].items())
                   + " (kernel_gpu: the kernels' GPU clock; kernel_cpu/collective_cpu: host clocks)")
    if info.get("truncated_records"):
        out.append(f"note: {info['truncated_records']} unfinished record(s) (a process stopped mid-write) skipped")
    if info.get("skipped_objects"):
        out.append(f"note: {info['skipped_objects']} JSON object(s) that are not Inspector records skipped")
    if info.get("records"):
        out.append("note: " + info.get("note", ""))
    return out
