"""Per-rank liveness, readable by a watchdog: progress counter, in-collective flag, stage text,
and a pulse.

Local launches back it with shared memory so the parent process can tell, when progress stops,
which rank is stuck outside a collective (the one holding the others) and which are waiting
inside one. The pulse is bumped by a thread of its own in each rank: it keeps beating while the
rank waits in a collective or sleeps, and stops only when the whole process is frozen (SIGSTOP,
a debugger, a C call holding the interpreter), which names that rank when the others wait for
it. Under torchrun each rank keeps it in-process for its own watchdog thread.
"""
from __future__ import annotations

import os
import threading
import time

STAGE_BYTES = 160
PULSE_S = 0.25          # how often a rank's pulse thread beats


#: Cells whose bytes and times the ETA reads (a sweep has tens to a few hundred).
TIMED_CELLS = 4096


class SharedSlots:
    """Shared-memory slots for ``world`` ranks (created by the parent before spawning)."""

    def __init__(self, ctx, world: int):
        self.world = world
        self.progress = ctx.RawArray("q", world)      # bumps on every step of every rank
        self.in_coll = ctx.RawArray("b", world)       # 1 while inside a timed collective call
        self.stage = ctx.RawArray("c", world * STAGE_BYTES)
        self.pulse = ctx.RawArray("q", world)         # bumped every PULSE_S by each rank's own thread
        self.rows_done = ctx.RawValue("q", 0)         # rows written by rank 0 (progress bar)
        self.cells_total = ctx.RawValue("q", 0)
        # the ETA's inputs, by rank 0 (first TIMED_CELLS cells): each cell's bytes before it runs,
        # each cell's wall seconds once written (0: not given)
        self.cell_bytes = ctx.RawArray("d", TIMED_CELLS)
        self.cell_s = ctx.RawArray("d", TIMED_CELLS)
        # a trace's one-off set-up inside a cell (building the engine for a new TP x batch): which
        # cells will start with one (before they run), and its seconds in each cell done
        self.cell_setup = ctx.RawArray("b", TIMED_CELLS)
        self.cell_setup_s = ctx.RawArray("d", TIMED_CELLS)

    def set_cells(self, sizes_bytes) -> None:
        """The run's cells, in order: their total, and their bytes for the ETA (rank 0)."""
        sizes = list(sizes_bytes)
        for i, b in enumerate(sizes[:TIMED_CELLS]):
            self.cell_bytes[i] = float(b)
        self.cells_total.value = len(sizes)

    def cell_figures(self, done: int) -> tuple[list, list]:
        """(bytes of every cell, seconds of the ``done`` cells finished), or ([], []) when not given."""
        n = min(int(self.cells_total.value), TIMED_CELLS)
        if n < int(self.cells_total.value) or not any(self.cell_bytes[:n]):
            return [], []
        return list(self.cell_bytes[:n]), list(self.cell_s[:min(done, n)])

    def set_setups(self, flags) -> None:
        """Which cells start with a one-off set-up, in order (rank 0, with the cells' total)."""
        flags = list(flags)
        for i, f in enumerate(flags[:TIMED_CELLS]):
            self.cell_setup[i] = 1 if f else 0
        self.cells_total.value = len(flags)

    def setup_figures(self, done: int) -> tuple[list, list, list]:
        """(every cell's set-up flag, the ``done`` cells' wall seconds and their set-up seconds), or
        ([], [], []) when the run gives none (a sweep)."""
        n = min(int(self.cells_total.value), TIMED_CELLS)
        if n < int(self.cells_total.value) or not any(self.cell_setup[:n]):
            return [], [], []
        k = min(done, n)
        return [bool(f) for f in self.cell_setup[:n]], list(self.cell_s[:k]), list(self.cell_setup_s[:k])

    def stage_of(self, rank: int) -> str:
        raw = bytes(self.stage[rank * STAGE_BYTES:(rank + 1) * STAGE_BYTES])
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


