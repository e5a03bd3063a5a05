"""What an nccl-tests table says about itself: which collective it measured, and whether each
row's size, time and algbw agree.

nccl-tests prints the same columns for every collective; the collective shows in them:

- the ``redop`` column: the reducing tests (all_reduce, reduce_scatter, reduce) print a reduction
  (``sum``, ``prod``, ``max``, ``min``, ``avg``); the others print ``none``, or, in the layout
  before the ``redop``/``root`` columns were printed for every test, no such column at all;
- the ``root`` column: ``-1`` for the collectives without a root; broadcast and reduce print the
  root rank (0 and up);
- ``count`` against ``size``: all_gather, reduce_scatter and alltoall print the count of one rank
  (size = count x type size x ranks); the others the whole buffer's (size = count x type size);
- busbw / algbw, nccl-tests' bus factor: 2(n-1)/n for all_reduce, (n-1)/n for all_gather,
  reduce_scatter and alltoall, 1 for broadcast, reduce and sendrecv (nccl-tests doc/PERFORMANCE.md).

Every figure nccl-tests prints comes from one time per size: algbw = size / time, for every
collective (its ``*GetBw`` functions divide the bytes of the size column by the time). A row whose
algbw is not size / time within the rounding of the printed digits was not written by nccl-tests
as it stands (or was edited): :func:`check_algbw` names it.
"""
from __future__ import annotations

#: bytes per element of nccl-tests' type names
TYPE_BYTES = {"float": 4, "half": 2, "bfloat16": 2, "double": 8, "int8": 1, "uint8": 1, "int32": 4,
              "uint32": 4, "int64": 8, "uint64": 8, "f8e4m3": 1, "f8e5m2": 1, "int": 4, "char": 1}
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
NOT_REDUCING = ("all_gather", "alltoall", "broadcast", "sendrecv")
ROOTED = ("broadcast", "reduce")
PER_RANK_COUNT = ("all_gather", "reduce_scatter", "alltoall")
KNOWN = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw for ``op`` on ``n`` ranks."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in PER_RANK_COUNT:
        return (n - 1) / n
    return 1.0


def _entry(row: dict):
    return row.get("out-of-place") or row.get("in-place")


def _best_ratio(rows: list[dict]) -> float | None:
    """busbw / algbw of the row with the largest algbw (two printed decimals: coarse below 0.5 GB/s)."""
    best = None
    for r in rows:
        for place in ("out-of-place", "in-place"):
            e = r.get(place)
            if e and e["algbw"] == e["algbw"] and e["algbw"] > 0 and (best is None or e["algbw"] > best["algbw"]):
                best = e
    if best is None or best["algbw"] < 0.5:
        return None
    return best["busbw"] / best["algbw"]


def count_ratio(rows: list[dict]) -> int | None:
    """size / (count x type size) over the rows with a count: 1, or the rank count for the
    per-rank-count collectives; None when unknown or not one whole number for every row."""
    seen = set()
    for r in rows:
        wb = TYPE_BYTES.get(r.get("type"))
        if not wb or not r.get("count") or not r.get("size"):
            continue
        q, rem = divmod(r["size"], r["count"] * wb)
        if rem:
            return None
        seen.add(q)
    return seen.pop() if len(seen) == 1 else None


