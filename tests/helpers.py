"""What the tests import: the repository's root, the toy model, ways to run commprof (in a
subprocess as a user does, or in this process) and readers of a results dir. Fixtures live in
conftest.py; everything a test imports by name lives here."""
import os
import subprocess
import sys
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the toy dense model every CPU trace and sweep test runs: 8 layers, hidden 1024, 16/4 heads, vocab 8192
TOY_MODEL = os.path.join(REPO, "tests", "data", "toy-dense-config.json")


# Variables a test run must not inherit: a fault spec from the shell, or torchrun's rank variables
# (which would make commprof act as one rank of someone else's job).
_CLEARED_ENV = ("COMMPROF_TEST_FAULT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT")


def run_cli(args, cwd, env=None, timeout=300):
    """Run commprof as a user would: a separate process, its own stdout/stderr and exit code."""
    e = dict(os.environ)
    for k in _CLEARED_ENV:
        e.pop(k, None)
    e["PYTHONPATH"] = REPO + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "commprof", *args], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=timeout)


def cli_env(env=None) -> dict:
    """The environment ``run_cli`` gives commprof (for tests that start it with ``Popen`` to send
    it signals): this one without inherited fault specs or torchrun variables, plus ``env``."""
    e = dict(os.environ)
    for k in _CLEARED_ENV:
        e.pop(k, None)
    e["PYTHONPATH"] = REPO + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    return e


@dataclass
class CliResult:
    """What a finished ``commprof`` call left: the same fields as ``subprocess.CompletedProcess``."""

    returncode: int
    stdout: str
    stderr: str


def run_inproc(args, cwd, env=None) -> CliResult:
    """Run ``commprof ARGS`` inside this process: the console entry ``commprof.cli.main`` (so a bad
    flag is mapped to one line and exit 2 exactly as for a user), with stdout/stderr captured by
    typer's ``CliRunner`` isolation, ``cwd`` as the working directory and ``env`` on top of a
    cleaned environment. Ranks a command launches are still real processes; only the CLI process
    itself is saved (a Python + torch start-up per call)."""
    from typer.testing import CliRunner

    from commprof.cli import main

    overrides = {k: None for k in _CLEARED_ENV}
    overrides["PYTHONPATH"] = REPO + os.pathsep + os.environ.get("PYTHONPATH", "")
    overrides.update(env or {})
    old_argv, old_cwd = sys.argv, os.getcwd()
    # trace --predict sets torch's thread count as one gloo rank runs; give this process its own back
    torch_threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None
    with CliRunner().isolation(env=overrides) as (out, err, _):
        sys.argv = ["commprof", *map(str, args)]
        os.chdir(cwd)
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            sys.argv = old_argv
            os.chdir(old_cwd)
            if torch_threads is not None:
                sys.modules["torch"].set_num_threads(torch_threads)
            sys.stdout.flush()
            sys.stderr.flush()
        return CliResult(code, out.getvalue().decode("utf-8", "replace"), err.getvalue().decode("utf-8", "replace"))


def csv_rows(out, name):
    """The rows of the CSV ``name`` in the results dir ``out``, as dicts of strings."""
    import csv

    with open(os.path.join(out, name), newline="") as f:
        return list(csv.DictReader(f))


def write_sweep_dir(d, meta: dict, rows) -> str:
    """A synthetic results dir (made if missing): ``meta`` as meta.json and ``rows`` as sweep.csv
    under the sweep's columns (a column a row does not give stays empty); the dir's path."""
    import csv
    import json

    from commprof.results import COLUMNS

    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(d, "sweep.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return str(d)


def sweep_rows(out):
    """The rows of a results dir's sweep.csv, as dicts of strings."""
    return csv_rows(out, "sweep.csv")


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
