"""The terminal: a rich console on stdout, one way to emit a result (JSON or tables), number
formatting and the progress bar."""
from __future__ import annotations

import math
import sys
import time


def stdout_console(width: int = 160):
    """A rich console on stdout: the terminal's width, or when piped ``$COLUMNS`` if set, else
    ``width`` columns (so tables in logs and tests are not squeezed to 80). Under :func:`tables_as`
    (``--format csv|json``) a console whose tables are kept for stdout and whose other lines go to stderr."""
    import os

    from rich.console import Console

    cols = os.environ.get("COLUMNS", "")
    if not sys.stdout.isatty() and cols.isdigit() and int(cols) > 0:
        width = int(cols)
    if _SINK["format"] is not None:
        return _sink_console(width)
    return Console(width=None if sys.stdout.isatty() else width)


#: ``--format``: the format while a verb runs under :func:`tables_as`, the real stdout, the tables kept.
_SINK: dict = {"format": None, "stdout": None, "tables": []}


def _sink_console(width: int):
    from rich.console import Console
    from rich.table import Table

    class _Sink(Console):
        def print(self, *objects, **kwargs):
            rest = [o for o in objects if not isinstance(o, Table)]
            for o in objects:
                if isinstance(o, Table):
                    record_table(o)
            if rest:
                super().print(*rest, **kwargs)

    return _Sink(file=sys.stderr, width=width)


def _plain(cell) -> str:
    from rich.text import Text

    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        return Text.from_markup(cell).plain
    return str(cell)


def record_table(table) -> bool:
    """Keep a rich ``Table`` for ``--format csv|json`` (True), or do nothing (False: print it)."""
    if _SINK["format"] is None:
        return False
    cols = [c for c in table.columns]
    header = [_plain(c.header) for c in cols]
    cells = [[_plain(v) for v in c.cells] for c in cols]
    rows = [dict(zip(header, vals)) for vals in zip(*cells)] if cells else []
    _SINK["tables"].append({"title": _plain(table.title or ""), "columns": header, "rows": rows})
    return True


def record_frame(df, title: str = "") -> bool:
    """Keep a DataFrame's raw rows for ``--format csv|json`` (True), or do nothing (False)."""
    if _SINK["format"] is None:
        return False
    _SINK["tables"].append({"title": title, "columns": [str(c) for c in df.columns],
                            "rows": df.to_dict("records"), "raw": True})
    return True


def _json_value(v):
    """A cell as JSON: numbers as numbers (thousands separators dropped), NaN as null."""
    if isinstance(v, float):
        return None if v != v else v
    if isinstance(v, (int, bool)) or v is None:
        return v
    if hasattr(v, "item"):                                  # a numpy scalar
        return _json_value(v.item())
    text = str(v)
    try:
        f = float(text.replace(",", "")) if text.strip() else None
    except ValueError:
        return text
    if f is None or f != f:
        return text or None
    return int(f) if f.is_integer() and "." not in text and "e" not in text.lower() else f


def _write_tables(fmt: str, tables: list, out) -> None:
    import csv
    import json

    if fmt == "json":
        docs = [{"title": t["title"], "rows": [{k: _json_value(v) for k, v in r.items()} for r in t["rows"]]}
                for t in tables]
        json.dump(docs[0] if len(docs) == 1 else docs, out, indent=2)
        out.write("\n")
        return
    for i, t in enumerate(tables):                          # csv: one header + rows per table, a blank line between
        if i:
            out.write("\n")
        w = csv.writer(out, lineterminator="\n")
        w.writerow(t["columns"])
        for r in t["rows"]:
            w.writerow(["" if (v := _json_value(r.get(c, ""))) is None else v for c in t["columns"]])


