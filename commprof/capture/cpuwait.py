"""The client's own wait for a CPU, and the CPUs a local server pins its threads to.

Why: ``commprof serve`` timestamps a token when its process reads it. On a machine whose cores the
client shares with the server, the client can sit on the kernel's run queue while the tokens wait
in its socket: a request then reads as one burst at the end (TTFT = the whole request), and in a
closed loop the next request leaves late. vLLM on CPU binds its model threads to cores
(``VLLM_CPU_OMP_THREADS_BIND``) and its workers busy-poll their message queue between steps, so a
client placed on one of those cores competes with a thread that never sleeps during a level.

Two things here, both Linux-only and harmless elsewhere:

* :class:`WaitMeter`: the main thread's time on a CPU and on the run queue over a level, from
  ``/proc/self/schedstat`` (the kernel's own counters, ns), so a level's row says how late the
  client could have been.
* :func:`place_client`: finds the local server by its listening port (``/proc/net/tcp``), its
  processes and the CPUs their threads are bound to alone (pinned), for meta.json; and restricts
  this process to a CPU list when asked (``--client-cpus``). It does not move the client by
  itself: on the 2-core VM this was measured on, a client held on the CPU vLLM leaves to its
  frontend waited longer for a CPU than one the kernel could place on either core
  (docs/serve.md).
"""
from __future__ import annotations

import os
from urllib.parse import urlsplit

PROC = "/proc"

#: A level's client wait above this share of its wall time is named in the level's burst note.
WAIT_NOTE_PCT = 10.0


def read_schedstat(path: str = os.path.join(PROC, "self", "schedstat")) -> tuple[float, float] | None:
    """(ms on a CPU, ms runnable but waiting on the run queue) of one task since it started, or
    None where the kernel does not publish it. ``/proc/self/schedstat`` is the process's main
    thread: the one that runs serve's event loop and reads the streams."""
    try:
        with open(path) as f:
            run_ns, wait_ns = f.read().split()[:2]
        return int(run_ns) / 1e6, int(wait_ns) / 1e6
    except (OSError, ValueError):
        return None


class WaitMeter:
    """``start()`` before a level, ``stop()`` after: ``{"run_ms", "wait_ms"}`` of the main thread
    over it (NaN where not available)."""

    def __init__(self, path: str = os.path.join(PROC, "self", "schedstat")):
        self.path = path
        self._t0 = None

    def start(self) -> None:
        self._t0 = read_schedstat(self.path)

    def stop(self) -> dict:
        t1 = read_schedstat(self.path)
        if self._t0 is None or t1 is None:
            return {"run_ms": float("nan"), "wait_ms": float("nan")}
        return {"run_ms": t1[0] - self._t0[0], "wait_ms": t1[1] - self._t0[1]}


def wait_note(wait_ms: float, wall_s: float) -> str:
    """A sentence for a level whose client waited for a CPU a noticeable share of its wall time
    ('' below :data:`WAIT_NOTE_PCT` or when unknown)."""
    if not (wait_ms == wait_ms and wall_s > 0):
        return ""
    pct = 100.0 * wait_ms / 1e3 / wall_s
    if pct < WAIT_NOTE_PCT:
        return ""
    return (f"commprof's client waited for a CPU {wait_ms:.0f} ms ({pct:.0f}% of the level): tokens can have "
            "waited in its socket, so bursts, TTFT and ITL include the client's own delay (cores shared with "
            "the server or other work)")


# ---------------------------------------------------------------------------------------------
# Placement


def parse_cpu_list(text: str) -> set[int]:
    """``"0-3,8,10-11"`` (the kernel's Cpus_allowed_list, taskset -c) as a set of CPU ids; a bad
    item raises ValueError."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if a < 0 or b < a:
            raise ValueError(f"bad CPU range {part!r}")
        cpus.update(range(a, b + 1))
    return cpus


def listener_inodes(port: int, proc: str = PROC) -> set[str]:
    """Socket inodes listening on TCP ``port`` (any address, IPv4 or IPv6)."""
    out = set()
    for name in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc, "net", name)) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f_ = line.split()
            if len(f_) > 9 and f_[3] == "0A" and f_[1].rsplit(":", 1)[-1].upper() == f"{port:04X}":
                out.add(f_[9])
    return out


def _listdir(path: str) -> list[str]:
    """A /proc directory's entries; none where it is gone or not ours to read."""
    try:
        return os.listdir(path)
    except OSError:
        return []


