"""``check`` on noisy figures: an item judged from sweep cells (or trace runs) that their own run
flagged unstable (column ``unstable``: ``sweep --repeat N`` or ``trace --repeat N`` repeats that
disagree, a long tail, tokens that spread; :mod:`commprof.analysis.noise`) is not a verdict on
them alone. Its PASS or WARN becomes INSUFFICIENT (exit 9 when nothing FAILs) naming the cells
and what to do; a FAIL stands when its figure is past the FAIL bound by more than the cells'
spread (even the figure divided by that spread, or for a bandwidth multiplied by it, still
fails), else it is INSUFFICIENT too. Results from before the column are judged as before.
Numbers in, items out (no I/O)."""
from __future__ import annotations

from commprof.analysis.verdict import Item
from commprof.analysis.whatnow import basis_for
from commprof.model.units import finite_float, human_bytes

#: The most unstable cells an item names one by one (the rest are counted).
NAMED_MAX = 3


def _text(v) -> str:
    return "" if v is None or (isinstance(v, float) and v != v) else str(v).strip()


def _factor(v) -> float | None:
    return finite_float(v, at_least=1.0)


def unstable_cells(rows, verb: str = "sweep") -> list[tuple[str, str, float | None]]:
    """(label, reason, spread) of each row of ``rows`` (a sweep or trace-summary frame) whose
    ``unstable`` column holds a reason; [] for a frame without the column. ``spread``: how far the
    row's figure may be off, as a factor: the larger of its repeats' max / min and (a sweep cell)
    its p95 / p50; None when neither is known."""
    if rows is None or not len(rows) or "unstable" not in rows.columns:
        return []
    out = []
    for r in rows.to_dict("records"):
        why = _text(r.get("unstable"))
        if not why:
            continue
        if verb == "trace":
            label = f"TP={r.get('tp')} batch={r.get('batch')} {r.get('mode', '')}".rstrip()
            keys = ("repeat_spread",)
        else:
            try:
                size = human_bytes(int(r.get("size_bytes")))
            except (TypeError, ValueError):
                size = f"{r.get('size_bytes')} B"
            label = f"{r.get('op')} TP={r.get('tp')} {size} {r.get('mode', '')}".rstrip()
            keys = ("repeat_spread", "tail_ratio")
        spreads = [f for f in (_factor(r.get(k)) for k in keys) if f is not None]
        out.append((label, why, max(spreads) if spreads else None))
    return out


def guard(item: Item, rows, *, figure: float | None = None, fail_bound: float | None = None,
          higher_is_better: bool = False, verb: str = "sweep") -> Item:
    """``item`` as judged from ``rows``, with what their noise allows (module doc). ``figure``
    and ``fail_bound``: the item's measured value and the value past which it FAILs (above it for
    a latency, below it for a bandwidth: ``higher_is_better``)."""
    if item.status not in ("PASS", "WARN", "FAIL"):
        return item
    bad = unstable_cells(rows, verb)
    if not bad:
        return item
    what = "cells" if verb == "sweep" else "runs"
    named = "; ".join(f"{label} ({why})" for label, why, _ in bad[:NAMED_MAX])
    more = f"; and {len(bad) - NAMED_MAX} more" if len(bad) > NAMED_MAX else ""
    note = f"{len(bad)} of the {len(rows)} {what} it stands on unstable: {named}{more}"
    basis = item.basis or basis_for(item.id)
    spread = max((s for _, _, s in bad if s is not None), default=None)
    if item.status == "FAIL" and spread is not None and figure is not None and fail_bound is not None:
        off = figure * spread if higher_is_better else figure / spread
        if (off < fail_bound) if higher_is_better else (off > fail_bound):
            item.basis = (f"{basis}; {note}; a FAIL all the same: {figure:,.1f} is past the FAIL bound "
                          f"{fail_bound:,.1f} by more than their {spread:.2f}x spread")
            return item
    rerun = f"rerun with `commprof {verb} --repeat 5` on a quiet machine"
    return Item(item.id, item.item, "INSUFFICIENT", f"{item.value}; not judged: {note}", item.threshold, item.source,
                hint=rerun, box=item.box,
                basis=(f"{basis}; would be {item.status} on {what} that are not steady figures: "
                       f"{', '.join(label for label, _, _ in bad[:NAMED_MAX])}{more}"),
                what_now=(f"Not a verdict on this item: the {what} it stands on were unstable (named above); "
                          f"{rerun} and check again."))
