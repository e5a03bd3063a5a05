"""One rule for the input paths a results dir records (``commprof.model.fileio.shown_path``): relative
to the working dir when the input lies below it, else absolute. Run from a tmp working dir on inputs
given by relative path, no verb or importer may write the machine's absolute path of that dir."""
import json
import os
import shutil

from helpers import REPO, TOY_MODEL, hta_subsampled_files

from commprof.analysis.moeroute import parse_skew

DATA = os.path.join(REPO, "tests", "data")
KINETO = [f"hta_trace_filter_rank{r}_subsampled.json.gz" for r in (0, 1)]


def _inputs(tmp_path):
    """The public fixtures copied below the tmp working dir, so a relative path can name them."""
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(os.path.join(DATA, "nccl-tests", "all_reduce_perf_8xA100.log"), d / "ar8.log")
    shutil.copy(os.path.join(DATA, "nvidia-smi", "a100x4-nvlink-topo-m.txt"), d / "topo-m.txt")
    hta_subsampled_files(d)             # HTA's pair beside the checkout (the test skips without it)
    shutil.copy(TOY_MODEL, d / "toy.json")


def _json(path):
    with open(path) as f:
        return json.load(f)


def test_verbs_and_importers_record_relative_input_paths(cli_inproc, tmp_path):
    _inputs(tmp_path)
    runs = {
        "imp": ["import", "nccl-tests", "in/ar8.log", "--out", "imp"],
        "topo": ["import", "nvidia-smi-topo", "in/topo-m.txt", "--out", "topo"],
        "kin": ["import", "kineto", *(f"in/{n}" for n in KINETO), "--out", "kin"],
        "plan": ["plan", "--model", "in/toy.json", "--tp", "2", "--out", "plan"],
        "pred": ["predict", "--model", "in/toy.json", "--gpu", "a100-sxm", "--comm", "imp", "--tp", "8",
                 "--out", "pred"],
        "tr": ["trace", "--predict", "--comm-from", "reference:nvlink4", "--model", "in/toy.json", "--tp", "2",
               "--batch", "1", "--context", "64", "--tokens", "2", "--warmup", "1", "--no-charts", "--out", "tr"],
        "chk": ["check", "imp", "topo", "--out", "chk"],
        "gapd": ["gap", "imp", "--reference", "nvlink4", "--out", "gapd"],
    }
    for out, args in runs.items():
        res = cli_inproc(*args, env={"COMMPROF_CACHE_DIR": "cache"})     # the reference cache below it too
        assert res.returncode in (0, 1), (out, res.returncode, res.stderr)    # check exits 1 on a FAIL item
        assert os.path.exists(tmp_path / out / "meta.json"), out

    # the recorded inputs are there, as relative paths (so the test below has something to find)
    assert [f["path"] for f in _json(tmp_path / "imp" / "meta.json")["source_files"]] == ["in/ar8.log"]
    assert _json(tmp_path / "imp" / "meta.json")["runs"][0]["file"] == "in/ar8.log"
    assert [f["path"] for f in _json(tmp_path / "topo" / "meta.json")["source_files"]] == ["in/topo-m.txt"]
    assert _json(tmp_path / "topo" / "topo.json")["source_files"] == ["in/topo-m.txt"]
    assert [f["path"] for f in _json(tmp_path / "kin" / "meta.json")["source_files"]] == [f"in/{n}" for n in KINETO]
    assert "config.json at in/toy.json" in json.dumps(_json(tmp_path / "plan" / "meta.json"))
    pred = _json(tmp_path / "pred" / "meta.json")
    assert "config.json at in/toy.json" in json.dumps(pred) and '"results_dir": "imp"' in json.dumps(pred)
    tr = _json(tmp_path / "tr" / "meta.json")
    assert tr["inputs"]["communication"]["results_dir"] == os.path.join("cache", "reference", "nvlink4")
    assert _json(tmp_path / "chk" / "meta.json")["evidence_dirs"] == ["imp", "topo"]
    assert _json(tmp_path / "gapd" / "meta.json")["evidence_dirs"] == ["imp"]

    # and nowhere in what they wrote is the tmp working dir's absolute path
    roots = {str(tmp_path), os.path.realpath(tmp_path)}
    for out in runs:
        for root, _, files in os.walk(tmp_path / out):
            for name in files:
                if name.endswith((".json", ".md", ".csv")):
                    with open(os.path.join(root, name), errors="replace") as f:
                        text = f.read()
                    assert not [r for r in roots if r in text], os.path.join(root, name)


def test_an_input_outside_the_working_dir_stays_absolute(tmp_path, monkeypatch):
    """The rule's other half, through --skew file:PATH: an absolute path below the working dir is
    recorded relative, one outside it absolute (a relative '../x' would mean nothing elsewhere)."""
    (tmp_path / "work").mkdir()
    loads = tmp_path / "loads.csv"
    loads.write_text("expert,load\n" + "".join(f"{e},{e + 1}\n" for e in range(8)))
    shutil.copy(loads, tmp_path / "work" / "loads.csv")
    monkeypatch.chdir(tmp_path / "work")
    assert parse_skew(f"file:{tmp_path / 'work' / 'loads.csv'}", 8, 0).spec == "file:loads.csv"
    assert parse_skew("file:../loads.csv", 8, 0).spec == f"file:{loads}"
