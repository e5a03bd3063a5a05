"""Latency statistics over per-iteration samples (each sample already the max across ranks)."""
from __future__ import annotations

import numpy as np

PERCENTILES = {"p50": 50, "p95": 95, "p99": 99}


def summarize_us(samples_us) -> dict:
    """p50/p95/p99 (linear interpolation between order statistics), min, max and mean, in us."""
    a = np.asarray(samples_us, dtype=np.float64)
    out = {f"latency_us_{k}": float(np.percentile(a, q)) for k, q in PERCENTILES.items()}
    out.update(latency_us_min=float(a.min()), latency_us_max=float(a.max()), latency_us_mean=float(a.mean()))
    return out
