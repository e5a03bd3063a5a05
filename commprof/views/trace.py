"""Views of a trace results dir: the summary lines and the per-token, per-layer and share-vs-TP charts."""
from __future__ import annotations

import os

from .charts import _save

TRACE_TOKENS_PNG = "trace_tokens.png"
TRACE_LAYERS_PNG = "trace_layers_heatmap.png"
TRACE_SHARE_PNG = "trace_share_vs_tp.png"
_PARTS = (("compute_us", "compute", "#4C72B0"), ("transfer_us", "transfer", "#DD8452"),
          ("wait_us", "wait", "#C44E52"), ("gaps_us", "gaps", "#8C8C8C"))


def trace_charts(tok, lay, summ, meta: dict, out_dir: str) -> list[str]:
    """Stacked bar per token, per-layer heatmap of communication share, share vs TP degree, from
    the trace tables (``trace_tokens``, ``trace_layers``, ``trace_summary``), written into ``out_dir``."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if tok.empty or summ.empty:
        return []
    os.makedirs(out_dir, exist_ok=True)
    kind = meta.get("kind", "measured")
    prov = (f"{kind} on {', '.join(meta.get('hosts', ['?']))}, backend {meta.get('backend', '?')}, "
            f"model {meta.get('model', {}).get('name', '?')}, {meta.get('scaling', '')}; {meta.get('start_time', '')}")
    written = []

    runs = list(tok.groupby(["tp", "batch", "mode"]))
    cols = min(3, len(runs))
    rows_n = math.ceil(len(runs) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(5.5 * cols, 3.8 * rows_n), squeeze=False)
    for ax, ((tp, b, mode), g) in zip(axes.flat, runs):
        m = g.groupby("token")[[p[0] for p in _PARTS]].mean() / 1e3
        bottom = None
        for col, label, color in _PARTS:
            ax.bar(m.index, m[col], bottom=bottom, label=label, color=color, width=0.85)
            bottom = m[col] if bottom is None else bottom + m[col]
        ax.set_title(f"TP={tp} batch={b} {mode}")
        ax.set_xlabel("token")
        ax.set_ylabel("ms per token (mean over ranks)")
    for ax in list(axes.flat)[len(runs):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"commprof trace: per-token time split ({kind})", fontsize=11)
    written.append(_save(fig, os.path.join(out_dir, TRACE_TOKENS_PNG), prov, size=7, top=0.95))

    piv = lay.groupby(["layer", "tp", "batch", "mode"])["comm_share_pct"].mean().unstack(["tp", "batch", "mode"])
    fig, ax = plt.subplots(figsize=(2 + 1.2 * piv.shape[1], 2 + 0.12 * piv.shape[0]))
    im = ax.imshow(piv.to_numpy(), aspect="auto", cmap="magma_r", vmin=0, vmax=100, interpolation="nearest")
    ax.set_xticks(range(piv.shape[1]), [f"TP={t}\nb={b}\n{m}" for t, b, m in piv.columns], fontsize=8)
    ax.set_ylabel("layer")
    fig.colorbar(im, ax=ax, label="comm share (%)")
    ax.set_title("communication share per layer", fontsize=10)
    written.append(_save(fig, os.path.join(out_dir, TRACE_LAYERS_PNG), prov))

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for (b, mode), g in summ.groupby(["batch", "mode"]):
        g = g.sort_values("tp")
        ax.plot(g["tp"], g["comm_share_pct"], marker="o", label=f"batch {b} {mode}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(summ["tp"].unique()), [str(t) for t in sorted(summ["tp"].unique())])
    ax.set_ylim(0, 100)
    ax.set_xlabel("TP degree")
    ax.set_ylabel("communication share of token latency (%)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"communication share vs TP ({kind})", fontsize=10)
    written.append(_save(fig, os.path.join(out_dir, TRACE_SHARE_PNG), prov))
    return written


def _comm_ms(r: dict) -> str:
    """The communication of one token in ms (ms_per_token x comm_share_pct), as text."""
    try:
        v = float(r["ms_per_token"]) * float(r["comm_share_pct"]) / 100.0
    except (KeyError, TypeError, ValueError):
        return "?"
    return f"{v:.3f}" if v == v else "?"


def summary_lines(summary) -> list[str]:
    """One line per (tp, batch, mode) of ``trace_summary``; columns a table lacks are left out."""
    lines = []
    for r in summary.to_dict("records"):
        def num(k, fmt):
            v = r.get(k)
            return format(v, fmt) if isinstance(v, (int, float)) and v == v else "?"
        scaled = r.get("scaled") not in (None, 0, "0", "", False) and r.get("scaled") == r.get("scaled")
        label = str(r.get("kind", "?")) + (f", scaled from {r.get('layers_run')} of {r.get('layers_model')} layers"
                                           if scaled else "")
        phase = str(r.get("phase") or "decode")
        if phase in ("prefill", "mixed"):
            decode = f" + {r.get('batch')} decode tokens" if phase == "mixed" else ""
            lines.append(f"TP={r.get('tp')} {phase} prompt={r.get('prompt')} chunk={r.get('chunk')}{decode} "
                         f"{r.get('mode', '?')}: TTFT {num('ttft_ms', '.2f')} ms, of which communication "
                         f"{num('ttft_comm_ms', '.2f')} ms ({num('ttft_comm_share_pct', '.1f')}%); "
                         f"{num('ms_per_token', '.3f')} ms per chunk step, {r.get('collectives_per_step', '?')} "
                         f"collectives/step (transfer {num('transfer_share_pct', '.1f')}%, "
                         f"wait {num('wait_share_pct', '.1f')}%) [{label}]")
            continue
        lines.append(f"TP={r.get('tp')} batch={r.get('batch')} {r.get('mode', '?')}: {num('ms_per_token', '.3f')} "
                     f"ms/token, {num('tokens_per_s', '.1f')} tokens/s, {r.get('collectives_per_step', '?')} "
                     f"collectives/step ({num('collectives_per_token', 'g')}/token), communication "
                     f"{num('comm_share_pct', '.1f')}% = {_comm_ms(r)} ms (transfer {num('transfer_share_pct', '.1f')}%, "
                     f"wait {num('wait_share_pct', '.1f')}%) [{label}]")
    return lines
