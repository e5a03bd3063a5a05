"""Reading a JSON object from a user's file with one-line errors that name the file and line."""
from __future__ import annotations

import json

from .errors import UsageError


def read_json_object(path: str, label: str) -> dict:
    """``label`` names the file in errors, e.g. "model config 'x/config.json'"."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise UsageError(f"{label}: file not found") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{label}: not valid JSON, it is corrupt (line {e.lineno}: {e.msg})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{label}: not valid JSON, it is corrupt (not UTF-8 text)") from None
    except OSError as e:
        raise UsageError(f"{label}: cannot read ({e.strerror})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{label}: expected a JSON object")
    return data
