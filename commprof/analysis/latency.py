"""A box's collective latency at any message size, looked up the one way commprof does it.

:func:`loglog_lookup` is the rule: latency is taken as piecewise linear in log(size) vs
log(latency) through the measured sizes; inside them it interpolates, beyond them it extends the
nearest segment and says ``extrapolated``. Callers choose what they accept, by that word:
``trace --predict``, ``predict`` and the report's step pricing (:class:`CommTable`) take an
extrapolated value and record that they did; ``gap``'s comparison of two boxes and its prefill
pricing take measured and interpolated values only (it never compares what a box did not run).
"""
from __future__ import annotations

import math
import os

from commprof import results
from commprof.model.errors import UsageError


def loglog_lookup(xs, ys, x: float) -> tuple[float | None, str]:
    """``(y at x, how)`` on the log-log polyline through ``(xs, ys)`` (xs sorted ascending, > 0).

    ``how`` is ``exact`` (x is one of xs), ``interpolated`` (between two), ``extrapolated``
    (outside [xs[0], xs[-1]]: the first or last segment extended), ``single point`` (one x only:
    its y, whatever x) or ``none`` (no points, or a y <= 0 where it would be used: value None).
    """
    n = len(xs)
    if not n:
        return None, "none"
    if n == 1:
        return (ys[0], "single point") if ys[0] > 0 else (None, "none")
    if x < xs[0] or x > xs[-1]:
        k = 1 if x < xs[0] else n - 1
        how = "extrapolated"
    else:
        k = next(i for i in range(n) if xs[i] >= x)
        if xs[k] == x:
            return (ys[k], "exact") if ys[k] > 0 else (None, "none")
        how = "interpolated"
    x0, x1, y0, y1 = xs[k - 1], xs[k], ys[k - 1], ys[k]
    if y0 <= 0 or y1 <= 0:
        return None, "none"
    f = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(y0) + f * (math.log(y1) - math.log(y0))), how


PREDICT_STATS = ("latency_us_rankavg_mean", "latency_us_mean")   # first present wins

#: The one rule for a missing all-gather (trace --predict, predict, gap and the report price alike):
#: a dir with all_reduce but no all_gather rows at a TP degree prices the all-gather (the logits
#: step) as an all_reduce of the same size, an upper bound: a ring all-reduce moves 2(n-1)/n of the
#: buffer per rank, a ring all-gather (n-1)/n.
ALL_GATHER_STAND_IN = ("no all_gather rows at tp={tp}: the all-gather is priced as an all_reduce of the same "
                       "size (an upper bound: a ring all-reduce moves twice an all-gather's bytes)")


#: The rule for a missing all-to-all (predict --ep's MoE dispatch and combine): an all-to-all whose
#: send buffer is S bytes per rank moves (n-1)/n x S per rank, as an all-gather of S bytes does, so
#: it is priced as that all-gather (its n-1 peer messages go at once where a ring takes n-1 steps);
#: without all_gather rows either, as an all-reduce of S (twice the bytes: an upper bound).
ALL_TO_ALL_STAND_IN = ("no all_to_all rows at tp={tp}: the all-to-all (S bytes sent per rank) is priced as an "
                       "{op} of the same size ({why})")
_A2A_WHY = {"all_gather": "the same (n-1)/n x S bytes per rank", "all_reduce": "an upper bound: twice the bytes"}


def stand_in_op(op: str, tp: int, have: set) -> tuple[str, str | None]:
    """``(op to price, note)``: ``op`` itself, or all_reduce for an all_gather the rows lack at
    ``tp`` when they hold all_reduce there (:data:`ALL_GATHER_STAND_IN`); ``have``: (op, tp) pairs.
    An all_to_all the rows lack: all_gather, else all_reduce, of the same size (:data:`ALL_TO_ALL_STAND_IN`)."""
    if op == "all_to_all" and (op, tp) not in have:
        for sub in ("all_gather", "all_reduce"):
            if (sub, tp) in have:
                return sub, ALL_TO_ALL_STAND_IN.format(tp=tp, op=sub, why=_A2A_WHY[sub])
    if op == "all_gather" and (op, tp) not in have and ("all_reduce", tp) in have:
        return "all_reduce", ALL_GATHER_STAND_IN.format(tp=tp)
    return op, None


