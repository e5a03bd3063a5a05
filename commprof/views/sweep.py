"""Views of a sweep results dir: the terminal table and the latency / busbw charts."""
from __future__ import annotations

import os

from ..units import human_bytes
from ..items import latency_stat
from .charts import _provenance, _save, size_axes
from .console import _fmt, stdout_console


LATENCY_PNG = "latency_vs_size.png"


BUSBW_PNG = "busbw_vs_size.png"


def stat_of(df) -> str:
    """What the latency_us_p50 column holds (:func:`commprof.items.latency_stat`)."""
    return latency_stat(df)


def print_table(df, meta: dict, console=None) -> None:
    """One line per row: op, tp, group, mode, size, p50/p95/p99 latency, busbw, wrong."""
    from rich.table import Table

    console = console or stdout_console(150)
    title = (f"commprof sweep: {meta.get('kind', 'measured')} on {', '.join(meta.get('hosts', ['?']))} "
             f"({meta.get('backend', '?')}, {', '.join(meta.get('gpus', []))}) at {meta.get('start_time', '?')}")
    t = Table(title=title, title_justify="left")
    impls = "impl" in df.columns and (df["impl"].astype(str) == "custom").any()
    fallback = "fallback" in df.columns and (df["fallback"].astype(str) != "").any()
    stat = stat_of(df)
    # imported nccl-tests rows hold one average per size: no percentile columns unless reported
    tails = [c for c in ("latency_us_p95", "latency_us_p99") if c in df.columns and df[c].notna().any()]
    for col, just in (("op", "left"), ("tp", "right"), ("grp", "right"), ("mode", "left"),
                      *((("impl", "left"),) if impls or fallback else ()),
                      ("size", "right"), ("batch", "right"), (f"{stat} us", "right"),
                      *((f"{c[11:]} us", "right") for c in tails), ("busbw GB/s", "right"), ("wrong", "right")):
        t.add_column(col, justify=just)
    has_enq = "enqueue_us_p50" in df.columns and df["enqueue_us_p50"].notna().any()
    has_host = "host_us_p50" in df.columns and df["host_us_p50"].notna().any()
    if has_enq:
        t.add_column("enqueue p50 us", justify="right")
    if has_host:
        t.add_column("host p50 us", justify="right")
    order = ["op", "tp", "mode", "size_bytes", "group"] + (["impl"] if "impl" in df.columns else [])
    for r in df.sort_values(order).itertuples():
        wrong = int(r.wrong) if r.wrong == r.wrong else 0     # NaN: not checked
        impl_cell = ([str(r.impl) + (" (custom refused)" if getattr(r, "fallback", "") else "")]
                     if impls or fallback else [])
        unchecked = str(getattr(r, "status", "")) == "unchecked"
        cells = [r.op, str(r.tp), str(r.group), r.mode, *impl_cell, human_bytes(int(r.size_bytes)), str(r.batch or ""),
                 _fmt(r.latency_us_p50), *(_fmt(getattr(r, c)) for c in tails),
                 _fmt(r.busbw_gbps, 3),
                 f"[bold red]{wrong} WRONG[/]" if wrong else ("n/a (not checked)" if unchecked else "0")]
        if has_enq:
            cells.append(_fmt(r.enqueue_us_p50))
        if has_host:
            cells.append(_fmt(r.host_us_p50))
        t.add_row(*cells)
    console.print(t)
    if "comm" in df.columns and (df["comm"].astype(str) == "none (1 rank)").any():
        console.print("TP=1 rows: one rank, no communication (a self-test of the path, never judged by check)")
    if "nccl-tests" in stat:
        console.print(f"{stat}: nccl-tests prints one average time per size (over its iterations and ranks), "
                      "not percentiles")
    if "clock" in df.columns and (df["clock"].astype(str) == "cuda_event_spin").any():
        console.print("p50/p95/p99: the op's GPU time (CUDA events, op enqueued behind a spin kernel); "
                      "enqueue: host dispatch; host: one call on an idle GPU, issue to seen complete")
    if "timing" in df.columns and (df["timing"].astype(str) == "back-to-back").any():
        loops = sorted({int(v) for v in df["loop"].dropna()}) if "loop" in df.columns else []
        console.print(f"back-to-back: each sample is a loop of {', '.join(map(str, loops)) or 'N'} calls with no "
                      "barrier between them, timed as one and averaged (nccl-tests' method); p50/p95/p99 are "
                      "over loops, not calls")


def draw_lines(ax, d0, ycol: str, prefix: str = "", band: bool = True):
    """One line per (tp, mode[, impl]) of ``d0`` on ``ax``: latency with its p50-p95 band where the
    rows have percentiles (never for an imported average), busbw without zero points (a printed
    0.00 at tiny sizes is a rounding, not a cliff on a log axis)."""
    stat = stat_of(d0)
    keys = ["tp", "mode"] + (["impl"] if "impl" in d0.columns else [])
    for key, g in d0.groupby(keys):
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
            ax.fill_between(g["size_bytes"], g["latency_us_p50"], g["latency_us_p95"],
                            color=line.get_color(), alpha=0.2, lw=0)


def charts(df, meta: dict, out_dir: str) -> list[str]:
    """Latency vs size per TP (p50 line and p50-p95 band, or the imported average alone) and busbw
    vs size; one panel per op; the provenance line under each, wrapped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    if df.empty:
        return written
    ops = list(dict.fromkeys(df["op"]))
    d0 = df[df["group"] == 0]
    stat = stat_of(d0)
    lat_label = ("latency (us), p50 line, p50-p95 band" if stat == "p50" else f"latency (us), {stat}")
    for fname, ycol, ylabel in ((LATENCY_PNG, "latency_us_p50", lat_label),
                                (BUSBW_PNG, "busbw_gbps", "busbw (GB/s, nccl-tests definition)")):
        fig, axes = plt.subplots(1, len(ops), figsize=(6 * len(ops), 4.6), squeeze=False)
        for ax, op in zip(axes[0], ops):
            sub = d0[d0["op"] == op]
            draw_lines(ax, sub, ycol)
            size_axes(ax, f"size per op ({op}: " + ("gathered output" if op == "all_gather" else "per-rank buffer")
                      + ", binary units)", ylabel, op)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
        fig.suptitle(f"commprof sweep: {ylabel.split(' (')[0]} vs message size", fontsize=11)
        written.append(_save(fig, os.path.join(out_dir, fname), _provenance(meta), size=7, top=0.95, dpi=110))
    return written
