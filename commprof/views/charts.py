"""What every chart shares: a provenance line under it (wrapped, never cut), log-size axes in
binary units, and one way to save it."""
from __future__ import annotations

import os

from ..fileio import atomic_path
from ..units import human_bytes


def _provenance(meta: dict) -> str:
    """The provenance line of a results dir's charts: kind, hosts, backend, GPUs, time, command."""
    cmd = " ".join(meta.get("command", [])) or "?"
    return (f"{meta.get('kind', 'measured')} on {', '.join(meta.get('hosts') or ['?'])}, backend "
            f"{meta.get('backend', '?')}, GPUs {', '.join(meta.get('gpus') or ['?'])}, {meta.get('start_time', '?')}; "
            f"command: {cmd}")


def footer(fig, text: str, fontsize: float = 7, width: int | None = None) -> float:
    """Write ``text`` under the chart, wrapped to the figure's width (never cut); returns the
    fraction of the figure's height it takes, for ``tight_layout(rect=(0, that, 1, ...))``."""
    import textwrap

    w_in = fig.get_size_inches()[0]
    width = width or max(40, int(w_in * 72 / (fontsize * 0.56)))       # characters per line at this size
    lines = textwrap.wrap(" ".join(str(text).split()), width) or [""]
    fig.text(0.01, 0.005, "\n".join(lines), fontsize=fontsize, color="0.35", va="bottom", ha="left")
    h_in = fig.get_size_inches()[1]
    return min(0.4, (len(lines) * fontsize * 1.35 + 4) / 72 / h_in)


def size_axes(ax, xlabel: str, ylabel: str, title: str | None = None) -> None:
    """Log-log axes over message sizes, labelled in binary units, with a grid."""
    import matplotlib.ticker

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: human_bytes(int(v)) if v >= 1 else ""))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)


def _save(fig, path: str, provenance: str, size: float = 6, top: float = 1.0, dpi: int = 100) -> str:
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
