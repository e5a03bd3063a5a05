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


def sweep_rows(out):
    """The rows of a results dir's sweep.csv, as dicts of strings."""
    import csv

    with open(os.path.join(out, "sweep.csv"), newline="") as f:
        return list(csv.DictReader(f))


def results_meta(out):
    import json

    with open(os.path.join(out, "meta.json")) as f:
        return json.load(f)


def one_line_error(res):
    """The single 'commprof: error:' line of a failed run (and no traceback)."""
    errors = [l for l in res.stderr.strip().splitlines() if l.startswith("commprof: error:")]
    assert len(errors) == 1, res.stderr
    assert "Traceback" not in res.stderr
    return errors[0]
