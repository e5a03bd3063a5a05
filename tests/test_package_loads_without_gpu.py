"""`import commprof` must work with no GPU, driver, torch, cupy or NVML."""
import subprocess
import sys

from helpers import REPO

BLOCK = """
import sys
for name in ("torch", "cupy", "pynvml", "numpy", "pandas", "matplotlib"):
    sys.modules[name] = None          # any import of these now raises ImportError
import commprof, commprof.cli, commprof.verbs.sweep, commprof.model.collectives, commprof.model.models, commprof.model.sizes
import commprof.results, commprof.model.machine, commprof.model.errors, commprof.verbs.plan, commprof.verbs.topo, commprof.api
import commprof.analysis.costmodel, commprof.analysis.profiles, commprof.ingest.nccltests, commprof.verbs.check, commprof.verbs.gap, commprof.verbs.report
import commprof.views.show, commprof.views.report, commprof.verbs.trace, commprof.verbs.predict, commprof.views.predict
import microbench, cuda_ext
from commprof.model.models import get_model
from commprof.model.sizes import parse_sizes
print(parse_sizes("decode", ["all_reduce"], get_model("Gemma-3-27B"), [1], 2)[0].size_bytes)
print(commprof.model.machine.versions()["torch"])
"""


def test_import_without_native_dependencies():
    res = subprocess.run([sys.executable, "-c", BLOCK], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["10752", "n/a"]
