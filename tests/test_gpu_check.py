"""scripts/gpu_check.sh on CPU: its plan fits one 600 s device command, every planned commprof
command passes the CLI's own validation, and one failing step never stops the later ones.

The GPU steps themselves run only on a GPU machine; here the script runs with ``--dry-run``, or
with ``GPU_CHECK_ONLY`` and a stand-in ``PYTHON`` so no step needs a GPU.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
SCRIPT = os.path.join(REPO, "scripts", "gpu_check.sh")
STEPS = ["machine", "topo", "assumptions", "sweep", "assume-oneshot", "assume-trace", "p2p", "trace",
         "predict-nvlink4", "check", "report", "gpu-tests"]
LIMIT_S = 600 - 120        # one device command, two minutes kept spare
STEP_RE = re.compile(r"^step (\d+)/(\d+) (\S+) +box +(\d+) s, ends by +(\d+) s")


def gpu_check(*args, env=None, cwd=None):
    e = {k: v for k, v in os.environ.items() if k not in ("GPU_CHECK_ONLY", "PYTHON")}
    e.update(env or {})
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, env=e, cwd=cwd, timeout=60)


def plan(outdir):
    """(rc, [(step, box_s, argv)], total_s, stdout) of a dry run; checks its arithmetic."""
    res = gpu_check("--dry-run", str(outdir))
    lines = res.stdout.splitlines()
    steps, ends_s = [], 0
    for i, line in enumerate(lines):
        m = STEP_RE.match(line)
        if m:
            steps.append((m.group(3), int(m.group(4)), shlex.split(lines[i + 1])))
            ends_s += int(m.group(4))
            assert int(m.group(5)) == ends_s, line       # each step ends by the sum of the boxes so far
    m = re.search(r"time boxes (\d+) s \+ packing (\d+) s = (\d+) s", res.stdout)
    assert m, res.stdout
    assert int(m.group(1)) == sum(b for _, b, _ in steps)
    assert int(m.group(1)) + int(m.group(2)) == int(m.group(3))
    return res.returncode, steps, int(m.group(3)), res.stdout


def summary(outdir):
    """{step: (status, seconds, box_s)} from OUTDIR/summary.txt."""
    rows = {}
    with open(os.path.join(outdir, "summary.txt")) as f:
        for line in f.read().splitlines()[2:]:
            if line.startswith("# assumptions"):
                break
            m = re.match(r"^(\S+) +(.+?) +(\d+) +(\d+)$", line)
            assert m, line
            rows[m.group(1)] = (m.group(2), int(m.group(3)), int(m.group(4)))
    return rows


def test_script_parses_and_shellcheck_when_present():
    assert subprocess.run(["bash", "-n", SCRIPT]).returncode == 0
    if shutil.which("shellcheck"):
        res = subprocess.run(["shellcheck", SCRIPT], capture_output=True, text=True)
        assert res.returncode == 0, res.stdout


def test_dry_run_plans_every_step_in_order_within_one_device_command(tmp_path):
    out = tmp_path / "gc"
    rc, steps, total_s, text = plan(out)
    assert rc == 0, text
    assert [s for s, _, _ in steps] == STEPS
    assert all(box > 0 for _, box, _ in steps)
    assert total_s <= LIMIT_S
    for _, box, argv in steps:
        assert argv[:4] == ["timeout", "-k", "10", str(box)]
    assert "fits" in text
    assert not out.exists()                       # a dry run creates and runs nothing


def test_dry_run_refuses_a_plan_over_the_budget(tmp_path):
    res = gpu_check("--dry-run", "--budget", "100", str(tmp_path / "gc"))
    assert res.returncode == 2
    assert "does not fit the budget" in res.stderr and "--budget 100" in res.stderr


def test_bad_usage_is_refused(tmp_path):
    assert gpu_check().returncode == 2
    assert gpu_check("--dry-run", "--budget", "soon", str(tmp_path)).returncode == 2
    res = gpu_check("--dry-run", str(tmp_path), env={"GPU_CHECK_ONLY": "topo,nosuch"})
    assert res.returncode == 2 and "nosuch" in res.stderr


@pytest.fixture
def no_device(monkeypatch, tmp_path):
    """The CLI's validation runs as on the H200 (one GPU, nccl, 90% of 141 GB), but nothing is measured:
    each verb's core call is replaced by a recorder after its flags are checked."""
    import commprof.verbs.check
    import commprof.cli
    import commprof.capture.launch
    import commprof.verbs.p2p
    import commprof.verbs.report
    import commprof.verbs.sweep
    import commprof.verbs.topo
    import commprof.verbs.trace
    import cuda_ext.loader

    calls = []
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("COMMPROF_TEST_ONESHOT", raising=False)
    monkeypatch.setattr(commprof.capture.launch, "choose_world",
                        lambda backend, n, flag: (n, "nccl", "test: one H200", None))
    monkeypatch.setattr(commprof.capture.launch, "cuda_device_count", lambda: 1)     # trace --predict checks it
    monkeypatch.setattr(cuda_ext.loader, "require_gpu", lambda *a, **k: None)
    monkeypatch.setattr(commprof.verbs.trace, "available_bytes_per_rank", lambda *a: (int(141e9 * 0.9), "test"))
    monkeypatch.setattr(commprof.verbs.sweep, "measure", lambda cfg, charts=True: calls.append(("sweep", cfg)) or 0)
    monkeypatch.setattr(commprof.verbs.trace, "measure", lambda cfg, charts=True:
                        calls.append(("predict", cfg, cfg.comm_from) if cfg.comm_from else ("trace", cfg)) or 0)
    for mod in (commprof.verbs.topo, commprof.verbs.p2p, commprof.verbs.check, commprof.verbs.report):
        verb = mod.__name__.rsplit(".", 1)[1]
        monkeypatch.setattr(mod, "run", lambda *a, _n=verb, **k: calls.append((_n, a, k)) or 0)
    return calls


