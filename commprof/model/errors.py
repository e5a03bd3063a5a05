"""Known failures and the exit codes they map to.

Every failure a user can cause or meet (bad flags, missing GPUs, dead or hung ranks, corrupt
files) is raised as a :class:`CommprofError` carrying one line of text. The CLI prints that line
and exits with ``exit_code``; ``COMMPROF_DEBUG=1`` adds the traceback.
"""
from __future__ import annotations

import socket

# Exit codes, documented in the README.
EXIT_OK = 0
EXIT_WRONG = 1          # a correctness check found wrong elements
EXIT_USAGE = 2          # bad flag, model, size list, config file, output dir
EXIT_DEVICE = 3         # not enough devices for the requested backend / TP degree
EXIT_RANK_DIED = 4      # a rank exited or was killed mid-run
EXIT_RANK_HUNG = 5      # the watchdog found no progress for --timeout seconds
EXIT_RANK_ERROR = 6     # a rank raised an error (e.g. a collective failed)
EXIT_CHECK_FAILED = 8   # commprof check: an item FAILed
EXIT_INSUFFICIENT_EVIDENCE = 9   # commprof check: too few measured items judged for a verdict (nothing FAILed)


class CommprofError(Exception):
    """A failure with a one-line, user-facing explanation."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(CommprofError):
    exit_code = EXIT_USAGE


class DeviceError(CommprofError):
    exit_code = EXIT_DEVICE


class RankDied(CommprofError):
    exit_code = EXIT_RANK_DIED


class RankHung(CommprofError):
    exit_code = EXIT_RANK_HUNG


class RankFailed(CommprofError):
    exit_code = EXIT_RANK_ERROR


def where(rank: int | None = None, stage: str | None = None, host: str | None = None) -> str:
    """Prefix naming host, rank and stage, e.g. ``host=box1 rank=3 stage=all_reduce tp=4 16KiB``."""
    parts = [f"host={host or socket.gethostname()}"]
    if rank is not None:
        parts.append(f"rank={rank}")
    if stage:
        parts.append(f"stage={stage}")
    return " ".join(parts)


EXIT_NO_GPU = 7         # no NVIDIA driver, no NVML bindings, or NVML sees no GPU


class NoGpuError(CommprofError):
    """NVML cannot be used here: no bindings, no driver, or zero devices."""

    exit_code = EXIT_NO_GPU


def shown(value, limit: int = 60) -> str:
    """A user's value as it goes into a one-line message: ``repr`` (so a newline or a control byte
    cannot break the line), cut to about ``limit`` characters with the full length named."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    try:
        text = repr(value)
    except (ValueError, RecursionError):      # holds an integer over Python's 4,300-digit limit, or nests deep
        return f"a {type(value).__name__} too large to print"
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text):,} characters)"
    return text


def warn(message: str) -> None:
    """A legal but odd input: one line on stderr, the run goes on."""
    import sys

    print(f"commprof: warning: {message}", file=sys.stderr)


class BadValue(UsageError, ValueError):
    """A value that breaks its rule (a size, a count). Also a ValueError, so a caller that catches
    ValueError to put its flag's name in front keeps working."""


EXIT_TERMINATED = 143       # 128 + SIGTERM, as a shell reports a process ended by it


class Terminated(KeyboardInterrupt):
    """SIGTERM to commprof: handled like Ctrl-C (ranks ended, what was measured written, meta
    ``interrupted``), exit 143. A KeyboardInterrupt so every handler of Ctrl-C handles it too."""

    exit_code = EXIT_TERMINATED
    reason = "terminated by SIGTERM"
