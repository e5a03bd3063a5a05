"""Starting the ranks of a run, and watching them.

* local (default): commprof spawns the ranks on this machine and watches them from the parent:
  progress bar, a dead rank, a hung rank (``--timeout``), each reported as one line;
* torchrun: when ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` are set, this process *is* a rank; the
  given ranks are used (so a run spans nodes) and each rank watches itself.

A rank's body is a module-level function ``fn(cfg, rank, world, local_rank, store=None,
slots=None)`` named as ``"module:function"`` so spawned processes can import it. ``cfg`` needs
``world_size``, ``timeout_s``, ``out_dir`` and ``progress``; rank 0 writes ``out_dir``.
"""
from __future__ import annotations

import math
import os
import signal
import socket
import sys
import time

from commprof import results
from commprof.results.meta import remove_temp_files
from commprof.model.errors import (EXIT_TERMINATED, CommprofError, DeviceError, RankDied, RankFailed, RankHung,  # noqa: F401
                                    Terminated, UsageError, where)
from commprof.model.machine import supports_graph_events
from commprof.model.targets import resolve_target

STARTUP_GRACE_S = 60.0
GLOO_MAX_LOCAL_RANKS = 64
MODES = ("eager", "graph")
#: --timeout's rule: seconds without progress, a finite number in (0, a day].
MAX_TIMEOUT_S = 86400.0
#: --iters / --warmup at most this many per cell (each timed iteration keeps one sample per rank).
MAX_ITERS = 1_000_000
#: A hung rank's pulse (a thread of its own) is "frozen" when it has not beaten for this long.
FROZEN_AFTER_S = 2.0

def torchrun_env() -> dict | None:
    """RANK/WORLD_SIZE/LOCAL_RANK as set by torchrun, or None when commprof launches itself."""
    if all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        try:
            return {"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"]),
                    "local_rank": int(os.environ["LOCAL_RANK"]),
                    "local_world": int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))}
        except ValueError:
            raise UsageError("RANK/WORLD_SIZE/LOCAL_RANK are set but not integers") from None
    return None


