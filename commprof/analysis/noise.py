"""Noise of a measurement, numbers in, numbers out (no I/O): how far apart a sweep cell's repeats'
medians are (``sweep --repeat N``: every cell measured N times, the repeats interleaved over the
sweep), how long its tail is against its median, and whether that makes the cell unstable; for a
trace, how widely one run's tokens spread, and whether its per-token time falls as the batch grows
by more than that spread allows (it cannot: a step of more sequences does more work).

The limits below are commprof's own choices ("proposed": no published number), each with its
reason beside it. They are not ``check`` thresholds (commprof/data/thresholds.toml judges a box);
they say whether a figure is steady enough to be read as one number.
"""
from __future__ import annotations

import math

#: Proposed: repeats of one cell whose medians are more than this far apart (max / min) are
#: unstable. Repeats of a cell on an idle box agree within tens of percent even on CPU (gloo) and
#: within a few percent on GPUs; 2x apart means the box was busy, or its clocks or the placement of
#: its processes changed, during the run: no repeat's median can then stand for the cell.
REPEAT_SPREAD_MAX = 2.0
#: Proposed: a cell whose p95 is more than this many times its p50 is unstable. Every sample times
#: the same call on the same buffers, so a tail 3x the median means at least one sample in twenty
#: was mostly something else (a preempted rank, a page fault, a timer tick). p95 rather than p99:
#: with the 40 samples of a gloo cell the p99 is the largest sample, one outlier.
TAIL_RATIO_MAX = 3.0
#: Proposed: a trace run whose tokens' interquartile range is more than this share of their median
#: is unstable. Each decode step repeats the same kernels and collectives over a cache that grows by
#: one token, so its steps take nearly the same time; a middle half spread over half the median
#: means a quarter of the steps ran a quarter slower or faster than the median: something else ran.
TOKEN_SPREAD_MAX = 0.5
#: Proposed: a trace's ms/token at a larger batch below a smaller batch's (same TP, mode, phase) by
#: more than this share plus both runs' token spreads (interquartile range / median) is flagged: a
#: step of more sequences does at least the work of one with fewer, so the smaller batch's run was
#: slowed by something else. 10%: the clock and cache effects between two runs of one step.
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


def _us(v: float) -> str:
    return f"{v:,.1f}"


def unstable_reason(repeat_p50s=(), p50=None, p95=None) -> str:
    """Why a cell is unstable ("" when it is not), with its numbers: its repeats' medians more
    than :data:`REPEAT_SPREAD_MAX` apart, or its p95 over :data:`TAIL_RATIO_MAX` x its p50."""
    why = []
    s = spread(repeat_p50s)
    if s is not None and s > REPEAT_SPREAD_MAX:
        shown = " / ".join(_us(v) for v in _pos(repeat_p50s))
        why.append(f"repeats' p50 {shown} us, {s:.2f}x apart (limit {REPEAT_SPREAD_MAX:g}x)")
    t = tail_ratio(p50, p95)
    if t is not None and t > TAIL_RATIO_MAX:
        why.append(f"p95 {_us(float(p95))} us = {t:.2f}x p50 {_us(float(p50))} us (limit {TAIL_RATIO_MAX:g}x)")
    return "; ".join(why)


def _percentile(sorted_v: list[float], q: float) -> float:
    """The q-th percentile (0-100) of sorted values, linear between the closest ranks (numpy's default)."""
    pos = (len(sorted_v) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_v) - 1)
    return sorted_v[lo] + (sorted_v[hi] - sorted_v[lo]) * (pos - lo)


def iqr_ratio(values) -> float | None:
    """(p75 - p25) / p50 of the positive finite ``values``; None with fewer than two."""
    v = sorted(_pos(values))
    if len(v) < 2:
        return None
    p50 = _percentile(v, 50)
    return (_percentile(v, 75) - _percentile(v, 25)) / p50


def token_spread_reason(token_ms) -> str:
    """Why one trace run's per-token times (each token's slowest rank, ms) are unstable, "" when
    they are not: their interquartile range over :data:`TOKEN_SPREAD_MAX` of their median."""
    v = sorted(_pos(token_ms))
    r = iqr_ratio(v)
    if r is None or r <= TOKEN_SPREAD_MAX:
        return ""
    return (f"its {len(v)} tokens spread from {_percentile(v, 25):,.3f} to {_percentile(v, 75):,.3f} ms "
            f"(middle half) around {_percentile(v, 50):,.3f} ms: interquartile range {r:.2f}x the median "
            f"(limit {TOKEN_SPREAD_MAX:g})")


def batch_drops(rows: list[dict], noise_key: str | None = None) -> list[dict]:
    """Rows of one trace summary (dicts with ``tp``, ``batch``, ``ms_per_token`` and, when given,
    ``noise_key``: the row's own relative spread, its tokens' :func:`iqr_ratio`) where a larger
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
