"""What every chart shares: a provenance line under it (wrapped, never cut), log-size axes in
binary units, and one way to save it."""
from __future__ import annotations

import os

from commprof.model.fileio import atomic_path
from commprof.model.units import human_bytes


def where_from(meta: dict) -> str:
    """Where a results dir's numbers come from: ``measured on vm``, or ``imported from a100.txt``
    (an import names its file, not hosts it never ran on)."""
    hosts = [h for h in (meta.get("hosts") or []) if h]
    kind = meta.get("kind", "measured")
    files = [os.path.basename(f.get("path", "")) for f in meta.get("source_files") or [] if isinstance(f, dict)]
    if kind == "imported":
        return f"imported from {', '.join(f for f in files if f) or 'a file'}"
    return f"{kind} on {', '.join(hosts) or '?'}"


def chart_provenance(meta: dict) -> str:
    """The provenance line of a results dir's charts: where from, backend, GPUs, time, command."""
    cmd = " ".join(meta.get("command", [])) or "?"
    gpus = [g for g in (meta.get("gpus") or []) if g]
    return (f"{where_from(meta)}, backend {meta.get('backend') or '?'}, GPUs {', '.join(gpus) or '?'}, "
            f"{meta.get('start_time', '?')}; command: {cmd}")


def chart_source(meta: dict) -> str:
    """Who made a results dir's numbers, for a chart's title: ``commprof sweep on vm`` for a
    measured run, ``nccl-tests on A100-SXM4-40GB (imported)`` for an import, with its ``--label``."""
    label = f" [{meta['label']}]" if meta.get("label") else ""
    gpus = ", ".join(dict.fromkeys(g for g in (meta.get("gpus") or []) if g and not str(g).startswith("unknown")))
    if meta.get("kind") == "imported" or meta.get("verb") == "import":
        tool = ("Kineto trace" if meta.get("source") == "kineto" else
                "nccl-tests" if "nccl-tests" in str(meta.get("what", "")) else "a file")
        return f"{tool}{' on ' + gpus if gpus else ''} (imported){label}"
    hosts = ", ".join(h for h in (meta.get("hosts") or []) if h) or "?"
    return f"commprof {meta.get('verb') or 'sweep'} on {hosts}{label}"


def plain_log_ticks(axis, decades: float | None = None) -> None:
    """A log axis labelled in plain numbers (0.5, 1, 2, 1,000), no minor labels: matplotlib's
    default mixes 10^x majors with 6x10^-1 minors when the range is under a decade. 1-2-5 steps
    over at most three decades of data (``decades``, else read from the data drawn so far),
    powers of ten beyond."""
    import math

    import matplotlib.ticker as mt

    if decades is None:
        lo, hi = (axis.axes.dataLim.intervaly if axis is axis.axes.yaxis else axis.axes.dataLim.intervalx)
        decades = math.log10(hi / lo) if lo > 0 and hi > lo and math.isfinite(hi / lo) else 0.0
    axis.set_major_locator(mt.LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 3 else (1.0,)))
    axis.set_major_formatter(mt.FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:.3g}"))
    axis.set_minor_formatter(mt.NullFormatter())


#: The share of a chart's height its footer may take before the figure grows taller to hold it.
FOOTER_MAX_SHARE = 0.4


def footer(fig, text: str, fontsize: float = 7, width: int | None = None) -> float:
    """Write ``text`` under the chart, wrapped to the figure's width (never cut); returns the
    fraction of the figure's height it takes, for ``tight_layout(rect=(0, that, 1, ...))``. A footer
    taller than :data:`FOOTER_MAX_SHARE` of the figure makes the figure taller by its own height, so
    the panels keep theirs and the text never runs over them."""
    import textwrap

    w_in, h_in = fig.get_size_inches()
    width = width or max(40, int(w_in * 72 / (fontsize * 0.56)))       # characters per line at this size
    lines = textwrap.wrap(" ".join(str(text).split()), width) or [""]
    need_in = (len(lines) * fontsize * 1.35 + 4) / 72
    if need_in > FOOTER_MAX_SHARE * h_in:
        h_in += need_in
        fig.set_size_inches(w_in, h_in)
    fig.text(0.01, 0.005, "\n".join(lines), fontsize=fontsize, color="0.35", va="bottom", ha="left")
    return need_in / h_in


def title(fig, text: str, fontsize: float = 11) -> float:
    """The figure's title, wrapped to its width (never clipped at either side); returns the top of
    the panels' area (a fraction of the height) that leaves room for it, for :func:`save_chart`."""
    import textwrap

    w_in, h_in = fig.get_size_inches()
    width = max(30, int(w_in * 72 / (fontsize * 0.56)))     # characters per line at this size
    lines = textwrap.wrap(" ".join(str(text).split()), width) or [""]
    fig.suptitle("\n".join(lines), fontsize=fontsize)
    return 1 - (len(lines) * fontsize * 1.2 + 4) / 72 / h_in / 2.5


def size_axes(ax, xlabel: str, ylabel: str, title: str | None = None) -> None:
    """Log-log axes over message sizes, labelled in binary units, with a grid."""
    import matplotlib.ticker

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    plain_log_ticks(ax.yaxis)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: human_bytes(int(v)) if v >= 1 else ""))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)


def save_chart(fig, path: str, provenance: str, size: float = 7.5, top: float = 1.0, dpi: int = 100) -> str:
    """Every chart carries its provenance line at the bottom; ``top`` < 1 leaves room for a suptitle."""
    import matplotlib.pyplot as plt

    bottom = footer(fig, provenance, fontsize=size)
    fig.tight_layout(rect=(0, bottom, 1, top))
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=dpi, format=os.path.splitext(path)[1].lstrip(".") or "png")
    finally:
        plt.close(fig)
    return path
