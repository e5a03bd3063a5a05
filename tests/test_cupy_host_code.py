"""Bugs that only a GPU box would show, reproduced on CPU: each test is named after the bug it
reproduces and runs commprof's GPU host code on the simulated cupy of ``fake_cupy`` (as strict as
real cupy where the bug lived) or on fakes of the installed packages."""
import os
import subprocess
import sys
import types
import warnings

import pytest

from helpers import REPO
from cuda_ext import loader
from fake_cupy import SimCupy, TorchStream, sim_custom_setup


# ---- commprof p2p: host_staged_bandwidth compared a cupy array with a numpy array ------------------

def test_sim_cupy_is_as_strict_as_cupy_about_numpy_and_devices(sim):
    np = sim.np
    with sim.cuda.Device(0):
        a = sim.zeros(4, np.uint8)
    with pytest.raises(TypeError, match="Unsupported type"):
        sim.array_equal(a, np.zeros(4, np.uint8))
    with sim.cuda.Device(1):
        b = sim.zeros(4, np.uint8)
        sim.no_p2p.add((1, 0))
        with pytest.raises(ValueError, match="Peer access is unavailable"):
            sim.array_equal(a, b)
    assert bool(sim.array_equal(a, a[:]))


@pytest.mark.parametrize("p2p", ["on", "off"])
def test_p2p_host_staged_two_gpus_compares_cupy_with_numpy(sim, p2p):
    from commprof.verbs.p2p import host_staged_bandwidth

    if p2p == "off":          # the box this probe is for: no peer access either way
        sim.no_p2p.update({(0, 1), (1, 0)})
    r = host_staged_bandwidth(0, 1, (1 << 16) + 3, iters=3)
    assert (r["probe"], r["kind"], r["src_device"], r["dst_device"]) == ("host_staged", "peer", 0, 1)
    assert r["verified"] is True and r["gbps"] > 0 and r["size_bytes"] == (1 << 16) + 3
    assert host_staged_bandwidth(1, 1, 4096, iters=1)["verified"] is True


def test_p2p_host_staged_catches_a_corrupt_copy(sim, monkeypatch):
    from commprof.verbs.p2p import host_staged_bandwidth

    rt, real = sim.cuda.runtime, sim.cuda.runtime.memcpy

    def lossy(dst, src, n, kind):
        real(dst, src, n, kind)
        if kind == rt.memcpyHostToDevice:
            sim.ct.memset(dst + 100, 0xEE, 1)
    monkeypatch.setattr(rt, "memcpy", lossy)
    assert host_staged_bandwidth(0, 1, 4096, iters=1)["verified"] is False


def test_p2p_command_on_two_simulated_gpus(sim, tmp_path, capsys):
    import csv

    from commprof.verbs import p2p
    from commprof.verbs.p2p import P2pConfig

    sim.nulls.update({1: type(sim.nulls[0])(ptr=0, device=1)})
    out = str(tmp_path / "p2p")
    assert p2p.run(P2pConfig(size="4096", rounds=20, out=out)) == 0
    rows = list(csv.DictReader(open(os.path.join(out, "p2p.csv"))))
    probes = sorted({r["probe"] for r in rows})
    assert probes == ["copy_engine", "host_staged", "pingpong", "sm_copy"]
    assert [(r["src_device"], r["dst_device"]) for r in rows if r["probe"] == "host_staged"] == [("0", "1"), ("1", "0")]
    assert all(r["verified"] == "True" for r in rows if r["probe"] != "pingpong")
    assert "P2P off: host-staged GB/s" in " ".join(capsys.readouterr().out.split())   # titles wrap


# ---- pip extras: one CuPy per CUDA major, and the error names the right one --------------------------

