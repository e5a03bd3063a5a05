"""check and report read NCCL's own account (issue 32): an 'import nccl-debug' dir given to
'commprof check' or 'report' contributes N0-N6, judged with check's thresholds ([nccl_debug]), and
the report shows one line per communicator. The real logs come from shared/data (skipped, named,
when absent); their expected verdicts are the ones counted by hand in tests/test_nccl_debug.py."""
import json
import os

import pytest
from helpers import REPO, shared_data
from test_nccl_debug import REAL

from commprof.analysis.checkitems_nccl import nccl_debug_items
from commprof.analysis.thresholds import load_thresholds
from commprof.ingest.nccldebug import import_nccl_debug
from commprof.model.errors import UsageError
from commprof.results import load

FRAG = os.path.join(REPO, "tests", "data", "nccl-debug", "fragment_8gpu_nvlink_written.log")
SHM = "rtx5060tix2_pcie-shm-p2pdisabled_vllm_p2pbench-off.log"
CHECK_STATUS = {"INFO": "SKIP", "INSUFFICIENT": "SKIP"}


def _dir(tmp_path, log, **kw):
    out = tmp_path / os.path.basename(log)
    import_nccl_debug([log], str(out), command=["test"], **kw)
    return str(out)


@pytest.mark.parametrize("name", sorted(REAL))
def test_check_items_of_each_real_log(tmp_path, name):
    d = _dir(tmp_path, shared_data("nccl-debug", name))
    got = {i.id: i for i in nccl_debug_items(load(d), load_thresholds())}
    for k, v in REAL[name][2].items():
        assert got[k].status == CHECK_STATUS.get(v, v), (k, got[k])
        if got[k].status in ("FAIL", "WARN"):
            assert got[k].hint, k          # every FAIL and WARN says what the buyer does next


def test_check_cli_fails_on_shm_and_writes_the_items(cli_inproc, tmp_path):
    d = _dir(tmp_path, shared_data("nccl-debug", SHM))
    res = cli_inproc("check", d, "--out", str(tmp_path / "chk"))
    assert res.returncode == 8, res.stderr
    items = {i["id"]: i for i in json.loads((tmp_path / "chk" / "check.json").read_text())["items"]}
    assert items["N1"]["status"] == "FAIL" and "NCCL_P2P_DISABLE=1" in items["N1"]["value"]
    assert items["N1"]["hint"].startswith("Unset NCCL_P2P_DISABLE and re-test")
    assert items["N1"]["what_now"].startswith("Unset NCCL_P2P_DISABLE and re-test")   # the log's own, not a generic line
    assert items["N4"]["status"] == "WARN"
    head = json.loads((tmp_path / "chk" / "check.json").read_text())["headline"]
    assert head.startswith("FAIL on 2 of") and "(the engine's own account only;" in head, head


def test_thresholds_file_sets_the_verdict_and_refuses_a_bad_word(cli_inproc, tmp_path):
    d = _dir(tmp_path, shared_data("nccl-debug", SHM))
    th = tmp_path / "th.toml"
    th.write_text('[nccl_debug]\nshm_with_override = "WARN"\n')
    got = {i.id: i.status for i in nccl_debug_items(load(d), load_thresholds(str(th)))}
    assert got["N1"] == "WARN"
    th.write_text('[nccl_debug]\nshm_with_override = "MAYBE"\n')
    with pytest.raises(UsageError, match="nccl_debug.shm_with_override"):
        nccl_debug_items(load(d), load_thresholds(str(th)))
    res = cli_inproc("check", d, "--thresholds", str(th), "--out", str(tmp_path / "c2"))
    assert res.returncode == 2 and "shm_with_override" in res.stderr


def test_expected_gpus_from_the_import_reach_check(tmp_path):
    d = _dir(tmp_path, FRAG, expect_gpus=16)
    got = {i.id: i for i in nccl_debug_items(load(d), load_thresholds())}
    assert got["N5"].status == "FAIL" and "16 GPUs were sold" in got["N5"].value


def test_report_shows_the_transport_table_and_verdicts(cli_inproc, tmp_path):
    d = _dir(tmp_path, FRAG)
    res = cli_inproc("report", d, "--out", str(tmp_path / "rep"))
    assert res.returncode in (0, 8, 9), res.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    sec = md[md.index("## NCCL's own account (transports)"):]
    comms = load(d).tables["nccl_comms"]
    for s in comms["summary"]:
        assert f"| {s} |" in sec
    assert "pairs printed P2P/CUMEM (NVLink)" in sec
    assert "| N3 | NVLink SHARP (NVLS) is used where the switch offers it | WARN |" in sec
    assert "NCCL&#39;s own account (transports)" in (tmp_path / "rep" / "report.html").read_text()


def test_report_headline_of_an_engine_account_alone_has_no_placeholder(cli_inproc, tmp_path):
    """The headline read 'GPUs not named, ?, unknown' for a box known only from its NCCL log."""
    d = str(tmp_path / "nd")
    res = cli_inproc("import", "nccl-debug", shared_data("nccl-debug", "rtx5060tix2_pcie-shm-p2pdisabled_vllm_p2pbench-off.log"),
                     "--out", d)
    assert res.returncode == 8, res.stderr
    res = cli_inproc("report", d, "--out", str(tmp_path / "rep"))
    assert res.returncode == 0, res.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    head = md[md.index("## Headline"):md.index("## Checklist")]
    assert ", ?," not in head and "FAIL: N1" in head