def autogroup_on() -> bool:
    """Linux's ``kernel.sched_autogroup_enabled`` (False where there is no such setting)."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def shared_core_note(backend: str, trun: dict | None) -> str | None:
    """A line for gloo ranks under torchrun that outnumber this node's cores: torchrun starts each
    worker in a session of its own, and with Linux's autogroup scheduling ranks of different
    sessions that share a core hand over to each other slowly (measured: a back-to-back 4 KiB
    all_reduce 0.68 ms per call under torchrun vs 0.21 ms under commprof's own launcher on one core,
    results/bench/cpu_placement.md). None when it does not apply."""
    if backend != "gloo" or trun is None:
        return None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    if trun["local_world"] <= cores or not autogroup_on():
        return None
    return (f"note: {trun['local_world']} gloo ranks under torchrun share {cores} core(s) here, each in a session "
            "of its own, and autogroup scheduling is on: they hand over to each other slowly, so figures "
            "(back-to-back most) can be several times those of the same run started by commprof itself "
            "(README, \"Where CPU ranks run\")")


def _no_nvidia_driver() -> bool:
    """No NVIDIA kernel driver on this Linux host (no /proc/driver/nvidia, /dev/nvidia0, nor WSL's
    /dev/dxg): no CUDA GPU can be visible, and torch (seconds to import on a busy machine) need not
    be asked."""
    return sys.platform.startswith("linux") and not any(
        os.path.exists(p) for p in ("/proc/driver/nvidia", "/dev/nvidia0", "/dev/dxg"))


def cuda_device_count() -> int:
    if _no_nvidia_driver():
        return 0
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken CUDA install counts as no GPU
        return 0


def resolve_backend(requested: str, max_tp: int, trun: dict | None) -> tuple[str, str]:
    """auto -> NCCL when every rank of this node gets its own CUDA GPU, else gloo on CPU."""
    need = trun["local_world"] if trun else max_tp
    if requested not in ("auto", "nccl", "gloo"):
        raise UsageError(f"--backend '{requested}': use auto, nccl or gloo")
    if requested == "gloo":              # asked for: no GPU count (no torch import before the progress shows)
        return "gloo", "requested with --backend gloo (CPU ranks)"
    gpus = cuda_device_count()
    if requested == "nccl":
        if gpus == 0:
            raise DeviceError(f"{where()}: --backend nccl needs NVIDIA GPUs, but no CUDA GPU is visible "
                              "(check nvidia-smi, CUDA_VISIBLE_DEVICES and that torch is a CUDA build); "
                              "use --backend gloo to run on CPU")
        if gpus < need:
            raise DeviceError(f"{where()}: --backend nccl needs one GPU per rank: {need} ranks on this node "
                              f"but {gpus} CUDA GPU(s) visible; lower --tp or use --backend gloo")
        return "nccl", f"requested with --backend nccl ({gpus} CUDA GPUs visible)"
    if gpus >= need:
        return "nccl", f"auto: {gpus} CUDA GPUs visible, {need} needed, so NCCL"
    return "gloo", f"auto: {gpus} CUDA GPU(s) visible, {need} needed for NCCL, so gloo on CPU"


def choose_world(requested_backend: str, max_ranks: int, flag: str) -> tuple[int, str, str, dict | None]:
    """(world size, backend, why, torchrun env) for a run that needs ``max_ranks`` ranks; ``flag``
    names the option asking for them in errors (--tp, --ep). Raises DeviceError."""
    trun = torchrun_env()
    if trun:
        world = trun["world"]
        if max_ranks > world:
            raise DeviceError(f"{where(trun['rank'])}: {flag} {max_ranks} needs {max_ranks} ranks, "
                              f"but torchrun started WORLD_SIZE={world}")
    else:
        world = max_ranks
    name, reason = resolve_backend(requested_backend, max_ranks, trun)
    if name == "gloo" and not trun and max_ranks > GLOO_MAX_LOCAL_RANKS:
        raise DeviceError(f"{where()}: {flag} {max_ranks} asks for {max_ranks} local CPU ranks; gloo runs at "
                          f"most {GLOO_MAX_LOCAL_RANKS} here (use torchrun across nodes for more)")
    return world, name, reason, trun


def parse_modes(modes: str | None, backend: str) -> list[str]:
    """--modes: eager and/or graph; default both on NCCL, eager elsewhere (graphs need CUDA)."""
    mode_list = [m.strip() for m in (modes or ("eager,graph" if backend == "nccl" else "eager")).split(",")
                 if m.strip()]
    for m in mode_list:
        if m not in MODES:
            raise UsageError(f"--modes: unknown mode '{m}'; use eager and/or graph")
    if "graph" in mode_list and backend != "nccl":
        raise UsageError("--modes graph needs CUDA graphs, i.e. the nccl backend on GPUs")
    if "graph" in mode_list:
        import torch

        if not supports_graph_events(torch):
            raise UsageError(f"--modes graph times CUDA events recorded inside the graph, which needs "
                             f"torch >= 2.8 (torch.cuda.Event(external=True)); this is torch {torch.__version__}: "
                             "upgrade torch or use --modes eager")
    return mode_list


def check_counts(timeout_s: float, iters: int | None = None, warmup: int | None = None) -> None:
    """--timeout a finite number of seconds in (0, 86400], --iters 1..1,000,000, --warmup
    0..1,000,000 (None = the command's default). Checked before any rank starts: a NaN or infinite
    timeout would otherwise fail inside every rank."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not math.isfinite(timeout_s) \
            or not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise UsageError(f"--timeout {timeout_s!r}: must be a positive number of seconds, at most "
                         f"{MAX_TIMEOUT_S:.0f} (a day)")
    if iters is not None and not 1 <= iters <= MAX_ITERS:
        raise UsageError(f"--iters {iters}: must be from 1 to {MAX_ITERS:,}")
    if warmup is not None and not 0 <= warmup <= MAX_ITERS:
        raise UsageError(f"--warmup {warmup}: must be from 0 to {MAX_ITERS:,}")
    check_fault_env()


