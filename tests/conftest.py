import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def run_cli(args, cwd, env=None, timeout=300):
    """Run commprof as a user would: a separate process, its own stdout/stderr and exit code."""
    e = dict(os.environ)
    e.pop("COMMPROF_TEST_FAULT", None)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    e["PYTHONPATH"] = REPO + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "commprof", *args], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def cli(tmp_path):
    def _run(*args, env=None, timeout=300):
        return run_cli(list(args), cwd=tmp_path, env=env, timeout=timeout)
    return _run
