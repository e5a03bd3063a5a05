"""What every rank does around its body: process group, device, liveness, shutdown.

``rank_session`` is shared by every capability that runs ranks (sweep, trace); ``worker_main`` is
the entry of a rank that commprof spawned itself (see ``commprof.capture.launch``).
"""
from __future__ import annotations

import os
import socket
import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from microbench import faults
from microbench.heartbeat import Heartbeat, start_self_watchdog
from commprof.model import machine as runinfo
from commprof.model.targets import resolve_target
from commprof.model.errors import CommprofError


@dataclass
class RankEnv:
    torch: object
    dist: object
    rank: int
    world: int
    local_rank: int
    device: object
    hb: Heartbeat
    host: str
    fault: object
    world_ctrl: object        # a gloo group over all ranks: barriers, gathers, rows to rank 0
    infos: list               # every rank's runinfo.rank_info, in rank order


def pin_to_core(local_rank: int) -> None:
    """Keep a gloo rank that commprof spawned on one core: the ``local_rank``-th of the cores this
    process may use, round robin. Done first, so the rank's own threads (pulse, gloo's transport)
    start on that core too. On the 2-core VM the benchmarks ran on, pinned ranks gave a 4 KiB
    all-reduce p50 of 0.2 ms instead of 0.3-0.4 ms, and its runs stayed out of the VM's 3-4 ms
    cross-core wake-up mode in 15 of 16 rounds (scripts/bench_cli_overhead.py --cpus all). Ranks
    under torchrun keep the affinity torchrun or the user gave them; without ``sched_setaffinity``
    (not Linux) nothing changes."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[local_rank % len(cpus)]})
    except (AttributeError, OSError):
        pass


@contextmanager
def rank_session(cfg, rank: int, world: int, local_rank: int, store=None, slots=None):
    """Initialise this rank (device, process group, control group, environment) and tear down."""
    import torch
    import torch.distributed as dist

    host = socket.gethostname()
    if cfg.backend == "gloo" and slots is not None:
        pin_to_core(local_rank)
    hb = Heartbeat(rank, slots)
    if slots is None:
        start_self_watchdog(hb, cfg.timeout_s + 10, host)
    else:
        hb.start_pulse()
    fault = faults.from_env()
    if fault is not None:
        fault.install(rank)
    hb.stage("init: process group")
    if cfg.backend == "gloo":
        # One intra-op thread per rank: ranks share the cores and a gloo rank mostly waits.
        torch.set_num_threads(1)
        device = torch.device("cpu")
    else:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    # Collectives give up a little after the watchdog so it names the stuck rank first.
    pg_timeout = timedelta(seconds=cfg.timeout_s + (30 if slots is not None else 0))
    kwargs = dict(backend=cfg.backend, timeout=pg_timeout)
    if cfg.backend == "nccl":
        kwargs["device_id"] = device
    if store is not None:
        dist.init_process_group(store=store, rank=rank, world_size=world, **kwargs)
    else:
        dist.init_process_group(init_method="env://", **kwargs)
    failed = False
    try:
        hb.stage("init: environment")
        world_ctrl = dist.group.WORLD if cfg.backend == "gloo" else dist.new_group(backend="gloo")
        infos = [None] * world
        dist.all_gather_object(infos, runinfo.rank_info(rank, local_rank, device), group=world_ctrl)
        yield RankEnv(torch, dist, rank, world, local_rank, device, hb, host, fault, world_ctrl, infos)
        hb.stage("finish")
        dist.barrier(group=world_ctrl)
    except BaseException:
        failed = True           # the stage stays where it failed: the launcher's error line names it
        raise
    finally:
        if not failed:
            hb.stage("shutdown")
        # NCCL communicators that were captured into CUDA graphs can hang ncclCommDestroy
        # (pytorch/pytorch#115388): on NCCL the process exit releases them instead.
        if cfg.backend == "gloo":
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - shutdown of a failed group must not mask the cause
                pass


def worker_main(cfg, target: str, rank: int, world: int, port: int, slots, errq):
    """Entry of a rank started by commprof itself (spawned). Errors go to the parent as one line."""
    import torch.distributed as dist

    _die_with_parent()
    if os.environ.get("COMMPROF_DEBUG") != "1":
        import warnings
        warnings.filterwarnings("ignore")
    try:
        store = dist.TCPStore("127.0.0.1", port, world + 1, False, timeout=timedelta(seconds=cfg.timeout_s))
        resolve_target(target)(cfg, rank, world, rank, store=store, slots=slots)
    except BaseException as e:  # noqa: BLE001 - every failure must reach the parent as a line
        stage = (slots.stage_of(rank) if slots is not None else "") or "start"
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        tb = traceback.format_exc() if os.environ.get("COMMPROF_DEBUG") == "1" else ""
        # commprof's own errors are already one line and keep their exit code (a file that cannot
        # be written is not a rank fault); anything else is "a rank raised an error" (exit 6).
        ours = _is_commprof_error(e)
        errq.put((rank, stage, msg if ours else f"{type(e).__name__}: {msg}", tb, e.exit_code if ours else None))
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)


def _is_commprof_error(e: BaseException) -> bool:
    return isinstance(e, CommprofError)


def _die_with_parent():
    """Linux: have the kernel SIGKILL this rank when the launching process dies, even by SIGKILL
    (the pulse thread's parent check covers other systems, within a beat)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)          # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
