"""Views of a sweep results dir: the terminal table and the latency / busbw charts."""
from __future__ import annotations

import os

from commprof.model.units import human_bytes
from commprof.analysis.verdict import latency_stat
from commprof.analysis.noise import unstable_reason
from commprof.views.charts import chart_provenance, save_chart, chart_source, size_axes, title
from commprof.views.console import Col, fit_table, fmt_cell, stdout_console


LATENCY_PNG = "latency_vs_size.png"


BUSBW_PNG = "busbw_vs_size.png"


def stat_of(df) -> str:
    """What the latency_us_p50 column holds (:func:`commprof.analysis.verdict.latency_stat`)."""
    return latency_stat(df)


#: Below this many samples a p99 is the largest sample or one step from it: the table says so.
FEW_SAMPLES = 100


def samples_of(df):
    """Timed samples behind each row's percentiles (``iters``: calls, or loops under back-to-back),
    None for a table without the column."""
    return df["iters"] if "iters" in df.columns else None


def avg_busbw(df):
    """nccl-tests' closing ``# Avg bus bandwidth`` line for each run of a sweep: the mean busbw over
    the sizes of one (op, tp, mode[, impl]) on group 0. A DataFrame: the keys, ``sizes`` and
    ``avg_busbw_gbps``."""
    keys = ["op", "tp", "mode"] + (["impl"] if "impl" in df.columns else [])
    d0 = df[df["group"] == 0] if "group" in df.columns else df
    out = d0.groupby(keys, sort=True).agg(sizes=("size_bytes", "nunique"), avg_busbw_gbps=("busbw_gbps", "mean"))
    return out.reset_index()


def print_table(df, meta: dict, console=None) -> None:
    """One line per row: op, tp, group, mode, size, batch, samples, p50/p95/p99 latency, the
    rank-average mean (nccl-tests' time), algbw and busbw, wrong; then nccl-tests' average-busbw
    line per run."""
    from rich.text import Text

    console = console or stdout_console(170)
    title = (f"commprof {meta.get('verb') or 'sweep'}: {meta.get('kind', 'measured')} on "
             f"{', '.join(meta.get('hosts', ['?']))} ({meta.get('backend', '?')}, {', '.join(meta.get('gpus', []))}) "
             f"at {meta.get('start_time', '?')}")
    impls = "impl" in df.columns and (df["impl"].astype(str) == "custom").any()
    fallback = "fallback" in df.columns and (df["fallback"].astype(str) != "").any()
    stat = stat_of(df)
    # imported nccl-tests rows hold one average per size: no percentile columns unless reported
    tails = [c for c in ("latency_us_p95", "latency_us_p99") if c in df.columns and df[c].notna().any()]
    rankavg = ("latency_us_rankavg_mean" in df.columns and df["latency_us_rankavg_mean"].notna().any()
               and stat == "p50")
    n = samples_of(df)
    has_n = n is not None and n.notna().any()
    has_algbw = "algbw_gbps" in df.columns and df["algbw_gbps"].notna().any()
    # a batch column only where some row has one (an imported log's sizes have no batch)
    has_batch = "batch" in df.columns and df["batch"].astype(str).str.strip().replace("nan", "").ne("").any()
    # keep: what goes last when the terminal is narrow (None: never left out)
    cols = [Col("op", "left", None), Col("tp", "right", None), Col("grp", "right", 1), Col("mode", "left", 4),
            *([Col("impl", "left", 3)] if impls or fallback else []),
            Col("size", "right", None), *([Col("batch", "right", 2)] if has_batch else []),
            *([Col("n", "right", 1)] if has_n else []),
            Col(f"{stat} us", "right", None), *(Col(f"{c[11:]} us", "right", 2 if c.endswith("99") else 1) for c in tails),
            *([Col("rank-avg mean us", "right", 1, "rank-avg us")] if rankavg else []),
            *([Col("algbw GB/s", "right", 0)] if has_algbw else []),
            Col("busbw GB/s", "right", 3), Col("wrong", "right", None)]
    has_enq = "enqueue_us_p50" in df.columns and df["enqueue_us_p50"].notna().any()
    has_host = "host_us_p50" in df.columns and df["host_us_p50"].notna().any()
    if has_enq:
        cols.append(Col("enqueue p50 us", "right", 0, "enq p50 us"))
    if has_host:
        cols.append(Col("host p50 us", "right", 0))
    has_spread = "repeat_spread" in df.columns and df["repeat_spread"].notna().any()
    if has_spread:
        cols.append(Col("repeat spread", "right", 2, "spread"))
    rows = []
    order = ["op", "tp", "mode", "size_bytes", "group"] + (["impl"] if "impl" in df.columns else [])
    for r in df.sort_values(order).itertuples():
        wrong = int(r.wrong) if r.wrong == r.wrong else 0     # NaN: not checked
        impl_cell = ([str(r.impl) + (" (custom refused)" if getattr(r, "fallback", "") else "")]
                     if impls or fallback else [])
        unchecked = str(getattr(r, "status", "")) == "unchecked"
        cells = [r.op, str(r.tp), str(r.group), r.mode, *impl_cell, human_bytes(int(r.size_bytes)),
                 *([_batch_cell(r.batch)] if has_batch else []),
                 *([fmt_cell(r.iters * _repeats(r), 0)] if has_n else []),
                 _p50_cell(r), *(fmt_cell(getattr(r, c)) for c in tails),
                 *([fmt_cell(r.latency_us_rankavg_mean)] if rankavg else []),
                 *([fmt_cell(r.algbw_gbps, 3)] if has_algbw else []),
                 fmt_cell(r.busbw_gbps, 3),
                 Text(f"{wrong} WRONG", style="bold red") if wrong else ("n/a" if unchecked else "0")]
        if has_enq:
            cells.append(fmt_cell(r.enqueue_us_p50))
        if has_host:
            cells.append(fmt_cell(r.host_us_p50))
        if has_spread:
            sp = getattr(r, "repeat_spread")
            cells.append(f"{sp:.2f}x" if sp == sp else "")
        rows.append(cells)
    fit_table(title, cols, rows, console=console)
    for line in notes(df, stat, tails, rankavg, has_n) + noise_notes(df):
        console.print(line)


