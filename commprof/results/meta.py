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

import json
import os
import socket
import sys
import tempfile
from datetime import datetime

from ..errors import UsageError
from ..jsonfile import read_json_object
from ..runinfo import machine, nccl_env, now_iso, versions

META_JSON = "meta.json"
SCHEMA_VERSION = 2

#: The verbs that write results dirs, and the kinds of figures a dir can hold.
VERBS = ("sweep", "trace", "moe", "p2p", "topo", "plan", "import", "reference", "check", "report", "gap", "serve", "predict")
KINDS = ("measured", "imported", "modelled", "predicted", "checklist")

BASE_KEYS = ("schema_version", "verb", "kind", "what", "status", "start_time", "end_time", "command",
             "hosts", "gpus", "machine", "versions", "nccl_env")


def provenance(verb: str, kind: str, what: str, *, command=None, hosts=None, gpus=None,
               status: str = "running", **extra) -> dict:
    """The ``meta.json`` of a new results dir: the base keys, then ``extra`` (the verb's own).

    ``hosts`` defaults to this host (pass ``[]`` when the hosts are unknown); ``gpus`` is a list
    of GPU names (empty when none)."""
    if verb not in VERBS:
        raise ValueError(f"verb {verb!r}: use one of {VERBS}")
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: use one of {KINDS}")
    start = now_iso()
    meta = {
        "schema_version": SCHEMA_VERSION, "verb": verb, "kind": kind, "what": what, "status": status,
        "start_time": start, "end_time": None if status == "running" else start,
        "command": [str(a) for a in (command if command is not None else sys.argv)],
        "hosts": sorted(set(hosts)) if hosts is not None else [socket.gethostname()],
        "gpus": [str(g) for g in gpus] if gpus else [],
        "machine": machine(), "versions": versions(), "nccl_env": nccl_env(),
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


def default_out_dir(root: str = "results", suffix: str = "") -> str:
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
    final = os.path.join(path, META_JSON)
    tmp = final + TMP_SUFFIX
    text = json.dumps(meta, indent=2, sort_keys=False, default=str) + "\n"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, final)
    except OSError as e:
        raise UsageError(f"'{final}': cannot write ({e.strerror or e})") from None
    finally:
        remove_quietly(tmp)


TMP_SUFFIX = ".tmp"


def remove_quietly(path: str) -> None:
    """Remove a temporary file if it is there; a failure to remove it must not hide the cause."""
    try:
        os.remove(path)
    except OSError:
        pass


def remove_temp_files(path: str) -> None:
    """Remove the temporary files a writer killed mid-write can leave in a results dir
    (``meta.json.tmp``, ``<table>.csv.tmp``); nothing else is touched."""
    try:
        names = os.listdir(path)
    except OSError:
        return
    for name in names:
        if name == META_JSON + TMP_SUFFIX or (name.endswith(".csv" + TMP_SUFFIX)):
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
    write_meta(path, meta)


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
    for k in ("machine", "versions", "nccl_env"):
        if not isinstance(m.get(k), dict):
            m[k] = {}
    return m