class tables_as:
    """``--format csv|json``: while a verb runs, every line it prints goes to stderr and every
    table it shows is kept; on the way out the tables go to stdout in ``fmt``, and nothing else."""

    def __init__(self, fmt: str):
        self.fmt = fmt

    def __enter__(self):
        _SINK.update(format=self.fmt, stdout=sys.stdout, tables=[])
        sys.stdout = sys.stderr
        return self

    def __exit__(self, *exc):
        out = _SINK["stdout"]
        sys.stdout = out
        tables = _SINK["tables"]
        _SINK.update(format=None, stdout=None, tables=[])
        if tables:
            _write_tables(self.fmt, tables, out)
            out.flush()
        return False


def emit(data: dict, as_json: bool, draw, paths: list[str], console=None, width: int = 160) -> None:
    """A command's result: JSON on stdout (notes on stderr) or ``draw(console)`` tables, then the
    files written."""
    import json

    if as_json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
        if paths:
            print(f"wrote {', '.join(paths)}", file=sys.stderr)
        return
    draw(console)
    if paths:
        (console or stdout_console(width)).print(f"wrote {', '.join(paths)}")


def fmt_cell(v, digits=1):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "-"
    if f != f:
        return "-"
    return f"{f:,.{digits}f}"


def clock(seconds: float) -> str:
    """``1:05`` (m:ss) or ``1:02:05`` (h:mm:ss)."""
    s = max(0, int(round(seconds)))
    h, m = divmod(s, 3600)
    m, s = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def fit_size_time(sizes: list, seconds: list) -> tuple[float, float] | None:
    """``(a, b)`` of seconds = a + b x bytes, least squares with a, b >= 0, over the steps done
    (``seconds[i]`` is step i's, ``sizes[i]`` its bytes); None with fewer than two distinct sizes."""
    n = len(seconds)
    xs, ys = [float(x) for x in sizes[:n]], [float(y) for y in seconds]
    if n < 2 or len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    if b < 0:                                   # time does not grow with size here: a per-step time
        return my, 0.0
    if a < 0:                                   # no fixed part: time in proportion to size
        return 0.0, sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    return a, b


def eta_from_sizes(sizes: list, seconds: list, current_s: float) -> float | None:
    """Seconds left: each step not done priced by :func:`fit_size_time` over the steps done, less
    the ``current_s`` the running step has had (it counts 0 once it outlives its price); None
    when the fit cannot be made."""
    fit = fit_size_time(sizes, seconds)
    if fit is None:
        return None
    a, b = fit
    rest = [a + b * float(x) for x in sizes[len(seconds):]]
    if not rest:
        return 0.0
    return max(rest[0] - current_s, 0.0) + sum(rest[1:])


def blend_eta(by_mean: float, by_size: float | None) -> float:
    """The ETA from two estimates that bracket the truth: ``by_mean`` (steps left x the measured
    time per step) knows nothing of the larger messages still to come and runs short; ``by_size``
    (:func:`eta_from_sizes`) prices them by a line through the small ones done, though bandwidth
    still rises with size (time grows slower than bytes), so it runs long. Their geometric mean is
    within 2x of any truth between them while they stay within 4x of each other; one alone where
    the other is missing or not positive."""
    if by_size is None or by_size <= 0:
        return by_mean
    if by_mean <= 0:
        return by_size
    return math.sqrt(by_mean * by_size)