def _batch_cell(v) -> str:
    """A row's batch: the whole number, "" where it has none."""
    try:
        return str(int(float(v))) if v == v and str(v).strip() else ""
    except (TypeError, ValueError):
        return str(v)


def _repeats(r) -> int:
    """How many times the row's cell ran (``--repeat``; 1 for tables from before it)."""
    v = getattr(r, "repeats", 1)
    return int(v) if v == v and v else 1


def unstable_of(r) -> str:
    """Why a sweep row (a DataFrame row tuple) is unstable, "" when it is not: its ``unstable``
    column, or for tables from before that column its p95 against its p50 (:mod:`commprof.analysis.noise`)."""
    if hasattr(r, "unstable"):
        v = str(getattr(r, "unstable") or "")
        return "" if v == "nan" else v
    return unstable_reason((), getattr(r, "latency_us_p50", None), getattr(r, "latency_us_p95", None))


def _p50_cell(r):
    """The p50 cell: the number, and a '!' after it when the row is unstable (:func:`unstable_of`)."""
    from rich.text import Text

    text = fmt_cell(r.latency_us_p50)
    return Text(text + "!", style="bold yellow") if unstable_of(r) else text


#: The most unstable rows named one per line under the sweep table (the rest are counted).
NOISE_ROWS_SHOWN = 8


def noise_notes(df) -> list[str]:
    """The lines under the table that name the unstable rows ('!' after their p50), one per row
    with its numbers and why (:mod:`commprof.analysis.noise`), and what to do."""
    bad = [(r, unstable_of(r)) for r in df.sort_values(["op", "tp", "mode", "size_bytes"]).itertuples()]
    bad = [(r, why) for r, why in bad if why]
    if not bad:
        return []
    reps = int(df["repeats"].max()) if "repeats" in df.columns and df["repeats"].notna().any() else 1
    advice = ("rerun on a quiet machine" if reps > 1 else
              "rerun with --repeat 3 (repeats interleaved) on a quiet machine to see whether they agree")
    lines = [f"!: {len(bad)} of {len(df)} rows unstable, their p50 is not a steady figure; {advice}:"]
    for r, why in bad[:NOISE_ROWS_SHOWN]:
        impl = f" {r.impl}" if str(getattr(r, "impl", "")) == "custom" else ""
        lines.append(f"!   {r.op} TP={r.tp} {human_bytes(int(r.size_bytes))} {r.mode}{impl} group {r.group}: "
                     f"p50 {fmt_cell(r.latency_us_p50)} us; {why}")
    if len(bad) > NOISE_ROWS_SHOWN:
        lines.append(f"!   and {len(bad) - NOISE_ROWS_SHOWN} more"
                     + (" (sweep.csv column unstable)" if "unstable" in df.columns else ""))
    return lines