@pytest.mark.parametrize("cuda,want", [
    ("13.0", "pip install 'commprof[gpu-cuda13]' (cupy-cuda13x, for torch's CUDA 13.0)"),
    ("13.1", "pip install 'commprof[gpu-cuda13]' (cupy-cuda13x, for torch's CUDA 13.1)"),
    ("12.8", "pip install 'commprof[gpu-cuda12]' (cupy-cuda12x, for torch's CUDA 12.8)"),
    ("12.4", "pip install 'commprof[gpu-cuda12]' (cupy-cuda12x, for torch's CUDA 12.4)"),
    (None, "pip install 'commprof[gpu-cuda12]' (cupy-cuda12x) or 'commprof[gpu-cuda13]' (cupy-cuda13x), "
           "the one matching your CUDA major"),
    ("11.8", "pip install 'commprof[gpu-cuda12]' (cupy-cuda12x) or 'commprof[gpu-cuda13]' (cupy-cuda13x), "
             "the one matching your CUDA major"),
    ("", "pip install 'commprof[gpu-cuda12]' (cupy-cuda12x) or 'commprof[gpu-cuda13]' (cupy-cuda13x), "
         "the one matching your CUDA major"),
])
def test_gpu_install_hint_per_cuda_major(cuda, want):
    assert loader.gpu_install_hint(cuda) == want


def test_pyproject_offers_one_cupy_per_cuda_major():
    import tomllib

    extras = tomllib.load(open(os.path.join(REPO, "pyproject.toml"), "rb"))["project"]["optional-dependencies"]
    assert extras["gpu-cuda12"] == ["cupy-cuda12x>=13"] and extras["gpu-cuda13"] == ["cupy-cuda13x>=13"]
    for name, pkg in loader.GPU_EXTRAS.values():   # the hint names extras that exist
        assert extras[name] == [f"{pkg}>=13"]
    assert "gpu" not in extras      # no extra can pick the CUDA major: the user names it
    cupys = [(name, d) for name, deps in extras.items() for d in deps if d.startswith("cupy")]
    assert len({d for _, d in cupys}) == len(cupys) == 2


def _no_cupy_here(monkeypatch, cuda, installed=()):
    """No cupy module, a torch built for `cuda`, and these CuPy distributions installed."""
    import importlib.metadata as md

    monkeypatch.setitem(sys.modules, "cupy", None)          # import cupy -> ImportError
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(version=types.SimpleNamespace(cuda=cuda)))
    real = md.distribution

    def distribution(name):
        if name in installed:
            return types.SimpleNamespace(metadata={"Name": name})
        if name in loader.CUPY_DISTRIBUTIONS:
            raise md.PackageNotFoundError(name)
        return real(name)
    monkeypatch.setattr(md, "distribution", distribution)


@pytest.mark.parametrize("cuda,extra", [("13.0", "gpu-cuda13"), ("12.8", "gpu-cuda12")])
def test_missing_cupy_names_the_extra_for_torchs_cuda(monkeypatch, cuda, extra):
    _no_cupy_here(monkeypatch, cuda)
    with pytest.raises(loader.CudaUnavailable) as e:
        loader.require_gpu()
    msg = str(e.value)
    assert msg.startswith(f"cupy not installed, and the CUDA kernels need it: pip install 'commprof[{extra}]'")
    assert "\n" not in msg
    assert e.value.exit_code == 3


def test_two_cupys_installed_is_one_line_naming_them(monkeypatch):
    _no_cupy_here(monkeypatch, "13.0", installed=("cupy-cuda12x", "cupy-cuda13x"))
    assert loader.installed_cupy_distributions() == ["cupy-cuda12x", "cupy-cuda13x"]
    with pytest.raises(loader.CudaUnavailable) as e:
        loader.require_gpu()
    assert str(e.value) == (
        "2 CuPy packages are installed (cupy-cuda12x, cupy-cuda13x) and overwrite each other's files: "
        "pip uninstall -y cupy-cuda12x cupy-cuda13x, then pip install 'commprof[gpu-cuda13]' (cupy-cuda13x, "
        "for torch's CUDA 13.0)")
    # one CuPy is fine (here it then fails to import, as none is really there)
    _no_cupy_here(monkeypatch, "13.0", installed=("cupy-cuda13x",))
    with pytest.raises(loader.CudaUnavailable, match="^cupy not installed"):
        loader.require_gpu()


