"""`import commprof` must work with no GPU, driver, torch, cupy or NVML."""
import subprocess
import sys

from helpers import REPO

BLOCK = """
import sys
for name in ("torch", "cupy", "pynvml", "numpy", "pandas", "matplotlib"):
    sys.modules[name] = None          # any import of these now raises ImportError
import commprof, commprof.cli, commprof.sweep, commprof.collectives, commprof.models, commprof.sizes
import commprof.results, commprof.runinfo, commprof.errors, commprof.planner, commprof.topo, commprof.api
import commprof.costmodel, commprof.profiles, commprof.nccltests, commprof.check, commprof.gap, commprof.report
import commprof.views.show, commprof.views.report, commprof.trace, commprof.predict, commprof.views.predict
import microbench, cuda_ext
from commprof.models import get_model
from commprof.sizes import parse_sizes
print(parse_sizes("decode", ["all_reduce"], get_model("Gemma-3-27B"), [1], 2)[0].size_bytes)
print(commprof.runinfo.versions()["torch"])
"""


def test_import_without_native_dependencies():
    res = subprocess.run([sys.executable, "-c", BLOCK], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["10752", "n/a"]
