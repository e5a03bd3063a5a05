"""Expert-parallel all-to-all under skew (``commprof moe``): summary lines and charts."""
from __future__ import annotations

import os

from ..routing import PLACEMENTS
from .charts import _provenance, _save

LOAD_PNG = "moe_rank_load.png"
LATENCY_PNG = "moe_latency_vs_skew.png"


def summary_lines(steps) -> list[str]:
    """One line per (ep, tokens, skew) of ``moe_steps``: contiguous numbers, then after rebalancing."""
    lines = []
    for (ep, tok, skew), g in steps.groupby(["ep", "tokens", "skew"], sort=False):
        parts = []
        for pl in PLACEMENTS:
            r = g[g.placement == pl]
            if r.empty:
                continue
            r = r.iloc[0]
            sd = f"{r.slowdown:.2f}x" if r.slowdown == r.slowdown else "-"
            parts.append(f"imbalance {r.imbalance:.2f} p50 {r.latency_us_p50:,.1f} us p99 "
                         f"{r.latency_us_p99:,.1f} us slowdown {sd}" + (" WRONG" if r.wrong else ""))
        lines.append(f"ep {ep} tokens {tok} {skew}: {parts[0]}" +
                     (f" | rebalanced: {parts[1]}" if len(parts) > 1 else ""))
    return lines


def charts(steps, ranks, meta: dict, out_dir: str) -> list[str]:
    """Per-rank load before/after rebalancing (largest token count, most imbalanced skew, one panel
    per EP degree) and p50 latency vs skew per EP degree (one line per token count and placement)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    prov = _provenance(meta)
    eps = sorted(steps.ep.unique())
    paths = []

    fig, axes = plt.subplots(1, len(eps), figsize=(4.5 * len(eps), 4.4), squeeze=False)
    for ax, ep in zip(axes[0], eps):
        s = steps[(steps.ep == ep) & (steps.placement == "contiguous")]
        tok = s.tokens.max()
        s = s[s.tokens == tok]
        skew = s.sort_values("imbalance", ascending=False).iloc[0]["skew"]
        w = 0.4
        for i, pl in enumerate(PLACEMENTS):
            rr = ranks[(ranks.ep == ep) & (ranks.tokens == tok) & (ranks["skew"] == skew) & (ranks.placement == pl)]
            ax.bar(rr["rank"] + (i - 0.5) * w, rr.load_tokens, width=w, label=pl)
        ax.set_title(f"ep {ep}, {tok} tokens, {skew}", fontsize=9)
        ax.set_xticks(range(int(ep)))
        ax.set_xlabel("rank")
        ax.set_ylabel("tokens received (load)")
        ax.legend(fontsize=7)
    fig.suptitle(f"{meta.get('model', {}).get('name', '?')}: per-rank load before/after rebalancing", fontsize=10)
    paths.append(_save(fig, os.path.join(out_dir, LOAD_PNG), prov))

    fig, axes = plt.subplots(1, len(eps), figsize=(4.5 * len(eps), 4.4), squeeze=False)
    skews = list(dict.fromkeys(steps["skew"]))
    for ax, ep in zip(axes[0], eps):
        for tok in sorted(steps.tokens.unique()):
            for pl, style in zip(PLACEMENTS, ("-", "--")):
                s = steps[(steps.ep == ep) & (steps.tokens == tok) & (steps.placement == pl)]
                s = s.set_index("skew").reindex(skews)
                ax.plot(range(len(skews)), s.latency_us_p50, style, marker="o", label=f"{tok} tok, {pl}")
        ax.set_xticks(range(len(skews)))
        ax.set_xticklabels(skews, fontsize=7, rotation=20)
        ax.set_title(f"ep {ep}", fontsize=9)
        ax.set_ylabel("dispatch+combine p50 (us)")
        ax.legend(fontsize=6)
    fig.suptitle("MoE all-to-all latency vs routing skew", fontsize=10)
    paths.append(_save(fig, os.path.join(out_dir, LATENCY_PNG), prov))
    return paths
