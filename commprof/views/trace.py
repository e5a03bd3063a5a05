"""Views of a trace results dir: the summary lines and the per-token, per-layer and share-vs-TP charts."""
from __future__ import annotations

import os

from commprof.views.charts import save_chart, chart_source, where_from
from commprof.analysis.noise import BATCH_DROP_MIN, batch_drops, iqr_ratio, token_spread_reason

TRACE_TOKENS_PNG = "trace_tokens.png"
TRACE_LAYERS_PNG = "trace_layers_heatmap.png"
TRACE_SHARE_PNG = "trace_share_vs_tp.png"
_PARTS = (("compute_us", "compute", "#4C72B0"), ("transfer_us", "transfer", "#DD8452"),
          ("wait_us", "wait", "#C44E52"), ("gaps_us", "gaps", "#8C8C8C"))


def time_unit(largest_ms: float) -> tuple[float, str]:
    """Milliseconds, or seconds once the largest value runs into thousands of ms: (divisor, unit)."""
    return (1e3, "s") if largest_ms >= 1e3 else (1.0, "ms")


def trace_charts(tok, lay, summ, meta: dict, out_dir: str) -> list[str]:
    """Stacked bar per token, per-layer heatmap of communication share, share vs TP degree, from
    the trace tables (``trace_tokens``, ``trace_layers``, ``trace_summary``), written into ``out_dir``."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    if tok.empty or summ.empty:
        return []
    os.makedirs(out_dir, exist_ok=True)
    kind = meta.get("kind", "measured")
    prov = (f"{where_from(meta)}, backend {meta.get('backend') or '?'}, "
            f"model {meta.get('model', {}).get('name', '?')}, {meta.get('scaling', '')}; {meta.get('start_time', '')}")
    written = []

    runs = list(tok.groupby(["tp", "batch", "mode"]))
    cols = min(3, len(runs))
    rows_n = math.ceil(len(runs) / cols)
    totals = tok.groupby(["tp", "batch", "mode", "token"])[[p[0] for p in _PARTS]].mean().sum(axis=1)
    scale, unit = time_unit(float(totals.max()) / 1e3 if len(totals) else 0.0)
    fig, axes = plt.subplots(rows_n, cols, figsize=(max(7.0, 5.5 * cols), 3.8 * rows_n + 0.6), squeeze=False)
    for ax, ((tp, b, mode), g) in zip(axes.flat, runs):
        m = g.groupby("token")[[p[0] for p in _PARTS]].mean() / 1e3 / scale
        bottom = None
        for col, label, color in _PARTS:
            ax.bar(m.index, m[col], bottom=bottom, label=label, color=color, width=0.85)
            bottom = m[col] if bottom is None else bottom + m[col]
        reps, unstable = _repeats_of(summ, tp, b, mode)
        ax.set_title(f"TP={tp} batch={b} {mode}" + (f", {reps} repeats" if reps > 1 else "")
                     + (" (unstable)" if unstable else ""))
        ax.set_xlabel("token (timed step)" + (", the repeats end to end" if reps > 1 else ""))
        if reps > 1 and len(m) % reps == 0:      # where each repeat's tokens begin (trace --repeat)
            per = len(m) // reps
            for k in range(1, reps):
                x = m.index[k * per] - 0.5
                ax.axvline(x, color="0.35", linestyle="--", linewidth=0.9)
                ax.annotate(f"repeat {k + 1}", (x, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -3),
                            textcoords="offset points", va="top", fontsize=7, color="0.25")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(f"{unit} per token (mean over ranks)")
    for ax in list(axes.flat)[len(runs):]:
        ax.axis("off")
    # the title, then one legend under it, above the panels: never over a bar
    top = 1 - 0.75 / fig.get_size_inches()[1]
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, top + 0.35 / fig.get_size_inches()[1]))
    fig.suptitle(f"{chart_source(meta)}: per-token time split"
                 + (f" ({kind})" if kind not in ("measured", "imported") else ""), fontsize=11)
    written.append(save_chart(fig, os.path.join(out_dir, TRACE_TOKENS_PNG), prov, size=7.5, top=top))

    piv = lay.groupby(["layer", "tp", "batch", "mode"])["comm_share_pct"].mean().unstack(["tp", "batch", "mode"]) \
        if not lay.empty else None
    if piv is not None and piv.size:
        fig, ax = plt.subplots(figsize=(max(5.5, 2.5 + 1.2 * piv.shape[1]), max(3.2, 2 + 0.12 * piv.shape[0])))
        im = ax.imshow(piv.to_numpy(), aspect="auto", cmap="magma_r", vmin=0, vmax=100, interpolation="nearest")
        ax.set_xticks(range(piv.shape[1]), [f"TP={t}\nb={b}\n{m}" for t, b, m in piv.columns], fontsize=8)
        step = max(1, math.ceil(piv.shape[0] / 16))          # at most ~16 labelled rows, each a whole layer
        ax.set_yticks(range(0, piv.shape[0], step), [str(int(v)) for v in piv.index[::step]])
        run = int(summ["layers_run"].max()) if "layers_run" in summ.columns and summ["layers_run"].notna().any() else None
        total = (int(summ["layers_model"].max()) if "layers_model" in summ.columns
                 and summ["layers_model"].notna().any() else None)
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, label="comm share (%)")
        ax.set_title("communication share per layer" + (f" ({run} of {total} layers run)" if run and total
                                                        and run != total else ""), fontsize=10)
        written.append(save_chart(fig, os.path.join(out_dir, TRACE_LAYERS_PNG), prov))

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
    written.append(save_chart(fig, os.path.join(out_dir, TRACE_SHARE_PNG), prov))
    return written


def _repeats_of(summ, tp, batch, mode) -> tuple[int, bool]:
    """(how many repeats a run's tokens pool, whether it is flagged unstable) from ``trace_summary``;
    (1, False) for a summary from before ``--repeat``."""
    if summ is None or "repeats" not in summ.columns:
        return 1, False
    sel = summ[(summ["tp"] == tp) & (summ["batch"] == batch) & (summ["mode"] == mode)]
    if "phase" in sel.columns and len(sel) > 1:
        sel = sel[sel["phase"].astype(str).isin(["decode", "nan", ""])]
    if sel.empty:
        return 1, False
    r = sel.iloc[0]
    try:
        n = int(float(r["repeats"]))
    except (TypeError, ValueError):
        n = 1
    return max(n, 1), bool(_text(r.get("unstable")))


def _comm_ms(r: dict) -> str:
    """The communication of one token in ms (ms_per_token x comm_share_pct), as text."""
    try:
        v = float(r["ms_per_token"]) * float(r["comm_share_pct"]) / 100.0
    except (KeyError, TypeError, ValueError):
        return "?"
    return f"{v:.3f}" if v == v else "?"


def _text(v) -> str:
    """A text cell of a loaded table: NaN (pandas' empty cell) and None as ""."""
    return "" if v is None or (isinstance(v, float) and v != v) else str(v).strip()


def repeats_note(r: dict) -> str:
    """``; over N repeats' tokens (A / B / C ms/token, X.XXx apart)`` for a run timed more than once
    (``trace --repeat``), "" otherwise; ``!`` after it when the run is unstable (column ``unstable``)."""
    try:
        n = int(float(r.get("repeats")))
    except (TypeError, ValueError):
        n = 1
    out = ""
    if n > 1:
        each = [v for v in _text(r.get("ms_per_token_repeats")).split(";") if v]
        try:
            shown = " / ".join(f"{float(v):,.3f}" for v in each)
            spread = f", {float(r.get('repeat_spread')):.2f}x apart" if _text(r.get("repeat_spread")) else ""
        except ValueError:
            shown, spread = "", ""
        out = f"; over {n} repeats' tokens" + (f" ({shown} ms/token{spread})" if shown else "")
    return out + (" !" if _text(r.get("unstable")) else "")


def summary_lines(summary) -> list[str]:
    """One line per (tp, batch, mode) of ``trace_summary``; columns a table lacks are left out."""
    lines = []
    for r in summary.to_dict("records"):
        def num(k, fmt):
            v = r.get(k)
            return format(v, fmt) if isinstance(v, (int, float)) and v == v else "?"
        scaled = r.get("scaled") not in (None, 0, "0", "", False) and r.get("scaled") == r.get("scaled")
        part = (r.get("layers_run") not in (None, "") and r.get("layers_model") not in (None, "")
                and r.get("layers_run") == r.get("layers_run") and int(r["layers_run"]) < int(r["layers_model"]))
        label = str(r.get("kind", "?")) + (f", scaled from {r.get('layers_run')} of {r.get('layers_model')} layers"
                                           if scaled else f", {int(r['layers_run'])} of {int(r['layers_model'])} "
                                           "layers run, not scaled" if part else "")
        phase = str(r.get("phase") or "decode")
        if phase in ("prefill", "mixed"):
            decode = f" + {r.get('batch')} decode tokens" if phase == "mixed" else ""
            lines.append(f"TP={r.get('tp')} {phase} prompt={r.get('prompt')} chunk={r.get('chunk')}{decode} "
                         f"{r.get('mode', '?')}: TTFT {num('ttft_ms', '.2f')} ms, of which communication "
                         f"{num('ttft_comm_ms', '.2f')} ms ({num('ttft_comm_share_pct', '.1f')}%); "
                         f"{num('ms_per_token', '.3f')} ms per chunk step, {r.get('collectives_per_step', '?')} "
                         f"collectives/step (transfer {num('transfer_share_pct', '.1f')}%, "
                         f"wait {num('wait_share_pct', '.1f')}%){repeats_note(r)} [{label}]")
            continue
        if phase == "training":       # backward/optimizer ops in the steps: no token is generated
            lines.append(f"TP={r.get('tp')} {r.get('mode', '?')}: training steps, not decode (backward/optimizer ops "
                         f"in the trace): {num('ms_per_token', '.3f')} ms/step, {r.get('collectives_per_step', '?')} "
                         f"collectives/step, communication {num('comm_share_pct', '.1f')}% = {_comm_ms(r)} ms/step "
                         f"(transfer {num('transfer_share_pct', '.1f')}%, wait {num('wait_share_pct', '.1f')}%) [{label}]")
            continue
        lines.append(f"TP={r.get('tp')} batch={r.get('batch')} {r.get('mode', '?')}: {num('ms_per_token', '.3f')} "
                     f"ms/token, {num('tokens_per_s', '.1f')} tokens/s, {r.get('collectives_per_step', '?')} "
                     f"collectives/step ({num('collectives_per_token', 'g')}/token), communication "
                     f"{num('comm_share_pct', '.1f')}% = {_comm_ms(r)} ms (transfer {num('transfer_share_pct', '.1f')}%, "
                     f"wait {num('wait_share_pct', '.1f')}%){repeats_note(r)} [{label}]")
    return lines


def token_times_ms(tokens) -> dict:
    """Per (tp, batch, mode, phase) of ``trace_tokens``: each token's slowest rank's latency in ms
    (what ``ms_per_token`` is the median of), in token order."""
    if tokens is None or tokens.empty or not {"tp", "batch", "token", "latency_us"} <= set(tokens.columns):
        return {}
    keys = [k for k in ("tp", "batch", "mode", "phase") if k in tokens.columns]
    out = {}
    for key, g in tokens.groupby(keys):
        k = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        try:
            run = (int(k["tp"]), int(k["batch"]), str(k.get("mode", "")), str(k.get("phase", "decode") or "decode"))
        except (TypeError, ValueError):
            continue
        out[run] = [float(v) / 1e3 for v in g.groupby("token")["latency_us"].max().tolist()]
    return out


def noise_lines(summary, tokens=None) -> list[str]:
    """The lines that say a trace run's ms/token is not a steady figure
    (:mod:`commprof.analysis.noise`): its own tokens spread too widely, or its ms/token falls as
    the batch grows by more than the two runs' spreads allow (a step of more sequences does more
    work, so the smaller batch was slowed by something else, e.g. a busy machine). Runs of
    commprof's engine only (measured or predicted): an imported engine's steps of one batch also
    carry prompt chunks and vary in what they do, so their spread is not noise."""
    if summary is None or summary.empty or not {"tp", "batch", "ms_per_token"} <= set(summary.columns):
        return []
    times = token_times_ms(tokens)
    rows, lines = [], []
    for r in summary.to_dict("records"):
        phase = str(r.get("phase") or "decode")
        if phase == "training" or str(r.get("kind", "")) == "imported":
            continue        # an engine's own steps (import kineto) differ in what they carry: not noise
        try:
            key = (int(r["tp"]), int(r["batch"]), str(r.get("mode", "")), phase)
        except (KeyError, TypeError, ValueError):
            continue
        own = times.get(key, [])
        # the reason written beside the run (trace_summary.csv column unstable: its repeats and its
        # tokens), else, for a dir from before the column, its tokens' spread read again
        why = _text(r.get("unstable")) if "unstable" in summary.columns else token_spread_reason(own)
        label = f"TP={key[0]} batch={key[1]} {key[2]}" + (f" {phase}" if phase != "decode" else "")
        if why:
            lines.append(f"!: unstable: {label} at {float(r['ms_per_token']):,.3f} ms/token: {why}; "
                         "rerun it on a quiet machine")
        if phase == "decode":
            rows.append({**r, "phase": phase, "noise": iqr_ratio(own) or 0.0})
    for d in batch_drops(rows, "noise"):
        lines.append(f"!: unstable: TP={d['tp']} batch={d['batch_large']} at {d['ms_large']:,.3f} ms/token is "
                     f"{100 * d['drop']:.0f}% below batch={d['batch_small']}'s {d['ms_small']:,.3f} ms/token, beyond "
                     f"{100 * BATCH_DROP_MIN:.0f}% plus half of each run's token spread (interquartile range over median); "
                     "a step of more sequences cannot be cheaper, so the smaller batch was slowed by something else "
                     "(a busy machine): rerun it on a quiet one")
    return lines
