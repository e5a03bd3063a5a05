"""What ``commprof predict`` shows: one line per box and TP, a table, and the stacked ms/token chart."""
from __future__ import annotations

from commprof.analysis.errorband import band_whose
from commprof.views.console import Col, fit_table, fmt_cell, stdout_console
from commprof.views.charts import save_chart


def predict_line(r: dict) -> str:
    """One row as the sentence a buyer reads: ms/token, its communication in ms and in share."""
    has_ttft = fmt_cell(r.get("ttft_ms")) != "-"        # no --prompt: empty in the row, NaN read back
    ttft = f"; TTFT {fmt_cell(r['ttft_ms'])} ms (collectives {fmt_cell(r['ttft_comm_ms'])} ms)" if has_ttft else ""
    kv = (f"; KV fits {r['kv_max_sequences']:,} sequences of {r['context']:,} tokens" if r["weights_fit"]
          else "; weights do not fit")
    band = ""
    if fmt_cell(r.get("ms_per_token_lo")) != "-":
        kind = r.get("error_kind", "?")
        whose = band_whose(kind)
        lo, hi, ms = float(r["ms_per_token_lo"]), float(r["ms_per_token_hi"]), float(r["ms_per_token"])
        side = (": all of it below the prediction, where such figures ran faster than predicted" if hi < ms else
                ": all of it above the prediction, where such figures ran slower than predicted" if lo > ms else "")
        band = (f"; band {fmt_cell(r['ms_per_token_lo'], 2)}-{fmt_cell(r['ms_per_token_hi'], 2)} ms/token "
                f"(past error on held-out published figures, {whose}{side})")
    share = (f" (band {fmt_cell(r['comm_share_lo_pct'])}-{fmt_cell(r['comm_share_hi_pct'])}%)"
             if fmt_cell(r.get("comm_share_lo_pct")) != "-" and float(r["comm_ms"]) > 0 else "")
    return (f"{r['gpu']} TP={r['tp']} batch {r['batch']}: {fmt_cell(r['ms_per_token'], 2)} ms/token = compute "
            f"{fmt_cell(r['compute_ms'], 2)} ms (modelled) + communication {fmt_cell(r['comm_ms'], 2)} ms "
            f"({r['comm_kind']}: {r['comm']}), {fmt_cell(r['comm_share_pct'])}% communication{share}{band}; "
            f"{fmt_cell(r['tokens_s_per_user'])} tok/s per user, {fmt_cell(r['tokens_s_per_box'], 0)} per {r['tp']} GPUs"
            f"{ttft}{kv}")


def render_predict(rows: list[dict], notes: list[str], model: str, console=None) -> None:
    console = console or stdout_console(170)
    title = f"commprof predict: {model} (compute modelled; communication from each --comm input)"
    # (key, header, keep when narrow: None never left out)
    cols = [("box", "box", None), ("tp", "TP", None), ("batch", "batch", None), ("compute_ms", "compute ms", 3),
            ("gaps_ms", "gaps ms", 1), ("comm_ms", "comm ms", 4), ("ms_per_token", "ms/token", None),
            ("comm_share_pct", "comm %", 2), ("tokens_s_per_user", "tok/s user", 1), ("tokens_s_per_box", "tok/s box", 1),
            ("ttft_ms", "TTFT ms", 0), ("kv_max_sequences", "KV seqs", 3)]
    if all(fmt_cell(r.get("ttft_ms")) == "-" for r in rows):     # no --prompt: no TTFT column of dashes
        cols = [c for c in cols if c[0] != "ttft_ms"]
    table = [[str(r[k]) if k in ("box", "tp", "batch") else
              (f"{r[k]:,}" if k == "kv_max_sequences" and r["weights_fit"] else
               "no fit" if k == "kv_max_sequences" else fmt_cell(r[k], 2)) for k, _, _ in cols] for r in rows]
    fit_table(title, [Col(h, "left" if h == "box" else "right", keep) for _, h, keep in cols], table, console=console)
    for r in rows:
        console.print(predict_line(r), soft_wrap=True)
    for n in notes:
        console.print(f"note: {n}", soft_wrap=True)


