"""Byte sizes: parse ``4K``/``64M`` style values and print them back."""
from __future__ import annotations

import re

from .errors import UsageError

_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
           "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(text: str) -> int:
    """Parse a byte count; suffixes are binary, as in nccl-tests (``4K`` = 4096 bytes)."""
    m = _SIZE_RE.match(text)
    if not m or m.group(2).upper() not in _SUFFIX:
        raise ValueError(f"'{text}' is not a byte size (examples: 4096, 4K, 64K, 1M, 2G)")
    value = float(m.group(1)) * _SUFFIX[m.group(2).upper()]
    if value < 1 or value != int(value):
        raise ValueError(f"'{text}' is not a positive whole number of bytes")
    return int(value)


def human_bytes(n: int) -> str:
    """4096 -> '4KiB', 10240 -> '10KiB', 1536 -> '1.5KiB'."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.3g}{unit}"
    return f"{n}B"


def parse_int_list(text: str, flag: str) -> list[int]:
    """Parse ``2,4,8`` into [2, 4, 8]; every value must be a positive integer."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{flag} '{text}': expected positive integers separated by commas, e.g. 2,4,8") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"{flag} '{text}': expected positive integers separated by commas, e.g. 2,4,8")
    return values
