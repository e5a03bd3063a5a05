"""The checklist's thresholds: ``commprof/data/thresholds.toml`` (versioned; each value with its
source), overridden key by key by a user's ``--thresholds FILE``."""
from __future__ import annotations

import copy
import math
import os
import tomllib

from commprof.model.errors import UsageError
from commprof.model.fileio import read_user_bytes

DEFAULT_THRESHOLDS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "thresholds.toml")


def _read_toml(path: str) -> dict:
    data = read_user_bytes(path, f"thresholds file '{path}'", ": is a directory, not a TOML file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"thresholds file '{path}': byte {e.start} (0x{data[e.start]:02x}) is not UTF-8; "
                         "TOML files are UTF-8 text") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"thresholds file '{path}': not valid TOML ({' '.join(str(e).split())})") from None


def _check_number(path: str, key: str, v) -> None:
    """A threshold is a finite number >= 0 (TOML allows nan, inf and negatives: none is a threshold)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return
    if isinstance(v, int) and abs(v) > 10 ** 15:      # TOML integers are unbounded; no threshold is this big
        raise UsageError(f"thresholds file '{path}': key '{key}' has {len(str(abs(v)))} digits: must be a "
                         "finite number >= 0 of at most 15 digits")
    if not math.isfinite(v) or v < 0:
        raise UsageError(f"thresholds file '{path}': key '{key}' = {v!r}: must be a finite number >= 0")


def load_thresholds(path: str | None = None) -> dict:
    """The default thresholds, overridden by ``path``. Unknown keys, wrong types, negative, NaN or
    infinite numbers and unreadable files (a directory, not UTF-8, not TOML) are refused with one
    line naming the file and the key."""
    base = _read_toml(DEFAULT_THRESHOLDS)
    base["_user"] = []                  # "table.key" the user's file set (fixed thresholds override)
    if not path:
        return base
    user = _read_toml(path)
    merged = copy.deepcopy(base)
    for key, val in user.items():
        if key not in base or key == "_user":
            raise UsageError(f"thresholds file '{path}': unknown key '{key}' "
                             f"(known: {', '.join(k for k in base if k != '_user')})")
        if not isinstance(base[key], dict):
            if type(val) is not type(base[key]):
                raise UsageError(f"thresholds file '{path}': key '{key}' must be {type(base[key]).__name__}")
            _check_number(path, key, val)
            merged[key] = val
            continue
        if not isinstance(val, dict):
            raise UsageError(f"thresholds file '{path}': '{key}' must be a table ([{key}])")
        for k, v in val.items():
            if k not in base[key]:
                raise UsageError(f"thresholds file '{path}': unknown key '{key}.{k}' "
                                 f"(known: {', '.join(base[key])})")
            want = base[key][k]
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) if isinstance(want, float) else \
                type(v) is type(want)
            if not ok:
                raise UsageError(f"thresholds file '{path}': key '{key}.{k}' must be {type(want).__name__}, "
                                 f"got {type(v).__name__}")
            _check_number(path, f"{key}.{k}", v)
            merged[key][k] = v
            merged["_user"].append(f"{key}.{k}")
    return merged
