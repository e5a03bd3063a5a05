"""Reading a user's file (its bytes, or one JSON object) with one-line errors that name the file."""
from __future__ import annotations

import json

from .errors import UsageError
from .fileio import read_user_bytes  # noqa: F401  (one reader of a user's file; kept importable here)


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
