"""scripts/setup.sh (issue 34): a second run with nothing changed does no pip work and takes under
5 s; a change of pyproject.toml or of the torch spec runs pip again; the test extra holds only what
the main venv's tests need (the real servers have venvs of their own).

The script runs on a copy of itself and pyproject.toml in a temporary dir, against a venv whose
``python`` is a wrapper: ``python -m pip ...`` is logged and does nothing, anything else runs this
test's own interpreter (so no package is installed anywhere)."""
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def fake(tmp_path):
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "scripts", "setup.sh"), root / "scripts" / "setup.sh")
    shutil.copy(os.path.join(REPO, "pyproject.toml"), root / "pyproject.toml")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "pip.log"
    py = venv / "bin" / "python"
    py.write_text(f'#!/bin/sh\nif [ "$1" = "-m" ] && [ "$2" = "pip" ]; then echo "$@" >> "{log}"; exit 0; fi\n'
                  f'exec "{sys.executable}" "$@"\n')
    py.chmod(0o755)
    env = dict(os.environ, COMMPROF_VENV=str(venv), PYTHONPATH=REPO)
    env.pop("COMMPROF_TORCH", None)

    def run(**extra):
        log.touch()
        before = log.read_text()
        t0 = time.monotonic()
        r = subprocess.run(["bash", str(root / "scripts" / "setup.sh")], env=dict(env, **extra), capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return r, log.read_text()[len(before):].splitlines(), time.monotonic() - t0

    return root, venv, run


def _installed_torch_spec():
    import importlib.metadata as m

    return "torch==" + m.version("torch").split("+")[0]


def test_second_run_does_no_pip_work_and_a_change_runs_it_again(fake):
    root, venv, run = fake
    torch_spec = _installed_torch_spec()
    r, pip, _ = run(COMMPROF_TORCH=torch_spec)
    assert [p for p in pip if "-e .[test]" in p], pip              # the first run installs
    assert not [p for p in pip if " torch==" in p]                  # the pinned torch is there already
    assert (venv / ".commprof-setup").is_file()

    r, pip, secs = run(COMMPROF_TORCH=torch_spec)
    assert pip == [] and secs < 5, (pip, secs)                      # nothing changed: no pip, under 5 s
    assert "nothing changed since the last setup" in r.stdout

    r, pip, _ = run(COMMPROF_TORCH="torch==0.0.1")                  # another torch: pip again, torch first
    assert pip[0].endswith("torch==0.0.1") and "-e .[test]" in pip[1], pip
    r, pip, _ = run(COMMPROF_TORCH="torch==0.0.1")
    assert pip == []

    with open(root / "pyproject.toml", "a") as f:                   # pyproject.toml changed: pip again
        f.write("\n# a change\n")
    r, pip, _ = run(COMMPROF_TORCH="torch==0.0.1")
    assert [p for p in pip if "-e .[test]" in p], pip

    (venv / ".commprof-setup").unlink()                             # no stamp: pip again
    r, pip, _ = run(COMMPROF_TORCH="torch==0.0.1")
    assert [p for p in pip if "-e .[test]" in p], pip


def test_stamp_names_the_torch_spec_and_the_pyproject(fake):
    root, venv, _ = fake
    env = dict(os.environ, COMMPROF_VENV=str(venv))

    def stamp(**extra):
        return subprocess.run(["bash", str(root / "scripts" / "setup.sh"), "--stamp"], env=dict(env, **extra),
                              capture_output=True, text=True, check=True).stdout.strip()

    a = stamp(COMMPROF_TORCH="torch==2.13.0")
    assert len(a) == 64 and a == stamp(COMMPROF_TORCH="torch==2.13.0")
    assert a != stamp(COMMPROF_TORCH="torch==2.12.0") and a != stamp(COMMPROF_TORCH="")


def test_test_extra_holds_no_engine_server():
    import tomllib

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        test = tomllib.load(f)["project"]["optional-dependencies"]["test"]
    names = {d.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower() for d in test}
    assert names == {"pytest", "import-linter", "hypothesis", "ruff"}, names     # ruff: the linter .ci/run runs
    # ...and no test of the main suite imports transformers itself: the server test runs it from
    # its own venv (tests/test_serve.py's real_server, scripts/serve_venv.sh)
    for name in sorted(os.listdir(os.path.join(REPO, "tests"))):
        if name.endswith(".py"):
            with open(os.path.join(REPO, "tests", name)) as f:
                text = f.read()
            assert not re.search(r"^\s*(from|import) transformers\b", text, re.M), name
