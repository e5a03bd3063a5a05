"""The MoE step that ``commprof moe`` measures, as pure parts and rank 0's writer.

Routing distributions and draws (numpy, seeded, no torch), expert placement on ranks, imbalance,
the rebalancing what-if (replicate the hottest experts, pack replicas by load), the send matrix
each placement implies, and each row's slowdown against uniform routing. The run's config is
:mod:`commprof.model.moeconfig`, the tables rank 0 writes :mod:`commprof.results.moe`; the measured
part runs in every rank (``microbench.moe_rank``).

One hidden vector travels per (token, chosen expert): a token whose k experts live on one rank
is sent k times (no per-rank de-duplication), so bytes scale with tokens x top_k.
"""
from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass

import numpy as np

from commprof.model.errors import UsageError
from commprof.model.fileio import check_regular, read_user_bytes, shown_path
from commprof.model.moeconfig import MoeRunConfig

HOT_SHARE_DEFAULT = 0.5



@dataclass(frozen=True)
class Skew:
    """A parsed ``--skew`` entry: its spec text and the per-expert routing probabilities."""

    spec: str
    probs: tuple


#: The largest load one expert may carry in a replay file: a token count (no capture routes 10^15
#: tokens) or a share; a sum of such loads stays finite.
MAX_LOAD = 1e15


def _load_file(path: str, experts: int, spec: str) -> np.ndarray:
    """Per-expert load from CSV ``expert,load`` (header optional) or JSON list / dict."""
    label = f"--skew {spec}"
    if not os.path.lexists(path):
        raise UsageError(f"{label}: load file '{path}' does not exist")
    check_regular(path, f"{label}: load file '{path}'")     # a device, a FIFO, a dir: said as such
    loads = np.zeros(experts, dtype=np.float64)

    def put(e, v, at):
        try:
            te, tv = str(e).strip(), str(v).strip()
            if not (te.isascii() and tv.isascii()):         # int() and float() take any script's digits
                raise ValueError(te)
            ei, fv = int(te), float(tv)
        except ValueError:
            raise UsageError(f"{label}: '{path}' {at}: expected an expert id and a load, got {e!r}, {v!r}") from None
        if not 0 <= ei < experts:
            raise UsageError(f"{label}: '{path}' {at}: expert {ei} is outside 0..{experts - 1}")
        if not np.isfinite(fv) or fv < 0 or fv > MAX_LOAD:
            raise UsageError(f"{label}: '{path}' {at}: load {fv!r} must be a number from 0 to {MAX_LOAD:g} "
                             "(tokens routed to the expert, or its share)")
        loads[ei] += fv

    if path.lower().endswith(".json"):
        raw = read_user_bytes(path, f"{label}: '{path}'", limit=64 << 20)
        try:
            data = json.loads(raw.decode("utf-8"))
        except ValueError as e:
            raise UsageError(f"{label}: '{path}' is not valid JSON ({str(e).splitlines()[0]})") from None
        except RecursionError:
            raise UsageError(f"{label}: '{path}' is not valid JSON for commprof (nested too deep)") from None
        if isinstance(data, list):
            if len(data) > experts:
                raise UsageError(f"{label}: '{path}' lists {len(data)} loads but the model has {experts} experts")
            for i, v in enumerate(data):
                put(i, v, f"item {i}")
        elif isinstance(data, dict):
            for k, v in data.items():
                put(k, v, f"key {k!r}")
        else:
            raise UsageError(f"{label}: '{path}' must hold a JSON list of loads or an object expert -> load")
    else:
        raw = read_user_bytes(path, f"{label}: '{path}'", limit=64 << 20)
        try:
            rows = [r for r in csv.reader(raw.decode("utf-8").splitlines()) if r and any(c.strip() for c in r)]
        except UnicodeDecodeError as e:
            raise UsageError(f"{label}: '{path}' is not UTF-8 text (byte {e.start}); expected CSV expert,load "
                             "or a .json file") from None
        except csv.Error as e:          # e.g. a field over the csv module's 131,072-character limit
            raise UsageError(f"{label}: '{path}' is not a CSV file of expert,load ({e})") from None
        except OSError as e:
            raise UsageError(f"{label}: '{path}' cannot be read ({e.strerror or e})") from None
        if rows and rows[0][0].strip().lower() == "expert":
            rows = rows[1:]
        for n, r in enumerate(rows, start=1):
            if len(r) != 2:
                raise UsageError(f"{label}: '{path}' row {n}: expected 2 fields expert,load, found {len(r)}")
            put(r[0], r[1], f"row {n}")
    if not np.isfinite(loads.sum()) or loads.sum() <= 0:
        raise UsageError(f"{label}: '{path}' holds no positive load")
    return loads


