"""Crash-safe CSV tables: every results table is appended through :class:`TableAppender`.

Rows are flushed and fsynced one call at a time, so a killed writer keeps every finished row. A
killed writer can leave a last line without its newline; reopening the table (``--resume``) cuts
that fragment off before appending, and :func:`read_table_rows` drops it when reading, so a resumed
table never holds a glued or truncated row.
"""
from __future__ import annotations

import csv
import io
import os

from commprof.model.errors import UsageError
from commprof.model.fileio import check_regular, read_user_bytes, write_atomic


def _repair_tail(path: str) -> list[str] | None:
    """Cut a last line that has no newline (a killed writer's fragment). Returns the header, or
    None when the file holds no complete header line."""
    with open(path, "rb+") as f:
        data = f.read()
        cut = data.rfind(b"\n") + 1
        if cut < len(data):
            f.truncate(cut)
        if cut == 0:
            return None
    first = data[:data.find(b"\n")].decode("utf-8", errors="replace")
    return next(csv.reader([first]), None)


class TableAppender:
    """A CSV table that grows one batch of rows at a time. An existing table keeps its own header
    (it may predate newer columns); rows are written with ``extrasaction='ignore'``."""

    def __init__(self, path: str, columns: list[str]):
        self.path = path
        self.columns = list(columns)
        header = None
        try:
            if os.path.lexists(path):
                check_regular(path, f"'{path}'")    # a symlink to /dev/zero, a FIFO: refused, not read
            if os.path.exists(path) and os.path.getsize(path) > 0:
                header = _repair_tail(path)
            self._f = open(path, "a", encoding="utf-8", newline="")
        except OSError as e:
            raise UsageError(f"'{path}': cannot write ({e.strerror or e})") from None
        if header:
            self.columns = header
        else:
            self._f.seek(0)
            self._f.truncate()
            self._write(",".join(self.columns) + "\n")

    def _write(self, text: str) -> None:
        if self._f.closed:
            raise UsageError(f"'{self.path}': cannot write (closed after an earlier write failed)")
        try:
            self._f.write(text)
            self._f.flush()
            os.fsync(self._f.fileno())
        except OSError as e:
            # A full disk: drop what Python still buffers (closing would retry the write) and say
            # which file; the rows already fsynced stay, and a resume cuts any fragment.
            try:
                self._f.close()
            except OSError:
                pass
            raise UsageError(f"'{self.path}': cannot write ({e.strerror or e})") from None

    def write(self, rows: list[dict]) -> None:
        if not rows:
            return
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.columns, extrasaction="ignore", lineterminator="\n")
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
        self._write(buf.getvalue())

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


def write_table(path: str, columns: list[str], rows: list[dict]) -> None:
    """Write a whole table atomically (a temporary file renamed into place)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    write_atomic(path, buf.getvalue())


def read_table_rows(path: str, required=()) -> tuple[list[str], list[dict]]:
    """(header, rows as dicts of strings) of a table. A truncated last line (a killed writer) is
    dropped; an empty file (no header line), any other malformed line, undecodable bytes, a field
    over the csv module's limit or a missing required column is an error naming the file (and
    line)."""
    raw = read_user_bytes(path, f"'{path}'")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"'{path}': not UTF-8 text (byte {e.start}); not a commprof table") from None
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines = lines[:-1]
    reader = csv.reader(lines)
    try:
        header = next(reader)
    except StopIteration:
        what = "empty (0 bytes)" if not text else "without a complete header line"
        raise UsageError(f"'{path}': {what}; not a commprof table (a run killed before its first row "
                         "leaves one: run it again, or with --resume for a sweep)") from None
    except csv.Error as e:
        raise UsageError(f"'{path}': not a CSV table ({e})") from None
    missing = [c for c in required if c not in header]
    if missing:
        raise UsageError(f"'{path}': not a commprof table of this kind (missing column {missing[0]})")
    rows = []
    try:
        for lineno, rec in enumerate(reader, start=2):
            if len(rec) != len(header):
                raise UsageError(f"'{path}' line {lineno}: expected {len(header)} fields, found {len(rec)}")
            rows.append(dict(zip(header, rec)))
    except csv.Error as e:
        raise UsageError(f"'{path}': not a CSV table ({e})") from None
    return header, rows
