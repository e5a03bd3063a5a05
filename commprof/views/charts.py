"""What every chart shares: a provenance line under it and one way to save it."""
from __future__ import annotations



def _provenance(meta: dict) -> str:
    cmd = " ".join(meta.get("command", [])) or "?"
    return (f"{meta.get('kind', 'measured')} on {', '.join(meta.get('hosts', ['?']))}, backend {meta.get('backend', '?')}, "
            f"{meta.get('start_time', '?')}; command: {cmd}")


def _save(fig, path: str, provenance: str, size: int = 6) -> str:
    """Every chart carries its provenance line at the bottom."""
    import matplotlib.pyplot as plt

    import textwrap

    width_in = fig.get_size_inches()[0]
    lines = textwrap.wrap(provenance, width=max(60, int(width_in * 120 / size)))   # wrapped, never cut
    fig.text(0.01, 0.005, "\n".join(lines), fontsize=size, color="0.35", va="bottom")
    fig.tight_layout(rect=(0, 0.01 + 0.022 * len(lines), 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
