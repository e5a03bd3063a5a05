"""Build commprof's CUDA kernels on the user's machine at first use, cache them, load them.

Nothing is compiled at install time. The first :func:`load` compiles the ``.cu`` files beside this
module and caches the result; later calls (and later processes) reuse the cache.

Which path is used (one rule, in this order):

* **nvcc** (``backend="nvcc"``, chosen by ``"auto"`` whenever an ``nvcc`` is found on PATH, in
  ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin`` or ``/usr/local/cuda/bin``): :func:`build` runs
  ``nvcc -cubin -arch=sm_XY -O3 -std=c++17 -lineinfo`` once per source for the visible GPU's
  architecture, into ``$COMMPROF_CACHE_DIR/cuda_ext/<arch>-<key>/`` (else
  ``$XDG_CACHE_HOME/commprof/...``, else ``~/.cache/commprof/...``). The key hashes the sources,
  the arch, the nvcc flags and ``nvcc --version``, so an edit or a new toolkit rebuilds.
  :func:`load` then loads each cubin with ``cupy.RawModule(path=...)``.
* **NVRTC through cupy** (``backend="nvrtc"``, chosen by ``"auto"`` when no nvcc is found):
  ``cupy.RawModule(code=<source>)``; cupy compiles for the current GPU and keeps its own cache
  (``~/.cupy/kernel_cache``). The sources include no headers, so NVRTC needs no include path.
* Neither cupy nor a GPU: :class:`CudaUnavailable` (exit code 3) with one line naming what is
  missing and the fix. A missing cupy names the pip extra for the CUDA major torch is built for
  (:func:`gpu_install_hint`: ``commprof[gpu-cuda12]`` installs ``cupy-cuda12x``,
  ``commprof[gpu-cuda13]`` ``cupy-cuda13x``); two CuPy distributions installed side by side (they
  unpack into the same ``cupy`` package) are refused before cupy is imported, naming both.

``COMMPROF_CUDA_BACKEND=nvcc|nvrtc`` forces one path (for example when the local nvcc is newer
than the driver and its cubins do not load).

Copy-engine bandwidth needs no kernel of ours: ``cuda_ext/probes.py`` times
``cudaMemcpyPeerAsync`` (``cudaMemcpyAsync`` on one GPU) through cupy.

:func:`compile_only` compiles every source for one arch without a GPU, cupy or torch (the CI test
uses it for sm_80, sm_90 and sm_120).

Only the standard library is imported at module level (plus :mod:`commprof.model.errors`): cupy is
imported inside the functions that need it, so ``import cuda_ext.loader`` works anywhere.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from commprof.model.errors import DeviceError

SOURCE_DIR = os.path.dirname(os.path.abspath(__file__))

#: Flags every nvcc compile uses (build and compile_only alike).
NVCC_FLAGS = ("-O3", "-std=c++17", "-lineinfo")

#: Every kernel, by the source file (stem) that defines it.
KERNELS = {
    "commprof_p2p_copy": "p2p_probes",
    "commprof_pingpong": "p2p_probes",
    "commprof_spin": "p2p_probes",
    "commprof_oneshot_allreduce_bf16": "oneshot_allreduce",
    "commprof_oneshot_allreduce_fp16": "oneshot_allreduce",
    "commprof_oneshot_allreduce_fp32": "oneshot_allreduce",
}

BACKENDS = ("auto", "nvcc", "nvrtc")

#: commprof's pip extra and the CuPy wheel it installs, by CUDA major. There is no plain ``gpu``
#: extra: pip cannot see which CUDA torch is built for, and a wrong guess installs a second CuPy.
GPU_EXTRAS = {"12": ("gpu-cuda12", "cupy-cuda12x"), "13": ("gpu-cuda13", "cupy-cuda13x")}

#: CuPy distributions that all provide the ``cupy`` package (any two of them overwrite each other).
CUPY_DISTRIBUTIONS = ("cupy", "cupy-cuda11x", "cupy-cuda12x", "cupy-cuda13x")


def gpu_install_hint(cuda_version: str | None) -> str:
    """The pip command that installs the CuPy for a CUDA version (``torch.version.cuda``).

    >>> gpu_install_hint("13.0")
    "pip install 'commprof[gpu-cuda13]' (cupy-cuda13x, for torch's CUDA 13.0)"

    ``None`` (a CPU build of torch, or no torch) or a major without an extra names both extras.
    """
    version = str(cuda_version or "").strip()
    known = GPU_EXTRAS.get(version.split(".")[0])
    if known:
        extra, package = known
        return f"pip install 'commprof[{extra}]' ({package}, for torch's CUDA {version})"
    return " or ".join(f"{'pip install ' if i == 0 else ''}'commprof[{extra}]' ({package})"
                       for i, (extra, package) in enumerate(GPU_EXTRAS.values())) + \
        ", the one matching your CUDA major"


def torch_cuda_version() -> str | None:
    """``torch.version.cuda`` (e.g. ``"13.0"``), or None for a CPU build of torch or no torch."""
    try:
        import torch

        return getattr(getattr(torch, "version", None), "cuda", None) or None
    except Exception:  # noqa: BLE001 - no torch, or a broken one: the hint then names both extras
        return None


def installed_cupy_distributions() -> list[str]:
    """The CuPy distributions installed in this environment (:data:`CUPY_DISTRIBUTIONS`), sorted."""
    import importlib.metadata

    found = []
    for name in CUPY_DISTRIBUTIONS:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.append(name)
    return sorted(found)


class CudaUnavailable(DeviceError):
    """The CUDA kernels cannot be built or loaded here; the message names what is missing and the fix."""


def sources() -> list[str]:
    """Paths of the ``.cu`` files shipped in ``cuda_ext/``, sorted by name."""
    return sorted(os.path.join(SOURCE_DIR, f) for f in os.listdir(SOURCE_DIR) if f.endswith(".cu"))


def find_nvcc() -> str | None:
    """The nvcc to use: PATH first, then $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin; else None."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            cand = os.path.join(root, "bin", "nvcc")
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return cand
    return None


