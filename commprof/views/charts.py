"""What every chart shares: a provenance line under it and one way to save it."""
from __future__ import annotations



def _provenance(meta: dict) -> str:
    cmd = " ".join(meta.get("command", [])) or "?"
    return (f"{meta.get('kind', 'measured')} on {', '.join(meta.get('hosts', ['?']))}, backend {meta.get('backend', '?')}, "
            f"{meta.get('start_time', '?')}; command: {cmd}")[:180]


def _save(fig, path: str, provenance: str, size: int = 6) -> str:
    """Every chart carries its provenance line at the bottom."""
    import matplotlib.pyplot as plt

    fig.text(0.01, 0.005, provenance, fontsize=size, color="0.35")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