def infer_collective(rows: list[dict], has_redop_column: bool, has_root_column: bool,
                     n: int | None) -> tuple[str, str]:
    """(nccl-tests collective name, how it was told) from the table alone; ("", why) when the
    table does not tell it. ``n`` is the rank count from the log's rank lines or header, if any."""
    cands = list(KNOWN)
    how = []
    redops = {(r.get("redop") or "").lower() for r in rows} - {""}
    if has_redop_column and redops:
        if redops == {"none"}:
            cands = [c for c in cands if c in NOT_REDUCING]
            how.append("redop column 'none' (not a reduction)")
        elif "none" not in redops:
            cands = [c for c in cands if c in REDUCING]
            how.append(f"redop column '{sorted(redops)[0]}' (a reduction)")
    elif not has_redop_column:
        cands = [c for c in cands if c in NOT_REDUCING]
        how.append("no redop column (not a reduction)")
    roots = {r.get("root") for r in rows if r.get("root") is not None}
    if roots == {-1}:
        cands = [c for c in cands if c not in ROOTED]
        how.append("root -1 (no root)")
    elif roots and min(roots) >= 0:
        cands = [c for c in cands if c in ROOTED]
        how.append(f"root {min(roots)} (a rooted collective)")
    elif not has_root_column:
        cands = [c for c in cands if c not in ROOTED]      # old layout: a rooted test prints a root column
        how.append("no root column")
    q = count_ratio(rows)
    if q is not None and (n is None or n > 1):
        if q == 1:
            cands = [c for c in cands if c not in PER_RANK_COUNT]
            how.append("size = count x type size (the whole buffer's count)")
        elif n is None or q == n:
            cands = [c for c in cands if c in PER_RANK_COUNT]
            n = n or q
            how.append(f"size = count x type size x {q} ranks (a count per rank)")
    ratio = _best_ratio(rows)
    if ratio is not None:
        tol = 0.03 * max(ratio, 1e-9) + 0.01
        if n:
            fit = [c for c in cands if abs(bus_factor(c, n) - ratio) <= tol]
        else:                                   # any rank count >= 2: all_reduce in [1, 2), a count per rank in [0.5, 1)
            fit = [c for c in cands if (c == "all_reduce" and 1 - tol <= ratio < 2)
                   or (c in PER_RANK_COUNT and 0.5 - tol <= ratio < 1 + tol)
                   or (c not in PER_RANK_COUNT and c != "all_reduce" and abs(ratio - 1) <= tol)]
        if fit and len(fit) < len(cands):
            how.append(f"busbw/algbw = {ratio:.3f}" + (f" on {n} ranks" if n else ""))
        cands = fit
    if len(cands) == 1:
        return cands[0], "from the table: " + ", ".join(how)
    if n == 1 and set(cands) == {"all_reduce", "reduce_scatter"}:
        return "all_reduce", ("from the table: " + ", ".join(how) + "; on one rank all_reduce and "
                              "reduce_scatter print the same table: taken as all_reduce")
    if set(cands) == {"all_gather", "alltoall"}:
        return "all_gather", ("from the table: " + ", ".join(how) + "; all_gather_perf and alltoall_perf print the "
                              "same table (the same count, size and bus factor): taken as all_gather, the "
                              "file name says alltoall where it contains 'alltoall'")
    if not cands:
        return "", "the table's columns fit no nccl-tests collective (" + ", ".join(how) + ")"
    return "", ("the table fits " + " or ".join(cands) + (" (" + ", ".join(how) + ")" if how else "")
                + ("; the rank count is unknown" if not n else ""))


def _half_ulp(tok: str) -> float:
    """Half the last printed digit of a number token ('12.34' -> 0.005, '1806' -> 0.5)."""
    t = tok.lower()
    if "e" in t or "n" in t:
        return 0.0
    _, _, dec = t.partition(".")
    return 0.5 * 10 ** -len(dec)


def check_algbw(size: int, time_tok: str, algbw_tok: str) -> str:
    """"" when algbw is size / time within the rounding of both printed figures, else why not."""
    try:
        t, a = float(time_tok), float(algbw_tok)
    except ValueError:
        return ""
    if size <= 0 or not t > 0 or a != a or t != t:
        return ""
    ht, ha = _half_ulp(time_tok), _half_ulp(algbw_tok)
    lo = size / ((t + ht) * 1e3)
    hi = size / ((t - ht) * 1e3) if t > ht else float("inf")
    slack = 1e-6 * max(a, 1.0)
    if lo - ha - slack <= a <= hi + ha + slack:
        return ""
    return (f"algbw {algbw_tok} GB/s is not size / time = {size} B / {time_tok} us = {size / (t * 1e3):.4g} GB/s "
            "(nccl-tests prints algbw = size / time)")


def check_algbw_float(size: int, t: float, a: float) -> str:
    """The same rule for -J JSON figures (printed to full precision: 1% and 0.01 GB/s)."""
    if size <= 0 or not t > 0 or a != a:
        return ""
    want = size / (t * 1e3)
    if abs(a - want) <= 0.01 * want + 0.01:
        return ""
    return f"alg_bw {a:g} GB/s is not size / time = {size} B / {t:g} us = {want:.4g} GB/s"