def check_fault_env() -> None:
    """A malformed ``COMMPROF_TEST_FAULT`` (commprof's own tests set it) is one line, exit 2,
    before any rank starts; a test that asks for a fault must not run without it."""
    from microbench.faults import ENV, FaultSpecError, parse

    spec = os.environ.get(ENV, "")
    try:
        parse(spec)
    except FaultSpecError as e:
        raise UsageError(f"{ENV}={spec!r}: {e} (a variable for commprof's own tests: unset it)") from None


def run_ranks(cfg, target: str, progress=None) -> bool:
    """Run ``target`` on every rank (local launch, or as this torchrun rank). Returns True on the
    process that holds the results (the local parent, or torchrun rank 0). Raises CommprofError.
    ``progress``: what draws the local launch's bar, called as ``progress(None, label,
    starting=...)`` (the verbs pass :func:`commprof.views.console.progress_bar`; None: no bar), so
    the launcher imports no view."""
    check_fault_env()
    trun = torchrun_env()
    if trun:
        _run_as_torchrun_rank(cfg, target, trun)
        return trun["rank"] == 0
    _run_local(cfg, target, progress)
    return True


def _meta_version(out_dir: str):
    """Which ``meta.json`` is there now (every write replaces the file: a new inode). A run marks
    a dir failed or interrupted only if it wrote that meta itself: a refused ``--resume`` leaves the
    complete run it refused as it was."""
    try:
        st = os.stat(os.path.join(out_dir, results.META_JSON))
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _finish(cfg, before, status: str, error: str) -> None:
    """Mark this run's ``meta.json`` (best effort: on a full disk it may not be writable)."""
    now = _meta_version(cfg.out_dir)
    if now is None or now == before:
        return
    try:
        results.finish_meta(cfg.out_dir, status, error)
    except (CommprofError, OSError):
        pass


def _run_as_torchrun_rank(cfg, target: str, trun: dict) -> None:
    before = _meta_version(cfg.out_dir) if trun["rank"] == 0 else None
    try:
        resolve_target(target)(cfg, trun["rank"], trun["world"], trun["local_rank"])
    except Exception as e:  # noqa: BLE001
        if trun["rank"] == 0:
            _finish(cfg, before, "failed", str(e).splitlines()[0] if str(e) else type(e).__name__)
        code = e.exit_code if isinstance(e, CommprofError) else None
        raise RankFailed(f"{where(trun['rank'])}: {type(e).__name__}: "
                         f"{(str(e).strip().splitlines() or [''])[0]}", code) from e


def _run_local(cfg, target: str, progress=None) -> None:
    # within a second of start, before torch loads: the ranks are starting (imports, rendezvous)
    bar = progress(None, cfg.VERB or "run", starting=f"starting {cfg.world_size} rank(s)") \
        if cfg.progress and progress is not None else None
    try:
        _run_local_ranks(cfg, target, bar)
    finally:
        if bar is not None:
            bar.close()


def _run_local_ranks(cfg, target: str, bar) -> None:
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from microbench.heartbeat import SharedSlots
    from microbench.rank import worker_main

    world = cfg.world_size
    ctx = mp.get_context("spawn")
    slots = SharedSlots(ctx, world)
    errq = ctx.SimpleQueue()
    # The parent holds the rendezvous store: no free-port race, and it outlives any rank.
    store = dist.TCPStore("127.0.0.1", 0, world + 1, True, wait_for_workers=False)
    procs = [ctx.Process(target=worker_main, args=(cfg, target, r, world, store.port, slots, errq),
                         name=f"commprof-rank{r}", daemon=True) for r in range(world)]
    before = _meta_version(cfg.out_dir)
    restore_term = _on_sigterm()
    try:
        for p in procs:
            p.start()
        try:
            failure = _watch(cfg, procs, slots, errq, bar)
        except KeyboardInterrupt as e:
            _stop(procs)
            _finish(cfg, before, "interrupted", getattr(e, "reason", "interrupted by the user (Ctrl-C)"))
            raise
        if failure is None:
            return
        _stop(procs)
        _finish(cfg, before, "failed", str(failure))
        raise failure
    finally:
        _stop(procs)
        remove_temp_files(cfg.out_dir)      # a rank killed mid-write leaves its .tmp
        restore_term()