def test_cupy_already_imported_skips_the_distribution_scan(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", SimCupy.__new__(SimCupy))   # any imported cupy
    monkeypatch.setattr(loader, "installed_cupy_distributions", lambda: pytest.fail("scanned again"))
    assert loader._import_cupy() is sys.modules["cupy"]


NO_NATIVE = """
import sys
for name in ("torch", "cupy", "numpy"):
    sys.modules[name] = None
import commprof, cuda_ext, cuda_ext.loader, commprof.verbs.p2p, microbench.oneshot_rank
try:
    cuda_ext.loader.require_gpu()
except cuda_ext.loader.CudaUnavailable as e:
    print(e)
"""


def test_imports_and_hint_without_torch_cupy_numpy():
    res = subprocess.run([sys.executable, "-c", NO_NATIVE], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "cupy not installed, and the CUDA kernels need it: pip install 'commprof[gpu-cuda12]' (cupy-cuda12x) "
        "or 'commprof[gpu-cuda13]' (cupy-cuda13x), the one matching your CUDA major"]


# ---- sweep --impl custom: cupy 14 deprecates ExternalStream for Stream.from_external -----------------

class _OldTorchStream:
    """torch before the CUDA stream protocol: a raw handle only."""

    def __init__(self, ptr):
        self.cuda_stream = ptr


def test_cupy_stream_prefers_from_external(sim):
    from microbench.oneshot_rank import cupy_stream

    with sim.cuda.Device(1):
        s = sim.cuda.Stream(non_blocking=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert cupy_stream(sim, TorchStream(s.ptr), 1) is s
        assert cupy_stream(sim, _OldTorchStream(s.ptr), 1) is s     # torch < 2.10: through an adapter
    assert sim.stream_calls == [("from_external", s.ptr)] * 2


def test_cupy_stream_falls_back_to_external_stream_on_old_cupy(sim, monkeypatch):
    from microbench.oneshot_rank import cupy_stream

    monkeypatch.delattr(sim.cuda.Stream, "from_external")         # cupy 13: no CUDA stream protocol
    with sim.cuda.Device(1):
        s = sim.cuda.Stream(non_blocking=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert cupy_stream(sim, TorchStream(s.ptr), 1) is s
    assert sim.stream_calls == [("ExternalStream", s.ptr, 1)]


def test_sweep_custom_bind_on_old_cupy_runs_on_torchs_stream(sim, monkeypatch):
    """The whole timed call through ExternalStream (cupy 13), on a one-GPU TP=1 group."""
    from cuda_ext import oneshot
    from cuda_ext.oneshot import verify

    monkeypatch.delattr(sim.cuda.Stream, "from_external")
    sim.devices = 1
    (rank,), cells = sim_custom_setup(1, 1, (4096,))
    cell = next(c for c in cells if c.custom)
    n = 4096 // 2
    host = oneshot.rank_pattern(0, n)
    x = sim.asarray(oneshot.encode(host, "bf16"))
    stream = sim.cuda.Stream(non_blocking=True)
    rank.torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        current_stream=lambda device: TorchStream(stream.ptr), synchronize=lambda device: sim.flush()))
    tensor = types.SimpleNamespace(data_ptr=lambda: x.data.ptr, numel=lambda: n, element_size=lambda: 2)
    rank.bind(cell, tensor, None)()
    assert sim.queues[stream.key]                # enqueued on torch's stream, not another
    sim.flush()
    assert verify(x, oneshot.reference_sum([host], "bf16"), "bf16", atol=0.0, rtol=0.0) == 0
    assert sim.stream_calls == [("ExternalStream", stream.ptr, 0)]
    rank.check_status(cell)
    rank.close()
