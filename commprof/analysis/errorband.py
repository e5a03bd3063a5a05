"""The error band every predicted ms/token carries: how far off predictions of its kind have been on
published, measured figures the model never saw.

A prediction's *kind* is what its error has been seen to depend on: ``tp1`` (one GPU, no
communication), ``nvlink`` (TP > 1 over NVLink) or ``pcie`` (TP > 1 over PCIe). For each kind,
:data:`ERROR_BANDS` holds the 10th and 90th percentile of ``measured / predicted`` over the *held-out*
figures of that kind in ``tests/data/published-decode/figures.csv`` (never used to fit anything),
as ``scripts/bench_predict_figures.py`` computes and writes them to
``results/bench/predict_figures.md``; a kind with fewer than three held-out figures takes the band
of every held-out figure (``all``). The band is the range of past errors, not a confidence interval.
Standard library only; numbers in, numbers out.
"""
from __future__ import annotations

KINDS = ("tp1", "nvlink", "pcie")

#: A kind gets its own band from this many held-out figures of it; with fewer it takes ``all``'s.
MIN_FIGURES = 3

#: measured / predicted over the held-out figures, per kind: the 10th (``lo``) and 90th (``hi``)
#: percentile, the extremes (``min``, ``max``) and how many figures (``n``). Copied from results/bench/predict_figures.json
#: ("held_out_bands"); tests/test_predict_figures.py checks that the two agree.
ERROR_BANDS: dict = {
    'tp1': {'lo': 0.875, 'hi': 1.104, 'min': 0.829, 'max': 1.131, 'n': 25},
    'nvlink': {'lo': 0.909, 'hi': 1.153, 'min': 0.881, 'max': 1.211, 'n': 17},
    'pcie': {'lo': 0.859, 'hi': 1.084, 'min': 0.808, 'max': 1.186, 'n': 9},
    'all': {'lo': 0.881, 'hi': 1.128, 'min': 0.808, 'max': 1.211, 'n': 51},
}

BAND_SOURCE = ("measured / predicted over the held-out published figures of tests/data/published-decode/figures.csv "
               "(scripts/bench_predict_figures.py; results/bench/predict_figures.md)")


def error_kind(tp: int, comm: str) -> str:
    """``tp1``, ``nvlink`` or ``pcie``: TP=1, else the interconnect the comm spec or label names
    (``reference:nvlink*`` -> nvlink; anything else, a PCIe profile or a measured dir, -> pcie
    unless its name says nvlink)."""
    if tp <= 1:
        return "tp1"
    return "nvlink" if "nvlink" in str(comm).lower() else "pcie"


def band_of(kind: str, bands: dict | None = None) -> dict | None:
    """The band entry of ``kind``, else the ``all`` one, else None."""
    bands = ERROR_BANDS if bands is None else bands
    return bands.get(kind) or bands.get("all")


def band_whose(kind: str, bands: dict | None = None) -> str:
    """Whose past errors the band of ``kind`` is, in words: its own kind's, or every held-out
    figure's when fewer than :data:`MIN_FIGURES` figures of the kind are held out."""
    bands = ERROR_BANDS if bands is None else bands
    if kind in bands:
        return f"{kind} predictions"
    return f"all predictions: fewer than {MIN_FIGURES} {kind} figures held out"


def band(ms: float, kind: str, bands: dict | None = None) -> tuple[float, float]:
    """``(lo, hi)`` ms around a predicted ``ms`` of ``kind``: ``ms x lo_ratio`` to ``ms x hi_ratio``
    (the measured / predicted range of its kind); ``(ms, ms)`` when no band is known."""
    b = band_of(kind, bands)
    if not b:
        return ms, ms
    return ms * b["lo"], ms * b["hi"]


def share_band(comm_ms: float, ms: float, lo_ms: float, hi_ms: float) -> tuple[float, float]:
    """The communication share (%) a band of step times allows: at the extremes the whole
    difference between the predicted and the band's time is compute or communication.
    ``(lowest share, highest share)``, clipped to [0, 100]."""
    if ms <= 0:
        return 0.0, 0.0
    cands = [comm_ms / hi_ms if hi_ms > 0 else 0.0,                           # slower: all of it compute
             (comm_ms + hi_ms - ms) / hi_ms if hi_ms > 0 else 0.0,             # slower: all of it comm
             comm_ms / lo_ms if lo_ms > 0 else 1.0,                            # faster: compute shrank
             (comm_ms - (ms - lo_ms)) / lo_ms if lo_ms > 0 else 0.0]           # faster: comm shrank
    cands = [min(1.0, max(0.0, c)) for c in cands]
    return 100.0 * min(cands), 100.0 * max(cands)