def test_every_planned_commprof_command_passes_the_cli_validation(tmp_path, no_device):
    from typer.testing import CliRunner

    from commprof.cli import app
    from commprof.model.sweepconfig import CUSTOM, plan_cells
    from commprof.analysis.latency import CommTable

    rc, steps, _, text = plan(tmp_path / "gc")
    assert rc == 0, text
    runner = CliRunner()
    verbs, groups = [], []
    for step, _, argv in steps:
        cmd = argv[4:]                               # after: timeout -k 10 BOX
        if step == "machine":
            assert cmd == ["bash", SCRIPT, "--machine-info"]
            continue
        if step.startswith("assum"):
            assert cmd[1:3] == ["scripts/gpu_assumptions.py", f"{tmp_path}/gc/assumptions"] and cmd[3] == "--group"
            groups += cmd[4].split(",")
            continue
        if step == "gpu-tests":
            assert cmd[1:3] == ["-m", "pytest"] and "-m" in cmd[3:] and cmd[-1] == "tests/"
            with open(os.path.join(REPO, "pyproject.toml")) as f:
                assert '"gpu:' in f.read()              # the marker the step selects is registered
            continue
        assert cmd[1:3] == ["-m", "commprof"], cmd
        verbs.append(cmd[3])
        before = len(no_device)
        res = runner.invoke(app, cmd[3:])
        assert res.exit_code == 0, f"{step}: {shlex.join(cmd)}\n{res.output}\n{res.exception!r}"
        assert len(no_device) == before + 1, f"{step}: the core was not reached"
    assert verbs == ["topo", "sweep", "p2p", "trace", "trace", "check", "report"]
    import gpu_assumptions

    assert groups == gpu_assumptions.GROUPS          # every group of checks runs, each once, spin clock first
    assert gpu_assumptions.CHECKS[0][0] == "spin-clock"

    by = {}
    for c in no_device:
        by.setdefault(c[0], []).append(c)
    sweep_cfg = by["sweep"][0][1]
    assert sweep_cfg.backend == "nccl" and sweep_cfg.modes == ["eager", "graph"] and sweep_cfg.verify
    cells = plan_cells(sweep_cfg)
    custom = [c for c in cells if c.impl == CUSTOM]
    assert custom and all(c.op == "all_reduce" and c.mode == "eager" for c in custom)
    assert {c.op for c in cells} == {"all_reduce", "all_gather"} and {c.mode for c in cells} == {"eager", "graph"}
    trace_cfg = by["trace"][0][1]
    assert trace_cfg.tps == [1] and trace_cfg.modes == ["eager", "graph"]
    assert trace_cfg.layers == trace_cfg.layers_model == 64     # the whole model fits one H200
    assert len(by["predict"]) == 1
    for _, cfg, src in by["predict"]:
        assert cfg.tps == [2, 4, 8] and cfg.modes == ["graph"]
        table = CommTable(src)                   # the reference profile covers every lookup the run makes
        for tp in cfg.tps:
            for op in ("all_reduce", "all_gather"):
                assert table.latency_us(op, tp, "graph", 10240) > 0


