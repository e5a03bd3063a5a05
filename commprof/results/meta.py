"""Provenance: one ``meta.json`` writer for every verb's results dir.

Every dir's ``meta.json`` has the same base keys (:data:`BASE_KEYS`): which verb wrote it and what
kind of figures it holds (measured, imported, modelled, predicted, checklist), the schema version,
status and times, the command, hosts, GPUs, machine, versions and ``NCCL_*`` variables. A verb adds
its own keys beside them. ``machine`` and ``versions`` always describe the machine that wrote the
dir: for imported and modelled dirs that is not the box the figures describe (``hosts`` and
``gpus`` are). Dirs written before the schema (no ``verb``) are read through
:func:`normalize`, which fills the base keys from what the dir holds.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import tempfile
from datetime import datetime

from commprof.model.errors import CommprofError, UsageError, shown
from commprof.model.fileio import TMP_SUFFIX, remove_quietly, shown_path, write_json  # noqa: F401 (shown_path: re-exported)
from commprof.model.fileio import read_json_object, write_in_place
from commprof.model.machine import machine, nccl_env, now_iso, run_env, versions
from commprof.model import registry

META_JSON = "meta.json"
SCHEMA_VERSION = 2

def writing_verbs() -> tuple:
    """The verbs that write results dirs (those of :data:`commprof.model.registry.VERBS` with a
    result kind), and ``reference`` (an analytic profile written as a sweep dir)."""
    return tuple(v.name for v in registry.VERBS if v.kinds) + ("reference",)


#: The verbs that write results dirs (at import; :func:`writing_verbs` reads the registry now), and
#: the kinds of figures a dir can hold.
VERBS = writing_verbs()
KINDS = ("measured", "imported", "modelled", "predicted", "checklist")

BASE_KEYS = ("schema_version", "verb", "kind", "what", "status", "start_time", "end_time", "command",
             "hosts", "gpus", "machine", "versions", "nccl_env", "env")


def require_results_dir(path: str) -> None:
    """A results dir a reader was given: one line when it is missing or is not a directory."""
    if not os.path.isdir(path):
        raise UsageError(f"results dir '{path}' " + ("is not a directory" if os.path.exists(path) else "does not exist"))

def user_command(argv) -> list[str]:
    """The command as a user would type it again: the program as ``commprof`` (the console script
    or ``python -m commprof``, wherever it was installed), the rest as given. A committed results
    dir then names no machine's install path."""
    args = [str(a) for a in argv]
    if args:
        head = os.path.basename(args[0])
        if head == "commprof" or (head == "__main__.py" and os.path.basename(os.path.dirname(args[0])) == "commprof"):
            args[0] = "commprof"
    return args

def provenance(verb: str, kind: str, what: str, *, command=None, hosts=None, gpus=None,
               status: str = "running", **extra) -> dict:
    """The ``meta.json`` of a new results dir: the base keys, then ``extra`` (the verb's own).

    ``hosts`` defaults to this host (pass ``[]`` when the hosts are unknown); ``gpus`` is a list
    of GPU names (empty when none)."""
    if verb not in writing_verbs():
        raise ValueError(f"verb {verb!r}: use one of {writing_verbs()}")
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: use one of {KINDS}")
    start = now_iso()
    meta = {
        "schema_version": SCHEMA_VERSION, "verb": verb, "kind": kind, "what": what, "status": status,
        "start_time": start, "end_time": None if status == "running" else start,
        "command": user_command(command if command is not None else sys.argv),
        "hosts": sorted(set(hosts)) if hosts is not None else [socket.gethostname()],
        "gpus": [str(g) for g in gpus] if gpus else [],
        "machine": machine(), "versions": versions(), "nccl_env": nccl_env(), "env": run_env(),
        "writer": writer_info(),
    }
    meta.update(extra)
    return meta


def file_sha256(path: str) -> str:
    """The sha256 of a source file, recorded in an imported dir's provenance (read in 1 MiB blocks)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def rank_fields(rank_infos: list[dict]) -> dict:
    """hosts, GPU names, world size and ranks from the ranks' own reports (``runinfo.rank_info``)."""
    gpus = sorted({i["gpu"] for i in rank_infos if i.get("gpu") not in (None, "n/a")})
    return {"hosts": sorted({i["host"] for i in rank_infos}), "gpus": gpus or ["none (CPU ranks)"],
            "world_size": len(rank_infos), "ranks": rank_infos}


