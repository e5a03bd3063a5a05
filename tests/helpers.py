"""What the tests import: the repository's root, the toy model, ways to run commprof (in a
subprocess as a user does, or in this process) and readers of a results dir. Fixtures live in
conftest.py; everything a test imports by name lives here."""
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Real files taken out of fetched repository snapshots are never committed: they lie beside the
#: checkout (CI puts ``shared/`` there); COMMPROF_SHARED_DATA points elsewhere (an empty dir: all skip).
SHARED_DATA = os.environ.get("COMMPROF_SHARED_DATA") or os.path.join(os.path.dirname(REPO), "shared", "data")


def shared_data(kind: str, name: str = "") -> str:
    """The path of ``shared/data/<kind>/<name>`` beside the checkout; the test skips, naming the
    file, where it is absent (it came out of a repository snapshot and is never committed)."""
    import pytest

    path = os.path.join(SHARED_DATA, kind, name) if name else os.path.join(SHARED_DATA, kind)
    if not os.path.exists(path):
        pytest.skip(f"needs shared/data/{kind}/{name} beside the checkout (a real file out of a repository "
                    "snapshot, never committed)")
    return path


def shared_path(kind: str, name: str) -> str | None:
    """``shared/data/<kind>/<name>`` beside the checkout, or None where it is absent (for scripts
    and generators, which go on without it; a test calls :func:`shared_data`, which skips)."""
    path = os.path.join(SHARED_DATA, kind, name)
    return path if os.path.exists(path) else None


def corpus_log(name: str, skip: bool | None = None) -> str:
    """A log of the real-box corpus (``tests/data/nccl-tests/corpus.toml``): the committed copy
    (transcribed from a public page or issue), else the one beside the checkout (out of a fetched
    repository snapshot, never committed); absent, a test skips naming it, a script (``skip``
    False; the default is whether a test is running) stops naming it."""
    here = os.path.join(REPO, "tests", "data", "nccl-tests", name)
    if os.path.exists(here):
        return here
    if skip is None:
        skip = "PYTEST_CURRENT_TEST" in os.environ
    if skip:
        return shared_data("nccl-tests", name)
    path = shared_path("nccl-tests", name)
    if path is None:
        raise SystemExit(f"needs shared/data/nccl-tests/{name} beside the checkout (a real log out of a repository "
                         "snapshot, never committed)")
    return path


#: The subsample of HTA's trace_filter pair the fuzzer mutates: every metadata event, NCCL kernel,
#: ProfilerStep# annotation, memcpy/memset and the Trace event, and of the other events every 12th.
SUBSAMPLE_EVERY = 12


def hta_subsampled(rank: int, path: str | None = None) -> str:
    """Rank ``rank`` (0 or 1) of HTA's trace_filter pair (``shared/data/kineto``), subsampled
    (:data:`SUBSAMPLE_EVERY`) so a fuzzer can mutate it thousands of times, as compact JSON text; no
    kept event is changed. ``path``: the trace (else the shared one; a test skips without it)."""
    import gzip
    import json

    path = path or shared_data("kineto", f"trace_filter__sampled_rank-{rank}.json.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)

    def kept(i: int, e: dict) -> bool:
        name, cat = str(e.get("name", "")), str(e.get("cat", ""))
        return (e.get("ph") == "M" or cat in ("gpu_memcpy", "gpu_memset", "Trace") or name.startswith("ProfilerStep#")
                or (cat == "kernel" and "nccl" in name.lower()) or i % SUBSAMPLE_EVERY == SUBSAMPLE_EVERY - 1)

    doc["traceEvents"] = [e for i, e in enumerate(doc.get("traceEvents", [])) if kept(i, e)]
    return json.dumps(doc, separators=(",", ":"))


def hta_subsampled_files(out_dir) -> list[str]:
    """Both ranks of :func:`hta_subsampled` written as ``.json.gz`` files into ``out_dir``."""
    import gzip

    paths = []
    for rank in (0, 1):
        path = os.path.join(str(out_dir), f"hta_trace_filter_rank{rank}_subsampled.json.gz")
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(hta_subsampled(rank))
        paths.append(path)
    return paths


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


def nccl_log(path, gpu, ranks=8, hosts=("boxa",), alpha_us=20.0, busbw_gbps=100.0, op="all_reduce", graph=0,
             wrong=None, validation=True, sizes=None):
    """A synthetic nccl-tests 2.1x text log: rank lines naming ``gpu`` on ``hosts`` (ranks spread
    evenly), times from alpha + size / algbw. ``wrong``: {size: (out-of-place, in-place) #wrong}."""
    sizes = sizes or [8 << (2 * k) for k in range(14)] + [256 << 20, 1 << 30]
    per_host = ranks // len(hosts)
    lines = [f"# nThread 1 nGpus 1 minBytes {sizes[0]} maxBytes {sizes[-1]} step: 4(factor) warmup iters: 5 iters: 20 "
             f"agg iters: 1 validation: {int(validation)} graph: {graph}", "#", "# Using devices"]
    for r in range(ranks):
        lines.append(f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on {hosts[r // per_host]:>10s} device {r % per_host:2d} "
                     f"[0x{16 + r:02x}] {gpu}")
    lines += ["#", "#                                                              out-of-place                       in-place",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"]
    factor = 2 * (ranks - 1) / ranks if op == "all_reduce" else (ranks - 1) / ranks
    for s in sizes:
        t = alpha_us + s / (busbw_gbps / factor * 1e3)
        alg = s / t / 1e3
        w = (wrong or {}).get(s, (0, 0))
        wo, wi = ("N/A", "N/A") if not validation else w
        lines.append(f"{s:12d} {max(s // 4, 1):13d}     float     sum      -1 {t:8.2f} {alg:7.2f} {alg * factor:7.2f} "
                     f"{wo:>6} {t:8.2f} {alg:7.2f} {alg * factor:7.2f} {wi:>6}")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1.0", "#"]
    name = f"{op}_perf.log"
    p = os.path.join(path, name) if os.path.isdir(path) else path
    with open(p, "w") as f:
        f.write("\n".join(lines) + "\n")
    return p


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def dump_dom(path: str, width: int | None = None) -> str:
    """What headless Chromium holds after loading the page at ``path`` (scripts run, images
    decoded), optionally in a window ``width`` px wide."""
    size = [f"--window-size={width},3000"] if width else []
    res = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                          "--no-first-run", "--disable-background-networking", "--disable-component-update",
                          "--disable-sync", f"--user-data-dir={os.path.dirname(path)}/chrome-profile-{width or 0}",
                          *size, "--virtual-time-budget=5000", "--dump-dom", f"file://{path}"],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


#: The python of Holistic Trace Analysis's own venv (``bash scripts/hta_venv.sh`` makes it; ``.ci/run`` does).
HTA_PYTHON = os.environ.get("COMMPROF_HTA_PYTHON", os.path.join(REPO, ".venv-hta", "bin", "python"))


def hta_figures(files):
    """HTA's per-rank kernel time by kind and overlap for ``files`` (scripts/bench_hta_agreement.py's
    ``hta_figures``, run in the HTA venv); the test skips with the reason where there is no venv."""
    import pytest

    if not os.path.exists(HTA_PYTHON):
        pytest.skip(f"no HTA venv at {HTA_PYTHON} (make it: bash scripts/hta_venv.sh)")
    sys.path.insert(0, os.path.join(REPO, "scripts"))
    from bench_hta_agreement import hta_figures as run

    return run(HTA_PYTHON, list(files))