def notes(df, stat: str, tails: list, rankavg: bool, has_n: bool) -> list[str]:
    """The lines under the sweep table: nccl-tests' average busbw per run, then what the columns hold."""
    lines = []
    for r in avg_busbw(df).itertuples(index=False):
        impl = f" {r.impl}" if "impl" in r._fields and str(r.impl) == "custom" else ""
        lines.append(f"# Avg bus bandwidth: {r.avg_busbw_gbps:.3f} GB/s  ({r.op} TP={r.tp} {r.mode}{impl}, "
                     f"mean busbw over its {r.sizes} sizes; nccl-tests' closing line also averages its in-place "
                     "runs and 0-byte rows)")
    if has_n and "nccl-tests" in stat:
        lines.append("n: the iterations nccl-tests averaged into its one time per size")
    elif has_n:
        n_rows = [n * _repeats(r) for n, r in zip(df["iters"], df.itertuples()) if n == n]    # x --repeat
        few = sorted({int(v) for v in n_rows if int(v) < FEW_SAMPLES})
        what = "loops" if "timing" in df.columns and (df["timing"].astype(str) == "back-to-back").all() else "samples"
        if few and "latency_us_p99" in tails:
            lines.append(f"n: timed {what} per row; p99 over {', '.join(map(str, few))} {what} is the largest "
                         "one or interpolated next to it, not a tail estimate")
        else:
            lines.append(f"n: timed {what} per row")
    if rankavg:
        lines.append("rank-avg mean: per iteration the average over the group's ranks, then the mean over "
                     "iterations: the number to compare with nccl-tests' time column (p50/p95/p99 are of "
                     "the slowest rank)")
    if "comm" in df.columns and (df["comm"].astype(str) == "none (1 rank)").any():
        lines.append("TP=1 rows: one rank, no communication (a self-test of the path, never judged by check)")
    if "status" in df.columns and (df["status"].astype(str) == "unchecked").any():
        lines.append("wrong n/a: not checked (nccl-tests ran with validation off, its #wrong column N/A)")
    if "nccl-tests" in stat:
        lines.append(f"{stat}: nccl-tests prints one average time per size (over its iterations and ranks), "
                     "not percentiles")
    if "clock" in df.columns and (df["clock"].astype(str) == "cuda_event_spin").any():
        lines.append("p50/p95/p99: the op's GPU time (CUDA events, op enqueued behind a spin kernel); "
                     "enqueue: host dispatch; host: one call on an idle GPU, issue to seen complete")
    if "timing" in df.columns and (df["timing"].astype(str) == "back-to-back").any():
        loops = sorted({int(v) for v in df["loop"].dropna()}) if "loop" in df.columns else []
        lines.append(f"back-to-back: each sample is a loop of {', '.join(map(str, loops)) or 'N'} calls with no "
                     "barrier between them, timed as one and averaged (nccl-tests' method); p50/p95/p99 are "
                     "over loops, not calls")
    return lines