#: Where a run's results go without --out: a folder of results/ that git ignores, so a run on a
#: checkout never shows as untracked beside the committed example dirs.
RUNS_DIR = os.path.join("results", "runs")


def default_out_dir(root: str = RUNS_DIR, suffix: str = "") -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(root, f"{stamp}-{socket.gethostname()}{suffix}")


def check_writable(path: str) -> None:
    """Refuse an output dir that cannot be written: a file in its place or on its path, a
    read-only file system, no permission. Found by writing (as root, permission bits say
    nothing): the missing dirs are made and a probe file written, then all removed again, so a
    refusal, or a check that passes, leaves nothing behind."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"output dir '{path}' is a file, not a directory")
    missing, p = [], os.path.abspath(path)
    while not os.path.lexists(p):
        missing.append(p)
        if os.path.dirname(p) == p:
            break
        p = os.path.dirname(p)
    if os.path.lexists(p) and not os.path.isdir(p):
        raise UsageError(f"output dir '{path}': '{p}' on its path is a file, not a directory")
    made = []
    try:
        for d in reversed(missing):
            os.mkdir(d)
            made.append(d)
        fd, probe = tempfile.mkstemp(prefix=".commprof-write-test-", dir=path)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        made_dir = e.filename and os.path.abspath(e.filename) in missing[1:]     # an ancestor of path
        where = f" (making '{e.filename}')" if made_dir else ""
        raise UsageError(f"output dir '{path}': cannot write there{where}: {e.strerror or e}; "
                         "choose another --out") from None
    finally:
        for d in reversed(made):
            try:
                os.rmdir(d)
            except OSError:
                pass


def check_out_dir(path: str, resume: bool) -> None:
    """Refuse a directory that cannot be written, or that holds other content unless resuming a
    commprof results dir (and an empty or missing one when resuming: nothing to continue)."""
    if not os.path.exists(path):
        if resume:
            raise UsageError(f"--resume: output dir '{path}' does not exist")
        check_writable(path)
        return
    if not os.path.isdir(path):
        raise UsageError(f"output dir '{path}' is a file, not a directory")
    check_writable(path)
    entries = sorted(os.listdir(path))
    if not entries:
        if resume:
            raise UsageError(f"--resume: output dir '{path}' is empty, there is nothing to resume; "
                             "drop --resume to start a sweep there")
        return
    if not resume:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise UsageError(f"output dir '{path}' already holds files ({shown}); "
                         "choose another --out, or pass --resume to continue that sweep")
    if META_JSON not in entries:
        raise UsageError(f"--resume: '{path}' is not a commprof results dir (no {META_JSON})")


def read_meta(path: str) -> dict:
    mp = os.path.join(path, META_JSON)
    if not os.path.exists(mp):
        raise UsageError(f"results dir '{path}': no {META_JSON} (not a commprof results dir)")
    return read_json_object(mp, f"results dir '{path}': {META_JSON}")


def write_meta(path: str, meta: dict) -> None:
    """Atomic: a temporary file renamed into place, so a reader never sees half a file. A write
    that fails (a full disk, a read-only dir) is one UsageError naming the file; the old
    ``meta.json`` stays as it was and no temporary file is left."""
    if meta.get("status") == "running":     # this process writes the dir now: readers can ask if it lives
        meta["writer"] = writer_info()
    write_json(os.path.join(path, META_JSON), meta, indent=2, sort_keys=False, default=str)


#: The kinds of file commprof writes into a results dir (each through ``fileio``'s atomic writer).
_WRITTEN_EXTS = (".json", ".csv", ".png", ".md", ".html", ".jsonl")


def remove_temp_files(path: str) -> None:
    """Remove the temporary files a writer killed mid-write can leave in a results dir
    (``meta.json.tmp``, ``<table>.csv.tmp``); nothing else is touched."""
    try:
        names = os.listdir(path)
    except OSError:
        return
    for name in names:
        if name.endswith(TMP_SUFFIX) and os.path.splitext(name[:-len(TMP_SUFFIX)])[1] in _WRITTEN_EXTS:
            remove_quietly(os.path.join(path, name))


def start(path: str, meta: dict) -> dict:
    """Create ``path`` and write ``meta`` into it; returns ``meta``."""
    os.makedirs(path, exist_ok=True)
    write_meta(path, meta)
    return meta


def stamp(path: str, meta: dict) -> bool:
    """Write ``meta`` into an output dir unless it already holds a ``meta.json`` (``check`` or
    ``report`` may write beside another verb's results: that provenance stays)."""
    if os.path.exists(os.path.join(path, META_JSON)):
        return False
    os.makedirs(path, exist_ok=True)
    write_meta(path, meta)
    return True


def finish_meta(path: str, status: str, error: str | None = None):
    """Mark the latest run in ``meta.json`` as complete or failed (keeps every row). Raises
    UsageError when ``meta.json`` cannot be written (a full disk)."""
    try:
        meta = read_meta(path)
    except UsageError:
        return
    meta["status"] = status
    meta["end_time"] = now_iso()
    if error:
        meta["error"] = error
    elif "error" in meta:
        del meta["error"]
    if meta.get("runs"):
        meta["runs"][-1].update(end_time=meta["end_time"], status=status, **({"error": error} if error else {}))
    try:
        write_meta(path, meta)
    except UsageError as e:
        if getattr(e, "errno", None) not in (errno.ENOSPC, errno.EDQUOT):
            raise
        _finish_in_place(path, meta, e)


def _finish_in_place(path: str, meta: dict, cause: UsageError) -> None:
    """The disk is full: no temporary ``meta.json`` fits, so the finished one is written over the
    old file's own bytes (compact JSON where the indented text would not fit), saying the disk was
    full; else a reader later finds "running" and calls the run killed. Raises ``cause`` if even
    that fails."""
    meta["disk_full"] = True
    if meta.get("status") != "complete":
        meta["status"] = "failed"
        why = "the disk is full (meta.json finished in place)"
        meta["error"] = f"{meta['error']}; {why}" if meta.get("error") else why
        if meta.get("runs"):
            meta["runs"][-1].update(status="failed", error=meta["error"])
    mp = os.path.join(path, META_JSON)
    text = json.dumps(meta, indent=2, sort_keys=False, default=str) + "\n"
    try:
        if len(text.encode()) > os.path.getsize(mp):
            text = json.dumps(meta, separators=(",", ":"), sort_keys=False, default=str) + "\n"
        write_in_place(mp, text.encode())
    except (OSError, UsageError):
        raise cause from None


@contextlib.contextmanager
def failing(path: str, what: str = "charts"):
    """Around what a verb writes after its rows are complete (its charts): a failure there marks
    ``meta.json`` failed (best effort: the failed file's temporary is gone, so the small meta write
    usually fits) before the error goes on, so the dir never says complete with a chart missing."""
    try:
        yield
    except (CommprofError, OSError) as e:
        try:
            finish_meta(path, "failed", f"{what}: {e}")
        except (CommprofError, OSError):
            pass
        raise


def normalize(meta: dict, verb: str) -> dict:
    """A copy of ``meta`` with every base key, for dirs written before the schema (or by hand):
    ``verb`` as the dir's files say, ``gpus`` always a list, missing keys empty."""
    m = dict(meta)
    m.setdefault("schema_version", 1)
    m.setdefault("verb", verb)
    m.setdefault("kind", {"check": "checklist"}.get(verb, "measured"))
    m.setdefault("what", "")
    m.setdefault("status", "unknown")
    m.setdefault("start_time", None)
    m.setdefault("end_time", None)
    m.setdefault("command", [])
    hosts = m.get("hosts") or ([m["host"]] if m.get("host") else [])
    m["hosts"] = [str(h) for h in hosts] if isinstance(hosts, list) else [str(hosts)]
    gpus = m.get("gpus")
    if isinstance(gpus, int) and not isinstance(gpus, bool):       # p2p before the schema: a count
        m.setdefault("gpu_count", gpus)
        gpus = []
    m["gpus"] = [str(g) for g in gpus] if isinstance(gpus, list) else ([] if gpus is None else [str(gpus)])
    for k in ("machine", "versions", "nccl_env", "env"):
        if not isinstance(m.get(k), dict):
            m[k] = {}
    return m


# --- a run that did not finish -------------------------------------------------------------------

#: A run on another host whose dir has not changed for this long counts as gone (seconds).
STALE_S = 30 * 60


def _pid_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) of a process (Linux /proc), to tell a
    zombie or a later process given the same pid from the writer; None where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _pid_start(pid: int) -> int | None:
    st = _pid_stat(pid)
    return None if st is None else st[1]


