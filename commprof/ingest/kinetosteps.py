"""Attributing a serving engine's steps from its ranks' Kineto traces (:mod:`commprof.ingest.kinetoread`).

Per step and rank (steps from ``ProfilerStep#N``, vLLM's ``gpu_model_runner: forward``, or
``--step-marker``; else one step per ``plan`` count of collectives; else the whole capture):

* compute: time some compute kernel runs (union of intervals);
* communication, exposed: a collective runs and no compute kernel does;
* communication, overlapped: a collective runs beside compute (counted in compute, as HTA does);
* memory: only a memcpy/memset runs; idle: nothing runs.

The same collective is aligned across ranks by its order in the step; its transfer is the
shortest rank's duration, the rest of each rank's duration is wait (arrival skew), and the rank
with the shortest duration arrived last (the straggler). The exposed communication of a rank is
split into transfer and wait in the proportion of its collectives' own transfer and wait.

On CPU-only traces (gloo) the collectives are CPU ops and the compute is the other CPU ops.
"""
from __future__ import annotations

import math
import os
import re
from bisect import bisect_left

from commprof.model.errors import UsageError
from commprof.ingest.kinetoread import STEP_RES, RankTrace, vllm_step


# --- intervals -------------------------------------------------------------------------------------------

def _merge(iv) -> list:
    """Disjoint, sorted [start, end] of intervals (s, e)."""
    out: list = []
    for s, e in sorted((s, e) for s, e in iv if e > s):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def _length(m) -> float:
    return float(sum(e - s for s, e in m))


def _inter(a, b) -> float:
    """Length of the intersection of two merged interval lists."""
    i = j = 0
    tot = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            tot += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tot


def _clip(iv, lo, hi):
    return [(max(s, lo), min(e, hi)) for s, e in iv if e > lo and s < hi]


# --- steps ---------------------------------------------------------------------------------------------

def find_steps(rt: RankTrace, step_re=None, plan_count: int | None = None) -> tuple[str, list]:
    """(how the steps were found, [(step id, lo, hi, GPU window or None)]): events whose anchor
    lies in [lo, hi) belong to the step."""
    cpu = [m for m in rt.marks if not m[3]]
    gpu = [m for m in rt.marks if m[3]]
    cands = [(step_re, f"--step-marker '{step_re.pattern}'")] if step_re is not None else STEP_RES
    for rx, how in cands:
        sel = sorted((m for m in cpu if rx.search(m[0])), key=lambda m: m[1])
        gsel = sorted((m for m in gpu if rx.search(m[0])), key=lambda m: m[1])
        if not sel and not gsel:
            continue
        by_name: dict = {}
        for g in gsel:
            by_name.setdefault(g[0], []).append(g)
        seen: dict = {}
        out = []
        for k, m in enumerate(sel or gsel):
            mm = re.match(r"^ProfilerStep#(\d+)$", m[0])
            i = seen.get(m[0], 0)
            seen[m[0]] = i + 1
            g = by_name.get(m[0], [])
            gwin = (g[i][1], g[i][1] + g[i][2]) if i < len(g) else None
            out.append((int(mm.group(1)) if mm else k, m[1], m[1] + m[2], gwin, m[0]))
        return how, out
    if step_re is not None:
        raise UsageError(f"--step-marker '{step_re.pattern}': matches no annotation in '{rt.path}' (rank {rt.rank})")
    colls = sorted(rt.colls, key=lambda c: c.anchor)
    if plan_count and len(colls) >= plan_count:
        n = len(colls) // plan_count
        bounds = [-math.inf]
        for k in range(1, n + 1):
            if k * plan_count < len(colls):
                bounds.append((colls[k * plan_count - 1].anchor + colls[k * plan_count].anchor) / 2)
            else:
                bounds.append(math.inf)
        return (f"every {plan_count} collectives (the plan's count per step; the trace has no step annotations)",
                [(k, bounds[k], bounds[k + 1], None, "") for k in range(n)])
    return "the whole capture as one step (no step annotations; pass --step-marker REGEX)", \
        [(0, -math.inf, math.inf, None, "")]


class _Index:
    """A rank's events sorted by the time that places them in a step, for slicing by step."""

    def __init__(self, rt: RankTrace):
        self.compute = sorted(rt.compute, key=lambda e: e[2])
        self.memory = sorted(rt.memory, key=lambda e: e[2])
        self.colls = sorted(rt.colls, key=lambda c: c.anchor)
        self.cpu = sorted(rt.cpu_ops)
        self.keys = {"compute": [e[2] for e in self.compute], "memory": [e[2] for e in self.memory],
                     "colls": [c.anchor for c in self.colls], "cpu": [e[0] for e in self.cpu]}

    def between(self, what: str, lo: float, hi: float) -> list:
        k = self.keys[what]
        return getattr(self, what)[bisect_left(k, lo):bisect_left(k, hi)]


