"""Every file commprof reads from a user or writes into a results dir goes through here.

Reading (:func:`read_user_bytes`, :func:`open_user_file`): only a regular file (a symlink to
``/dev/zero``, a FIFO or a directory is refused before a byte is read) and at most a bounded
number of bytes, so a hostile path cannot hang or exhaust memory. Writing (:func:`write_atomic`,
:func:`atomic_path`): a temporary file in the same directory, flushed, fsynced and renamed into
place, so a full disk or a kill leaves the old file or none, never half of one; a failure is one
:class:`~commprof.model.errors.UsageError` naming the file.
"""
from __future__ import annotations

import contextlib
import json
import errno
import os
import stat

from commprof.model.errors import UsageError

#: The largest file commprof reads whole (results tables, meta.json, logs, config files), bytes.
MAX_READ_BYTES = 1 << 30
#: Suffix of the temporary file beside each file being written (removed on failure).
TMP_SUFFIX = ".tmp"


def _size_words(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def shown_path(path: str) -> str:
    """An input path (file or dir) as meta.json and the pages record it: relative to the working dir
    when it lies below it (a committed results dir names no machine's absolute paths), else absolute.
    The one rule for every recorded input path; read through the path as given, record this."""
    full = os.path.abspath(path)
    rel = os.path.relpath(full)
    return full if rel == ".." or rel.startswith(".." + os.sep) else rel


def check_regular(path: str, label: str, directory_hint: str | None = None) -> os.stat_result:
    """The file's stat, or a UsageError of one line: not found, a directory (with
    ``directory_hint`` as the rest of the sentence), or not a regular file (a device such as
    ``/dev/zero``, a FIFO, a socket: reading one may never end)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"{label}: file not found") from None
    except (OSError, ValueError) as e:      # ValueError: a NUL byte in the path
        raise UsageError(f"{label}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{label}{directory_hint}" if directory_hint is not None else f"{label}: is a directory")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a character device" if stat.S_ISCHR(st.st_mode) else "a block device" if stat.S_ISBLK(st.st_mode)
                else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "not a regular file")
        raise UsageError(f"{label}: is {kind}, not a regular file; commprof reads only regular files")
    return st


def read_user_bytes(path: str, label: str, directory_hint: str | None = None,
                    limit: int = MAX_READ_BYTES) -> bytes:
    """The whole file, or a UsageError of one line naming it by ``label``: not found, unreadable,
    a directory (``directory_hint``: the rest of the sentence after ``label``), not a regular
    file, or larger than ``limit`` bytes (checked again while reading: a file that grows)."""
    st = check_regular(path, label, directory_hint)
    if st.st_size > limit:                  # refused by its size, before a byte is read
        raise UsageError(f"{label}: larger than {_size_words(limit)} ({_size_words(st.st_size)}); not a file "
                         "commprof reads whole")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise UsageError(f"{label}: file not found") from None
    except OSError as e:
        raise UsageError(f"{label}: cannot read ({e.strerror or e})") from None
    if len(data) > limit:
        raise UsageError(f"{label}: larger than {_size_words(limit)}; not a file commprof reads whole")
    return data


def open_user_file(path: str, label: str, directory_hint: str | None = None):
    """A regular file opened for reading in binary (the caller bounds what it reads)."""
    check_regular(path, label, directory_hint)
    try:
        return open(path, "rb")
    except OSError as e:
        raise UsageError(f"{label}: cannot read ({e.strerror or e})") from None


def cannot_write(path: str, e: OSError) -> UsageError:
    """The one-line error of a failed write: the file, and the reason (a full disk: ENOSPC)."""
    why = e.strerror or os.strerror(e.errno) if e.errno else str(e)
    hint = "; free space or choose another --out" if e.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    return UsageError(f"'{path}': cannot write ({why}){hint}")


def remove_quietly(path: str) -> None:
    """Remove a temporary file if it is there; a failure to remove it must not hide the cause."""
    try:
        os.remove(path)
    except OSError:
        pass


@contextlib.contextmanager
def atomic_path(path: str):
    """Yield a temporary path beside ``path`` to write the whole file into (a chart's savefig, a
    DataFrame's to_csv); on success it is fsynced and renamed onto ``path``; on any failure it is
    removed, ``path`` keeps what it held, and an OSError becomes one UsageError naming ``path``."""
    tmp = path + TMP_SUFFIX
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        err = cannot_write(path, e)
        err.errno = e.errno                 # callers may fall back on a full disk (ENOSPC)
        raise err from None
    finally:
        remove_quietly(tmp)


def write_atomic(path: str, data: str | bytes) -> str:
    """Write ``data`` (text is UTF-8) as the whole of ``path``, atomically; returns ``path``."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(raw)
            f.flush()
    return path


def write_in_place(path: str, data: bytes) -> str:
    """Overwrite the existing file ``path`` with ``data`` in place (same inode, its own blocks),
    then cut it to ``data``'s length: the fallback of a small file's last write when the disk is
    full and no temporary file fits (not atomic: used only where the atomic write already failed).
    An OSError is one UsageError naming ``path``."""
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise cannot_write(path, e) from None
    return path


def write_json(path: str, obj, **dump_kwargs) -> str:
    """``obj`` as JSON (indented by 2 unless told otherwise, a newline at the end), atomically."""
    dump_kwargs.setdefault("indent", 2)
    return write_atomic(path, json.dumps(obj, **dump_kwargs) + "\n")


@contextlib.contextmanager
def all_or_none(*paths: str):
    """Around the writes of files that only make sense together (a table and the ``meta.json``
    that says what it holds): on any failure the ones among ``paths`` that were not there before
    are removed again, so a full disk leaves all of them or none (files that were there keep what
    they held: each write is atomic)."""
    new = [p for p in paths if not os.path.lexists(p)]
    try:
        yield
    except BaseException:
        for p in new:
            remove_quietly(p)
        raise


def read_json_object(path: str, label: str) -> dict:
    """``label`` names the file in errors, e.g. "model config 'x/config.json'".

    Every way a file can fail to be one JSON object (missing, unreadable, a directory, not UTF-8,
    corrupt, an integer over Python's 4,300-digit limit, nested too deep, an array or a number at
    the top) is a UsageError of one line.
    """
    raw = read_user_bytes(path, label)
    bom = 3 if raw.startswith(b"\xef\xbb\xbf") else 0      # a UTF-8 byte order mark (some Windows editors)
    try:
        data = json.loads(raw[bom:].decode("utf-8"))
    except UnicodeDecodeError as e:           # decoded whole, so the offset is the file's
        raise UsageError(f"{label}: not valid JSON, it is corrupt (not UTF-8 text: byte {bom + e.start} is "
                         f"0x{raw[bom + e.start]:02x})") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{label}: not valid JSON, it is corrupt (line {e.lineno}: {e.msg})") from None
    except ValueError:                  # json's int() of a number with more than 4,300 digits
        raise UsageError(f"{label}: not valid JSON for commprof (a number has more than 4,300 digits)") from None
    except RecursionError:
        raise UsageError(f"{label}: not valid JSON for commprof (arrays or objects nested too deep)") from None
    if not isinstance(data, dict):
        raise UsageError(f"{label}: expected a JSON object {{...}} at the top, got {_kind(data)}")
    return data


def _kind(value) -> str:
    """A JSON value's kind in words: 'an array', 'a string', 'a number', ..."""
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    return "null"
