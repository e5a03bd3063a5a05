"""The collective as the engine pays it, beside the same box's back-to-back figure.

NCCL Inspector (``commprof import nccl-inspector``) times every collective an engine runs under
real traffic; a sweep dir (``commprof sweep`` or imported nccl-tests logs) of the same box times the
same collective alone. :func:`engine_vs_sweep` sets them side by side at the same op, TP degree
(the communicator's ranks) and size (nccl-tests' meaning, ``model/collectives.py``), the sweep's
latency looked up by :func:`commprof.analysis.latency.loglog_lookup` (measured or interpolated
sizes only: a size beyond the sweep's is not compared, as ``gap`` never compares an extrapolated
value). ``ratio`` = in-engine mean / back-to-back mean: what a step's collective costs in service
for each microsecond the benchmark says. Pure: rows in, rows out.
"""
from __future__ import annotations

from commprof.analysis.latency import PREDICT_STATS, loglog_lookup
from commprof import results
from commprof.model.errors import UsageError
from commprof.model.units import finite_float

#: the sweep's mode an engine's decode runs in (CUDA graphs), else the first the sweep holds
PREFERRED_MODES = ("graph", "eager")
COLUMNS = ["op", "tp", "size_bytes", "calls", "rank_dumps", "timing", "in_engine_us_mean", "in_engine_us_p50",
           "back_to_back_us", "sweep_stat", "sweep_mode", "sweep_timing", "how", "ratio"]


def pooled(insp_rows) -> dict:
    """(op, tp, size_bytes) -> the engine's calls pooled over communicators and ranks: calls, the
    calls-weighted mean, the median of the ranks' medians, and how they were timed. GPU-timed rows
    (``kernel_gpu``) are used where a key has any; else rows of unknown timing (older records);
    host-timed rows never (they hold the launch, not the collective)."""
    by = {}
    for r in insp_rows:
        if r.get("kind", "coll") != "coll" or r.get("gpu_timed") == "no":
            continue
        k = (str(r["op"]), int(float(r["nranks"])), int(float(r["size_bytes"])))
        by.setdefault(k, {}).setdefault(r.get("gpu_timed") or "unknown", []).append(r)
    out = {}
    for k, groups in by.items():
        timing = "yes" if "yes" in groups else "unknown"
        rows = groups[timing]
        calls = sum(int(float(r["calls"])) for r in rows)
        mean = sum(finite_float(r["time_us_mean"]) * int(float(r["calls"])) for r in rows) / calls if calls else None
        p50s = sorted(x for x in (finite_float(r.get("time_us_p50")) for r in rows) if x is not None)
        out[k] = {"calls": calls, "rank_dumps": len(rows), "mean": mean,
                  "p50": p50s[len(p50s) // 2] if p50s else None,
                  "timing": "GPU-timed" if timing == "yes" else "timing unknown"}
    return out


def engine_vs_sweep(insp_rows, sweep_rows, sweep_timing: str = "per-call") -> list[dict]:
    """One row per (op, tp, size) the engine ran: its in-service time beside the sweep's at the same
    op, TP degree and size, and their ratio (None where the sweep has no such op and TP, or the size
    lies beyond its sizes). ``sweep_rows``: dicts of one timing method (``results.one_timing``),
    group 0, NCCL's own implementation."""
    have = {}
    for r in sweep_rows:
        if str(r.get("impl", "nccl")) == "custom" or int(float(r.get("group", 0) or 0)) != 0:
            continue
        have.setdefault((str(r["op"]), int(float(r["tp"]))), []).append(r)
    out = []
    for (op, tp, size), e in sorted(pooled(insp_rows).items()):
        row = {"op": op, "tp": tp, "size_bytes": size, "calls": e["calls"], "rank_dumps": e["rank_dumps"],
               "timing": e["timing"], "in_engine_us_mean": e["mean"], "in_engine_us_p50": e["p50"],
               "back_to_back_us": None, "sweep_stat": "", "sweep_mode": "", "sweep_timing": sweep_timing,
               "how": "no sweep rows of this op and TP", "ratio": None}
        sub = have.get((op, tp), [])
        if sub:
            modes = {str(r.get("mode", "")) for r in sub}
            mode = next((m for m in PREFERRED_MODES if m in modes), sorted(modes)[0])
            sub = [r for r in sub if str(r.get("mode", "")) == mode]
            stat = next((s for s in PREDICT_STATS if all(finite_float(r.get(s)) is not None for r in sub)), None)
            if stat is None:
                row["how"] = f"the sweep's rows lack {' and '.join(PREDICT_STATS)}"
            else:
                by_size = {}
                for r in sub:
                    by_size.setdefault(int(float(r["size_bytes"])), []).append(finite_float(r[stat]))
                xs = sorted(by_size)
                ys = [sorted(by_size[x])[len(by_size[x]) // 2] for x in xs]
                val, how = loglog_lookup([float(x) for x in xs], ys, float(size))
                if how == "single point" and xs == [size]:
                    how = "exact"
                row.update(sweep_stat=stat, sweep_mode=mode, how=how)
                if how in ("exact", "interpolated") and val and e["mean"] is not None:
                    row.update(back_to_back_us=val, ratio=e["mean"] / val)
                elif how in ("extrapolated", "single point"):
                    row["how"] = f"{how}: not compared (the sweep ran {xs[0]}-{xs[-1]} B)"
        out.append(row)
    return out


def overhead_factor(rows, op: str | None = None) -> float | None:
    """The calls-weighted in-engine / back-to-back ratio over the rows compared (of ``op``, or all):
    the factor a collective's back-to-back price is multiplied by to be what the engine pays."""
    use = [r for r in rows if r["ratio"] is not None and (op is None or r["op"] == op)]
    calls = sum(r["calls"] for r in use)
    if not calls:
        return None
    return sum(r["ratio"] * r["calls"] for r in use) / calls


def _records(df) -> list[dict]:
    return [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in df.to_dict("records")]


def factor_against(insp_rows, comm, mode: str = "graph") -> tuple[float | None, list[dict]]:
    """(calls-weighted in-engine / ``comm``'s price, the rows compared): a results dir (sweep or
    imported nccl-tests) by :func:`engine_vs_sweep` (its sizes only, never extrapolated); a
    reference profile by its modelled latency at the exact size."""
    table = getattr(comm, "table", None)
    if table is not None:
        rows = engine_vs_sweep(insp_rows, _records(table.df), comm.timing)
        return overhead_factor(rows), rows
    rows = []
    for (op, tp, size), e in sorted(pooled(insp_rows).items()):
        row = {"op": op, "tp": tp, "size_bytes": size, "calls": e["calls"], "in_engine_us_mean": e["mean"],
               "back_to_back_us": None, "how": "the profile has no such op and TP", "ratio": None}
        if (op, tp) in comm.have and e["mean"] is not None:
            val = comm.price(tp, mode)(op, size)
            row.update(back_to_back_us=val, how="modelled at the exact size", ratio=e["mean"] / val if val else None)
        rows.append(row)
    return overhead_factor(rows), rows


def inspector_rows(path: str) -> list[dict]:
    """The rows of an ``import nccl-inspector`` dir (UsageError naming the dir when it is not one)."""
    res = results.load(path)
    if "nccl_inspector" not in res.tables:
        raise UsageError(f"--comm-overhead-from '{path}': not an 'import nccl-inspector' dir (no nccl_inspector.csv)")
    return _records(res.tables["nccl_inspector"])