class Heartbeat:
    def __init__(self, rank: int, slots: SharedSlots | None = None):
        self.rank = rank
        self.slots = slots
        self._stage = "start"
        self._progress = 0
        self._in_coll = 0
        self.last_change = time.monotonic()
        self.rows_done = 0

    # The two hot-path calls are kept to a store each.
    def enter(self):
        if self.slots is not None:
            self.slots.in_coll[self.rank] = 1
        self._in_coll = 1

    def leave(self):
        if self.slots is not None:
            self.slots.in_coll[self.rank] = 0
            self.slots.progress[self.rank] += 1
        self._in_coll = 0
        self._progress += 1

    def tick(self):
        """Progress without a stage change (e.g. one decoded token)."""
        self._progress += 1
        if self.slots is not None:
            self.slots.progress[self.rank] += 1

    def stage(self, text: str):
        self._stage = text
        self._progress += 1
        self.last_change = time.monotonic()
        if self.slots is not None:
            data = text.encode("utf-8")[:STAGE_BYTES - 1] + b"\0"
            base = self.rank * STAGE_BYTES
            self.slots.stage[base:base + len(data)] = data
            self.slots.progress[self.rank] += 1

    def start_pulse(self):
        """Beat ``slots.pulse[rank]`` from a daemon thread until the process ends, and end this
        rank when the process that spawned it is gone (no orphan keeps running a sweep)."""
        if self.slots is None:
            return None
        parent = os.getppid()

        def beat():
            while True:
                if not self.beat_once(parent):
                    os._exit(1)
                time.sleep(PULSE_S)

        t = threading.Thread(target=beat, name="commprof-pulse", daemon=True)
        t.start()
        return t

    def beat_once(self, parent: int) -> bool:
        """One beat of the pulse thread: bump this rank's slot; False once ``parent`` (the process
        that spawned this rank) is gone."""
        self.slots.pulse[self.rank] += 1
        return os.getppid() == parent

    def row_written(self, n: int = 1, seconds: float | None = None, setup_s: float | None = None):
        """``n`` rows written (rank 0); ``seconds``: the wall time the cell took, for the ETA;
        ``setup_s``: how much of it was a one-off set-up (a trace's engine build)."""
        if self.slots is not None and seconds is not None and n == 1 and self.rows_done < TIMED_CELLS:
            self.slots.cell_s[self.rows_done] = max(float(seconds), 1e-9)
            if setup_s is not None:
                self.slots.cell_setup_s[self.rows_done] = max(float(setup_s), 0.0)
        self.rows_done += n
        if self.slots is not None:
            self.slots.rows_done.value += n

    @property
    def current_stage(self) -> str:
        return self._stage

    @property
    def in_collective(self) -> bool:
        return bool(self._in_coll)


def start_self_watchdog(hb: Heartbeat, timeout_s: float, host: str):
    """Under torchrun there is no parent watching: a daemon thread ends this rank with one line
    when it has made no progress for ``timeout_s``."""

    def watch():
        last = hb._progress
        last_t = time.monotonic()
        while True:
            time.sleep(min(1.0, timeout_s / 4))
            if hb._progress != last:
                last, last_t = hb._progress, time.monotonic()
                continue
            if time.monotonic() - last_t > timeout_s:
                where = "waiting inside a collective for its peers" if hb.in_collective else \
                    "stuck outside any collective (this rank is holding the others)"
                os.write(2, (f"commprof: error: host={host} rank={hb.rank} stage={hb.current_stage}: "
                             f"no progress for {timeout_s:.0f} s, {where} (--timeout)\n").encode())
                os._exit(5)

    t = threading.Thread(target=watch, name="commprof-watchdog", daemon=True)
    t.start()
    return t


class TextProgress:
    """Rank 0's progress under torchrun (no parent process draws a bar): one stderr line per
    finished cell. Plain text, so rank-side code needs no view."""

    def __init__(self, total: int, what: str = "cells"):
        self.total, self.done, self.what = total, 0, what

    def advance(self):
        import sys

        self.done += 1
        print(f"commprof: {self.done}/{self.total} {self.what}", file=sys.stderr, flush=True)

    def close(self):
        return None