def _rank_step(ix: _Index, lo: float, hi: float, gwin, cpu: bool) -> dict | None:
    """The time split of one rank in one step (us), or None when nothing of the rank is in it."""
    if not cpu:
        comp = [(ts, ts + d) for ts, d, _ in ix.between("compute", lo, hi)]
        mem = [(ts, ts + d) for ts, d, _ in ix.between("memory", lo, hi)]
        colls = sorted(ix.between("colls", lo, hi), key=lambda c: c.ts)
        ev = comp + mem + [(c.ts, c.ts + c.dur) for c in colls]
        if not ev:
            return None
        w0, w1 = gwin or (min(s for s, _ in ev), max(e for _, e in ev))
    else:
        colls = sorted(ix.between("colls", lo, hi), key=lambda c: c.ts)     # CPU: anchor = start
        comp = [(ts, ts + d) for ts, d in ix.between("cpu", lo, hi)]
        mem = []
        ev = comp + [(c.ts, c.ts + c.dur) for c in colls]
        if not ev:
            return None
        w0 = lo if lo > -math.inf else min(s for s, _ in ev)
        w1 = hi if hi < math.inf else max(e for _, e in ev)
    U_c = _merge(_clip(comp, w0, w1))
    U_m = _merge(_clip(mem, w0, w1))
    U_x = _merge(_clip([(c.ts, c.ts + c.dur) for c in colls], w0, w1))
    comm = _length(U_x)
    if cpu:          # one thread: an op around a collective is nesting, not concurrency
        overlapped = 0.0
        compute = _length(U_c) - _inter(U_c, U_x)
    else:
        overlapped = _inter(U_x, U_c)
        compute = _length(U_c)
    busy = _length(_merge([*map(tuple, U_c), *map(tuple, U_m), *map(tuple, U_x)]))
    exposed = comm - overlapped
    window = w1 - w0
    return {"window_us": window, "compute_us": compute, "comm_us": comm, "comm_exposed_us": exposed,
            "comm_overlapped_us": overlapped, "memory_us": max(0.0, busy - compute - exposed),
            "idle_us": max(0.0, window - busy), "colls": colls, "U_c": U_c, "start": w0}


# --- attribution across ranks ------------------------------------------------------------------------------

