"""What a healthy box of a class measures: the expectations ``commprof check`` judges decode-size
latency (C10) and large-message busbw (C9) by.

A box is compared with the healthy boxes of its own class (nvswitch, nvlink, pcie-p2p,
pcie-no-p2p; ``pcie`` with P2P not known takes both PCIe classes), link generation (nvlink3..5,
pcie3..6), TP degree and timing method (``back-to-back avg`` as nccl-tests prints it, or
``per-call``; ``eager`` or ``graph``). The healthy boxes are ``commprof/data/healthy_boxes.toml``,
generated from the real-box corpus in the repository (``scripts/healthy_boxes.py``): real
nccl-tests logs and published figures, each with its public source. Where no healthy box of the
class, TP degree and method exists, the class's reference profile (:mod:`commprof.analysis.profiles`,
modelled) stands in, said so; where neither exists the caller falls back to its fixed thresholds.
"""
from __future__ import annotations

import contextlib
import functools
import os
import tomllib
from dataclasses import dataclass, field
from commprof.analysis.profiles import param_latency_us
from commprof.analysis.profiles import PROFILES

HEALTHY_BOXES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "healthy_boxes.toml")

_LINK_TITLE = {"nvlink2": "NVLink 2", "nvlink3": "NVLink 3", "nvlink4": "NVLink 4", "nvlink4-h800": "NVLink 4 (H800)",
               "nvlink5": "NVLink 5", "pcie3": "PCIe 3.0", "pcie4": "PCIe 4.0", "pcie5": "PCIe 5.0", "pcie6": "PCIe 6.0"}


@functools.lru_cache(maxsize=1)
def _committed_healthy_boxes() -> dict:
    with open(HEALTHY_BOXES, "rb") as f:
        data = tomllib.load(f)
    return {"decode": data.get("decode", []), "busbw": data.get("busbw", [])}


_TABLES: list = []          # tables in force instead of the committed one (innermost last)


def healthy_boxes() -> dict:
    """{'decode': [...], 'busbw': [...]}: the committed table (read once), or the one a
    :func:`healthy_table` block put in force."""
    return _TABLES[-1] if _TABLES else _committed_healthy_boxes()


@contextlib.contextmanager
def healthy_table(table: dict):
    """Judge with ``table`` (the form :func:`healthy_boxes` returns) in place of the committed
    healthy boxes inside the block: how scripts/leave_one_out.py judges each corpus box by
    thresholds built without it."""
    _TABLES.append({"decode": list(table.get("decode", [])), "busbw": list(table.get("busbw", []))})
    try:
        yield
    finally:
        _TABLES.pop()


def class_title(cls: str, link: str) -> str:
    """'NVLink 3 NVSwitch', 'PCIe 4.0 without P2P', 'PCIe 5.0 (P2P not known)'."""
    gen = _LINK_TITLE.get(link, link or "link generation unknown")
    if cls == "multi-node":
        return "multi-node (TP group across hosts)"
    return {"nvswitch": f"{gen} NVSwitch", "nvlink": f"{gen} (NVSwitch not known)", "pcie-p2p": f"{gen} with P2P",
            "pcie-no-p2p": f"{gen} without P2P", "pcie": f"{gen} (P2P not known)"}.get(cls, f"{gen} {cls}")


def method_of(df) -> str:
    """The timing method of sweep rows: 'back-to-back avg, eager' (nccl-tests' loop average),
    'per-call, graph', ... (one row's; the caller passes rows of one method and mode)."""
    timing = str(df["timing"].iloc[0]) if "timing" in df.columns and len(df) else "per-call"
    mode = str(df["mode"].iloc[0]).replace("-in-place", "") if len(df) else "eager"
    return f"{'back-to-back avg' if timing == 'back-to-back' else 'per-call'}, {'graph' if mode == 'graph' else 'eager'}"