def draw_lines(ax, d0, ycol: str, prefix: str = "", band: bool = True):
    """One line per (tp, mode[, impl]) of ``d0`` on ``ax``: latency with a whisker from p50 up to
    p95 at each point where the rows have percentiles (never for an imported average; whiskers,
    not filled bands, which overlap into one wash when the tails are wide), busbw without zero
    points (a printed 0.00 at tiny sizes is a rounding, not a cliff on a log axis)."""
    import numpy as np

    stat = stat_of(d0)
    keys = ["tp", "mode"] + (["impl"] if "impl" in d0.columns else [])
    groups = [(k, g) for k, g in d0.groupby(keys)]
    for i, (key, g) in enumerate(groups):
        tp, mode = key[0], key[1]
        custom = len(key) > 2 and key[2] == "custom"
        g = g.sort_values("size_bytes")
        g = g[g[ycol] > 0]
        if g.empty:
            continue
        style = ":" if custom else ("-" if mode == "eager" else "--")
        what = f" {stat}" if ycol == "latency_us_p50" else ""
        line, = ax.plot(g["size_bytes"], g[ycol], style, marker="s" if custom else "o", ms=3,
                        label=f"{prefix}TP={tp} {mode}" + (" custom one-shot" if custom else "") + what)
        if band and ycol == "latency_us_p50" and "latency_us_p95" in g.columns and g["latency_us_p95"].notna().any() \
                and stat == "p50":
            # series side by side at each size (a few percent apart on the log axis) so whiskers never overlap
            x = g["size_bytes"].to_numpy(float) * 2 ** (0.06 * (i - (len(groups) - 1) / 2))
            p50, p95 = g["latency_us_p50"].to_numpy(float), g["latency_us_p95"].to_numpy(float)
            ax.errorbar(x, p50, yerr=[np.zeros_like(p50), np.clip(p95 - p50, 0, None)], fmt="none",
                        ecolor=line.get_color(), elinewidth=1, capsize=3, alpha=0.7)


def label_batches(ax, d) -> list[str]:
    """Name each size's decode batch along the top of ``ax`` (``b=8``; a prefill chunk's tokens,
    ``128 tok``): the sizes of a model's sweep are its batches, and a reader looks for the batch,
    not the byte count. Returns the labels written (none when the rows carry no batch)."""
    if "batch" not in d.columns:
        return []
    cols = ["size_bytes", "batch"] + (["site"] if "site" in d.columns else [])
    pairs = d[cols].dropna(subset=["batch"]).drop_duplicates("size_bytes")
    labels = []
    for row in pairs.itertuples(index=False):
        size, batch = row[0], row[1]
        try:
            b = int(float(batch))
        except (TypeError, ValueError):
            continue
        # a prefill sweep's batch column counts the chunk's tokens, not sequences
        text = f"{b} tok" if len(row) > 2 and str(row[2]).startswith("prefill") else f"b={b}"
        ax.annotate(text, xy=(size, 1.0), xycoords=("data", "axes fraction"), xytext=(0, -3),
                    textcoords="offset points", ha="center", va="top", fontsize=7, color="0.3")
        labels.append(text)
    return labels


def charts(df, meta: dict, out_dir: str) -> list[str]:
    """Latency vs size per TP (p50 line with a whisker to p95, or the imported average alone) and
    busbw vs size; one panel per op; each size's batch along the top; the provenance line under
    each, wrapped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    if df.empty:
        return written
    ops = list(dict.fromkeys(df["op"]))
    d0 = df[df["group"] == 0]
    stat = stat_of(d0)
    lat_label = ("latency (us), p50 line, whisker to p95" if stat == "p50" else f"latency (us), {stat}")
    for fname, ycol, ylabel in ((LATENCY_PNG, "latency_us_p50", lat_label),
                                (BUSBW_PNG, "busbw_gbps", "busbw (GB/s, nccl-tests definition)")):
        fig, axes = plt.subplots(1, len(ops), figsize=(6 * len(ops), 4.6), squeeze=False)
        for ax, op in zip(axes[0], ops):
            sub = d0[d0["op"] == op]
            draw_lines(ax, sub, ycol)
            size_axes(ax, f"size per op ({op}: " + ("gathered output" if op == "all_gather" else "per-rank buffer")
                      + ", binary units)", ylabel, op)
            if label_batches(ax, sub):
                ax.margins(y=0.12)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8, loc="best")
        top = title(fig, f"{chart_source(meta)}: {ylabel.split(' (')[0]} vs message size", fontsize=11)
        written.append(save_chart(fig, os.path.join(out_dir, fname), chart_provenance(meta), size=7.5, top=top, dpi=110))
    return written
