"""Byte sizes: parse ``4K``/``64M`` style values and print them back; numbers read from files as a float or None."""
from __future__ import annotations

import math
import re
from fractions import Fraction

from commprof.model.errors import BadValue, UsageError, shown

_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
           "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}
# ASCII digits only (``\d`` would take other scripts' digits); the number part is bounded so a
# size with hundreds of digits is refused as too large, never converted.
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")
_INT_RE = re.compile(r"^[0-9]+$")

# The largest byte count any size flag takes: more than any one GPU holds (so more than any
# buffer, message or device memory commprof can mean), and far below where floats lose whole bytes.
MAX_BYTES = 1 << 40                     # 1 TiB
# The largest value of an integer list flag (--tp, --batch, --ep, --tokens): a C int, what NCCL
# and torch take for ranks and counts.
MAX_LIST_INT = (1 << 31) - 1


def parse_bytes(text: str, max_bytes: int = MAX_BYTES) -> int:
    """Parse a byte count; suffixes are binary, as in nccl-tests (``4K`` = 4096 bytes).

    Returns a whole number of bytes in ``1..max_bytes``; anything else (not a size, zero, a
    fraction of a byte, hundreds of digits) raises :class:`BadValue` (a UsageError and a
    ValueError) with a one-line reason; callers put their flag's name in front.
    """
    m = _SIZE_RE.match(text) if isinstance(text, str) else None
    if not m or m.group(2).upper() not in _SUFFIX:
        raise BadValue(f"{shown(text, 30)} is not a byte size (examples: 4096, 4K, 64K, 1M, 2G)")
    number = m.group(1)
    if len(number.split(".")[0].lstrip("0")) > 15:     # > 10^15 bytes whatever the suffix
        raise BadValue(f"{shown(text, 30)} is larger than {limit_text(max_bytes)}, the largest size accepted")
    value = Fraction(number) * _SUFFIX[m.group(2).upper()]       # exact: 1.5K is 1536, not 1535.99...
    if value < 1 or value.denominator != 1:
        raise BadValue(f"{shown(text, 30)} is not a positive whole number of bytes")
    if value > max_bytes:
        raise BadValue(f"{shown(text, 30)} is larger than {limit_text(max_bytes)}, the largest size accepted")
    return int(value)


def human_bytes(n: int) -> str:
    """4096 -> '4KiB', 10240 -> '10KiB', 1536 -> '1.5KiB'."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.3g}{unit}"
    return f"{n}B"


def limit_text(n: int) -> str:
    """A size limit in words: 1 << 40 -> '1TiB', 64 << 30 -> '64GiB'."""
    return f"{n >> 40}TiB" if n >= 1 << 40 and n % (1 << 40) == 0 else human_bytes(n)


def parse_int_list(text: str, flag: str, maximum: int = MAX_LIST_INT) -> list[int]:
    """Parse ``2,4,8`` into [2, 4, 8]; every value must be a whole number in ``1..maximum``.

    An empty element (``2,,8`` or a trailing comma) is refused, not skipped: it is usually a
    value that went missing.
    """
    example = "expected positive integers separated by commas, e.g. 2,4,8"
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise UsageError(f"{flag} {shown(text)}: empty; {example}")
    values = []
    for i, p in enumerate(parts, start=1):
        if not p:
            raise UsageError(f"{flag} {shown(text)}: element {i} is empty (two commas in a row, or a comma "
                             f"at an end); {example}")
        if not _INT_RE.match(p):
            raise UsageError(f"{flag} {shown(text)}: {shown(p, 20)} is not a whole number; {example}")
        if len(p.lstrip("0")) > len(str(maximum)) or int(p) > maximum:
            raise UsageError(f"{flag} {shown(text)}: {shown(p, 20)} is larger than {maximum}, the largest "
                             "value accepted")
        if int(p) < 1:
            raise UsageError(f"{flag} {shown(text)}: {p} is not positive; {example}")
        values.append(int(p))
    return values


def finite_float(v, *, above: float | None = None, at_least: float | None = None) -> float | None:
    """``v`` as a float (a number or its text: a CSV cell, a JSON value), or None when it is missing,
    not a number, NaN or infinite, or not ``> above`` / ``>= at_least`` where those are given."""
    if isinstance(v, bool):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(x) or (above is not None and not x > above) or (at_least is not None and not x >= at_least):
        return None
    return x


def json_number(v):
    """``v`` itself when a JSON document gave a number (int or float, not a bool), else None."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
