"""The terminal: a rich console on stdout, one way to emit a result (JSON or tables), number
formatting and the progress bar."""
from __future__ import annotations

import sys


def stdout_console(width: int = 160):
    """A rich console on stdout: the terminal's width, or ``width`` columns when piped (so tables
    in logs and tests are not squeezed to 80)."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else width)


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


class _Progress:
    """A rich progress bar on stderr, labelled with what runs (``sweep``, ``trace``, ``serve
    concurrency 4``), with the elapsed time and an estimate of the time left. Drawn on stderr so
    that ``commprof sweep > log`` on a terminal still shows it; off when stderr is not a terminal
    (a CI log gets no carriage-return noise)."""

    def __init__(self, total: int, label: str):
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self._p = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                           TextColumn("ETA"), TimeRemainingColumn(), console=Console(stderr=True),
                           transient=True, disable=not sys.stderr.isatty())
        self._task = self._p.add_task(label, total=total)
        self._p.start()

    def advance(self, n: int = 1):
        self._p.advance(self._task, n)

    def update(self, completed: int):
        self._p.update(self._task, completed=completed)

    def close(self):
        self._p.stop()


def progress_bar(total: int, label: str) -> _Progress:
    """A progress bar of ``total`` steps on stderr, labelled ``label``, shown only on a terminal."""
    return _Progress(total, label)


def column_decimals(values) -> int:
    """Decimals for one table column, fixed over the column so its numbers line up: by the
    column's typical (median) magnitude, 0 from 100 up, 1 from 10, 2 from 1, 3 below."""
    import numpy as np

    a = np.abs(np.asarray([v for v in values if isinstance(v, (int, float)) and v == v], dtype=float))
    a = a[np.isfinite(a)]
    m = float(np.median(a)) if a.size else 0.0
    return 0 if m >= 100 else 1 if m >= 10 else 2 if m >= 1 else 3


def frame_table(df, title: str, console=None, width: int = 160) -> None:
    """Any DataFrame as a rich table: numbers right-aligned, each float column with fixed
    decimals (:func:`column_decimals`) and thousands separators."""
    from rich.table import Table

    console = console or stdout_console(width)
    t = Table(title=title, title_justify="left")
    digits = {}
    for c in df.columns:
        t.add_column(str(c), justify="right" if df[c].dtype.kind in "iuf" else "left")
        if df[c].dtype.kind == "f":
            digits[c] = column_decimals(df[c].tolist())
    for row in df.itertuples(index=False):
        t.add_row(*("" if v != v else fmt_cell(v, digits.get(c, 3)) if isinstance(v, float) else str(v)
                    for c, v in zip(df.columns, row)))
    console.print(t)