def parse_skew(spec: str, experts: int, seed: int) -> Skew:
    """``uniform``, ``zipf:S``, ``hot:K[:SHARE]`` or ``file:PATH`` -> per-expert probabilities.

    Zipf: probability of the expert at popularity rank r (1-based) ~ 1/r^S; which expert id holds
    which rank is a permutation drawn from ``seed``. Hot: K experts (the first K of that
    permutation) take SHARE of the traffic (default 0.5), the others split the rest evenly.
    """
    s = spec.strip()
    kind, _, arg = s.partition(":")
    kind = kind.lower()
    perm = np.random.default_rng(seed).permutation(experts)
    p = np.zeros(experts, dtype=np.float64)
    if kind == "uniform" and not arg:
        p[:] = 1.0
    elif kind == "zipf":
        try:
            ex = float(arg)
        except ValueError:
            raise UsageError(f"--skew '{s}': zipf needs an exponent, e.g. zipf:1.0") from None
        if not np.isfinite(ex) or ex < 0:
            raise UsageError(f"--skew '{s}': the zipf exponent must be a number >= 0")
        p[perm] = 1.0 / np.arange(1, experts + 1, dtype=np.float64) ** ex
    elif kind == "hot":
        parts = arg.split(":")
        try:
            k = int(parts[0])
            share = float(parts[1]) if len(parts) > 1 else HOT_SHARE_DEFAULT
        except (ValueError, IndexError):
            raise UsageError(f"--skew '{s}': use hot:K or hot:K:SHARE, e.g. hot:4 or hot:4:0.7") from None
        if len(parts) > 2 or not 1 <= k <= experts or not 0 < share <= 1:
            raise UsageError(f"--skew '{s}': hot:K:SHARE needs 1 <= K <= {experts} experts and 0 < SHARE <= 1")
        p[perm[:k]] = share / k
        if k < experts:
            p[perm[k:]] = (1 - share) / (experts - k)
    elif kind == "file" and arg:
        p = _load_file(arg, experts, s)
        s = f"file:{shown_path(arg)}"           # recorded in meta.json and the tables: the one path rule
    else:
        raise UsageError(f"--skew '{s}': unknown skew spec; use uniform, zipf:S, hot:K[:SHARE] or file:PATH")
    return Skew(s, tuple(float(x) for x in p / p.sum()))


def route(tokens: int, experts: int, top_k: int, skew, seed: int) -> np.ndarray:
    """Each token's ``top_k`` distinct experts, shape (tokens, top_k), drawn without replacement
    from the skew's probabilities (Gumbel top-k). ``skew`` is a spec string or a :class:`Skew`."""
    if top_k < 1 or top_k > experts:
        raise UsageError(f"top_k {top_k} must be between 1 and the expert count {experts}")
    if not isinstance(skew, Skew):
        skew = parse_skew(skew, experts, seed)
    p = np.asarray(skew.probs, dtype=np.float64)
    rng = np.random.default_rng([seed, tokens])
    with np.errstate(divide="ignore"):
        keys = np.log(p)[None, :] + rng.gumbel(size=(tokens, experts))
    idx = np.argsort(-keys, axis=1, kind="stable")[:, :top_k]
    return idx.astype(np.int64)


def expert_loads(routing: np.ndarray, experts: int) -> np.ndarray:
    """Tokens routed to each expert (one per token choice); sums to tokens x top_k."""
    return np.bincount(routing.ravel(), minlength=experts).astype(np.int64)


def imbalance(rank_loads) -> float:
    """max / mean load over ranks (1.0 = perfectly even; an all-idle step counts as even)."""
    a = np.asarray(rank_loads, dtype=np.float64)
    m = a.mean() if a.size else 0.0
    return float(a.max() / m) if m > 0 else 1.0


@dataclass
class Placement:
    """Which ranks hold each expert's replicas (``replicas[e]`` = list of ranks)."""

    kind: str
    ep: int
    replicas: list
    note: str = ""

    def experts_on(self, rank: int) -> list[int]:
        return [e for e, rs in enumerate(self.replicas) for r in rs if r == rank]


