"""Fault injection for commprof's own tests: ``COMMPROF_TEST_FAULT=kind:key=value,...``.

kinds: ``hang`` (sleep forever before the collective), ``die`` (SIGKILL itself), ``corrupt``
(perturb the collective's result before the correctness check), ``sleep`` (delay; ms=N),
``nospace`` (this rank's fsyncs fail with ENOSPC, "disk full", after ``after=N`` good ones).
keys: ``rank`` (global rank, required), ``op``, ``tp``, ``mode``, ``iter`` (timed iteration, 0),
``ms`` (sleep), ``after`` (nospace), ``repeat`` (trace: only that repeat of each run, from 1).
Never set in normal use. A malformed value is refused before any rank starts (the launcher calls
:func:`parse` and reports one line, exit 2): a test that means a fault must not silently run without it.
"""
from __future__ import annotations

import errno
import math
import os
import signal
import time

ENV = "COMMPROF_TEST_FAULT"
KINDS = ("hang", "die", "corrupt", "sleep", "nospace")
#: Each key and its rule: whole numbers from a minimum, a non-negative number, or free text.
_KEYS = {"rank": ("int", 0), "tp": ("int", 1), "iter": ("int", 0), "after": ("int", 0), "ms": ("float", 0),
         "op": ("text", None), "mode": ("text", None), "repeat": ("int", 1)}


class FaultSpecError(ValueError):
    """A malformed ``COMMPROF_TEST_FAULT``; the message is one line naming the part at fault."""


class Fault:
    def __init__(self, kind: str, opts: dict):
        self.kind = kind
        self.opts = opts
        self.iter = int(opts.get("iter", 0))

    def applies(self, rank: int, op: str, tp: int, mode: str) -> bool:
        o = self.opts
        return (int(o.get("rank", -1)) == rank and o.get("op", op) == op
                and int(o.get("tp", tp)) == tp and o.get("mode", mode) == mode)

    def trigger(self):
        if self.kind == "hang":
            while True:
                time.sleep(3600)
        if self.kind == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.kind == "sleep":
            time.sleep(float(self.opts.get("ms", 100)) / 1e3)

    def install(self, rank: int) -> None:
        """Faults that act on the rank's whole process rather than at one collective: ``nospace``
        replaces ``os.fsync`` so that after ``after`` calls every fsync fails as a full disk does
        (every crash-safe table write fsyncs, so the next row written fails)."""
        if self.kind != "nospace" or int(self.opts["rank"]) != rank:
            return
        left = [int(self.opts.get("after", 0))]
        real = os.fsync

        def fsync(fd):
            if left[0] <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            left[0] -= 1
            return real(fd)

        os.fsync = fsync


def parse(spec: str) -> Fault | None:
    """``kind:key=value,...`` -> a :class:`Fault`; empty -> None. Raises :class:`FaultSpecError`."""
    spec = (spec or "").strip()
    if not spec:
        return None
    kind, sep, rest = spec.partition(":")
    kind = kind.strip()
    if kind not in KINDS:
        raise FaultSpecError(f"unknown kind {kind!r}; use one of {', '.join(KINDS)}")
    if not sep:
        raise FaultSpecError(f"expected {kind}:rank=N[,key=value...], got no ':'")
    opts = {}
    for part in rest.split(","):
        if not part.strip():
            continue
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not value:
            raise FaultSpecError(f"{part.strip()!r} is not key=value")
        if key not in _KEYS:
            raise FaultSpecError(f"unknown key {key!r}; use {', '.join(_KEYS)}")
        rule, least = _KEYS[key]
        if rule == "int" and not (value.isascii() and value.isdigit() and int(value) >= least):
            raise FaultSpecError(f"{key}={value!r}: expected a whole number >= {least}")
        if rule == "float":
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not math.isfinite(number) or number < least:
                raise FaultSpecError(f"{key}={value!r}: expected a finite number >= {least}")
        opts[key] = value
    if "rank" not in opts:
        raise FaultSpecError("rank=N is required (which rank the fault hits)")
    return Fault(kind, opts)


def from_env() -> Fault | None:
    """The fault ``COMMPROF_TEST_FAULT`` asks for, or None. Raises :class:`FaultSpecError`."""
    return parse(os.environ.get(ENV, ""))