def nvcc_version(nvcc: str) -> str:
    """``nvcc --version`` output (all of it: it goes into the cache key)."""
    try:
        res = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CudaUnavailable(f"nvcc at {nvcc} does not run ({e}): reinstall the CUDA toolkit") from None
    if res.returncode != 0:
        raise CudaUnavailable(f"nvcc at {nvcc} does not run (exit {res.returncode}): reinstall the CUDA toolkit")
    return res.stdout.strip()


def normalize_arch(arch: str) -> str:
    """``"sm_90"``, ``"90"``, ``"9.0"`` or ``"compute_90"`` -> ``"sm_90"`` (suffixes such as ``a`` kept)."""
    a = str(arch).strip().lower()
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)\.(\d)", a)
    if m:
        return f"sm_{m.group(1)}{m.group(2)}"
    m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})([af]?)", a)
    if m:
        return f"sm_{m.group(1)}{m.group(2)}"
    raise CudaUnavailable(f"unknown GPU architecture '{arch}': give it as sm_90, 90 or 9.0")


def detect_arch() -> str:
    """The current GPU's architecture (``sm_XY``): asks cupy, else ``nvidia-smi``."""
    try:
        import cupy

        return normalize_arch(cupy.cuda.Device().compute_capability)
    except ImportError:
        pass
    except Exception as e:  # cupy present but no usable GPU/driver
        raise CudaUnavailable(f"no CUDA GPU visible ({_first_line(e)}): run on a machine with an NVIDIA "
                              f"GPU and driver, or pass arch='sm_90'") from None
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            res = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            first = res.stdout.strip().splitlines()[0] if res.returncode == 0 and res.stdout.strip() else ""
            if first:
                return normalize_arch(first)
        except (OSError, subprocess.TimeoutExpired):
            pass
    raise CudaUnavailable("no CUDA GPU visible to pick an architecture for: run on a machine with an "
                          "NVIDIA GPU and driver, or pass arch='sm_90'")