def contiguous(experts: int, ep: int) -> Placement:
    """Experts [i*E/ep, (i+1)*E/ep) on rank i."""
    if experts % ep:
        raise UsageError(f"--ep {ep} does not divide the model's {experts} experts")
    per = experts // ep
    return Placement("contiguous", ep, [[e // per] for e in range(experts)])


def pack_replicas(loads, ep: int, redundant: int) -> Placement:
    """Replicate the ``redundant`` hottest experts once each and pack the E + N replicas onto
    ``ep`` ranks, largest load first, each onto the least-loaded rank with a free slot (E/ep + N/ep
    slots per rank), avoiding a second replica of the same expert on one rank when possible.
    A replicated expert's load splits evenly over its replicas."""
    loads = np.asarray(loads, dtype=np.float64)
    experts = loads.size
    if experts % ep:
        raise UsageError(f"--ep {ep} does not divide the model's {experts} experts")
    if redundant < 0 or redundant > experts or redundant % ep:
        raise UsageError(f"--rebalance {redundant}: the redundant slots must be a multiple of ep {ep} "
                         f"and at most the {experts} experts")
    hot = set(np.argsort(-loads, kind="stable")[:redundant].tolist())
    items = []
    for e in range(experts):
        n = 2 if e in hot else 1
        items += [(loads[e] / n, e)] * n
    items.sort(key=lambda t: (-t[0], t[1]))
    slots = experts // ep + redundant // ep
    free = [slots] * ep
    rank_load = [0.0] * ep
    replicas = [[] for _ in range(experts)]
    for w, e in items:
        open_ranks = [r for r in range(ep) if free[r] > 0]
        fresh = [r for r in open_ranks if r not in replicas[e]] or open_ranks
        r = min(fresh, key=lambda q: (rank_load[q], q))
        replicas[e].append(r)
        free[r] -= 1
        rank_load[r] += w
    return Placement("rebalanced", ep, replicas, note=f"{redundant} redundant slots")


def targets(routing: np.ndarray, placement: Placement) -> np.ndarray:
    """Destination rank of every (token, choice): an expert's uses go round-robin over its
    replicas in token order, so its load splits as evenly as integers allow."""
    flat = routing.ravel()
    dest = np.empty(flat.size, dtype=np.int64)
    seen = np.zeros(len(placement.replicas), dtype=np.int64)
    for i, e in enumerate(flat):
        rs = placement.replicas[e]
        dest[i] = rs[seen[e] % len(rs)]
        seen[e] += 1
    return dest.reshape(routing.shape)


def rank_loads(routing: np.ndarray, placement: Placement) -> np.ndarray:
    """Tokens each rank's experts receive (token choices, as dispatched)."""
    return np.bincount(targets(routing, placement).ravel(), minlength=placement.ep).astype(np.int64)


def rebalance(routing: np.ndarray, experts: int, ep: int, redundant: int) -> Placement:
    """The rebalanced placement for this routing. It never raises the max rank load: when the
    packing would (it is a heuristic), the contiguous placement is kept and the note says so."""
    base = contiguous(experts, ep)
    packed = pack_replicas(expert_loads(routing, experts), ep, redundant)
    if rank_loads(routing, packed).max() > rank_loads(routing, base).max():
        base.kind, base.note = "rebalanced", "packing did not lower the max load; contiguous kept"
        return base
    return packed


def source_ranks(tokens: int, ep: int) -> np.ndarray:
    """Rank owning each token: consecutive blocks of about tokens/ep (rank 0 first)."""
    return (np.arange(tokens) * ep) // tokens


def send_counts(routing: np.ndarray, placement: Placement) -> np.ndarray:
    """``counts[s, d]``: hidden vectors rank s sends rank d in dispatch (combine is the transpose)."""
    ep = placement.ep
    src = np.repeat(source_ranks(routing.shape[0], ep), routing.shape[1])
    dst = targets(routing, placement).ravel()
    return np.bincount(src * ep + dst, minlength=ep * ep).reshape(ep, ep).astype(np.int64)


def hot_list(loads, top: int = 3) -> str:
    """The ``top`` most loaded indices above the mean, as ``id:load`` joined by ``;``."""
    a = np.asarray(loads, dtype=np.float64)
    if a.size == 0 or a.max() <= a.mean():
        return ""
    order = [int(i) for i in np.argsort(-a, kind="stable")[:top] if a[i] > a.mean()]
    return ";".join(f"{i}:{int(a[i])}" for i in order)


def plan(cfg: MoeRunConfig, ep: int, tokens: int, skew_index: int, placement: str):
    """(routing, Placement) of one cell; every rank computes the same plan from the seed."""
    m = cfg.model
    routing = route(tokens, m["experts"], m["top_k"], cfg.skews[skew_index], cfg.seed)
    if placement == "contiguous":
        return routing, contiguous(m["experts"], ep)
    return routing, rebalance(routing, m["experts"], ep, cfg.redundant(ep))


def add_slowdown(steps: list[dict]) -> list[dict]:
    """Each step row's slowdown: its p50 over the uniform-routing p50 at the same ep, tokens and
    placement (empty where there is none); the rows, changed in place."""
    base = {(r["ep"], r["tokens"], r["placement"]): r["latency_us_p50"] for r in steps if r["skew"] == "uniform"}
    for r in steps:
        b = base.get((r["ep"], r["tokens"], r["placement"]))
        r["slowdown"] = r["latency_us_p50"] / b if b else ""
    return steps