class Eta:
    """The time left, from the steps' own measured times: the time per finished step (from the
    first step's start, after start-up; the larger of the mean over all steps and over the latest
    half, as later cells of a sweep hold larger messages) times the steps left, less the time the
    current step has already run. Never a default: before the first step ends it says so."""

    def __init__(self, total: int):
        self.total, self.t0, self.done, self.t_last = total, time.monotonic(), 0, None
        self.marks = [(0, self.t0)]
        self.sizes, self.seconds = [], []
        self.setup_flags, self.setup_seconds, self.setup_s = [], [], []

    def timed(self, sizes: list, seconds: list) -> None:
        """Every step's size (bytes, in order) and the measured seconds of those done: the ETA is
        then :func:`eta_from_sizes` (a later cell of a sweep holds a larger message; its time
        grows with it, which a mean over the small first cells cannot know)."""
        if len(sizes) == self.total:
            self.sizes, self.seconds = list(sizes), list(seconds)

    def timed_setups(self, flags: list, seconds: list, setup_s: list) -> None:
        """Every step's one-off set-up flag (a trace's engine build for a new TP x batch) and, for
        the steps done, their wall seconds and set-up seconds: the ETA then prices the set-ups
        left apart from the steps' own time (one build in the first cell of ``trace --repeat 3``
        is not three)."""
        if len(flags) == self.total and len(seconds) == len(setup_s):
            self.setup_flags, self.setup_seconds, self.setup_s = list(flags), list(seconds), list(setup_s)

    def by_setups(self, now: float) -> float | None:
        """Seconds left from :meth:`timed_setups`: each step left at the mean step time less its
        set-up, plus the mean set-up for each one left to do; None without the figures."""
        flags, secs, sets = self.setup_flags, self.setup_seconds, self.setup_s
        if not flags or not secs or len(secs) != self.done:
            return None
        run = sum(max(s - u, 0.0) for s, u in zip(secs, sets)) / len(secs)
        built = [u for u, f in zip(sets, flags) if f]
        setup = sum(built) / len(built) if built else 0.0
        rest = [run + (setup if f else 0.0) for f in flags[self.done:]]
        if not rest:
            return 0.0
        return max(rest[0] - (now - self.t_last), 0.0) + sum(rest[1:])

    def update(self, done: int, now: float | None = None):
        now = time.monotonic() if now is None else now
        if done != self.done:
            self.done, self.t_last = done, now
            self.marks.append((done, now))

    def per_step(self) -> float:
        n, t = self.marks[-1]
        mean = (t - self.t0) / n
        half = [m for m in self.marks if m[0] <= n - max(1, n // 2)]
        n0, t0 = half[-1]
        return max(mean, (t - t0) / (n - n0)) if n > n0 else mean

    def text(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        if self.done >= self.total:
            return "done"
        if not self.done or self.t_last is None:
            return "ETA after the first step"
        per = self.per_step()
        left = per * (self.total - self.done) - (now - self.t_last)
        if self.sizes and len(self.seconds) == self.done:
            left = blend_eta(left, eta_from_sizes(self.sizes, self.seconds, now - self.t_last))
        setups = self.by_setups(now)
        if setups is not None:
            left = setups
        if left <= 0:
            return f"ETA any moment (this step has run {clock(now - self.t_last)}, {clock(per)} per step so far)"
        return f"ETA {clock(left)}"


class _Progress:
    """Progress on stderr, labelled with what runs (``sweep``, ``trace``, ``serve concurrency
    4``): a start-up phase (``starting 2 ranks``, with its elapsed time) until the total is known,
    then the steps done, the elapsed time and an ETA from the steps' measured times (:class:`Eta`).
    On a terminal a rich bar (drawn on stderr, so ``commprof sweep > log`` still shows it); when
    stderr is not a terminal, one line per step, or per 10% of them when there are more than 20."""

    def __init__(self, total: int | None, label: str, starting: str | None = None, unit: str = "cells"):
        self.label, self.unit, self.t0 = label, unit, time.monotonic()
        self.tty = sys.stderr.isatty()
        self.total, self.eta, self._p, self._task, self._said = None, None, None, None, -1
        if self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._p = Progress(TextColumn(label), TextColumn("{task.fields[phase]}"), BarColumn(),
                               MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[eta]}"),
                               console=Console(stderr=True), transient=True)
            self._task = self._p.add_task(label, total=total, phase=starting or "", eta="")
            self._p.start()
        elif starting:
            self._line(starting)
        if total is not None:
            self.set_total(total)

    def _line(self, text: str):
        print(f"{self.label}: {text} ({clock(time.monotonic() - self.t0)} elapsed)", file=sys.stderr, flush=True)

    #: When stderr is not a terminal, a start-up that lasts prints a line this often (seconds).
    STILL_EVERY_S = 10.0

    def starting(self, text: str):
        """What the start-up phase is doing now (the elapsed time runs beside it)."""
        if self.total is not None:
            return
        if self._p is not None:
            self._p.update(self._task, phase=text)
            return
        now = time.monotonic()
        if now - getattr(self, "_still", self.t0) >= self.STILL_EVERY_S:
            self._still = now
            self._line(f"still {text}")

    def set_total(self, total: int):
        """The start-up is over: ``total`` steps to go, timed from now."""
        if self.total is not None:
            return
        self.total, self.eta = int(total), Eta(int(total))
        if self._p is not None:
            self._p.update(self._task, total=self.total, phase="", eta=self.eta.text())
        elif self.t0 is not None and time.monotonic() - self.t0 > 0.5:
            self._line(f"started; {self.total} {self.unit} to run")

    def update(self, completed: int, sizes: list | None = None, seconds: list | None = None,
               setups: tuple | None = None):
        """``completed`` steps done; ``sizes``/``seconds``: every step's bytes and the done steps'
        measured seconds, when the run gives them (:meth:`Eta.timed`); ``setups``: (every step's
        set-up flag, the done steps' seconds, their set-up seconds) (:meth:`Eta.timed_setups`)."""
        if self.total is None:
            return
        completed = min(int(completed), self.total)
        self.eta.update(completed)
        if sizes:
            self.eta.timed(sizes, seconds or [])
        if setups and setups[0]:
            self.eta.timed_setups(*setups)
        if self._p is not None:
            self._p.update(self._task, completed=completed, eta=self.eta.text())
            return
        step = 1 if self.total <= 20 else -(-self.total // 10)
        said = max(self._said, 0)
        if completed > said and (completed // step > said // step or completed == self.total):
            self._said = completed
            self._line(f"{completed}/{self.total} {self.unit}, {self.eta.text()}")

    def advance(self, n: int = 1):
        self.update((self.eta.done if self.eta else 0) + n)

    def close(self):
        if self._p is not None:
            self._p.stop()


def progress_bar(total: int | None, label: str, starting: str | None = None, unit: str = "cells") -> _Progress:
    """Progress of ``total`` steps on stderr, labelled ``label`` (:class:`_Progress`); ``total``
    None with ``starting`` shows the start-up phase until :meth:`_Progress.set_total`."""
    return _Progress(total, label, starting, unit)


def column_decimals(values) -> int:
    """Decimals for one table column, fixed over the column so its numbers line up: by the
    column's typical (median) magnitude, 0 from 100 up, 1 from 10, 2 from 1, 3 below."""
    import numpy as np

    a = np.abs(np.asarray([v for v in values if isinstance(v, (int, float)) and v == v], dtype=float))
    a = a[np.isfinite(a)]
    m = float(np.median(a)) if a.size else 0.0
    return 0 if m >= 100 else 1 if m >= 10 else 2 if m >= 1 else 3


def frame_table(df, title: str, console=None, width: int = 160, keep: dict | None = None) -> str:
    """Any DataFrame as a table that fits the terminal (:func:`fit_table`): numbers right-aligned,
    each float column with fixed decimals (:func:`column_decimals`) and thousands separators; the
    first column is kept, the last ones go first when the terminal is narrow, unless ``keep`` (header
    -> :class:`Col` keep) says otherwise. Under ``--format csv|json`` the frame's own values are kept
    instead (full precision, not the rounded cells): ``recorded``."""
    if record_frame(df, title):
        return "recorded"
    cols, digits = [], {}
    n = len(df.columns)
    keep = keep or {}
    for i, c in enumerate(df.columns):
        k = keep.get(str(c), None if i == 0 else n - i)
        cols.append(Col(str(c), "right" if df[c].dtype.kind in "iuf" else "left", keep=k))
        if df[c].dtype.kind == "f":
            digits[c] = column_decimals(df[c].tolist())
    rows = [["" if v != v else fmt_cell(v, digits.get(c, 3)) if isinstance(v, float) else str(v)
             for c, v in zip(df.columns, row)] for row in df.itertuples(index=False)]
    return fit_table(title, cols, rows, console=console or stdout_console(width))


# --- one table renderer for every verb: no number is ever cut --------------------------------

#: A cell that is a number (with an optional unit or sign): never folded, never cut with "…".
_NUMBER = r"^[<>=~≤≥±+-]*\(?[$]?\d[\d,]*(\.\d+)?([eE][+-]?\d+)?\)?( ?[A-Za-zµ%/]{1,6})?[x%]?$"

#: Words a header may shorten to when the table is too wide (the unit words stay).
_SHORT = {"latency": "lat", "bandwidth": "bw", "message": "msg", "collective": "coll", "sequences": "seqs",
          "compute": "comp", "communication": "comm", "threshold": "thresh", "requests": "reqs",
          "concurrency": "conc", "throughput": "tput", "tokens": "tok", "enqueue": "enq", "median": "med",
          "interconnect": "ic", "extrapolated": "extrap", "predicted": "pred",
          "measured": "meas", "reference": "ref", "ratio": "ratio", "number": "n"}


class Col:
    """One column of :func:`fit_table`: its header, alignment, how long it is kept when the
    terminal is narrow (``keep``: higher stays longer; columns with ``keep`` 0 or more may be
    left out, a column with ``keep=None`` never is), and a short header."""

    def __init__(self, header: str, justify: str = "right", keep: int | None = 0, short: str | None = None):
        self.header, self.justify, self.keep, self.short = str(header), justify, keep, short

    def short_header(self) -> str:
        if self.short:
            return self.short
        return " ".join(_SHORT.get(w.lower(), w) for w in self.header.split(" "))


def is_number_cell(text: str) -> bool:
    """Whether a cell's plain text is a number (``1,234.5``, ``12 KiB``, ``3.2x``, ``<=300``)."""
    import re

    return bool(re.match(_NUMBER, text.strip())) if text and any(ch.isdigit() for ch in text) else False


def _text(v):
    """A cell as rich Text: a Text as it is (styled), anything else as plain text (no markup, no emoji)."""
    from rich.text import Text

    return v.copy() if isinstance(v, Text) else Text("" if v is None else str(v))


def _plain(v) -> str:
    return _text(v).plain


def _cell(v):
    t = _text(v)
    plain = t.plain
    if is_number_cell(plain) or (" " not in plain and len(plain) <= 16):
        t.no_wrap, t.overflow = True, "ellipsis"      # a number or a short word: whole or not at all
    else:
        t.overflow = "fold"
    return t


def _col_mins(headers: list, rows: list) -> list[int]:
    """The narrowest each column can be with no word of a header or cell split (a number or
    short-word cell counts whole)."""
    widths = []
    for j, h in enumerate(headers):
        w = max((len(x) for x in str(h).split()), default=0)
        for r in rows:
            t = _cell(r[j])
            plain = t.plain
            w = max(w, len(plain) if t.no_wrap else max((len(x) for x in plain.split()), default=0))
        widths.append(max(w, 1))
    return widths


def _widths(headers: list, rows: list, width: int) -> list[int] | None:
    """Each column's width so the table fits ``width`` with no word split: from each column's
    widest cell, the columns with the most room above their longest word give way first; None
    when even the longest words do not fit."""
    mins = _col_mins(headers, rows)
    maxs = []
    for j, h in enumerate(headers):
        w = max((len(x) for x in str(h).splitlines() or [""]), default=0)
        for r in rows:
            w = max(w, max((len(x) for x in _plain(r[j]).splitlines() or [""]), default=0))
        maxs.append(max(w, mins[j]))
    avail = width - 3 * len(headers) - 1
    if sum(mins) > avail:
        return None
    widths = list(maxs)
    excess = sum(widths) - avail
    while excess > 0:
        j = max(range(len(widths)), key=lambda k: (widths[k] > mins[k], widths[k] - mins[k]))
        if widths[j] <= mins[j]:
            return None
        widths[j] -= 1
        excess -= 1
    return widths


def _render(console, table) -> str:
    """What ``table`` prints on ``console``'s width, as plain text."""
    import io

    from rich.console import Console

    scratch = Console(width=console.width, file=io.StringIO(), color_system=None, legacy_windows=False,
                      force_terminal=False)
    scratch.print(table)
    return scratch.file.getvalue()


def _cut(text: str, cells: list[list[str]], headers: list[str]) -> bool:
    """Whether rendering cut something (rich's ellipsis that the cells do not hold themselves)."""
    own = sum(_plain(c).count("…") for row in cells for c in row) + sum(h.count("…") for h in headers)
    return text.count("…") > own


def fit_table(title: str, cols: list, rows: list, console=None, width: int = 160, caption: str | None = None,
              say_left_out: bool = True) -> str:
    """Print a table that fits the console's width with every number whole: the full table if it
    fits; else with short headers; else leaving out the columns that may go (lowest ``keep`` first)
    and naming them under the table; else one block per row (``header value`` pairs, packed into
    the width). Cells are strings (plain: no markup) or rich ``Text`` (styled); ``cols`` are :class:`Col` or header
    strings. Returns the layout used: ``full``, ``short``, ``dropped`` or ``stacked``."""
    from rich.table import Table
    from rich.text import Text

    console = console or stdout_console(width)
    cols = [c if isinstance(c, Col) else Col(c, "left" if i == 0 else "right") for i, c in enumerate(cols)]
    rows = [list(r) for r in rows]

    def heads_of(keep_idx, short):
        return [cols[i].short_header() if short else cols[i].header for i in keep_idx]

    def sub(keep_idx):
        return [[r[i] for i in keep_idx] for r in rows]

    def build(keep_idx, short):
        """The table on these columns, each at the width :func:`_widths` gives; None if it cannot fit."""
        widths = _widths(heads_of(keep_idx, short), sub(keep_idx), console.width)
        if widths is None:
            return None
        t = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
        for i, w in zip(keep_idx, widths):
            c = cols[i]
            t.add_column(Text(c.short_header() if short else c.header, overflow="ellipsis"), justify=c.justify,
                         overflow="fold", width=w)
        for r in rows:
            t.add_row(*(_cell(r[i]) for i in keep_idx))
        return t

    idx = list(range(len(cols)))
    heads = [c.header for c in cols]
    for short in (False, True):
        t = build(idx, short)
        if t is not None and not _cut(_render(console, t), rows, heads):
            console.print(t)
            return "short" if short else "full"
    droppable = sorted((i for i in idx if cols[i].keep is not None), key=lambda i: (cols[i].keep, -i))
    left_out = []
    kept = list(idx)
    for i in droppable:
        kept.remove(i)
        left_out.append(i)
        if len(kept) < 2:
            break
        t = build(kept, True)
        if t is not None and not _cut(_render(console, t), rows, heads):
            console.print(t)
            if say_left_out:
                console.print(f"(left out at {console.width} columns: {', '.join(cols[j].header for j in sorted(left_out))}; "
                              "a wider terminal or --format csv shows them)", style="dim", soft_wrap=False)
            return "dropped"
    stacked(title, cols, rows, console)
    return "stacked"


def stacked(title: str, cols: list, rows: list, console) -> None:
    """The narrow layout: per row its first cell as a heading, then ``header value`` pairs packed
    into the console's width (a pair is never split; a number is never cut)."""
    from rich.text import Text

    w = max(20, console.width - 2)
    console.print(Text(title, style="italic"), soft_wrap=False)
    for r in rows:
        head = _text(r[0]) if r else Text("")
        console.print(Text("- ") + head + Text(":"), style="bold")
        line, lines = Text("  "), []
        for c, v in zip(cols[1:], r[1:]):
            if _plain(v) == "":
                continue
            pair = Text(f"{c.short_header()} ", style="dim") + _text(v)
            if line.cell_len > 2 and line.cell_len + 3 + pair.cell_len > w:
                lines.append(line)
                line = Text("  ")
            if line.cell_len > 2:
                line += Text(" · ", style="dim")
            line += pair
        lines.append(line)
        for ln in lines:
            console.print(ln, soft_wrap=True)