def _fake_python(tmp_path, body):
    p = tmp_path / "fakepy"
    p.write_text("#!/bin/bash\n" + body)
    p.chmod(0o755)
    return str(p)


def test_a_failing_step_does_not_stop_the_later_ones(tmp_path):
    out = tmp_path / "gc"
    out.mkdir()
    (out / "old.txt").write_text("an earlier run")
    tar = tmp_path / "back" / "gc.tgz"
    res = gpu_check(str(out), "--tar", str(tar),
                    env={"GPU_CHECK_ONLY": "topo,sweep,check,gpu-tests", "PYTHON": "/bin/false"})
    assert res.returncode == 1, res.stdout + res.stderr
    rows = summary(out)
    assert list(rows) == ["topo", "sweep", "check", "gpu-tests"]
    assert rows["topo"][0] == rows["sweep"][0] == rows["gpu-tests"][0] == "failed (rc 1)"
    assert rows["check"][0] == "skipped (no results to read)"     # never "measure now" instead
    # the last step runs on its own box plus the boxes the (instantly) failed steps left unused
    _, planned, _, _ = plan(tmp_path / "plan")
    boxes = {step: box for step, box, _ in planned}
    assert rows["gpu-tests"][2] >= sum(boxes[s] for s in rows) - 10
    assert rows["gpu-tests"][2] > boxes["gpu-tests"] + boxes["sweep"]
    assert (out / "topo.log").exists() and (out / "sweep.log").exists()
    assert [p.name for p in tmp_path.glob("gc.prev-*")], "the earlier run was not kept"
    with tarfile.open(tar) as t:
        names = t.getnames()
    assert "gc/summary.txt" in names and "gc/gpu-tests.log" in names and "gc/old.txt" not in names
    # beside the tarball, the summary: per step, then one line per assumption (here none was reached)
    text = (tmp_path / "back" / "gc.summary.txt").read_text()
    assert text == (out / "summary.txt").read_text()
    import gpu_assumptions

    tail = text.split("# assumptions", 1)[1].splitlines()[1:]
    assert len(tail) == len(gpu_assumptions.CHECKS) and all(ln.startswith("not reached") for ln in tail), tail


def test_check_exit_8_is_a_finding_and_only_written_dirs_are_read(tmp_path):
    py = _fake_python(tmp_path, 'out=""; prev=""\n'
                                'for a in "$@"; do [ "$prev" = --out ] && out="$a"; prev="$a"; done\n'
                                'case "$3" in\n'
                                '  topo) mkdir -p "$out" && echo "{}" > "$out/topo.json" ;;\n'
                                '  check) echo "check $*"; exit 8 ;;\n'
                                '  *) exit 3 ;;\n'
                                'esac\n')
    out = tmp_path / "gc"
    res = gpu_check(str(out), env={"GPU_CHECK_ONLY": "topo,sweep,check", "PYTHON": py})
    rows = summary(out)
    assert rows["topo"][0] == "ok" and rows["sweep"][0] == "failed (rc 3)"
    assert rows["check"][0].startswith("ok") and "8" in rows["check"][0]
    assert res.returncode == 1                          # the sweep failed; the finding did not
    check_line = next(ln for ln in (out / "check.log").read_text().splitlines() if ln.startswith("check "))
    assert f"{out}/topo " in check_line and "sweep-tp1" not in check_line
    assert (tmp_path / "gc.tgz").exists()
