"""Fault injection for commprof's own tests: ``COMMPROF_TEST_FAULT=kind:key=value,...``.

kinds: ``hang`` (sleep forever before the collective), ``die`` (SIGKILL itself), ``corrupt``
(perturb the collective's result before the correctness check), ``sleep`` (delay; ms=N).
keys: ``rank`` (global rank, required), ``op``, ``tp``, ``mode``, ``iter`` (timed iteration, 0).
Never set in normal use; a malformed value is ignored rather than risk a user's run.
"""
from __future__ import annotations

import os
import signal
import time


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


def from_env() -> Fault | None:
    spec = os.environ.get("COMMPROF_TEST_FAULT", "")
    if not spec or ":" not in spec:
        return None
    kind, _, rest = spec.partition(":")
    try:
        opts = dict(kv.split("=", 1) for kv in rest.split(",") if kv)
    except ValueError:
        return None
    return Fault(kind.strip(), opts)
