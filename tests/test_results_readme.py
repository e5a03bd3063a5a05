"""results/README.md is generated from the dirs under results/ (scripts/results_readme.py): it
lists every results dir with its verb, kind and provenance, and every benchmark; it cannot drift."""
import importlib.util
import json
import os

from helpers import REPO


def _script():
    spec = importlib.util.spec_from_file_location("results_readme", os.path.join(REPO, "scripts", "results_readme.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_committed_results_readme_is_what_the_script_writes():
    rr = _script()
    with open(os.path.join(REPO, "results", "README.md"), encoding="utf-8") as f:
        committed = f.read()
    assert committed == rr.render(os.path.join(REPO, "results")), \
        "results/README.md is out of date: run python scripts/results_readme.py and commit it"


def test_every_results_dir_and_benchmark_is_listed_once():
    rr = _script()
    root = os.path.join(REPO, "results")
    text = rr.render(root)
    dirs = [n for n in os.listdir(root) if os.path.isfile(os.path.join(root, n, "meta.json"))]
    assert dirs
    for n in dirs:
        assert text.count(f"`{n}/`") == 1, n
    for n in os.listdir(os.path.join(root, "bench")):
        if n.endswith(".json"):
            assert text.count(f"`{n[:-5]}`") == 1, n


def test_a_new_dir_changes_the_page(tmp_path):
    """A dir added (or its meta changed) is a different page, so the committed one fails the test above."""
    rr = _script()
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "b.json").write_text(json.dumps({"kind": "measured", "what": "w", "command": "python x.py",
                                                           "machine": {"host": "h", "cpu": "c", "cpu_cores": 2}}))
    before = rr.render(str(tmp_path))
    d = tmp_path / "sweep-x"
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({"verb": "sweep", "kind": "measured", "what": "a sweep", "hosts": ["box1"],
                                             "gpus": ["NVIDIA H100 80GB HBM3"], "status": "complete",
                                             "command": ["commprof", "sweep", "--tp", "2"],
                                             "start_time": "2026-12-04T10:00:00+00:00"}))
    (tmp_path / "notes").mkdir()
    after = rr.render(str(tmp_path))
    assert after != before
    row = next(line for line in after.splitlines() if "`sweep-x/`" in line)
    assert "| sweep | measured | complete | 2026-12-04 |" in row and "`box1`" in row and "H100" in row
    assert "`commprof sweep --tp 2`" in row
    assert "Measured on a GPU here: `sweep-x/`." in after
    assert "Other dirs (no meta.json): `notes/`." in after
    assert "## Results dirs (1)" in after and "## Benchmarks (1," in after
