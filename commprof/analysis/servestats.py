"""``commprof serve``'s statistics per level: percentiles, jitter, goodput against the SLOs and the
knee (the highest concurrency that meets them)."""
from __future__ import annotations

import math
from commprof.model.serveconfig import BURST_TPOT_MS, PCTS, RequestRow



def _pct(values, q) -> float:
    import numpy as np

    a = np.asarray([v for v in values if v == v], dtype=np.float64)
    return float(np.percentile(a, q)) if a.size else math.nan


def level_summary(level: dict, rows: list[RequestRow], wall_s: float, status: str) -> dict:
    """The per-level row: percentiles over the level's successful requests (ITL over every gap)."""
    ok = [r for r in rows if r.status == "ok"]
    kinds: dict[str, int] = {}
    for r in rows:
        if r.status != "ok":
            kinds[r.status] = kinds.get(r.status, 0) + 1
    out = {**{k: level[k] for k in ("level", "mode", "concurrency", "rate_rps")}, "status": status,
           "requests": len(rows), "ok": len(ok), "errors": len(rows) - len(ok),
           "error_kinds": ";".join(f"{k}:{v}" for k, v in sorted(kinds.items())), "duration_s": wall_s}
    tokens_out = sum(r.tokens_out for r in ok)
    out["output_tokens_per_s"] = tokens_out / wall_s if wall_s > 0 and ok else math.nan
    out["requests_per_s"] = len(ok) / wall_s if wall_s > 0 and ok else math.nan
    out["tokens_in_mean"] = sum(r.tokens_in for r in ok) / len(ok) if ok else math.nan
    out["tokens_out_mean"] = tokens_out / len(ok) if ok else math.nan
    out["input_tokens_per_s"] = sum(r.tokens_in for r in ok) / wall_s if wall_s > 0 and ok else math.nan
    gaps = [g for r in ok for g in r.gaps_ms]
    for name, values in (("ttft", [r.ttft_ms for r in ok]), ("tpot", [r.tpot_ms for r in ok]),
                         ("itl", gaps), ("e2e", [r.e2e_ms for r in ok])):
        for p, q in PCTS:
            out[f"{name}_ms_{p}"] = _pct(values, q)
        v = [x for x in values if x == x]
        out[f"{name}_ms_mean"] = sum(v) / len(v) if v else math.nan
        out[f"{name}_ms_std"] = (math.sqrt(sum((x - out[f"{name}_ms_mean"]) ** 2 for x in v) / len(v))
                                 if v else math.nan)          # population std, as vllm bench serve's np.std
    p50, p99 = out["tpot_ms_p50"], out["tpot_ms_p99"]
    out["jitter_tpot_p99_p50"] = p99 / p50 if p50 and p50 == p50 and p50 > 0 else math.nan
    bursts = [r for r in ok if r.burst]
    out["burst_requests"] = len(bursts)
    out["burst_note"] = (f"{len(bursts)} of {len(ok)} requests got their output in one burst (TPOT < "
                         f"{BURST_TPOT_MS:g} ms): their TPOT/ITL are delivery, not decode" if bursts else "")
    return out


def goodput(level: dict, rows: list[RequestRow], slo: dict) -> None:
    """``goodput_rps``: requests/s that met every latency limit of the SLO on their own (each
    ``<metric>_<pN>`` limit applied to the request's value, as ``vllm bench serve --goodput``
    does), and their share of the successful requests."""
    ok = [r for r in rows if r.status == "ok"]
    limits = {k.split("_ms_")[0]: v for k, v in slo.items() if "_ms_" in k}

    def meets(r):
        for m, lim in limits.items():
            v = (max(r.gaps_ms or [0.0]) if m == "itl" else getattr(r, f"{m}_ms", math.nan))
            if v == v and v > lim:
                return False
        return True

    good = sum(1 for r in ok if meets(r))
    wall = level["duration_s"]
    level["goodput_rps"] = good / wall if wall > 0 and ok else math.nan
    level["goodput_pct"] = 100.0 * good / len(ok) if ok else math.nan


def judge(levels: list[dict], slo: dict) -> int | None:
    """Mark each level's ``meets_slo``/``slo_missed`` and ``jitter_growth``; return the knee: the
    highest closed-loop concurrency that meets every SLO (None when none does)."""
    first = next((lv["jitter_tpot_p99_p50"] for lv in levels
                  if lv["mode"] == "closed" and lv["jitter_tpot_p99_p50"] == lv["jitter_tpot_p99_p50"]), math.nan)
    knee = None
    for lv in levels:
        j = lv["jitter_tpot_p99_p50"]
        lv["jitter_growth"] = j / first if first == first and j == j and first > 0 else math.nan
        missed = []
        for key, limit in slo.items():
            if key == "error_pct":
                continue
            v = lv.get(key, math.nan)
            if not (v == v) or v > limit:
                missed.append(f"{key}={'n/a' if v != v else f'{v:.4g}'}>{limit:g}")
        err_pct = 100.0 * lv["errors"] / lv["requests"] if lv["requests"] else 100.0
        if err_pct > slo.get("error_pct", 0.0) or not lv["ok"]:
            missed.append(f"error_pct={err_pct:.3g}>{slo.get('error_pct', 0.0):g}")
        lv["meets_slo"] = "yes" if not missed and lv["status"] == "complete" else "no"
        lv["slo_missed"] = " ".join(missed) if missed else ("" if lv["status"] == "complete" else "interrupted")
        if lv["mode"] == "closed" and lv["meets_slo"] == "yes":
            knee = lv["concurrency"] if knee is None else max(knee, lv["concurrency"])
    return knee


def profile_comm(run: dict) -> dict:
    """``serve --profile``: one imported run's communication per decode step and per token decoded.
    ``run`` holds the import's ``ms_per_step`` (median decode step), ``comm_share_pct`` (exposed
    communication's share) and ``batch`` (the tokens each decode step decoded: the median decode
    requests of vLLM's iteration marks). Per token = per step / those tokens; None where the run
    decoded none (a training or prefill-only capture)."""
    step_ms, share = float(run["ms_per_step"]), float(run["comm_share_pct"])
    tokens = int(run.get("batch") or 0)
    comm_step = step_ms * share / 100.0
    return {"decode_tokens_per_step": tokens, "comm_ms_per_step": comm_step,
            "comm_ms_per_token": comm_step / tokens if tokens > 0 else None,
            "step_ms_per_token": step_ms / tokens if tokens > 0 else None}
