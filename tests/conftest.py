"""Fixtures and the GPU marker's skip. What tests import by name is in helpers.py (re-exported
here for tests that still import it from conftest)."""
import pytest

from helpers import (REPO, TOY_MODEL, CliResult, cli_env, csv_rows, one_line_error,  # noqa: F401
                     results_meta, run_cli, run_inproc, sweep_rows, write_sweep_dir)


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available() and torch.cuda.device_count() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CUDA (none visible)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cli(tmp_path):
    """``cli(*args)``: commprof in a subprocess, as a user runs it (kept for the runs where a real
    process matters: killed or hung ranks, torchrun, the end-to-end run, signals)."""
    def _run(*args, env=None, timeout=300):
        return run_cli(list(args), cwd=tmp_path, env=env, timeout=timeout)
    return _run


@pytest.fixture
def cli_inproc(tmp_path):
    """``cli_inproc(*args)``: commprof in this process (``run_inproc``); same result fields as ``cli``."""
    def _run(*args, env=None):
        return run_inproc(list(args), cwd=tmp_path, env=env)
    return _run


@pytest.fixture
def sim(monkeypatch, tmp_path):
    """A simulated GPU (``fake_cupy.SimCupy``) installed as ``cupy``, with cuda_ext's loader reset
    to build through NVRTC into ``tmp_path``."""
    pytest.importorskip("numpy")
    import sys

    from fake_cupy import SimCupy

    from cuda_ext import loader

    fake = SimCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(loader, "_LOADED", {})
    monkeypatch.setenv("COMMPROF_CUDA_BACKEND", "nvrtc")
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path))
    return fake


@pytest.fixture(scope="session")
def gloo_sweep(tmp_path_factory):
    """A small sweep results dir this session measured itself (gloo, TP=2, toy model decode sizes
    at batch 1 and 8, charts rendered). Tests only read it: copy it before changing anything."""
    work = tmp_path_factory.mktemp("gloo-sweep")
    out = str(work / "sweep")
    res = run_inproc(["sweep", "--tp", "2", "--model", TOY_MODEL, "--batch", "1,8", "--iters", "3", "--warmup", "1",
                      "--timeout", "60", "--out", out], cwd=work)
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture(scope="session")
def gloo_trace(tmp_path_factory):
    """A small trace results dir this session measured itself (gloo, TP=2, batch 1, 2 of the toy
    model's 8 layers run and scaled, charts rendered). Tests only read it."""
    work = tmp_path_factory.mktemp("gloo-trace")
    out = str(work / "trace")
    res = run_inproc(["trace", "--model", TOY_MODEL, "--tp", "2", "--batch", "1", "--context", "64", "--tokens", "4",
                      "--warmup", "1", "--layers", "2", "--timeout", "60", "--out", out], cwd=work)
    assert res.returncode == 0, res.stderr
    return out
