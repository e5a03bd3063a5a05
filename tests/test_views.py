"""What a person sees: the progress bar, the tables' numbers and the charts' data (ticks, axes,
legends), read back from the objects drawn rather than from pixels."""
from __future__ import annotations

import io
import sys


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_drawn_on_stderr_with_the_verb_and_an_eta_when_stdout_is_redirected(monkeypatch):
    from commprof.views.console import progress_bar

    out, err = io.StringIO(), _Tty()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    bar = progress_bar(10, "trace")
    bar.update(4)
    bar._p.refresh()
    bar.close()
    assert out.getvalue() == ""
    assert "trace" in err.getvalue() and "4/10" in err.getvalue() and "ETA" in err.getvalue()


def test_progress_stays_off_when_stderr_is_not_a_terminal(monkeypatch):
    from commprof.views.console import progress_bar

    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    bar = progress_bar(10, "sweep")
    bar.update(4)
    bar.close()
    assert out.getvalue() == "" and err.getvalue() == ""


def test_each_verb_that_starts_ranks_labels_its_own_progress():
    from commprof.routing import MoeConfig
    from commprof.sweepconfig import SweepConfig
    from commprof.traceconfig import TraceConfig

    assert (SweepConfig.VERB, TraceConfig.VERB, MoeConfig.VERB) == ("sweep", "trace", "moe")


def _fake_repo(tmp_path, pip_rc: int):
    """A copy of scripts/setup.sh beside a fake .venv/bin/python whose pip fails (or not)."""
    import os
    import shutil
    import stat

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    (tmp_path / "scripts").mkdir()
    shutil.copy(os.path.join(root, "scripts", "setup.sh"), tmp_path / "scripts" / "setup.sh")
    py = tmp_path / ".venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\n"
                  'case "$*" in\n'
                  f'  *"pip install"*) echo "ERROR: No matching distribution found for torch==0.0.1" >&2; exit {pip_rc};;\n'
                  '  *"import torch, sys"*) exit 1;;\n'
                  '  *) echo "commprof ready";;\n'
                  "esac\n")
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return tmp_path / "scripts" / "setup.sh"


def test_setup_sh_says_what_it_does_and_fails_with_pips_error_and_status(tmp_path):
    import subprocess

    script = _fake_repo(tmp_path, pip_rc=3)
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "COMMPROF_TORCH": "torch==0.0.1"})
    assert p.returncode == 3
    assert "installing torch==0.0.1" in p.stderr
    assert "No matching distribution found for torch==0.0.1" in p.stderr
    assert "failed (exit 3)" in p.stderr
    assert "ready" not in p.stdout


def test_setup_sh_announces_each_step_when_pip_succeeds(tmp_path):
    import subprocess

    script = _fake_repo(tmp_path, pip_rc=0)
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "COMMPROF_TORCH": "torch==0.0.1"})
    assert p.returncode == 0, p.stderr
    assert "installing commprof in editable mode" in p.stderr and "s so far" in p.stderr
    assert "commprof ready" in p.stdout