def _stop(procs) -> None:
    """Kill every rank still running and reap them (SIGKILL also ends a stopped process)."""
    for p in procs:
        if p.pid is not None and p.exitcode is None:
            p.kill()
    for p in procs:
        if p.pid is not None:
            p.join(timeout=5)


def _on_sigterm():
    """While ranks run, SIGTERM raises :class:`Terminated` in the launching process, so the ranks
    are ended and the run is marked, as for Ctrl-C. Returns a function that restores the previous
    handler (nothing to restore off the main thread, where Python cannot set one)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        raise Terminated()

    old = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, old if old is not None else signal.SIG_DFL)


def _watch(cfg, procs, slots, errq, bar=None):
    """Poll the ranks until all exit, moving ``bar`` (the progress, or None). Returns None on
    success or the error to raise."""
    host = socket.gethostname()
    last_sum, last_t = -1, time.monotonic()
    errors: dict[int, tuple] = {}
    first_exit_t = None
    t_start = time.monotonic()
    pulses = _Pulses(slots, len(procs))
    while True:
        # a light poll: the parent shares the cores with the ranks it watches
        time.sleep(0.05 if time.monotonic() - t_start < 2.0 else 0.2)
        pulses.update()
        while not errq.empty():
            rank, *report = errq.get()
            errors.setdefault(rank, tuple(report))
        if bar is not None and slots.cells_total.value > 0:
            bar.set_total(int(slots.cells_total.value))
            done = int(slots.rows_done.value)
            sizes, seconds = slots.cell_figures(done)
            bar.update(done, sizes=sizes, seconds=seconds, setups=slots.setup_figures(done))
        elif bar is not None:
            up = sum(slots.progress[r] > 0 for r in range(len(procs)))
            bar.starting(f"starting {len(procs)} rank(s): {up} up" if up else f"starting {len(procs)} rank(s)")
        codes = [p.exitcode for p in procs]
        if all(c == 0 for c in codes):
            return None
        bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if bad:
            # Let the other ranks report (they fail right after a peer dies), then pick the cause.
            first_exit_t = first_exit_t or time.monotonic()
            if time.monotonic() - first_exit_t < 1.5 and any(c is None for c in codes):
                continue
            while not errq.empty():
                rank, *report = errq.get()
                errors.setdefault(rank, tuple(report))
            return _failure(host, procs, codes, errors, slots, verb_of(cfg), cfg.timeout_s)
        total = sum(slots.progress)
        if total != last_sum:
            last_sum, last_t = total, time.monotonic()
            continue
        # Until every rank has imported torch and reached its first stage, allow a start-up
        # grace: 8 ranks importing torch on 2 busy cores can take tens of seconds.
        started = all(slots.progress[r] > 0 for r in range(len(procs)))
        limit = cfg.timeout_s if started else max(cfg.timeout_s, STARTUP_GRACE_S)
        if time.monotonic() - last_t > limit:
            return _hung(host, cfg, procs, slots, pulses)


def verb_of(cfg) -> str:
    """The verb a rank config belongs to, for failure lines ("the trace stopped")."""
    return {"SweepRunConfig": "sweep", "TraceRunConfig": "trace", "MoeRunConfig": "moe"}.get(type(cfg).__name__, "run")


#: What gloo (and NCCL) say when a collective outlived the process group's timeout.
_PG_TIMEOUT = ("timed out waiting", "operation timed out", "watchdog caught collective operation timeout")


def _failure(host, procs, codes, errors, slots, verb: str = "run", timeout_s: float | None = None):
    died = [r for r, c in enumerate(codes) if c not in (None, 0) and r not in errors]
    if died:
        r = died[0]
        c = codes[r]
        how = f"killed by signal {signal.Signals(-c).name}" if c < 0 else f"exited with code {c}"
        return RankDied(f"{where(r, slots.stage_of(r), host)}: rank {how} (pid {procs[r].pid}); "
                        f"the {verb} stopped, rows written so far are kept")
    # Prefer an error that is not just the echo of a peer going away.
    def echo(msg):
        m = msg.lower()
        return any(s in m for s in ("connection closed", "connection reset", "broken pipe", "timed out",
                                    "timeout", "peer"))
    ranked = sorted(errors.items(), key=lambda kv: (echo(kv[1][1]), kv[0]))
    r, (stage, msg, tb, *rest) = ranked[0]
    if timeout_s is not None and all(any(k in str(rep[1]).lower() for k in _PG_TIMEOUT) for rep in errors.values()):
        # every rank that reported gave up waiting inside a collective: a hung (or starved) rank,
        # said as the watchdog says it, with the flag that sets the wait
        first = (str(msg).strip().splitlines() or [""])[0]
        return RankHung(f"{where(r, stage, host)}: a collective waited past the ranks' process-group timeout "
                        f"({timeout_s + 30:.0f} s = --timeout {timeout_s:.0f} + 30 s) and gave up ({first}); a rank "
                        f"stalled or the machine is overloaded: rerun with a longer --timeout (e.g. --timeout "
                        f"{2 * timeout_s:.0f}); the {verb} stopped, rows written so far are kept")
    if tb:
        import sys
        print(tb, file=sys.stderr)
    return RankFailed(f"{where(r, stage, host)}: {msg}", rest[0] if rest else None)


class _Pulses:
    """When each rank's pulse (``slots.pulse``, beaten by a thread of the rank's own) last moved."""

    def __init__(self, slots, world: int):
        self.slots = slots
        now = time.monotonic()
        self.seen = [0] * world
        self.moved = [now] * world

    def update(self):
        now = time.monotonic()
        for r in range(len(self.seen)):
            v = self.slots.pulse[r]
            if v != self.seen[r]:
                self.seen[r], self.moved[r] = v, now

    def frozen_for(self, r: int) -> float:
        """Seconds since rank ``r``'s pulse last moved; 0 before it ever beat (still importing)."""
        return time.monotonic() - self.moved[r] if self.seen[r] else 0.0