def writer_info() -> dict:
    """Who writes a running dir: host, pid, the pid's start time and a heartbeat (the time of this
    write; appended rows move the dir's files' mtimes, which readers take as later beats)."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "pid_start": _pid_start(pid), "heartbeat": now_iso()}


def _alive(writer: dict) -> bool | None:
    """True/False for a writer on this host; None when it ran on another host (cannot look)."""
    if not isinstance(writer, dict) or writer.get("host") != socket.gethostname():
        return None
    pid = writer.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 1 << 22:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass                                # another user's live process
    except OSError:
        return None
    started, now = writer.get("pid_start"), _pid_stat(pid)
    if now is None:
        return True
    return now[0] not in ("Z", "X") and not (isinstance(started, int) and now[1] != started)


def last_change_s(path: str) -> float | None:
    """Seconds since any file in ``path`` last changed (the heartbeat a reader sees)."""
    import time

    newest = None
    try:
        for e in os.scandir(path):
            try:
                m = e.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            newest = m if newest is None or m > newest else newest
    except OSError:
        return None
    return None if newest is None else max(0.0, time.time() - newest)


def run_state(path: str, meta: dict, done: int | None = None) -> tuple[str, str | None]:
    """(state, line) of the run that wrote ``path``: ``complete``, ``failed``, ``interrupted``,
    ``running`` (its writer is alive) or ``dead`` (meta says running but its writer is gone, or on
    another host nothing changed for :data:`STALE_S`), with one line for a reader to print unless
    complete, e.g. "unfinished sweep (2 of 22 cells): failed: ..." (``done``: cells written)."""
    status = meta.get("status", "unknown")
    if status not in ("failed", "interrupted", "running"):     # complete, or no status commprof writes
        return ("complete" if status == "complete" else "unknown"), None
    verb = meta.get("verb") if meta.get("verb") in VERBS else "run"
    planned = meta.get("cells_planned")
    cells = ""
    if isinstance(done, int) and isinstance(planned, int) and not isinstance(planned, bool) and planned > 0:
        cells = f" ({done} of {planned} cells)"
    elif isinstance(done, int):
        cells = f" ({done} cells written)"
    writer = meta.get("writer") if isinstance(meta.get("writer"), dict) else {}
    who = (f"pid {shown(writer.get('pid'), 24)} on host {shown(writer.get('host'), 60)}".replace("'", "")
           if writer else "its writer")
    if status == "running":
        alive = _alive(writer)
        if alive is None:
            age = last_change_s(path)
            alive = None if age is None else age < STALE_S
            if alive is False:
                return "dead", (f"unfinished {verb}{cells}: meta.json says running but nothing in '{path}' "
                                f"changed for {age / 60:,.0f} min ({who}); it likely died")
        if alive is False:
            return "dead", (f"unfinished {verb}{cells}: meta.json says running but its writer ({who}) is "
                            "gone: it was killed")
        return "running", f"unfinished {verb}{cells}: still running ({who})"
    error = " ".join(str(meta.get("error") or "").split())[:300]      # one line, whatever the file holds
    return status, f"unfinished {verb}{cells}: {status}" + (f": {error}" if error else "")


# --- one writer per dir ---------------------------------------------------------------------------

_LOCKS: dict = {}


def lock_dir(path: str, what: str = "--resume") -> None:
    """Hold ``path``'s lock (an flock on the directory itself: nothing is written into it) until
    :func:`unlock_dir` or this process ends; a second run asking for it is refused at once."""
    import fcntl

    key = os.path.abspath(path)
    if key in _LOCKS:
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as e:
        raise UsageError(f"{what}: cannot lock '{path}' ({e.strerror or e})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise UsageError(f"{what}: '{path}' is being written by another commprof run right now; wait for it "
                         "to end, or use another --out") from None
    _LOCKS[key] = fd


def unlock_dir(path: str) -> None:
    fd = _LOCKS.pop(os.path.abspath(path), None)
    if fd is not None:
        os.close(fd)            # closing the descriptor drops the flock