def _caveat(method: str, used: str) -> str:
    """What comparing a box measured with ``method`` against figures measured with ``used`` means."""
    out = []
    if method.endswith("graph") and used.endswith("eager"):
        out.append("graph replay only removes launch cost, so eager figures are a lenient bound")
    if method.startswith("per-call") and used.startswith("back-to-back"):
        out.append("a back-to-back loop hides launch cost, so a per-call figure can be somewhat slower")
    return "; ".join(out)



def methods_for(method: str) -> list[str]:
    """The methods whose healthy figures may judge a box measured with ``method``, best first: its
    own; for a graph measurement also eager figures (a graph only removes launch cost: eager
    figures are a lenient bound); for per-call also back-to-back averages of the same mode."""
    timing, mode = [x.strip() for x in method.split(",")]
    modes = [mode] + (["eager"] if mode == "graph" else [])
    timings = [timing] + (["back-to-back avg"] if timing == "per-call" else [])
    return [f"{t}, {m}" for m in modes for t in timings]


def _classes(cls: str) -> tuple:
    """The corpus classes that stand for ``cls``: P2P not known takes both PCIe classes; NVLink with
    the switch not known (an SXM box seen with fewer than 8 GPUs) takes NVSwitch boxes."""
    return {"pcie": ("pcie-p2p", "pcie-no-p2p"), "nvlink": ("nvlink", "nvswitch")}.get(cls, (cls,))


def _profiles(cls: str, link: str) -> list[str]:
    if cls in ("nvswitch", "nvlink") and link in ("nvlink3", "nvlink4", "nvlink5"):
        return [link]
    if cls.startswith("pcie") and link in ("pcie4", "pcie5"):
        return {"pcie-p2p": [f"{link}-p2p"], "pcie-no-p2p": [f"{link}-nop2p"]}.get(cls, [f"{link}-p2p", f"{link}-nop2p"])
    return []


@dataclass
class Expectation:
    """The healthy figures a box is compared with: ``lo``..``hi`` over ``refs`` (names and sources),
    ``kind``: 'healthy boxes' (logs and published figures) or 'reference profile' (modelled)."""
    kind: str
    lo: float
    hi: float
    refs: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    max_bytes: int = 0          # decode: the largest size the references cover (<= 64 KiB)
    what: str = ""              # 'healthy NVLink 3 NVSwitch boxes at TP=8, back-to-back avg, eager'
    derived: bool = False       # a reference profile's figure derived from other boxes (no real box of
                                # this class and TP behind it, commprof/analysis/profiles.py says how): a guess

    def logs(self) -> str:
        n_log = sum(1 for r in self.refs if r.get("kind") == "log")
        n_pub = sum(1 for r in self.refs if r.get("kind") == "published")
        parts = ([f"{n_log} log{'s' if n_log != 1 else ''}"] if n_log else []) + \
            ([f"{n_pub} published figure{'s' if n_pub != 1 else ''}"] if n_pub else [])
        return ", ".join(parts) or "modelled"

    def span(self, unit: str) -> str:
        return f"{self.lo:.3g} {unit}" if abs(self.hi - self.lo) < 1e-9 else f"{self.lo:.3g}-{self.hi:.3g} {unit}"