def _proc_state(pid) -> str:
    """The process's state letter from /proc (Linux; '' elsewhere): 'T' stopped, 'D' in I/O."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


def _hung(host, cfg, procs, slots, pulses=None):
    """Name the rank the others wait for. In order of evidence: a rank whose process is frozen
    (its pulse thread stopped: SIGSTOP, a debugger, a call holding the interpreter), then a rank
    stuck outside any collective while others wait inside one. (Progress counts do not name it:
    ranks outside a TP group's cells legitimately make fewer steps.)"""
    alive = [r for r, p in enumerate(procs) if p.exitcode is None]
    if pulses is not None:
        pulses.update()
    others = lambda r: ",".join(str(o) for o in alive if o != r) or "none"   # noqa: E731
    frozen = [r for r in alive if pulses is not None and pulses.frozen_for(r) >= FROZEN_AFTER_S]
    if frozen and len(frozen) < len(alive):
        r = max(frozen, key=pulses.frozen_for)
        state = _proc_state(procs[r].pid)
        how = ("its process is stopped (state T: SIGSTOP or a debugger)" if state == "T" else
               f"its process stopped responding (no heartbeat for {pulses.frozen_for(r):.0f} s"
               + (", state D: blocked in the kernel" if state == "D" else "") + ")")
        detail = f"rank hung: {how}, pid {procs[r].pid}; rank(s) {others(r)} wait for it"
        return RankHung(f"{where(r, slots.stage_of(r), host)}: {detail}; no progress for {cfg.timeout_s:.0f} s "
                        f"(--timeout); the run was stopped, rows written so far are kept")
    outside = [r for r in alive if slots.in_coll[r] == 0]
    inside = [r for r in alive if slots.in_coll[r] == 1]
    if outside and inside:
        r = outside[0]
        detail = (f"rank stuck outside any collective for {cfg.timeout_s:.0f} s (--timeout) while "
                  f"rank(s) {','.join(map(str, inside))} wait for it inside the collective")
    else:
        r = alive[0] if alive else 0
        detail = f"no rank made progress for {cfg.timeout_s:.0f} s (--timeout)"
    return RankHung(f"{where(r, slots.stage_of(r), host)}: {detail}; the run was stopped, "
                    f"rows written so far are kept")