def cache_root() -> str:
    """``$COMMPROF_CACHE_DIR/cuda_ext``, else ``$XDG_CACHE_HOME/commprof/cuda_ext``, else
    ``~/.cache/commprof/cuda_ext`` (the same root as the other caches of commprof)."""
    base = os.environ.get("COMMPROF_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "commprof")
    return os.path.join(base, "cuda_ext")


def cache_key(arch: str, nvcc_version_text: str) -> str:
    """Hash of every source's name and bytes, the arch, the nvcc flags and the nvcc version."""
    h = hashlib.sha256()
    for path in sources():
        h.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    h.update(f"{normalize_arch(arch)}\0{' '.join(NVCC_FLAGS)}\0{nvcc_version_text}".encode())
    return h.hexdigest()[:16]


def nvcc_command(nvcc: str, source: str, arch: str, out: str) -> list[str]:
    """The nvcc command line that turns one ``.cu`` into one cubin for ``arch``."""
    return [nvcc, "-cubin", f"-arch={normalize_arch(arch)}", *NVCC_FLAGS, "-o", out, source]


def _first_line(e: object) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _compile_one(nvcc: str, source: str, arch: str, out_dir: str) -> str:
    stem = os.path.splitext(os.path.basename(source))[0]
    out = os.path.join(out_dir, f"{stem}.{arch}.cubin")
    cmd = nvcc_command(nvcc, source, arch, out)
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CudaUnavailable(f"nvcc failed on {stem}.cu for {arch}: {_first_line(e)}") from None
    if res.returncode != 0:
        err = next((ln for ln in res.stderr.splitlines() if "error" in ln.lower()), None) \
            or _first_line(res.stderr or res.stdout or f"exit {res.returncode}")
        raise CudaUnavailable(f"nvcc failed on {stem}.cu for {arch}: {err.strip()} (a newer CUDA toolkit may "
                              f"be needed for this GPU; or set COMMPROF_CUDA_BACKEND=nvrtc to build through cupy)")
    return out


def _require_nvcc() -> str:
    nvcc = find_nvcc()
    if nvcc is None:
        raise CudaUnavailable(f"nvcc not found: install the CUDA toolkit or cupy "
                              f"({gpu_install_hint(torch_cuda_version())})")
    return nvcc


def compile_only(arch: str, out_dir: str) -> list[str]:
    """Compile every ``.cu`` for one architecture into ``out_dir`` (one cubin each); no GPU needed.

    Args:
        arch: target, e.g. ``"sm_90"`` (also ``"90"`` or ``"9.0"``).
        out_dir: created if missing.

    Returns:
        The cubin paths, in :func:`sources` order.

    Raises:
        CudaUnavailable: no nvcc, or nvcc failed (its first error line is in the message).
    """
    nvcc = _require_nvcc()
    arch = normalize_arch(arch)
    os.makedirs(out_dir, exist_ok=True)
    srcs = sources()
    with ThreadPoolExecutor(max_workers=max(1, len(srcs))) as pool:
        return list(pool.map(lambda s: _compile_one(nvcc, s, arch, out_dir), srcs))


def build(arch: str | None = None, force: bool = False) -> str:
    """Compile the kernels with nvcc for ``arch`` (default: the visible GPU's) unless cached.

    Args:
        arch: e.g. ``"sm_90"``; None asks the GPU (:func:`detect_arch`).
        force: rebuild even when the cache holds this exact build.

    Returns:
        The cache directory: one ``<stem>.<arch>.cubin`` per source and ``build.json`` (the nvcc
        command lines, version and key).
    """
    nvcc = _require_nvcc()
    arch = normalize_arch(arch) if arch else detect_arch()
    version = nvcc_version(nvcc)
    final = os.path.join(cache_root(), f"{arch}-{cache_key(arch, version)}")
    manifest = os.path.join(final, "build.json")
    if os.path.isfile(manifest) and not force:
        return final
    try:
        os.makedirs(cache_root(), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{arch}-", dir=cache_root())
    except OSError as e:
        raise CudaUnavailable(f"cannot write the CUDA kernel cache under '{cache_root()}' ({e.strerror}): "
                              f"set COMMPROF_CACHE_DIR to a writable directory") from None
    try:
        cubins = compile_only(arch, tmp)
        with open(os.path.join(tmp, "build.json"), "w") as f:
            json.dump({"arch": arch, "nvcc": nvcc, "nvcc_version": version, "key": os.path.basename(final),
                       "commands": [nvcc_command(nvcc, s, arch, os.path.join(final, os.path.basename(c)))
                                    for s, c in zip(sources(), cubins)]}, f, indent=2)
        if force and os.path.isdir(final):
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.replace(tmp, final)      # atomic: a concurrent builder either wins or finds ours
        except OSError:
            if not os.path.isfile(manifest):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


class Kernels:
    """The loaded kernels: ``get_function(name)`` returns a ``cupy.RawKernel`` for the current device.

    Attributes:
        backend: ``"nvcc"`` (cubins from :func:`build`) or ``"nvrtc"`` (cupy compiled the sources).
        arch: ``sm_XY`` the cubins target (nvrtc: the device's arch when loaded).
        directory: the cache directory (nvcc) or ``None`` (nvrtc: cupy's own cache).
    """

    def __init__(self, modules: dict, backend: str, arch: str, directory: str | None):
        self.modules = modules
        self.backend = backend
        self.arch = arch
        self.directory = directory
        self._functions: dict = {}

    def get_function(self, name: str):
        """The kernel ``name`` (a ``cupy.RawKernel``; cupy loads it per device on first launch there)."""
        if name not in KERNELS:
            raise KeyError(f"no CUDA kernel named {name!r} in cuda_ext (known: {', '.join(sorted(KERNELS))})")
        fn = self._functions.get(name)
        if fn is None:
            fn = self._functions[name] = self.modules[KERNELS[name]].get_function(name)
        return fn

    def __repr__(self) -> str:
        return f"Kernels(backend={self.backend!r}, arch={self.arch!r}, directory={self.directory!r})"


_LOADED: dict[tuple[str, str], Kernels] = {}


def _import_cupy():
    if sys.modules.get("cupy") is None:     # first import only: callers sit inside timed loops
        found = installed_cupy_distributions()
        if len(found) > 1:
            names = ", ".join(found)
            raise CudaUnavailable(f"{len(found)} CuPy packages are installed ({names}) and overwrite each other's "
                                  f"files: pip uninstall -y {' '.join(found)}, then "
                                  f"{gpu_install_hint(torch_cuda_version())}")
    try:
        import cupy
    except ImportError:
        raise CudaUnavailable(f"cupy not installed, and the CUDA kernels need it: "
                              f"{gpu_install_hint(torch_cuda_version())}") from None
    except Exception as e:  # a broken cupy install raises other errors at import
        raise CudaUnavailable(f"cupy does not import ({_first_line(e)}): reinstall it "
                              f"({gpu_install_hint(torch_cuda_version())})") from None
    return cupy


def require_gpu():
    """Return cupy once it imports and sees at least one GPU; else raise :class:`CudaUnavailable`."""
    cupy = _import_cupy()
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        raise CudaUnavailable(f"no CUDA GPU visible ({_first_line(e)}): run on a machine with an NVIDIA GPU "
                              f"and driver") from None
    if n < 1:
        raise CudaUnavailable("no CUDA GPU visible (cupy sees 0 devices): run on a machine with an NVIDIA GPU")
    return cupy


def load(backend: str | None = None, arch: str | None = None, force: bool = False) -> Kernels:
    """Build (first use only) and load every kernel for the current GPU.

    Args:
        backend: ``"auto"`` (default; ``$COMMPROF_CUDA_BACKEND`` overrides), ``"nvcc"`` or ``"nvrtc"``;
            see the module docstring for what each does.
        arch: nvcc only: build for this arch instead of the current GPU's.
        force: nvcc only: rebuild even if cached.

    Raises:
        CudaUnavailable: cupy missing, no GPU, no compiler, or the binary does not load.
    """
    backend = (backend or os.environ.get("COMMPROF_CUDA_BACKEND") or "auto").lower()
    if backend not in BACKENDS:
        raise CudaUnavailable(f"unknown CUDA backend '{backend}': use one of {', '.join(BACKENDS)}")
    cupy = require_gpu()
    if backend == "auto":
        backend = "nvcc" if find_nvcc() else "nvrtc"
    arch = normalize_arch(arch) if arch else detect_arch()
    key = (backend, arch)
    if key in _LOADED and not force:
        return _LOADED[key]
    directory = build(arch, force=force) if backend == "nvcc" else None
    try:   # create the modules and fetch every kernel now, so a failure surfaces here with its fix
        modules: dict = {}
        for src in sources():
            stem = os.path.splitext(os.path.basename(src))[0]
            if backend == "nvcc":
                modules[stem] = cupy.RawModule(path=os.path.join(directory, f"{stem}.{arch}.cubin"))
            else:
                with open(src) as f:
                    modules[stem] = cupy.RawModule(code=f.read(), options=("-std=c++17",), backend="nvrtc")
        kernels = Kernels(modules, backend, arch, directory)
        for name in KERNELS:
            kernels.get_function(name)
    except Exception as e:
        fix = ("the CUDA toolkit may be newer than the driver: update the driver or set "
               "COMMPROF_CUDA_BACKEND=nvrtc") if backend == "nvcc" else \
              "install the CUDA toolkit (nvcc) or NVRTC for cupy (the [ctk] extra of cupy-cuda12x / cupy-cuda13x)"
        raise CudaUnavailable(f"cannot load the CUDA kernels ({backend}, {arch}): {_first_line(e)}; {fix}") from None
    _LOADED[key] = kernels
    return kernels
