"""The alpha-beta cost model of a collective: fit it to a sweep, evaluate reference profiles, and
write a reference profile as a sweep results dir so that anything reading sweeps (``trace --predict
--comm-from``, later ``gap``) can use a box nobody measured here.

Model: ``latency_us(size_bytes) = alpha_us + size_bytes / (beta_gbps * 1e3)`` per (op, tp, mode),
with ``beta_gbps`` the op's algorithm bandwidth (GB = 1e9 bytes; ``size_bytes`` in the nccl-tests
meaning of :mod:`commprof.model.collectives`). A reference profile's entry may be piecewise (one such line
per NCCL protocol range, :func:`commprof.analysis.profiles.param_latency_us`); fits of sweeps stay one line.

numpy and pandas are imported inside the functions that need them (``import commprof.analysis.costmodel``
must work without them).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass

from commprof import results
from commprof.model.collectives import COLLECTIVES, DTYPE_BYTES
from commprof.model.errors import UsageError
from commprof.analysis.profiles import PROFILES, get_profile, list_profiles, param_latency_us
from commprof.analysis.profiles import REAL_LOGS

__all__ = ["Fit", "fit_sweep", "fit_results_dir", "profile_latency_us", "profile_param", "profile_checks",
           "profile_calibration",
           "write_profile_sweep", "resolve_comm_source", "list_profiles", "get_profile",
           "DEFAULT_PROFILE_SIZES", "REFERENCE_PREFIX"]

REFERENCE_PREFIX = "reference:"
FIT_STAT = "latency_us_p50"
# 256 B .. 256 MiB, doubling: covers decode payloads (a few KiB all-reduces up to tens of MiB of
# logits all-gather at large batch) so log-log lookups between points stay close to the model.
DEFAULT_PROFILE_SIZES = tuple(1 << k for k in range(8, 29))
_SWEEP_FORMAT = 1          # bump when write_profile_sweep's output changes (invalidates the cache)


# --- fitting ---------------------------------------------------------------------------------------

@dataclass
class Fit:
    """alpha-beta parameters of one (op, tp, mode) group of a sweep and how well they fit it."""

    op: str
    tp: int
    mode: str
    alpha_us: float
    beta_gbps: float                # math.inf when the data show no size dependence
    n_points: int
    n_sizes: int
    size_min_bytes: int
    size_max_bytes: int
    mean_rel_err_pct: float         # mean over the points of |model - measured| / measured
    max_rel_err_pct: float
    statistic: str = FIT_STAT
    note: str = ""

    def latency_us(self, size_bytes: float) -> float:
        return model_latency_us(self.alpha_us, self.beta_gbps, size_bytes)

    def to_dict(self) -> dict:
        """Plain dict (JSON-safe: an undetermined bandwidth is None, not infinity)."""
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = None
        return d


def model_latency_us(alpha_us: float, beta_gbps: float, size_bytes: float) -> float:
    """``alpha_us + size_bytes / (beta_gbps * 1e3)``: GB/s = 1e3 bytes per microsecond."""
    if not math.isfinite(beta_gbps):
        return float(alpha_us)
    return float(alpha_us) + float(size_bytes) / (float(beta_gbps) * 1e3)


def _fit_points(x, y) -> tuple[float, float, str]:
    """(alpha_us, us_per_byte, note) minimising the squared *relative* error, both kept >= 0.

    Weighted least squares with weights 1/latency: sizes span several decades, and an unweighted fit
    would spend all its freedom on the largest sizes and miss the small-message latency.
    """
    import numpy as np

    w = 1.0 / y
    if len(np.unique(x)) < 2:
        a = float(np.sum(w) / np.sum(w * w))        # best constant in relative terms
        return a, 0.0, "one size only: latency taken as alpha, bandwidth not determined"
    A = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (a, b), *_ = np.linalg.lstsq(A, y * w, rcond=None)
    if b <= 0:
        a = float(np.sum(w) / np.sum(w * w))
        return a, 0.0, "latency does not grow with size over these points: bandwidth not determined"
    if a < 0:
        b = float(np.sum(x * w) / np.sum((x * w) ** 2))
        return 0.0, b, "alpha came out negative and was clipped to 0 (bandwidth refitted through the origin)"
    return float(a), float(b), ""


def fit_sweep(df) -> list[Fit]:
    """Fit alpha/beta per (op, tp, mode) of a sweep frame (:func:`commprof.results.load_frame`).

    Uses the group-0 rows and their ``latency_us_p50``; rows without a positive latency are skipped.
    A frame holding both timing methods is fitted on its per-call rows only.
    Returns one :class:`Fit` per group, sorted by op, tp, mode.
    """
    import numpy as np

    if df is None or len(df) == 0:
        return []
    missing = [c for c in ("op", "tp", "mode", "size_bytes", FIT_STAT) if c not in df.columns]
    if missing:
        raise UsageError(f"fit: the sweep table has no column {missing[0]}")
    d = df[df["group"] == 0] if "group" in df.columns else df
    _, d, _ = results.one_timing(d)      # never a fit over per-call samples and loop averages mixed
    fits = []
    for (op, tp, mode), g in sorted(d.groupby(["op", "tp", "mode"]), key=lambda kv: kv[0]):
        x = g["size_bytes"].to_numpy(dtype=float)
        y = g[FIT_STAT].to_numpy(dtype=float)
        ok = np.isfinite(y) & (y > 0) & np.isfinite(x) & (x > 0)
        x, y = x[ok], y[ok]
        if len(x) == 0:
            continue
        a, b, note = _fit_points(x, y)
        beta = 1.0 / (b * 1e3) if b > 0 else math.inf
        rel = np.abs((a + b * x) - y) / y * 100.0
        fits.append(Fit(op=str(op), tp=int(tp), mode=str(mode), alpha_us=a, beta_gbps=beta,
                        n_points=int(len(x)), n_sizes=int(len(np.unique(x))),
                        size_min_bytes=int(x.min()), size_max_bytes=int(x.max()),
                        mean_rel_err_pct=float(rel.mean()), max_rel_err_pct=float(rel.max()), note=note))
    return fits


def fit_results_dir(path: str) -> list[Fit]:
    """:func:`fit_sweep` of the ``sweep.csv`` in a results dir."""
    return fit_sweep(results.load_frame(path))


# --- reference profiles ----------------------------------------------------------------------------

def _profile(profile) -> dict:
    if isinstance(profile, dict):
        return profile
    try:
        return PROFILES[profile.split(":", 1)[1] if profile.startswith(REFERENCE_PREFIX) else profile]
    except KeyError:
        raise UsageError(f"unknown reference profile '{profile}' (known: {', '.join(PROFILES)})") from None


def profile_param(profile, op: str, tp: int, mode: str = "eager") -> dict:
    """The parameter entry of one (op, tp, mode); UsageError says what the profile does have."""
    p = _profile(profile)
    for q in p["params"]:
        if q["op"] == op and q["tp"] == int(tp) and q["mode"] == mode:
            return q
    have = sorted({(q["op"], q["tp"], q["mode"]) for q in p["params"]})
    raise UsageError(f"reference profile '{p['name']}' has no {op} tp={tp} {mode} parameters "
                     f"(it has: {', '.join(f'{o} tp={t} {m}' for o, t, m in have)})")


def profile_latency_us(profile, op: str, tp: int, size_bytes: float, mode: str = "eager") -> float:
    """Modelled latency of one collective on a reference box, in microseconds.

    ``profile`` is a profile name (``nvlink4``, ``reference:nvlink4``) or a profile dict.
    """
    return param_latency_us(profile_param(profile, op, tp, mode), size_bytes)


def profile_checks(profile) -> list[dict]:
    """The profile's published check points (not used to set it) with the model's value and error."""
    p = _profile(profile)
    out = []
    for c in p.get("checks", []):
        model = profile_latency_us(p, c["op"], c["tp"], c["size_bytes"], c["mode"])
        out.append({**c, "model_us": round(model, 3),
                    "error_pct": round((model - c["latency_us"]) / c["latency_us"] * 100.0, 1)})
    return out


#: Size bands a calibration error is stated in: batch-1 decode payloads, larger-batch decode
#: payloads, and large messages (bandwidth).
CALIBRATION_BANDS = (("<= 64 KiB", 0, 64 << 10), ("128 KiB - 2 MiB", (64 << 10) + 1, 2 << 20),
                     (">= 64 MiB", 64 << 20, 1 << 62))


def profile_calibration(profile) -> list[dict]:
    """The profile against each real log it is calibrated on (``calibrated_on``; the points are in
    :data:`commprof.analysis.profiles.REAL_LOGS`): per size band, model / log as a ratio (median, and the
    smallest and largest over the band's sizes). > 1 means the profile is slower (pessimistic),
    < 1 faster (optimistic) than the real box."""
    p = _profile(profile)
    out = []
    for key in p.get("calibrated_on", []):
        log = REAL_LOGS[key]
        row = {"log": key, "op": log["op"], "tp": log["tp"], "mode": log["mode"], "bands": []}
        for name, lo, hi in CALIBRATION_BANDS:
            ratios = sorted(profile_latency_us(p, log["op"], log["tp"], s, log["mode"]) / t
                            for s, t in log["points"] if lo <= s <= hi)
            if not ratios:
                continue
            m = len(ratios) // 2
            med = ratios[m] if len(ratios) % 2 else (ratios[m - 1] + ratios[m]) / 2
            row["bands"].append({"band": name, "sizes": len(ratios), "median_ratio": round(med, 3),
                                 "min_ratio": round(ratios[0], 3), "max_ratio": round(ratios[-1], 3)})
        out.append(row)
    return out


def profile_rows(profile, tps=(2, 4, 8), sizes=DEFAULT_PROFILE_SIZES, ops=None, modes=None) -> list[dict]:
    """Sweep-format rows (``commprof.results.COLUMNS``) of a profile's model; nothing written."""
    p = _profile(profile)
    have = {(q["op"], q["tp"], q["mode"]) for q in p["params"]}
    ops = list(ops) if ops else list(dict.fromkeys(q["op"] for q in p["params"]))
    modes = list(modes) if modes else list(dict.fromkeys(q["mode"] for q in p["params"]))
    elem = DTYPE_BYTES["bf16"]
    rows = []
    for op in ops:
        if op not in COLLECTIVES:
            raise UsageError(f"unknown op '{op}' (known: {', '.join(COLLECTIVES)})")
        for tp in tps:
            for mode in modes:
                if (op, int(tp), mode) not in have:
                    if mode == "eager":
                        profile_param(p, op, tp, mode)          # raises, naming what exists
                    continue                                    # graph only where sources have it
                for size in sizes:
                    lat = profile_latency_us(p, op, tp, size, mode)
                    algbw, busbw = COLLECTIVES[op].bandwidth_gbps(int(size), lat, int(tp))
                    rows.append({
                        "op": op, "tp": int(tp), "group": 0, "ranks": f"0-{int(tp) - 1}", "mode": mode,
                        "clock": "model", "backend": "model", "dtype": "bf16", "size_bytes": int(size),
                        "count": max(int(size) // elem, 1), "batch": "", "site": f"reference:{p['name']}",
                        "iters": 0, "warmup": 0, "concurrent": 0,
                        "latency_us_p50": lat, "latency_us_p95": lat, "latency_us_p99": lat,
                        "latency_us_min": lat, "latency_us_max": lat, "latency_us_mean": lat,
                        "latency_us_rankavg_p50": lat, "latency_us_rankavg_mean": lat,
                        "enqueue_us_p50": "", "enqueue_us_p99": "",
                        "algbw_gbps": algbw, "busbw_gbps": busbw, "wrong": 0, "status": "ok",
                        "hosts": f"reference:{p['name']}",
                    })
    return rows


def write_profile_sweep(profile_name: str, out_dir: str, tps=(2, 4, 8), sizes=DEFAULT_PROFILE_SIZES,
                        ops=None, modes=None) -> str:
    """Write a reference profile's model as a sweep results dir (``sweep.csv`` + ``meta.json``).

    Every latency statistic holds the modelled value (the model has no spread); algbw/busbw follow
    :mod:`commprof.model.collectives`. The dir must be new or empty. Returns its path.
    """
    p = _profile(profile_name)
    results.check_out_dir(out_dir, resume=False)
    rows = profile_rows(p, tps=tps, sizes=sizes, ops=ops, modes=modes)
    os.makedirs(out_dir, exist_ok=True)
    used = sorted({(r["op"], r["tp"], r["mode"]) for r in rows})
    meta = results.provenance(
        "reference", "modelled", f"reference profile '{p['name']}' written as a sweep (alpha-beta model, nothing measured)",
        status="complete", hosts=[f"reference:{p['name']}"], gpus=[p["title"]])
    meta.update({
        "profile": p["name"],
        "title": p["title"],
        "link": p["link"],
        "model": p["model"],
        "backend": "model",
        "params": [q for q in p["params"] if (q["op"], q["tp"], q["mode"]) in used],
        "sources": p["sources"],
        "notes": p.get("notes", []) + [
            "Modelled, not measured: every latency column (p50, p95, p99, min, max, mean, rankavg) holds "
            "the same modelled value; the model has no spread, no arrival skew and no jitter.",
            "A parameter marked 'published' is a public measurement for that op, TP and mode; 'derived' "
            "ones say how they were obtained.",
        ],
        "checks": profile_checks(p),
        "calibration": profile_calibration(p),
        "config": {"tps": [int(t) for t in tps], "sizes": [int(s) for s in sizes],
                   "ops": sorted({r["op"] for r in rows}), "modes": sorted({r["mode"] for r in rows}),
                   "dtype": "bf16 (nominal: the model depends on bytes only; count = bytes / 2)"},
        "profile_sha256": _profile_digest(p, tps, sizes, ops, modes),
        "columns": {"latency_us_*": "modelled alpha + bytes / beta, the same value in every statistic",
                    "algbw_gbps": "size_bytes / modelled latency, GB = 1e9 bytes",
                    "busbw_gbps": "algbw x nccl-tests bus factor (commprof.model.collectives)",
                    "clock": "model: no clock was read"},
    })
    return results.write_sweep_table(out_dir, results.COLUMNS, rows, meta)


def _profile_digest(p: dict, tps, sizes, ops, modes) -> str:
    blob = json.dumps({"format": _SWEEP_FORMAT, "params": p["params"], "sources": p["sources"],
                       "tps": [int(t) for t in tps], "sizes": [int(s) for s in sizes],
                       "ops": list(ops or []), "modes": list(modes or [])}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def reference_cache_dir() -> str:
    """Where ``reference:<name>`` sweeps are kept: $COMMPROF_CACHE_DIR, else $XDG_CACHE_HOME/commprof,
    else ~/.cache/commprof; then ``reference/``."""
    base = os.environ.get("COMMPROF_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "commprof")
    return os.path.join(base, "reference")


def resolve_comm_source(spec: str) -> str:
    """``reference:<name>`` -> a results dir holding that profile's modelled sweep (written once into
    the user's cache and rewritten when the profile changes); any other spec is returned unchanged."""
    if not isinstance(spec, str) or not spec.startswith(REFERENCE_PREFIX):
        return spec
    p = _profile(spec)
    digest = _profile_digest(p, (2, 4, 8), DEFAULT_PROFILE_SIZES, None, None)
    path = os.path.join(reference_cache_dir(), p["name"])
    try:
        if results.read_meta(path).get("profile_sha256") == digest and \
                os.path.exists(os.path.join(path, results.SWEEP_CSV)):
            return path
    except UsageError:
        pass
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{p['name']}-", dir=parent)
    except OSError as e:
        raise UsageError(f"reference profile '{p['name']}': cannot write its sweep under '{parent}' "
                         f"({e.strerror}); set COMMPROF_CACHE_DIR to a writable directory") from None
    try:
        write_profile_sweep(p["name"], tmp)
        if os.path.exists(path):
            shutil.rmtree(path, ignore_errors=True)
        try:
            os.replace(tmp, path)
        except OSError:               # another process won the race: use its copy if it is current
            shutil.rmtree(tmp, ignore_errors=True)
            if results.read_meta(path).get("profile_sha256") != digest:
                raise
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def wire_latency_us(w: dict, tp: int, size_bytes: int) -> float:
    """Bound for a one-shot all-reduce on a wire probed by ``commprof p2p`` (``w``: one-way flag
    latency in us, SM read GB/s): a flag hop plus reading the tp-1 peers' buffers."""
    return w["oneway_us"] + (tp - 1) * size_bytes / (w["read_gbps"] * 1e3)
