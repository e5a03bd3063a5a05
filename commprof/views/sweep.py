"""Views of a sweep results dir: the terminal table and the latency / busbw charts."""
from __future__ import annotations

import os

from ..units import human_bytes
from .charts import _provenance
from .console import _fmt, stdout_console


LATENCY_PNG = "latency_vs_size.png"


BUSBW_PNG = "busbw_vs_size.png"


def print_table(df, meta: dict, console=None) -> None:
    """One line per row: op, tp, group, mode, size, p50/p95/p99 latency, busbw, wrong."""
    from rich.table import Table

    console = console or stdout_console(150)
    title = (f"commprof sweep: {meta.get('kind', 'measured')} on {', '.join(meta.get('hosts', ['?']))} "
             f"({meta.get('backend', '?')}, {', '.join(meta.get('gpus', []))}) at {meta.get('start_time', '?')}")
    t = Table(title=title, title_justify="left")
    impls = "impl" in df.columns and (df["impl"].astype(str) == "custom").any()
    fallback = "fallback" in df.columns and (df["fallback"].astype(str) != "").any()
    for col, just in (("op", "left"), ("tp", "right"), ("grp", "right"), ("mode", "left"),
                      *((("impl", "left"),) if impls or fallback else ()),
                      ("size", "right"), ("batch", "right"), ("p50 us", "right"), ("p95 us", "right"),
                      ("p99 us", "right"), ("busbw GB/s", "right"), ("wrong", "right")):
        t.add_column(col, justify=just)
    has_enq = "enqueue_us_p50" in df.columns and df["enqueue_us_p50"].notna().any()
    has_host = "host_us_p50" in df.columns and df["host_us_p50"].notna().any()
    if has_enq:
        t.add_column("enqueue p50 us", justify="right")
    if has_host:
        t.add_column("host p50 us", justify="right")
    order = ["op", "tp", "mode", "size_bytes", "group"] + (["impl"] if "impl" in df.columns else [])
    for r in df.sort_values(order).itertuples():
        wrong = int(r.wrong)
        impl_cell = ([str(r.impl) + (" (custom refused)" if getattr(r, "fallback", "") else "")]
                     if impls or fallback else [])
        cells = [r.op, str(r.tp), str(r.group), r.mode, *impl_cell, human_bytes(int(r.size_bytes)), str(r.batch or ""),
                 _fmt(r.latency_us_p50), _fmt(r.latency_us_p95), _fmt(r.latency_us_p99),
                 _fmt(r.busbw_gbps, 3), f"[bold red]{wrong} WRONG[/]" if wrong else "0"]
        if has_enq:
            cells.append(_fmt(r.enqueue_us_p50))
        if has_host:
            cells.append(_fmt(r.host_us_p50))
        t.add_row(*cells)
    console.print(t)
    if "comm" in df.columns and (df["comm"].astype(str) == "none (1 rank)").any():
        console.print("TP=1 rows: one rank, no communication (a self-test of the path, never judged by check)")
    if "clock" in df.columns and (df["clock"].astype(str) == "cuda_event_spin").any():
        console.print("p50/p95/p99: the op's GPU time (CUDA events, op enqueued behind a spin kernel); "
                      "enqueue: host dispatch; host: one call on an idle GPU, issue to seen complete")
    if "timing" in df.columns and (df["timing"].astype(str) == "back-to-back").any():
        loops = sorted({int(v) for v in df["loop"].dropna()}) if "loop" in df.columns else []
        console.print(f"back-to-back: each sample is a loop of {', '.join(map(str, loops)) or 'N'} calls with no "
                      "barrier between them, timed as one and averaged (nccl-tests' method); p50/p95/p99 are "
                      "over loops, not calls")


def charts(df, meta: dict, out_dir: str) -> list[str]:
    """Latency vs size per TP (p50 line, p95 band) and busbw vs size; one panel per op."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401 - used through matplotlib.ticker below

    written = []
    if df.empty:
        return written
    ops = list(dict.fromkeys(df["op"]))
    d0 = df[df["group"] == 0]
    for fname, ycol, ylabel in ((LATENCY_PNG, "latency_us_p50", "latency (us), p50 line, p50-p95 band"),
                                (BUSBW_PNG, "busbw_gbps", "busbw (GB/s, nccl-tests definition)")):
        fig, axes = plt.subplots(1, len(ops), figsize=(6 * len(ops), 4.6), squeeze=False)
        for ax, op in zip(axes[0], ops):
            sub = d0[d0["op"] == op]
            keys = ["tp", "mode"] + (["impl"] if "impl" in sub.columns else [])
            for key, g in sub.groupby(keys):
                tp, mode = key[0], key[1]
                custom = len(key) > 2 and key[2] == "custom"
                g = g.sort_values("size_bytes")
                style = ":" if custom else ("-" if mode == "eager" else "--")
                line, = ax.plot(g["size_bytes"], g[ycol], style, marker="s" if custom else "o", ms=3,
                                label=f"TP={tp} {mode}" + (" custom one-shot" if custom else ""))
                if ycol == "latency_us_p50":
                    ax.fill_between(g["size_bytes"], g["latency_us_p50"], g["latency_us_p95"],
                                    color=line.get_color(), alpha=0.2, lw=0)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: human_bytes(int(v)) if v >= 1 else ""))
            ax.set_xlabel(f"size per op (bytes; {op}: " +
                          ("gathered output" if op == "all_gather" else "per-rank buffer") + ")")
            ax.set_ylabel(ylabel)
            ax.set_title(op)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f"commprof sweep: {ylabel.split(' (')[0]} vs message size", fontsize=11)
        fig.text(0.01, 0.01, _provenance(meta), fontsize=7, color="0.35")
        fig.tight_layout(rect=(0, 0.04, 1, 0.95))
        path = os.path.join(out_dir, fname)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
