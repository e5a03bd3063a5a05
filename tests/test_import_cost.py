"""Verbs that only read files (import, gap, check on given dirs, report, show) never import torch:
its import costs a second or more on every run, and their meta.json still records its version
(from the package's metadata)."""
import importlib.metadata
import json
import os
import subprocess
import sys

from helpers import REPO, cli_env

LOG = os.path.join(REPO, "tests", "data", "nccl-tests", "all_reduce_perf_8xA100.log")

# import, gap, check, report and show in one process, as the CLI runs them; what it imported, and each exit code
SCRIPT = r"""
import json, sys
from commprof.cli import main
codes = []
for argv in sys.argv[1:]:
    sys.argv = ["commprof", *argv.split("\x1f")]
    try:
        main()
        codes.append(0)
    except SystemExit as e:
        codes.append(e.code)
print(json.dumps({"codes": codes, "torch": "torch" in sys.modules}))
"""


def test_verbs_that_read_files_do_not_import_torch(tmp_path):
    imp, gap, chk, rep = (str(tmp_path / n) for n in ("imp", "gap", "chk", "rep"))
    runs = [["import", "nccl-tests", LOG, "--out", imp], ["gap", imp, "--out", gap], ["check", imp, "--out", chk],
            ["report", imp, "--out", rep], ["show", imp, "--no-charts"]]
    res = subprocess.run([sys.executable, "-c", SCRIPT, *("\x1f".join(r) for r in runs)], cwd=tmp_path,
                         env=cli_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    codes = got["codes"]
    assert codes[:2] == [0, 0] and codes[2] in (0, 8, 9) and codes[3:] == [0, 0], res.stderr   # check: a finding
    assert got["torch"] is False
    with open(os.path.join(imp, "meta.json")) as f:
        versions = json.load(f)["versions"]
    assert versions["torch"] == importlib.metadata.version("torch")
    assert versions["nccl"] == "n/a"


def test_versions_from_a_loaded_torch_match_the_metadata(monkeypatch):
    import torch

    from commprof.model import machine as runinfo

    loaded = runinfo.versions()
    monkeypatch.delitem(sys.modules, "torch")
    unloaded = runinfo.versions()
    assert unloaded["torch"] == loaded["torch"] == torch.__version__
    assert unloaded["cuda_runtime"] == loaded["cuda_runtime"] == (torch.version.cuda or "n/a")
