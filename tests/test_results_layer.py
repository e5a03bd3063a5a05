"""The results layer: one provenance writer, one crash-safe appender, one load() for every dir."""
import json
import os

import pytest

from commprof import results
from commprof.model.errors import UsageError
from helpers import REPO, corpus_log

NCCL_LOG = "a100x8_dgx_allreduce_superbench_legacy.txt"     # out of a repository snapshot: corpus_log


def _committed_results_dirs():
    root = os.path.join(REPO, "results")
    # results/bench holds benchmark records (each .json with its own provenance), not a verb's dir
    return sorted(os.path.join(root, d) for d in os.listdir(root)
                  if os.path.isdir(os.path.join(root, d)) and d != "bench")


@pytest.mark.parametrize("path", _committed_results_dirs(), ids=os.path.basename)
def test_every_committed_results_dir_loads(path):
    r = results.load(path)
    assert r.verb in results.meta.VERBS
    assert set(results.BASE_KEYS) <= set(r.meta)
    assert isinstance(r.meta["gpus"], list) and isinstance(r.meta["hosts"], list)
    for name, df in r.tables.items():
        assert len(df.columns), name


def test_provenance_has_the_same_base_keys_for_every_verb():
    for verb in results.meta.VERBS:
        m = results.provenance(verb, "measured", "x", command=["commprof", verb], gpus=["g"])
        assert list(m)[:len(results.BASE_KEYS)] == list(results.BASE_KEYS)
        assert m["verb"] == verb and m["schema_version"] == results.SCHEMA_VERSION
    with pytest.raises(ValueError):
        results.provenance("nope", "measured", "x")
    with pytest.raises(ValueError):
        results.provenance("sweep", "guessed", "x")


def test_old_meta_is_normalized():
    m = results.normalize({"kind": "measured", "gpus": 2, "host": "h"}, "p2p")
    assert m["gpus"] == [] and m["gpu_count"] == 2 and m["hosts"] == ["h"] and m["verb"] == "p2p"
    assert set(results.BASE_KEYS) <= set(m)


def test_appender_drops_a_truncated_last_line_on_resume(tmp_path):
    p = str(tmp_path / "t.csv")
    t = results.TableAppender(p, ["a", "b"])
    t.write([{"a": 1, "b": 2.5}, {"a": 3, "b": 4}])
    t.close()
    with open(p, "a") as f:
        f.write("5,6")                        # a killed writer's fragment, no newline
    assert len(results.read_table_rows(p)[1]) == 2     # readers drop it
    t = results.TableAppender(p, ["a", "b", "c"])      # resume: the table keeps its own header
    assert t.columns == ["a", "b"]
    t.write([{"a": 7, "b": 8, "c": 9}])
    t.close()
    with open(p) as f:
        assert f.read() == "a,b\n1,2.5\n3,4\n7,8\n"


def test_appender_on_a_header_fragment_starts_over(tmp_path):
    p = str(tmp_path / "t.csv")
    with open(p, "w") as f:
        f.write("a,")
    t = results.TableAppender(p, ["a", "b"])
    t.write([{"a": 1, "b": 2}])
    t.close()
    with open(p) as f:
        assert f.read() == "a,b\n1,2\n"


def test_read_table_rows_names_the_file_on_bad_bytes(tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes(b"a,b\n\xff\xfe,1\n")
    with pytest.raises(UsageError, match="t.csv.*not UTF-8"):
        results.read_table_rows(str(p))


def test_load_reads_what_each_verb_writes(tmp_path, cli_inproc):
    from commprof.analysis.costmodel import resolve_comm_source

    plan = str(tmp_path / "plan")
    assert cli_inproc("plan", "--model", "Qwen2.5-32B", "--tp", "8", "--out", plan).returncode == 0
    imp = str(tmp_path / "imp")
    res = cli_inproc("import", "nccl-tests", corpus_log(NCCL_LOG), "--out", imp)
    assert res.returncode == 0, res.stderr
    os.environ["COMMPROF_CACHE_DIR"] = str(tmp_path / "cache")
    try:
        ref = resolve_comm_source("reference:nvlink4")
    finally:
        del os.environ["COMMPROF_CACHE_DIR"]
    got = {}
    for d in (plan, imp, ref):
        r = results.load(d)
        got[r.verb] = r
        assert set(results.BASE_KEYS) <= set(r.meta)
        with open(os.path.join(d, "meta.json")) as f:
            raw = json.load(f)
        assert raw["verb"] == r.verb and raw["schema_version"] == results.SCHEMA_VERSION
    assert got["plan"].kind == "modelled" and "plan" in got["plan"].tables and "plan" in got["plan"].docs
    assert got["import"].kind == "imported" and len(got["import"]["sweep"]) > 0
    assert got["reference"].kind == "modelled" and got["reference"]["sweep"]["latency_us_p50"].dtype.kind == "f"


def test_load_refuses_a_dir_without_results(tmp_path):
    with pytest.raises(UsageError, match="holds no commprof results"):
        results.load(str(tmp_path))
    with pytest.raises(UsageError, match="does not exist"):
        results.load(str(tmp_path / "missing"))


def test_meta_names_no_install_path_and_reports_name_dirs_as_given(tmp_path, monkeypatch):
    """A committed results dir is read on other machines: its command names the program as
    ``commprof`` (not the venv it ran from) and dirs below the working directory relatively."""
    from commprof.results.meta import shown_path, user_command

    assert user_command(["/home/u/proj/.venv/bin/commprof", "sweep", "--tp", "2"]) == ["commprof", "sweep", "--tp", "2"]
    assert user_command(["/site-packages/commprof/__main__.py", "gap", "a"]) == ["commprof", "gap", "a"]
    assert user_command(["/usr/bin/python3", "script.py"]) == ["/usr/bin/python3", "script.py"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "box").mkdir(parents=True)
    assert shown_path(str(tmp_path / "results" / "box")) == os.path.join("results", "box")
    assert shown_path("/") == "/"


def test_load_names_a_path_that_is_not_a_directory_as_such(tmp_path):
    """A file (or a link to a device) given where a results dir goes: 'not a directory', not 'does not exist'."""
    from commprof.model.errors import UsageError
    from commprof.results import load

    f = tmp_path / "meta.json"
    f.write_text("{}")
    with pytest.raises(UsageError, match="is not a directory"):
        load(str(f))
    with pytest.raises(UsageError, match="does not exist"):
        load(str(tmp_path / "absent"))