_PARTS = (("kernel_ms", "compute: rooflines"), ("floor_ms", "compute: kernel floors"), ("gaps_ms", "host gaps"),
          ("comm_ms", "communication"))


def predict_chart(rows: list[dict], path: str, meta: dict) -> str:
    """Stacked ms/token per TP and batch, one panel per box; provenance under it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    boxes = list(dict.fromkeys(r["box"] for r in rows))
    tallest = 0.0
    fig, axes = plt.subplots(1, len(boxes), figsize=(max(6, 4.5 * len(boxes)), 4.6), squeeze=False, sharey=True)
    colors = ("#4c72b0", "#8fa8d0", "#c8c8c8", "#dd8452")
    for ax, box in zip(axes[0], boxes):
        sub = [r for r in rows if r["box"] == box]
        labels = [f"TP{r['tp']}\nB{r['batch']}" + (f"\n{r['load'].replace('concurrency', 'conc')}" if r.get("load") else "")
                  for r in sub]       # a load row (predictload.py) names its level
        bottom = [0.0] * len(sub)
        # a TP degree whose weights do not fit the GPUs runs nothing: no bar, a label in its place
        fits = [str(r.get("weights_fit", True)).lower() in ("true", "1", "1.0") for r in sub]
        for (key, name), color in zip(_PARTS, colors):
            vals = [float(r[key]) if ok else 0.0 for r, ok in zip(sub, fits)]
            ax.bar(range(len(sub)), vals, bottom=bottom, color=color, label=name)
            bottom = [b + v for b, v in zip(bottom, vals)]
        # the error band of each bar: ms_per_token x the held-out measured/predicted range of its kind
        for i, r in enumerate(sub):
            if fits[i] and fmt_cell(r.get("ms_per_token_lo")) != "-":
                lo, hi = float(r["ms_per_token_lo"]), float(r["ms_per_token_hi"])
                ax.errorbar(i, bottom[i], yerr=[[max(0.0, bottom[i] - lo)], [max(0.0, hi - bottom[i])]],
                            fmt="none", ecolor="0.2", elinewidth=0.8, capsize=2)
                bottom[i] = max(bottom[i], hi)
        tallest = max(tallest, *bottom)
        for i, r in enumerate(sub):
            if fits[i]:
                ax.text(i, bottom[i], f"{r['comm_share_pct']:.0f}%", ha="center", va="bottom", fontsize=7)
            else:
                ax.text(i, 0, "weights\ndo not fit", ha="center", va="bottom", fontsize=7, color="0.35",
                        rotation=90)
        ax.set_xticks(range(len(sub)), labels, fontsize=7)
        # a step not captured whole by one CUDA graph says how it ran (--mode)
        how = {"piecewise": "; piecewise CUDA graphs", "eager": "; eager"}.get(sub[0].get("mode") or "graph", "")
        ax.set_title(f"{box}\n(comm: {sub[0]['comm_kind']}{how})", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("ms per token (one decode step)")
    # headroom above the tallest bar for its share label and the legend: the legend never covers a bar
    axes[0][0].set_ylim(0, (tallest or 1.0) * 1.35)
    axes[0][-1].legend(fontsize=7, loc="upper center", ncol=2, frameon=False)
    prov = (f"predicted: compute modelled from published GPU specs (calibration: {meta.get('calibration_source', '?')}); "
            f"communication per panel as labelled; {meta.get('start_time', '?')}; command: "
            f"{' '.join(meta.get('command', []))}. % above a bar: communication share; whisker: the error band "
            f"(10th-90th percentile of measured/predicted over held-out published figures of its kind).")
    return save_chart(fig, path, prov, top=1.0)
