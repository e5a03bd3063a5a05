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
#: unstable. A choice, not a fit: a factor the medians of one call on the same buffers should not
#: reach unless something outside the collective changed between repeats (load, clocks, where the
#: processes ran), so that no repeat's median can stand for the cell. For scale, on the shared 2-core
#: VM commprof's tests run on, under load from other jobs, three interleaved repeats of 4 gloo cells
#: were 1.08x to 2.25x apart (``commprof sweep --backend gloo --tp 2 --ops all_reduce,all_gather
#: --sizes 4K,16K --iters 4 --repeat 3``): on such a machine the flag fires, as it should.
REPEAT_SPREAD_MAX = 2.0
#: Proposed: a cell whose p95 is more than this many times its p50 is unstable: at least one sample
#: in twenty took 3x the median, i.e. was mostly something other than the collective (a preempted
#: rank, a page fault, a timer tick). p95 rather than p99: with a gloo cell's 40 samples the p99 is
#: the largest one, a single outlier. For scale, the committed CPU sweep results/sweep-default-vm
#: has 4 of its 24 cells over it (p95 3.02x to 28x p50).
TAIL_RATIO_MAX = 3.0
#: Proposed: a trace run whose tokens' interquartile range is more than this share of their median
#: is unstable. Each decode step repeats the same kernels and collectives over a cache that grows by
#: one token, so its steps take nearly the same time: the six runs of the committed CPU trace
#: results/trace-qwen2.5-32b-vm spread 0.04 to 0.26; half the median means a quarter of the steps ran
#: at least a quarter away from it.
TOKEN_SPREAD_MAX = 0.5
#: Proposed: a trace's ms/token at a larger batch below a smaller batch's (same TP, mode, phase) by
#: more than this share plus half of each run's token spread (interquartile range / median: each
#: median may sit anywhere in its middle half) is flagged. A step of more sequences does the work of
#: one with fewer and more, so a much cheaper larger batch means the smaller one was slowed by
#: something else. Not 0: the committed CPU trace (results/trace-qwen2.5-32b-vm) has batch 8
#: steadily 9% to 17% under batch 1 at each TP (why is not established; on CPU one row and eight
#: may take different GEMM paths), so the margin is 25%.
BATCH_DROP_MIN = 0.25


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


def repeat_reason(values, what: str = "p50", unit: str = "us", fmt: str = ",.1f") -> str:
    """The repeat rule, one for every verb: why repeats of one measurement disagree ("" when they
    do not): their figures (``what``, in ``unit``) more than :data:`REPEAT_SPREAD_MAX` apart (max / min)."""
    s = spread(values)
    if s is None or s <= REPEAT_SPREAD_MAX:
        return ""
    shown = " / ".join(format(v, fmt) for v in _pos(values))
    return f"repeats' {what} {shown} {unit}, {s:.2f}x apart (limit {REPEAT_SPREAD_MAX:g}x)"


def unstable_reason(repeat_p50s=(), p50=None, p95=None) -> str:
    """Why a cell is unstable ("" when it is not), with its numbers: its repeats' medians more
    than :data:`REPEAT_SPREAD_MAX` apart, or its p95 over :data:`TAIL_RATIO_MAX` x its p50."""
    why = [w for w in (repeat_reason(repeat_p50s),) if w]
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
    :data:`BATCH_DROP_MIN` plus half of each row's spread. Each: tp, the two batches, their ms/token, the drop."""
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
                if drop > BATCH_DROP_MIN + (n1 + n2) / 2:
                    out.append({"tp": tp, "batch_small": b1, "batch_large": b2, "ms_small": ms1, "ms_large": ms2,
                                "drop": drop})
    return out


def trace_run_noise(token_ms, repeat_ms=()) -> dict:
    """The noise columns of one trace run (``trace_summary.csv``): ``repeats`` (how many times the
    run was measured, ``trace --repeat``), each repeat's ms/token (``ms_per_token_repeats``,
    ';'-separated, empty for one), their ``repeat_spread`` (max / min) and ``unstable``: why the
    run's ms/token is not a steady figure ("" when it is): its repeats' medians disagree
    (:func:`repeat_reason`, the sweep's rule) or its tokens spread (:func:`token_spread_reason`,
    over every repeat's tokens). ``token_ms``: each token's slowest rank, ms."""
    reps = _pos(repeat_ms)
    s = spread(reps)
    why = [w for w in (repeat_reason(reps, "median", "ms/token", ",.3f"), token_spread_reason(token_ms)) if w]
    return {"repeats": max(1, len(list(repeat_ms or ()))),
            "ms_per_token_repeats": ";".join(f"{v:.6g}" for v in reps) if len(reps) > 1 else "",
            "repeat_spread": s if s is not None else "", "unstable": "; ".join(why)}