class CommTable:
    """Collective latency of another box, from a sweep results dir, interpolated log-log.

    The statistic is the *mean*: a token sums 2L+2 collectives, so its expected time is the sum of
    their expected latencies, and small-message latency is skewed (p50 below the mean). It is the
    average rank's time in the op (``latency_us_rankavg_mean``), as a rank of a decode step
    spends it; sweeps older than that column give the slowest rank's (``latency_us_mean``).
    ``flag`` is the option that named the dir, for the one-line refusals (``trace --comm-from``,
    ``predict --comm``; empty where no flag named it, as report's box sweep)."""

    def __init__(self, path: str, flag: str = "--comm-from"):
        self.path = path
        self.flag = f"{flag} " if flag else "sweep dir "
        self.meta = results.read_meta(path)
        df = results.load(path)["sweep"] if os.path.exists(os.path.join(path, results.SWEEP_CSV)) else None
        if df is None or df.empty:
            raise UsageError(f"{self.flag}'{path}': holds no sweep rows")
        # One timing method: per-call rows are what a decode step pays (one collective at a time);
        # a dir with only back-to-back averages (nccl-tests' method, e.g. imported logs) is used as
        # it is, and every lookup says so.
        self.timing, self.df, _ = results.one_timing(df[df["impl"] != "custom"])
        self.stat = next(c for c in PREDICT_STATS if c in self.df.columns and self.df[c].notna().all())
        self.lookups: list[dict] = []
        self.have = {(str(o), int(t)) for o, t in zip(self.df["op"], self.df["tp"])}
        #: what the prices stand on beyond the rows (the all-gather stand-in), one line each
        self.notes: list[str] = []

    def check_covers(self, tps) -> None:
        """Refuse, before anything is written, TP degrees (above 1) without all_reduce rows: nothing
        stands in for them."""
        missing = sorted(t for t in set(tps) if t > 1 and ("all_reduce", t) not in self.have)
        if missing:
            have = sorted(self.have)
            raise UsageError(f"{self.flag}'{self.path}': no all_reduce rows at tp={','.join(map(str, missing))} "
                             f"(it has {', '.join(f'{o} tp={t}' for o, t in have)})")

    def latency_us(self, op: str, tp: int, mode: str, size_bytes: int) -> float:
        """``op``'s latency at ``size_bytes`` on ``tp`` ranks (``mode``'s rows where the dir has
        them), by :func:`loglog_lookup` over the dir's sizes: interpolated inside them,
        extrapolated beyond them (a decode step's logits all-gather is often larger than any size a
        decode sweep ran); every lookup is recorded in :attr:`lookups` with how it was found."""
        df = self.df
        op, note = stand_in_op(op, tp, self.have)
        if note and note not in self.notes:
            self.notes.append(note)
        sub = df[(df["op"] == op) & (df["tp"] == tp) & (df["group"] == 0)]
        if sub.empty:
            have = sorted({(o, int(t)) for o, t in zip(df["op"], df["tp"])})
            raise UsageError(f"{self.flag}'{self.path}': no {op} rows at tp={tp} "
                             f"(it has {', '.join(f'{o} tp={t}' for o, t in have)})")
        if mode in set(sub["mode"]):
            sub = sub[sub["mode"] == mode]
        else:
            mode = sub["mode"].iloc[0]
        sub = sub.groupby("size_bytes", as_index=False)[self.stat].median().sort_values("size_bytes")
        val, how = loglog_lookup([float(x) for x in sub["size_bytes"]], [float(y) for y in sub[self.stat]],
                                 float(size_bytes))
        if val is None:
            raise UsageError(f"{self.flag}'{self.path}': {op} at tp={tp} has a latency <= 0 us in {self.stat}; "
                             "no size can be priced from it")
        self.lookups.append({"op": op, "tp": tp, "mode": mode, "size_bytes": size_bytes,
                             self.stat: val, "how": how, "timing": self.timing})
        return val
