"""The checklist's items from the engine's own account of the box: N0-N7 from an imported
NCCL_DEBUG=INFO log (``commprof import nccl-debug``: :func:`commprof.analysis.ncclverdict.engine_items`
judged again with check's thresholds, ``[nccl_debug]``), and I1 from NCCL Inspector's records
(``commprof import nccl-inspector``) against the box's sweep (``[in_engine]``). Each item's hint is
what a buyer does next."""
from __future__ import annotations

from commprof.analysis.inengine import engine_vs_sweep, overhead_factor
from commprof.analysis.ncclverdict import engine_items
from commprof.analysis.verdict import Item
from commprof.model.units import human_bytes

#: engine_items' words that are not check statuses: shown as SKIP with the word in the value
_STATUS = {"INFO": "SKIP", "INSUFFICIENT": "SKIP"}


def records(df) -> list[dict]:
    """A loaded table's rows as dicts: NaN as None, whole floats as ints (the tables' counts)."""
    out = []
    for r in df.to_dict("records"):
        row = {}
        for k, v in r.items():
            if isinstance(v, float):
                v = None if v != v else (int(v) if v.is_integer() else v)
            row[k] = v
        out.append(row)
    return out


def nccl_debug_items(res, th: dict) -> list[Item]:
    """N0-N7 of an ``import nccl-debug`` dir (its ``results.Results``)."""
    info = res.meta.get("nccl_debug", {})
    expect = res.meta.get("expect") or {}
    comms = records(res.tables["nccl_comms"])
    pairs = records(res.tables["nccl_pairs"]) if "nccl_pairs" in res.tables else []
    source = th["nccl_debug"]["source"]
    out = []
    for it in engine_items(info, comms, pairs, expect_gpus=expect.get("gpus"), expect_nodes=expect.get("nodes"),
                           th=th):
        status = _STATUS.get(it["verdict"], it["verdict"])
        value = it["evidence"] if status == it["verdict"] else f"{it['verdict']}: {it['evidence']}"
        # the log's own what-now (thresholds.toml [nccl_debug]) is the item's what-now line too, not the generic one
        out.append(Item(it["id"], it["item"], status, value, "NCCL's own log (import nccl-debug)", source,
                        it["what_now"], what_now=it["what_now"] if status in ("FAIL", "WARN") else ""))
    return out


def in_engine_rows(ev) -> list[dict]:
    """The engine's collectives beside the box's sweep (:func:`engine_vs_sweep`); [] without both."""
    if ev.inspector is None or ev.sweep is None:
        return []
    return engine_vs_sweep(records(ev.inspector), records(ev.sweep), ev.sweep_timing)


def in_engine_item(ev, th: dict) -> Item | None:
    """I1: the engine's collectives in service against the same box's sweep (None without an
    Inspector dir)."""
    if ev.inspector is None:
        return None
    t = th["in_engine"]
    name = "the engine's collectives cost in service what the box's sweep says"
    thr = f"in-engine / sweep <= {t['warn_ratio']:g}x (calls-weighted)"
    if ev.sweep is None:
        return Item("I1", name, "SKIP", "NCCL Inspector records but no sweep of this box to set them beside", thr,
                    t["source"], "give the box's sweep dir (commprof sweep, or import nccl-tests) beside the "
                    "Inspector dir")
    rows = in_engine_rows(ev)
    factor = overhead_factor(rows)
    if factor is None:
        why = "; ".join(dict.fromkeys(r["how"] for r in rows)) or "no collective in the records"
        return Item("I1", name, "SKIP", f"no (op, TP, size) of the engine's within the sweep's ({why})", thr,
                    t["source"], "sweep the box at the engine's sizes (commprof sweep --sizes decode --model M)")
    worst = max((r for r in rows if r["ratio"] is not None), key=lambda r: r["ratio"])
    value = (f"{factor:.2f}x calls-weighted over {sum(r['calls'] for r in rows if r['ratio'] is not None):,} calls; "
             f"worst {worst['op']} {human_bytes(worst['size_bytes'])} TP={worst['tp']} {worst['ratio']:.2f}x "
             f"({worst['in_engine_us_mean']:.1f} vs {worst['back_to_back_us']:.1f} us, sweep {worst['sweep_timing']})")
    status = "PASS" if factor <= t["warn_ratio"] else "WARN"
    hint = "" if status == "PASS" else (
        "the engine pays more per collective than the benchmark shows: price the box with this factor "
        "(commprof gap shows it per size); ask whether the engine runs CUDA graphs and its custom all-reduce, "
        "and re-test under the same load")
    return Item("I1", name, status, value, thr, t["source"], hint)


def nccl_items(ev, th: dict) -> list[Item]:
    """The box's items from the engine's own account: N0-N7 (a nccl-debug dir), I1 (an Inspector dir)."""
    out = nccl_debug_items(ev.nccl_debug, th) if ev.nccl_debug is not None else []
    i1 = in_engine_item(ev, th)
    return out + ([i1] if i1 is not None else [])
