"""Provenance recorded with every run: machine, versions, backend, environment, command line."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import socket
import sys
from datetime import datetime, timezone

from commprof._version import __version__


def now_iso() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


def supports_graph_events(torch) -> bool:
    """True when CUDA events can be recorded inside a captured graph and still be timed after
    replay (``torch.cuda.Event(external=True)``, torch >= 2.8): graph-mode timing needs it."""
    import inspect

    cls = torch.cuda.Event
    for fn in (cls.__new__, cls.__init__):
        try:
            if "external" in inspect.signature(fn).parameters:
                return True
        except (TypeError, ValueError):
            continue
    return False


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "n/a"


def cpu_ranges(cpus: list[int]) -> str:
    """Sorted core numbers as ranges, the form nvidia-smi and taskset use: [0, 1, 2, 3, 8] -> "0-3,8"."""
    runs, start = [], cpus[0]
    for a, b in zip(cpus, cpus[1:] + [None]):
        if b != a + 1:
            runs.append(str(start) if start == a else f"{start}-{a}")
            start = b
    return ",".join(runs)


def cpu_affinity() -> str:
    """The cores this process may run on ("0-3,8"), or "n/a" where the OS does not say."""
    try:
        return cpu_ranges(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return "n/a"


def rank_info(rank: int, local_rank: int, device) -> dict:
    """What one rank runs on (called inside the rank, gathered by rank 0)."""
    info = {"rank": rank, "local_rank": local_rank, "host": socket.gethostname(), "pid": os.getpid(),
            "device": str(device), "gpu": "n/a", "gpu_pci_bus_id": "n/a", "cpu_affinity": cpu_affinity()}
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        props = torch.cuda.get_device_properties(device)
        info["gpu"] = props.name
        info["gpu_memory_bytes"] = int(props.total_memory)
        try:  # PCI location fields exist only in newer torch builds
            info["gpu_pci_bus_id"] = (f"{int(props.pci_domain_id):04x}:{int(props.pci_bus_id):02x}:"
                                      f"{int(props.pci_device_id):02x}")
        except (AttributeError, TypeError, ValueError):
            pass
    return info


def driver_version() -> str:
    """NVIDIA driver version from NVML, or "n/a" (no driver, no GPU, no nvidia-ml-py)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - any NVML failure means "not available"
        return "n/a"


def commprof_commit() -> str:
    """The git commit commprof runs from when it is a checkout (``abc123...``, ``+ local changes``
    when commprof's own code (commprof/, microbench/, cuda_ext/) differs from it; results and docs
    do not count), else ``n/a (not a git checkout)``: two runs of the same
    version number from different commits are told apart."""
    return _commit(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _commit(root: str, _cache: dict = {}) -> str:  # noqa: B006 - one answer per process
    if root in _cache:
        return _cache[root]
    import subprocess

    answer = "n/a (not a git checkout)"
    if os.path.exists(os.path.join(root, ".git")):
        try:
            head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True,
                                  timeout=5)
            if head.returncode == 0 and head.stdout.strip():
                answer = head.stdout.strip()
                dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no",
                                        "--", "commprof", "microbench", "cuda_ext"],
                                       capture_output=True, text=True, timeout=5)
                if dirty.returncode == 0 and dirty.stdout.strip():
                    answer += " + local changes"
        except (OSError, subprocess.SubprocessError):
            answer = "n/a (git not runnable)"
    _cache[root] = answer
    return answer


def _torch_cuda_from_metadata() -> str:
    """The CUDA version torch was built for, read from its ``torch/version.py`` without importing
    torch (a 1 s import for a verb that never uses it); "n/a" for a CPU build or no torch."""
    try:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return "n/a"
        for d in spec.submodule_search_locations:
            try:
                with open(os.path.join(d, "version.py"), encoding="utf-8") as f:
                    m = re.search(r"^cuda\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
            except OSError:
                continue
            return m.group(1) if m else "n/a"
    except (ImportError, ValueError):
        pass
    return "n/a"


def versions() -> dict:
    """commprof, Python, torch, CUDA runtime, NCCL and driver versions. torch is asked only when
    this process has already imported it (the verbs that run ranks); otherwise its version comes
    from the installed package's metadata and NCCL, which only a loaded torch can tell, is "n/a"."""
    out = {"commprof": __version__, "commprof_commit": commprof_commit(), "python": sys.version.split()[0],
           "torch": "n/a",
           "cuda_runtime": "n/a", "nccl": "n/a", "driver": driver_version()}
    if "torch" in sys.modules and sys.modules["torch"] is None:   # its import is blocked: not available
        return out
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            out["torch"] = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            return out
        out["cuda_runtime"] = _torch_cuda_from_metadata()
        return out
    try:
        out["torch"] = torch.__version__
        out["cuda_runtime"] = torch.version.cuda or "n/a"
        if torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001
        pass
    return out


def machine() -> dict:
    return {"host": socket.gethostname(), "platform": platform.platform(), "cpu": cpu_model(),
            "cpu_cores": os.cpu_count()}


#: Variables outside NCCL's own that change what a run measures: which GPUs it sees, how many
#: threads each CPU rank's ops use.
RUN_ENV_VARS = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_DEVICE_MAX_CONNECTIONS",
                "PYTORCH_CUDA_ALLOC_CONF")


def run_env() -> dict:
    """The :data:`RUN_ENV_VARS` set in this process (unset ones left out: "unset" is the default)."""
    return {k: os.environ[k] for k in RUN_ENV_VARS if k in os.environ}


def nccl_env() -> dict:
    """NCCL_* and TORCH_NCCL_* variables: they change what NCCL does, so they travel with results."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "TORCH_NCCL_"))}