def decode_expectation(cls: str, link: str, tp: int, method: str, max_bytes: int = 65536,
                       min_bytes: int = 0) -> Expectation | None:
    """Healthy decode-size all-reduce latency (us, the largest average/p50 at sizes up to
    ``max_bytes``) of boxes of this class, link, TP degree and method (those covering sizes down to the
    box's smallest, ``min_bytes``); else the reference
    profile's modelled latency at ``max_bytes`` (eager or graph as the method says); else None."""
    title = class_title(cls, link)
    for used in methods_for(method):
        refs = [r for r in healthy_boxes()["decode"] if r["class"] in _classes(cls) and r["link"] == link
                and int(r["tp"]) == int(tp) and r["method"] == used and int(r["max_bytes"]) >= min_bytes]
        if refs:
            other = "" if used == method else f"; the box measured {method}: {_caveat(method, used)}"
            return Expectation("healthy boxes", min(r["us"] for r in refs), max(r["us"] for r in refs), refs,
                               [r["source"] for r in refs], min(max_bytes, max(int(r["max_bytes"]) for r in refs)),
                               f"healthy {title} boxes at TP={tp} ({used}{other})")
    mode = "graph" if method.endswith("graph") else "eager"
    vals = []
    for m in (mode, "eager"):
        vals = vals or _profile_values(cls, link, tp, m, lambda q: _profile_latency(q, max_bytes), "alpha_source")
        if vals:
            mode = m
            break
    if not vals:
        return None
    names = [n for n, _, _ in vals]
    return Expectation("reference profile", min(v for _, v, _ in vals), max(v for _, v, _ in vals),
                       [{"name": f"reference profile {n}", "kind": "modelled"} for n in names],
                       [f"commprof reference profile '{n}' (modelled; commprof/analysis/profiles.py)" for n in names],
                       max_bytes, f"reference profile {'/'.join(names)} at TP={tp} ({mode}, modelled: no healthy "
                       f"{title} box at TP={tp} measured {method})", all(d for _, _, d in vals))


def busbw_expectation(cls: str, link: str, tp: int, method: str, largest_bytes: int, nvls: bool) -> Expectation | None:
    """Healthy large-message busbw (GB/s) of boxes of this class, link and TP degree, at their
    largest size up to ``largest_bytes`` (a box whose log stops at 128 MiB is not held to 8 GiB
    figures); NVLS/SHARP boxes (busbw above the link ceiling) against NVLS boxes only, the others
    against Ring figures. Else the reference profile's busbw (Ring); else None. Busbw at these
    sizes does not depend on the timing method (one call takes milliseconds: launch cost, graphs and
    back-to-back loops do not show), so every method's figures stand for each other."""
    picked = []
    for r in healthy_boxes()["busbw"]:
        if r["class"] not in _classes(cls) or r["link"] != link or int(r["tp"]) != int(tp) \
                or bool(r["nvls"]) != bool(nvls):
            continue
        pts = [bw for s, bw in r["points"] if s <= largest_bytes]
        if pts:
            picked.append((r, max(pts)))
    title = class_title(cls, link)
    kind = "NVLS-capable " if nvls else ""
    if picked:
        return Expectation("healthy boxes", min(v for _, v in picked), max(v for _, v in picked),
                           [r for r, _ in picked], [r["source"] for r, _ in picked], 0,
                           f"healthy {kind}{title} boxes at TP={tp} (sizes up to the box's largest)")
    if nvls:
        return None
    vals = _profile_values(cls, link, tp, "eager", lambda q: q["busbw_gbps"], "busbw_source")
    if not vals:
        return None
    names = [n for n, _, _ in vals]
    return Expectation("reference profile", min(v for _, v, _ in vals), max(v for _, v, _ in vals),
                       [{"name": f"reference profile {n}", "kind": "modelled"} for n in names],
                       [f"commprof reference profile '{n}' (modelled)" for n in names], 0,
                       f"reference profile {'/'.join(names)} at TP={tp} (modelled: no healthy {title} box at "
                       f"TP={tp} with sizes up to the box's largest)", all(d for _, _, d in vals))


def _profile_latency(q: dict, size_bytes: int) -> float:
    return param_latency_us(q, size_bytes)


def _profile_values(cls, link, tp, mode, fn, source_key) -> list[tuple[str, float, bool]]:
    """(profile, value, derived) per profile of the class with an all_reduce entry at ``tp`` and
    ``mode``; derived: the entry's ``source_key`` figure is not calibrated on, nor published for, a
    real box of that class and TP degree."""
    out = []
    for name in _profiles(cls, link):
        for q in PROFILES.get(name, {}).get("params", []):
            if q["op"] == "all_reduce" and int(q["tp"]) == int(tp) and q["mode"] == mode:
                out.append((name, float(fn(q)), str(q.get(source_key, "")).startswith("derived")))
    return out
