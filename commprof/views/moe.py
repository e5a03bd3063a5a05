"""Expert-parallel all-to-all under skew (``commprof moe``): summary lines and charts."""
from __future__ import annotations

import os

from commprof.model.moeconfig import PLACEMENTS
from commprof.views.charts import chart_provenance, save_chart, plain_log_ticks
from commprof.views.console import Col, fit_table, record_frame, stdout_console

LOAD_PNG = "moe_rank_load.png"
LATENCY_PNG = "moe_latency_vs_skew.png"


#: Header of each column of :func:`summary_table`, before and after rebalancing.
_COLS = (("imbalance", "imbalance", 2), ("latency_us_p50", "p50 us", 1), ("latency_us_p99", "p99 us", 1),
         ("slowdown", "slowdown", 2))


def slowdown_text(v) -> str:
    """A slowdown against the uniform run: ``1.76x``; one below 1x is flagged ``(noise)``: skewed
    routing never lightens the busiest rank below a balanced split, so a skewed run timed faster
    than uniform is timing noise (or a uniform draw that happened to be as uneven)."""
    if v != v:
        return "-"
    return f"{v:.2f}x" + (" (noise)" if v < 1 - 1e-9 else "")


def summary_table(steps):
    """One row per (ep, tokens, skew) of ``moe_steps``: imbalance, p50/p99 latency and slowdown
    against uniform for the contiguous placement, then the same after rebalancing; cells as
    text, ready to print."""
    import pandas as pd

    rows = []
    for (ep, tok, skew), g in steps.groupby(["ep", "tokens", "skew"], sort=False):
        row = {"ep": int(ep), "tokens": int(tok), "skew": str(skew)}
        for pl in PLACEMENTS:
            r = g[g.placement == pl]
            if r.empty:
                continue
            r = r.iloc[0]
            pre = "" if pl == PLACEMENTS[0] else "rebal. "
            for col, head, d in _COLS:
                v = float(r[col])
                row[pre + head] = slowdown_text(v) if col == "slowdown" else ("-" if v != v else f"{v:,.{d}f}")
            if int(r.wrong):
                row["wrong"] = (row.get("wrong", "") + f" {pl} WRONG").strip()
        rows.append(row)
    return pd.DataFrame(rows).fillna("")


TITLE = "commprof moe: dispatch + combine all-to-all per step, contiguous experts vs rebalanced"


def _fit(steps, console) -> None:
    """The :func:`summary_table` on ``console``, fit to its width (:func:`fit_table`: ep, tokens, skew and a
    wrong column kept; the columns to the right go first)."""
    df = summary_table(steps)
    n = len(df.columns)
    fit_table(TITLE, [Col(col, "left" if col in ("skew", "wrong") else "right", None if i < 3 or col == "wrong" else n - i)
                      for i, col in enumerate(df.columns)], [[str(v) for v in r] for r in df.itertuples(index=False)],
              console=console)


def summary_lines(steps, width: int | None = None) -> list[str]:
    """The :func:`summary_table` as text lines ``width`` columns wide (default: the terminal's, as
    :func:`print_summary` draws it), then what the columns mean."""
    import io

    from rich.console import Console

    c = Console(file=io.StringIO(), width=width or stdout_console().width, record=True)
    _fit(steps, c)
    lines = c.export_text().rstrip("\n").splitlines()
    return lines + noise_note(steps)


def print_summary(steps, echo=print) -> None:
    """What ``moe`` and ``show`` print: the summary table fit to the terminal's width (to
    ``$COLUMNS`` when piped), then what its columns mean; under ``--format csv|json`` the rows of
    ``moe_steps`` instead of the table."""
    if not record_frame(steps, "moe_steps"):
        _fit(steps, stdout_console())
    for line in noise_note(steps):
        echo(line)


def noise_note(steps) -> list[str]:
    """What the summary's columns mean, and how many slowdowns below 1x it marks as noise."""
    lines = ["imbalance: the busiest rank's load / the mean; slowdown: p50 / the uniform run's p50 at the same "
             "ep, tokens and placement"]
    noise = int((steps["slowdown"] < 1 - 1e-9).sum()) if "slowdown" in steps.columns else 0
    if noise:
        lines.append(f"{noise} slowdown(s) below 1x marked (noise): skewed routing does not make the all-to-all "
                     "faster; a skewed run timed faster than uniform is timing noise (tens of percent on gloo/CPU) "
                     "or a uniform draw as uneven as the skewed one (compare imbalance)")
    return lines


def charts(steps, ranks, meta: dict, out_dir: str) -> list[str]:
    """Per-rank load before/after rebalancing (largest token count, most imbalanced skew, one panel
    per EP degree) and p50 latency vs skew per EP degree (one line per token count and placement)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    prov = chart_provenance(meta)
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
    paths.append(save_chart(fig, os.path.join(out_dir, LOAD_PNG), prov))

    fig, axes = plt.subplots(1, len(eps), figsize=(4.5 * len(eps), 4.4), squeeze=False)
    skews = list(dict.fromkeys(steps["skew"]))
    pairs = plt.get_cmap("tab20")
    for ax, ep in zip(axes[0], eps):
        for i, tok in enumerate(sorted(steps.tokens.unique())):
            # one hue per token count: dark solid for contiguous, the light shade dashed once rebalanced
            for j, (pl, style) in enumerate(zip(PLACEMENTS, ("-", "--"))):
                s = steps[(steps.ep == ep) & (steps.tokens == tok) & (steps.placement == pl)]
                s = s.set_index("skew").reindex(skews)
                ax.plot(range(len(skews)), s.latency_us_p50, style, marker="o", color=pairs((2 * i + j) % 20),
                        label=f"{tok} tok, {pl}")
        ax.set_yscale("log")
        plain_log_ticks(ax.yaxis)
        ax.set_xticks(range(len(skews)))
        ax.set_xticklabels(skews, fontsize=7, rotation=20)
        ax.set_title(f"ep {ep}", fontsize=9)
        ax.set_ylabel("dispatch+combine p50 (us, log)")
        ax.grid(True, which="both", axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("MoE all-to-all latency vs routing skew", fontsize=10)
    paths.append(save_chart(fig, os.path.join(out_dir, LATENCY_PNG), prov))
    return paths
