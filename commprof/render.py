"""Views of a results dir: the terminal table, charts and the progress bar. Never measures."""
from __future__ import annotations

import os
import sys

from .units import human_bytes

LATENCY_PNG = "latency_vs_size.png"
BUSBW_PNG = "busbw_vs_size.png"


def stdout_console(width: int = 160):
    """A rich console on stdout: the terminal's width, or ``width`` columns when piped (so tables
    in logs and tests are not squeezed to 80)."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else width)


def emit(data: dict, as_json: bool, draw, paths: list[str], console=None, width: int = 160) -> None:
    """A command's result: JSON on stdout (notes on stderr) or ``draw(console)`` tables, then the
    files written."""
    import json

    if as_json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
        if paths:
            print(f"wrote {', '.join(paths)}", file=sys.stderr)
        return
    draw(console)
    if paths:
        (console or stdout_console(width)).print(f"wrote {', '.join(paths)}")


def _fmt(v, digits=1):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "-"
    if f != f:
        return "-"
    return f"{f:,.{digits}f}"


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


def _provenance(meta: dict) -> str:
    cmd = " ".join(meta.get("command", [])) or "?"
    return (f"{meta.get('kind', 'measured')} on {', '.join(meta.get('hosts', ['?']))}, backend {meta.get('backend', '?')}, "
            f"{meta.get('start_time', '?')}; command: {cmd}")[:180]


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


class _Progress:
    def __init__(self, total: int):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._p = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                           transient=True, disable=not sys.stderr.isatty())
        self._task = self._p.add_task("sweep", total=total)
        self._p.start()

    def advance(self, n: int = 1):
        self._p.advance(self._task, n)

    def update(self, completed: int):
        self._p.update(self._task, completed=completed)

    def close(self):
        self._p.stop()


def progress_bar(total: int) -> _Progress:
    """A rich progress bar on stderr, shown only on a terminal."""
    return _Progress(total)


TRACE_TOKENS_PNG = "trace_tokens.png"
TRACE_LAYERS_PNG = "trace_layers_heatmap.png"
TRACE_SHARE_PNG = "trace_share_vs_tp.png"
_PARTS = (("compute_us", "compute", "#4C72B0"), ("transfer_us", "transfer", "#DD8452"),
          ("wait_us", "wait", "#C44E52"), ("gaps_us", "gaps", "#8C8C8C"))


def _save(fig, path: str, provenance: str, size: int = 6) -> str:
    """Every chart carries its provenance line at the bottom."""
    import matplotlib.pyplot as plt

    fig.text(0.01, 0.005, provenance, fontsize=size, color="0.35")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def trace_charts(out_dir: str, meta: dict, dest: str | None = None) -> list[str]:
    """Stacked bar per token, per-layer heatmap of communication share, share vs TP degree.
    Reads the trace tables in ``out_dir``; writes the charts there or into ``dest``."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    tok = pd.read_csv(os.path.join(out_dir, "trace_tokens.csv"))
    lay = pd.read_csv(os.path.join(out_dir, "trace_layers.csv"))
    summ = pd.read_csv(os.path.join(out_dir, "trace_summary.csv"))
    os.makedirs(dest or out_dir, exist_ok=True)
    kind = meta.get("kind", "measured")
    prov = (f"{kind} on {', '.join(meta.get('hosts', ['?']))}, backend {meta.get('backend', '?')}, "
            f"model {meta.get('model', {}).get('name', '?')}, {meta.get('scaling', '')}; {meta.get('start_time', '')}")
    written = []
    out_dir = dest or out_dir

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
    fig.text(0.01, 0.005, prov[:200], fontsize=7, color="0.35")
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    written.append(os.path.join(out_dir, TRACE_TOKENS_PNG))
    fig.savefig(written[-1], dpi=100)
    plt.close(fig)

    piv = lay.groupby(["layer", "tp", "batch", "mode"])["comm_share_pct"].mean().unstack(["tp", "batch", "mode"])
    fig, ax = plt.subplots(figsize=(2 + 1.2 * piv.shape[1], 2 + 0.12 * piv.shape[0]))
    im = ax.imshow(piv.to_numpy(), aspect="auto", cmap="magma_r", vmin=0, vmax=100, interpolation="nearest")
    ax.set_xticks(range(piv.shape[1]), [f"TP={t}\nb={b}\n{m}" for t, b, m in piv.columns], fontsize=8)
    ax.set_ylabel("layer")
    fig.colorbar(im, ax=ax, label="comm share (%)")
    ax.set_title("communication share per layer", fontsize=10)
    written.append(_save(fig, os.path.join(out_dir, TRACE_LAYERS_PNG), prov[:120]))

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
    written.append(_save(fig, os.path.join(out_dir, TRACE_SHARE_PNG), prov[:110]))
    return written


WIRE_PNG = "wire_vs_nccl.png"


def wire_chart(sweep_df, w: dict | None, out_path: str, provenance: str, custom=None) -> str:
    """NCCL's all-reduce p50 per TP degree against the wire bound from the p2p probes (dashed) and
    commprof's one-shot kernel (dotted, ``sweep --impl custom`` rows), whichever are present."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .gap import wire_latency_us

    df = sweep_df[(sweep_df["op"] == "all_reduce") & (sweep_df["group"] == 0)]
    fig, ax = plt.subplots(figsize=(7, 4.6))
    for (tp, mode), g in df.groupby(["tp", "mode"]):
        g = g.sort_values("size_bytes")
        line, = ax.plot(g["size_bytes"], g["latency_us_p50"], marker="o", ms=3,
                        label=f"{g['backend'].iloc[0] if 'backend' in g else 'NCCL'} TP={tp} {mode} p50")
        if w is not None:
            ax.plot(g["size_bytes"], [wire_latency_us(w, int(tp), int(x)) for x in g["size_bytes"]], "--",
                    color=line.get_color(), label=f"wire bound TP={tp}")
        if custom is not None and mode == "eager":
            c = custom[(custom["op"] == "all_reduce") & (custom["group"] == 0) & (custom["tp"] == tp)]
            if not c.empty:
                c = c.sort_values("size_bytes")
                ax.plot(c["size_bytes"], c["latency_us_p50"], ":", marker="s", ms=3, color=line.get_color(),
                        label=f"custom one-shot TP={tp} p50")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("all_reduce size per rank (bytes)")
    ax.set_ylabel("latency (us)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    if w is not None:
        ax.set_title(f"all-reduce vs the wire (one hop {w['oneway_us']:.2f} us + reading peers at "
                     f"{w['read_gbps']:.0f} GB/s)", fontsize=9)
    else:
        ax.set_title("all-reduce: the backend's collective vs commprof's one-shot kernel", fontsize=9)
    return _save(fig, out_path, provenance[:150])
