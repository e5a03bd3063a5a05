"""The Python API: `import commprof` gives load, plan, fit, compare, checklist, reference, each
returning DataFrames; on a modelled box made here (no committed results involved). import_kineto
is tested in test_kineto.py beside the traces it reads."""
import subprocess
import sys

import pytest

import commprof
from helpers import REPO


@pytest.fixture(scope="module")
def pcie_box(tmp_path_factory):
    """A sweep-shaped dir of the pcie5-nop2p reference profile (modelled), made for this test."""
    import os

    from commprof.analysis.costmodel import resolve_comm_source

    os.environ["COMMPROF_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    try:
        return resolve_comm_source("reference:pcie5-nop2p")
    finally:
        del os.environ["COMMPROF_CACHE_DIR"]


def test_import_is_light_and_names_the_api():
    code = "import sys, commprof; print('pandas' in sys.modules, sorted(commprof.__all__))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    light, names = out.stdout.split(" ", 1)
    assert light == "False"
    for n in ("load", "plan", "fit", "compare", "checklist", "reference", "import_kineto"):
        assert n in names


def test_plan_is_a_frame_of_collectives():
    steps = commprof.plan("Qwen2.5-32B", tp=8)
    assert len(steps) == 130 == steps.attrs["counts"]["collectives_per_step"]
    assert set(steps["op"]) == {"all_reduce", "all_gather"} and steps.attrs["kind"] == "modelled"
    # a second call still reaches the API (no module of the same name shadows it)
    assert len(commprof.plan("Qwen2.5-32B", tp=4, sp=True)) > 130


def test_load_fit_compare_checklist_reference(pcie_box):
    r = commprof.load(pcie_box)
    assert r.verb == "reference" and r.kind == "modelled"
    sweep = r["sweep"]
    assert sweep["latency_us_p50"].dtype.kind == "f"
    fits = commprof.fit(pcie_box)
    assert {"op", "tp", "mode", "alpha_us", "beta_gbps", "mean_rel_err_pct"} <= set(fits.columns)
    assert (fits["alpha_us"] > 0).all()
    gap = commprof.compare(pcie_box, reference="nvlink4")
    lat = gap[(gap["metric"] == "latency") & (gap["op"] == "all_reduce") & (gap["tp"] == 8)]
    assert not lat.empty and (lat["ratio"] > 1).all()          # a PCIe box's all-reduce is slower than NVLink 4's
    assert (gap["ratio"] == gap["this_box"] / gap["reference"]).all()
    assert gap.attrs["reference"] == "nvlink4"
    items = commprof.checklist(pcie_box)
    assert {"id", "status", "value"} <= set(items.columns) and items.attrs["verdict"] in ("PASS", "WARN", "FAIL", "SKIP")
    ref = commprof.reference("nvlink4", "all_reduce", 8, [4096, 1 << 20])
    assert ref["latency_us"].is_monotonic_increasing and ref.attrs["sources"]
