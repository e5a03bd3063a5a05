"""Noise of a measured cell, numbers in, numbers out: how far apart its repeats' medians are
(``sweep --repeat N``: the cells run N times, interleaved), how long its tail is against its median,
and whether that makes the cell unstable; and whether a trace's per-token time falls with the batch
by more than its own noise (it cannot: a step of more sequences does more work).

The limits are commprof's own choices, stated where they are used: two runs of one cell on a quiet
box agree within a few percent, so repeats 2x apart mean the box was busy or the clocks moved
during the run; a p95 over 3x the p50 means a third of the way up the tail the samples are mostly
something other than the collective (a preempted rank, a page fault, a timer tick)."""
from __future__ import annotations

import math

#: Repeats of one cell whose medians are more than this far apart (max / min): unstable.
REPEAT_SPREAD_MAX = 2.0
#: A cell whose p95 is more than this many times its p50: unstable.
TAIL_RATIO_MAX = 3.0
#: A trace's ms/token at a larger batch below the smaller batch's by more than this share (beyond
#: the two rows' own token-to-token spread): not a decode engine's behaviour, flagged.
BATCH_DROP_MIN = 0.10


def _pos(values) -> list[float]:
    out = []
    for v in values or ():
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f) and f > 0:
            out.append(f)
    return out


def spread(values) -> float | None:
    """max / min of the positive finite ``values``; None with fewer than two."""
    v = _pos(values)
    return max(v) / min(v) if len(v) >= 2 else None


def tail_ratio(p50, p95) -> float | None:
    """p95 / p50, None when either is missing or not positive."""
    a, b = _pos([p50]), _pos([p95])
    return b[0] / a[0] if a and b else None


def unstable_reason(repeat_p50s=(), p50=None, p95=None) -> str:
    """Why a cell is unstable ("" when it is not): its repeats' medians more than
    :data:`REPEAT_SPREAD_MAX` apart, or its p95 over :data:`TAIL_RATIO_MAX` x its p50."""
    why = []
    s = spread(repeat_p50s)
    if s is not None and s > REPEAT_SPREAD_MAX:
        why.append(f"repeats' p50 {s:.1f}x apart")
    t = tail_ratio(p50, p95)
    if t is not None and t > TAIL_RATIO_MAX:
        why.append(f"p95 {t:.1f}x p50")
    return "; ".join(why)


def parse_repeats(text) -> list[float]:
    """The ``p50_us_repeats`` cell of sweep.csv (``61860;130606;274912``) as numbers."""
    if text is None or (isinstance(text, float) and text != text):
        return []
    return _pos(str(text).split(";"))


def batch_drops(rows: list[dict], noise_key: str | None = None) -> list[dict]:
    """Rows of one trace summary (dicts with ``tp``, ``batch``, ``ms_per_token`` and, when given,
    ``noise_key``: the row's own relative spread, e.g. (p90 - p50) / p50 of its tokens) where a larger
    batch's ms/token is below a smaller batch's at the same TP (and phase) by more than
    :data:`BATCH_DROP_MIN` plus both rows' spreads. Each: tp, the two batches, their ms/token, the drop."""
    by: dict = {}
    for r in rows:
        try:
            key = (int(r["tp"]), str(r.get("phase", "")), str(r.get("mode", "")))
            b, ms = int(r["batch"]), float(r["ms_per_token"])
        except (KeyError, TypeError, ValueError):
            continue
        if not (math.isfinite(ms) and ms > 0):
            continue
        noise = 0.0
        if noise_key:
            try:
                noise = max(0.0, float(r.get(noise_key)))
            except (TypeError, ValueError):
                noise = 0.0
            noise = noise if math.isfinite(noise) else 0.0
        by.setdefault(key, []).append((b, ms, noise))
    out = []
    for (tp, _phase, _mode), pts in sorted(by.items()):
        pts.sort()
        for i, (b1, ms1, n1) in enumerate(pts):
            for b2, ms2, n2 in pts[i + 1:]:
                if b2 <= b1:
                    continue
                drop = 1.0 - ms2 / ms1
                if drop > BATCH_DROP_MIN + n1 + n2:
                    out.append({"tp": tp, "batch_small": b1, "batch_large": b2, "ms_small": ms1, "ms_large": ms2,
                                "drop": drop})
    return out