def server_pids(port: int, proc: str = PROC) -> set[int]:
    """The processes holding a socket that listens on ``port``, and all their descendants (vLLM's
    engine core and workers are the API server's children)."""
    inodes = listener_inodes(port, proc)
    if not inodes:
        return set()
    want = {f"socket:[{i}]" for i in inodes}
    roots, parent = set(), {}
    for pid in (int(d) for d in _listdir(proc) if d.isdigit()):
        try:
            with open(os.path.join(proc, str(pid), "stat")) as f:
                parent[pid] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        fd_dir = os.path.join(proc, str(pid), "fd")
        for fd in _listdir(fd_dir):
            try:
                if os.readlink(os.path.join(fd_dir, fd)) in want:
                    roots.add(pid)
                    break
            except OSError:
                continue
    tree, grew = set(roots), True
    while grew:
        new = {p for p, pp in parent.items() if pp in tree and p not in tree}
        tree |= new
        grew = bool(new)
    return tree


def pinned_cpus(pids, proc: str = PROC) -> set[int]:
    """CPUs that some thread of ``pids`` is bound to alone (its Cpus_allowed_list is one CPU)."""
    out: set[int] = set()
    for pid in pids:
        task_dir = os.path.join(proc, str(pid), "task")
        for tid in _listdir(task_dir):
            try:
                with open(os.path.join(task_dir, tid, "status")) as f:
                    for line in f:
                        if line.startswith("Cpus_allowed_list:"):
                            cpus = parse_cpu_list(line.split(":", 1)[1])
                            if len(cpus) == 1:
                                out |= cpus
                            break
            except (OSError, ValueError):
                continue
    return out


def place_client(url: str, how: str = "any", proc: str = PROC) -> dict:
    """Where serve's client runs: ``how`` is ``any`` (where the kernel puts it) or a CPU list
    (``"1,3"``, ``"2-3"``: this process is restricted to it). Returns, for meta.json,
    ``client_cpus``, ``server_pinned_cpus`` (the CPUs threads of the server at ``url`` are bound
    to alone, when it runs on this machine; else None), ``how`` and ``note``. A list that names
    no CPU this process may use raises ValueError."""
    try:
        allowed = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return {"how": how, "client_cpus": None, "server_pinned_cpus": None,
                "note": "CPU affinity not available on this platform"}
    got = {"how": how, "client_cpus": sorted(allowed), "server_pinned_cpus": None, "note": ""}
    if how != "any":
        want = parse_cpu_list(how) & allowed
        if not want:
            raise ValueError(f"names no CPU this process may run on (allowed: {_cpu_text(allowed)})")
        os.sched_setaffinity(0, want)
        got.update(client_cpus=sorted(want), note="restricted as given (--client-cpus)")
    u = urlsplit(url)
    if (u.hostname or "") not in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
        got["note"] = "; ".join(filter(None, [got["note"], "the server is not on this machine"]))
        return got
    pids = server_pids(u.port or (443 if u.scheme == "https" else 80), proc)
    if not pids:
        got["note"] = "; ".join(filter(None, [got["note"], "no process of this machine found listening on the "
                                                           "server's port"]))
        return got
    pinned = pinned_cpus(pids, proc)
    got["server_pinned_cpus"] = sorted(pinned)
    shared = pinned & set(got["client_cpus"])
    got["note"] = "; ".join(filter(None, [got["note"], (
        f"the server (pid {min(pids)}) pins threads to CPU {_cpu_text(pinned)}; the client may run on CPU "
        f"{_cpu_text(got['client_cpus'])}" + (f", {_cpu_text(shared)} shared with those threads" if shared else ""))
        if pinned else f"the server (pid {min(pids)}) pins no thread to a CPU"]))
    return got


def _cpu_text(cpus) -> str:
    return ",".join(str(c) for c in sorted(cpus))
