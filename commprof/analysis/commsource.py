"""Where a prediction's collective prices come from: one interface, two kinds of source.

* :class:`ProfileComm`: a reference profile (``reference:<name>``, :mod:`commprof.analysis.profiles`),
  evaluated in memory: the alpha-beta model at the exact size, nothing written anywhere;
* :class:`DirComm`: a results dir (``commprof sweep`` or ``commprof import`` of nccl-tests logs),
  looked up as ``trace --predict`` does (:class:`commprof.analysis.latency.CommTable`, log-log in size).

Both answer ``covers(tp)``, ``tps()``, ``price(tp, mode) -> (op, size_bytes) -> us``, ``describe()``,
and carry ``spec``, ``label``, ``kind`` (modelled / imported / measured), ``timing`` and ``notes``.
:func:`comm_source` picks one from a ``--comm`` spec.
"""
from __future__ import annotations

import os

from commprof.analysis.costmodel import REFERENCE_PREFIX, _profile, profile_latency_us
from commprof.analysis.latency import CommTable, stand_in_op
from commprof.model.errors import UsageError, shown
from commprof.results.meta import shown_path

_KIND_OF_VERB = {"reference": "modelled", "import": "imported", "sweep": "measured"}


class CommSource:
    """The interface: a box's collective latency (us) per op, TP degree, mode and size."""

    spec: str
    label: str
    kind: str
    timing: str
    notes: list

    def __init__(self, spec: str):
        self.spec = spec
        self.notes = []
        self._memo: dict = {}
        self.have: set = set()

    def tps(self) -> list[int]:
        return sorted({t for _, t in self.have})

    def covers(self, tp: int) -> bool:
        return tp == 1 or ("all_reduce", tp) in self.have

    def _lookup(self, op: str, tp: int, mode: str, size_bytes: int) -> float:
        raise NotImplementedError

    def price(self, tp: int, mode: str):
        """``price(op, size_bytes) -> us`` at ``tp``. Without all-gather entries the logits
        all-gather is priced as an all-reduce of the same size (an upper bound: a ring all-reduce
        moves twice an all-gather's bytes), and a note says so."""
        def price(op: str, size_bytes: int) -> float:
            op, rule = stand_in_op(op, tp, self.have)       # the one rule for a missing all-gather
            if rule and f"{self.label}: {rule}" not in self.notes:
                self.notes.append(f"{self.label}: {rule}")
            key = (op, tp, mode, int(size_bytes))
            if key not in self._memo:       # a step repeats the same few sizes 2L+2 times
                self._memo[key] = self._lookup(*key)
            return self._memo[key]
        return price

    def describe(self) -> dict:
        raise NotImplementedError


class ProfileComm(CommSource):
    """A reference profile evaluated in memory (modelled): ``graph`` parameters where the profile
    has them, else its ``eager`` ones (and the description says so)."""

    def __init__(self, spec: str):
        super().__init__(spec)
        self.profile = _profile(spec)
        self.label = f"{REFERENCE_PREFIX}{self.profile['name']}"
        self.kind, self.timing = "modelled", "per-call"
        self.modes = {(q["op"], q["tp"], q["mode"]) for q in self.profile["params"]}
        self.have = {(op, tp) for op, tp, _ in self.modes}

    def _lookup(self, op, tp, mode, size_bytes):
        if (op, tp, mode) not in self.modes:
            mode = "eager"
        return profile_latency_us(self.profile, op, tp, size_bytes, mode)

    def describe(self) -> dict:
        p = self.profile
        return {"spec": self.label, "results_dir": None, "kind": self.kind, "verb": "reference",
                "hosts": [self.label], "gpus": [p["title"]], "profile": p["name"], "title": p["title"],
                "start_time": None, "statistic": "modelled alpha-beta latency at the exact size (no spread)",
                "timing": self.timing, "tps": self.tps(), "notes": self.notes}


class DirComm(CommSource):
    """A results dir with sweep rows (a sweep, an imported nccl-tests log), priced by its mean."""

    def __init__(self, spec: str):
        super().__init__(spec)
        if not os.path.isdir(spec):
            raise UsageError(f"--comm {shown(spec)}: not a results dir nor reference:<profile> "
                             "(e.g. reference:pcie5-nop2p, or a dir written by commprof sweep or commprof import)")
        self.table = CommTable(spec, flag="--comm")
        meta = self.table.meta
        self.kind = meta.get("kind") if meta.get("kind") in ("modelled", "imported", "measured") else \
            _KIND_OF_VERB.get(meta.get("verb"), "measured")
        self.label = os.path.basename(os.path.normpath(spec))
        self.timing = self.table.timing
        df = self.table.df
        self.have = {(str(o), int(t)) for o, t in zip(df["op"], df["tp"])}

    def _lookup(self, op, tp, mode, size_bytes):
        return self.table.latency_us(op, tp, mode, size_bytes)

    def describe(self) -> dict:
        m = self.table.meta
        return {"spec": shown_path(self.spec), "results_dir": shown_path(self.table.path), "kind": self.kind,
                "verb": m.get("verb"), "hosts": m.get("hosts"), "gpus": m.get("gpus"),
                "profile": m.get("profile"), "title": m.get("title"), "start_time": m.get("start_time"),
                "statistic": f"{self.table.stat}, log-log interpolation in size",
                "timing": self.timing, "tps": self.tps(), "notes": self.notes}


def comm_source(spec) -> CommSource:
    """``reference:<name>`` -> :class:`ProfileComm` (in memory); a dir -> :class:`DirComm`;
    a :class:`CommSource` is returned as it is."""
    if isinstance(spec, CommSource):
        return spec
    if isinstance(spec, str) and spec.startswith(REFERENCE_PREFIX):
        return ProfileComm(spec)
    return DirComm(spec)


class ScaledComm(CommSource):
    """Another source's prices times a factor: the engine's in-service cost per collective
    (``predict --comm-overhead-from``, :func:`commprof.analysis.inengine.factor_against`). Its
    prices are in-service ones, so the engine terms of :mod:`commprof.analysis.enginecomm` (custom
    all-reduce, per-collective cost, PCIe rank skew) are not added again."""

    in_engine = True

    def __init__(self, base: CommSource, factor: float, why: str):
        super().__init__(base.spec)
        self.base, self.factor, self.why = base, float(factor), why
        self.label = f"{base.label} x{self.factor:.2f} in-engine"
        self.kind, self.timing, self.have = base.kind, base.timing, base.have
        self.notes = base.notes

    def _lookup(self, op, tp, mode, size_bytes):
        return self.base._lookup(op, tp, mode, size_bytes) * self.factor

    def describe(self) -> dict:
        return {**self.base.describe(), "in_engine_factor": self.factor, "in_engine_factor_source": self.why}