def attribute_steps(ranks: list[RankTrace], step_re=None, plan=None) -> dict:
    """Per step and rank: the time split and, aligned across ranks, transfer and wait; per layer
    (when every step holds the plan's collectives) and per rank (kernel totals, HTA's overlap)."""
    ranks = sorted(ranks, key=lambda r: r.rank)
    cpu = not any(r.kernels for r in ranks)
    plan_count = len(plan) if plan else None
    hows, per_rank, marks = set(), [], {}
    index = [_Index(rt) for rt in ranks]
    for rt in ranks:
        how, steps = find_steps(rt, step_re, plan_count)
        hows.add(how)
        per_rank.append({sid: (lo, hi, g) for sid, lo, hi, g, _ in steps})
        for sid, *_, name in steps:
            marks.setdefault(sid, name)
    common = sorted(set.intersection(*(set(p) for p in per_rank)))
    notes = []
    has_colls = any(r.colls for r in ranks)
    dropped = {"empty": 0, "no collectives": 0}
    if any(len(p) != len(common) for p in per_rank):
        notes.append(f"steps seen by every rank: {len(common)} (per rank: "
                     f"{', '.join(f'{r.rank}: {len(p)}' for r, p in zip(ranks, per_rank))})")
    steps, tokens, coll_rows, layer_acc = [], [], [], {}
    counts = []
    for sid in common:
        info = vllm_step(marks.get(sid) or "") or {}
        if info.get("phase") == "empty":              # the engine scheduled nothing in this iteration
            dropped["empty"] += 1
            continue
        parts = [_rank_step(ix, *p[sid], cpu) for ix, p in zip(index, per_rank)]
        if any(x is None or x["window_us"] <= 0 for x in parts):
            continue
        lists = [x["colls"] for x in parts]
        if has_colls and not any(lists):             # a step without communication: no step of this account
            dropped["no collectives"] += 1
            continue
        phase = {"phase": info.get("phase", "decode"), "step_tokens": info.get("step_tokens", ""),
                 "requests": (info["prefill_requests"] + info["decode_requests"]) if info else "",
                 "decode_requests": info.get("decode_requests", "")}
        n = min(len(c) for c in lists)
        if any(len(c) != n for c in lists):
            notes.append(f"step {sid}: ranks issued {', '.join(str(len(c)) for c in lists)} collectives; the first {n} "
                         "are aligned")
        counts.append(max(len(c) for c in lists))
        trans = [0.0] * len(ranks)
        wait = [0.0] * len(ranks)
        strag = [0] * len(ranks)
        sites = plan if plan and all(len(c) == len(plan) for c in lists) else None
        token = len(tokens) // len(ranks)
        for k in range(n):
            durs = [c[k].dur for c in lists]
            t = min(durs)
            last = durs.index(t)
            strag[last] += 1
            for i, rt in enumerate(ranks):
                c = lists[i][k]
                trans[i] += t
                wait[i] += c.dur - t
                coll_rows.append({"step": sid, "token": token, "index": k, "rank": rt.rank,
                                  "site": sites[k].site if sites else "", "op": c.op, "kernel": c.name[:120],
                                  "size_bytes": c.size_bytes if c.size_bytes is not None else "",
                                  "start_us": c.ts - parts[i]["start"], "duration_us": c.dur, "transfer_us": t,
                                  "wait_us": c.dur - t, "straggler": int(i == last)})
        for i, (rt, x) in enumerate(zip(ranks, parts)):
            own = sum(c.dur for c in x["colls"][:n]) or 0.0
            w = x["comm_exposed_us"] * (wait[i] / own) if own > 0 else 0.0
            tr = x["comm_exposed_us"] - w
            compute = x["compute_us"] + x["memory_us"]
            lat = x["window_us"]
            steps.append({"step": sid, "token": token, "rank": rt.rank, **phase,
                          **{k: x[k] for k in ("window_us", "compute_us", "comm_us", "comm_exposed_us",
                                               "comm_overlapped_us", "memory_us", "idle_us")},
                          "collectives": len(x["colls"]), "transfer_us": tr, "wait_us": w,
                          "straggler_count": strag[i]})
            tokens.append({"rank": rt.rank, "token": token, "latency_us": lat, "latency_us_measured": lat,
                           "compute_us": compute, "transfer_us": tr, "wait_us": w, "gaps_us": x["idle_us"],
                           "residual_us": lat - compute - tr - w - x["idle_us"],
                           "comm_share_pct": 100.0 * (tr + w) / lat if lat > 0 else 0.0, "phase": phase["phase"],
                           "decode_requests": phase["decode_requests"], "step_tokens": phase["step_tokens"]})
            if sites:
                cl = x["colls"]
                for j, s in enumerate(sites):
                    if s.layer is None:
                        continue
                    prev_end = cl[j - 1].ts + cl[j - 1].dur if j else x["start"]
                    comp_us = _inter(x["U_c"], [[prev_end, cl[j].ts]]) if cl[j].ts > prev_end else 0.0
                    a = layer_acc.setdefault((s.layer, rt.rank), {"compute_us": 0.0, "transfer_us": 0.0,
                                                                  "wait_us": 0.0, "straggler_count": 0,
                                                                  "collectives": 0, "steps": set()})
                    d = [lists[r][j].dur for r in range(len(ranks))]
                    a["compute_us"] += comp_us
                    a["transfer_us"] += min(d)
                    a["wait_us"] += cl[j].dur - min(d)
                    a["straggler_count"] += int(d.index(min(d)) == i)
                    a["collectives"] += 1
                    a["steps"].add(sid)
    layers = []
    for (layer, rank), a in sorted(layer_acc.items()):
        ns = len(a["steps"])
        c, tr, w = a["compute_us"] / ns, a["transfer_us"] / ns, a["wait_us"] / ns
        layers.append({"layer": layer, "rank": rank, "compute_us": c, "transfer_us": tr, "wait_us": w,
                       "comm_share_pct": 100.0 * (tr + w) / (c + tr + w) if c + tr + w > 0 else 0.0,
                       "straggler_count": a["straggler_count"], "collectives": a["collectives"]})
    for what, n in dropped.items():
        if n:
            notes.append(f"{n} step{'s' if n > 1 else ''} {'with nothing scheduled' if what == 'empty' else 'without collectives'}"
                         " dropped (not counted as tokens)")
    return {"steps": steps, "tokens": tokens, "collectives": coll_rows, "layers": layers, "notes": notes,
            "dropped_steps": dropped,
            "step_source": "; ".join(sorted(hows)), "cpu": cpu, "counts": counts,
            "collectives_per_step": int(sorted(counts)[len(counts) // 2]) if counts else 0,
            "ranks": [rank_totals(rt, cpu, until=max((v[1] for v in p.values() if v[1] < math.inf), default=None))
                      for rt, p in zip(ranks, per_rank)]}


def rank_totals(rt: RankTrace, cpu: bool, until: float | None = None) -> dict:
    """Totals of one rank over the capture up to the end of its last step (``until``; kernels
    placed by their launch, as HTA's ``include_last_profiler_step=True`` keeps them): kernel time
    by kind (sums of durations, as HTA's kernel breakdown), and the comm/compute overlap in HTA's
    definition: time computing while communicating over time communicating, on merged intervals."""
    keep = (lambda a: True) if until is None else (lambda a: a <= until)  # noqa: E731
    colls = [c for c in rt.colls if keep(c.anchor)]
    compute = [e for e in rt.compute if keep(e[2])]
    memory = [e for e in rt.memory if keep(e[2])]
    comm = [(c.ts, c.ts + c.dur) for c in colls]
    comp = [(ts, ts + d) for ts, d, *_ in (rt.cpu_ops if cpu else compute)]
    U_x, U_c = _merge(comm), _merge(comp)
    lx = _length(U_x)
    row = {"rank": rt.rank, "file": os.path.basename(rt.path), "backend": rt.backend or "",
           "comm_kernels": len(colls), "comm_kernel_us": float(sum(c.dur for c in colls)),
           "compute_kernels": len(compute), "compute_kernel_us": float(sum(d for _, d, _ in compute)),
           "memory_events": len(memory), "memory_us": float(sum(d for _, d, _ in memory)),
           "hta_overlap_pct": 100.0 * _inter(U_x, U_c) / lx if lx > 0 else 0.0}
    if cpu:
        # a CPU-only trace has no kernels: its compute is CPU ops, nested (an op holds the ops it
        # calls, the collective among them), so kernel counts and HTA's stream overlap are not
        # known there (empty, not 0); the CPU ops are counted instead, their time as the union of
        # their intervals outside the collectives
        ops = [(ts, ts + d) for ts, d, *_ in rt.cpu_ops if keep(ts)]
        U_o = _merge(ops)
        row.update({"compute_kernels": "", "compute_kernel_us": "", "hta_overlap_pct": "",
                    "compute_cpu_ops": len(ops), "compute_cpu_us": float(_length(U_o) - _inter(U_o, U_x)),
                    "na_reason": "CPU-only trace: no kernels (compute is CPU ops: compute_cpu_ops, compute_cpu_us); "
                                 "HTA's overlap is of GPU streams"})
    return row


# --- checks across files -----------------------------------------------------------------------------------

def _few(ranks: list, n: int = 8) -> str:
    """Rank numbers for a one-line message: the first ``n``, then how many more."""
    text = ", ".join(map(str, ranks[:n]))
    return text + (f", ... ({len(ranks):,} in all)" if len(ranks) > n else "")


def check_ranks(ranks: list[RankTrace], tp: int | None) -> None:
    """One run's ranks: no rank twice, none missing, all from one run (same world size, captures
    that overlap in time)."""
    seen: dict = {}
    for rt in ranks:
        if rt.rank in seen:
            raise UsageError(f"rank {rt.rank} appears twice ('{seen[rt.rank].path}' and '{rt.path}'); "
                             "pass each rank's trace once")
        seen[rt.rank] = rt
    worlds = sorted({rt.world for rt in ranks if rt.world is not None})
    if len(worlds) > 1:
        by = ", ".join(f"rank {rt.rank}: {rt.world}" for rt in ranks)
        raise UsageError(f"the traces come from different runs: their world sizes differ ({by})")
    have = sorted(seen)
    want = set(range(have[0], have[-1] + 1))
    if tp and 1 < len(have) < tp:              # one TP group: the block of tp ranks the first belongs to
        first = have[0] - have[0] % tp
        want |= set(range(first, first + tp))
    missing = sorted(want - set(have))
    if missing:
        raise UsageError(f"rank{'s' if len(missing) > 1 else ''} {_few(missing)} missing: the traces "
                         f"hold ranks {_few(have)}; pass every rank's trace of the TP group")
    if worlds and have[-1] >= worlds[0]:
        raise UsageError(f"rank {have[-1]} in '{seen[have[-1]].path}' but the world size is {worlds[0]}: "
                         "the traces come from different runs")
    spans = [(rt.span, rt) for rt in ranks if rt.span[0] < rt.span[1] and not rt.run]
    for (s1, a), (s2, b) in zip(spans, spans[1:]):
        if s1[1] < s2[0] or s2[1] < s1[0]:
            raise UsageError(f"the traces come from different runs: rank {a.rank} ('{a.path}') and rank {b.rank} "
                             f"('{b.path}') were captured at times that do not overlap")


