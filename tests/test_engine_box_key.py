"""The engine's own account is matched to its box (issue 32): an 'import nccl-debug' or
'import nccl-inspector' dir records what identifies the machine its log came from (hostnames of
NCCL's 'host:pid:tid' prefixes, the GPUs per host from busId/cudaDev; Inspector's hostname and
ranks), and check/report place it by its --label, else by hostname and GPU count, and never into a
box its log contradicts: it is then a box of its own, said in one line. The logs are real
(shared/data/nccl-debug, skipped and named when absent; their verdicts are counted by hand in
tests/test_nccl_debug.py), the sweeps real nccl-tests logs committed in tests/data."""
import json
import os

from helpers import REPO, shared_data

from commprof.analysis.evidence import gather_boxes
from commprof.ingest.nccldebug import import_nccl_debug
from commprof.ingest.ncclinspector import import_nccl_inspector

SHM = "rtx5060tix2_pcie-shm-p2pdisabled_vllm_p2pbench-off.log"      # host proxmox, 2 GPUs: N1 FAIL
SOCKET = "a100x16_2node_socket_vllm_llmk8s-noib.log"               # hosts deepseek-v2-5-0(-1), 8 GPUs each: N2 FAIL
IB = "a100x16_2node_ib_vllm_llmk8s-ib.log"
RTX5090 = os.path.join(REPO, "tests", "data", "nccl-tests", "rtx5090x8_pcie5_p2p_allreduce_aikitoria.txt")  # host crazy
NO_HOST = os.path.join(REPO, "tests", "data", "nccl-tests", "all_gather_perf_2gpu_bf16.log")   # a paste without rank lines
A100 = os.path.join(REPO, "tests", "data", "nccl-tests", "all_reduce_perf_8xA100.log")         # host modal
TOPO4 = os.path.join(REPO, "tests", "data", "nvidia-smi", "a100x4-nvlink-topo-m.txt")           # 4 GPUs
TP8 = os.path.join(REPO, "tests", "data", "nccl-inspector", "a100x8_tp8_written")               # host nodeA, 8 ranks


def _log(tmp_path, name, label=None, cli=None):
    out = tmp_path / name.split("_")[0] / name
    if label is None:
        import_nccl_debug([shared_data("nccl-debug", name)], str(out), command=["test"])
    else:
        res = cli("import", "nccl-debug", shared_data("nccl-debug", name), "--label", label, "--out", str(out))
        assert res.returncode in (0, 8), res.stderr
    return str(out)


def _hosts(d):
    return json.loads(open(os.path.join(d, "meta.json")).read())["box_identity"]["hosts"]


def _sweep(cli, tmp_path, log, name, *extra):
    out = tmp_path / name
    res = cli("import", "nccl-tests", log, "--out", str(out), *extra)
    assert res.returncode == 0, res.stderr
    return str(out)


def _check(cli, tmp_path, *dirs):
    out = tmp_path / "chk"
    res = cli("check", *dirs, "--out", str(out))
    data = json.loads((out / "check.json").read_text())
    return res, {b["box"]: {i["id"]: i for i in b["items"]} for b in data["boxes"]}


def test_the_import_records_what_identifies_the_machine(tmp_path):
    shm = json.loads(open(os.path.join(_log(tmp_path, SHM), "meta.json")).read())["box_identity"]
    assert shm["hosts"] == ["proxmox"] and shm["gpus_per_host"] == {"proxmox": 2}
    assert shm["gpus_from"]["proxmox"] == "busId" and len(shm["bus_ids"]["proxmox"]) == 2
    ib = json.loads(open(os.path.join(_log(tmp_path, IB), "meta.json")).read())["box_identity"]
    # 'pseek-v2-5-0-1:627:627' in the log is a line whose start another rank's output overwrote
    assert ib["hosts"] == ["deepseek-v2-5-0", "deepseek-v2-5-0-1"]
    assert ib["cut_hosts"] == {"pseek-v2-5-0-1": "deepseek-v2-5-0-1"}
    assert ib["gpus_per_host"]["deepseek-v2-5-0"] == 8 and ib["nnodes_max"] == 2
    insp = tmp_path / "insp"
    import_nccl_inspector([TP8], str(insp), command=["test"])
    bi = json.loads((insp / "meta.json").read_text())["box_identity"]
    assert bi["hosts"] == ["nodeA"] and bi["gpus_per_host"] == {"nodeA": 8} and bi["pids_per_host"] == {"nodeA": 8}


def test_two_hosts_beside_one_sweep_are_judged_each_on_its_own(cli_inproc, tmp_path):
    """The old behaviour put both logs into the 5090 box (host crazy): its N1 FAILed on another
    machine's NCCL_P2P_DISABLE, and the second log's account replaced the first's."""
    sw = _sweep(cli_inproc, tmp_path, RTX5090, "rtx5090")
    sock = _log(tmp_path, SOCKET)
    host = _hosts(sock)[0]             # the host that printed most of the 2-node log names its box
    res, boxes = _check(cli_inproc, tmp_path, sw, _log(tmp_path, SHM), sock)
    assert list(boxes) == ["rtx5090", "proxmox", host] and host.startswith("deepseek-v2-5-0"), list(boxes)
    assert not any(k.startswith("N") for k in boxes["rtx5090"])          # no other machine's verdict on the 5090
    assert boxes["proxmox"]["N1"]["status"] == "FAIL" and "NCCL_P2P_DISABLE=1" in boxes["proxmox"]["N1"]["value"]
    assert boxes["proxmox"].get("N2", {}).get("status") != "FAIL"      # one node: no network verdict
    assert boxes[host]["N2"]["status"] == "FAIL" and boxes[host]["N1"]["status"] == "PASS"
    assert res.returncode == 8
    notes = [ln for ln in res.stderr.splitlines() if "judged as its own box" in ln]
    assert len(notes) == 2, res.stderr
    assert any(f"{SHM}': host proxmox is not the box of rtx5090 (host crazy): judged as its own box" in n
               for n in notes), notes


def test_a_hostless_sweep_takes_the_first_log_and_a_second_host_is_its_own_box(cli_inproc, tmp_path):
    sw = _sweep(cli_inproc, tmp_path, NO_HOST, "gpu2")
    sock = _log(tmp_path, SOCKET)
    hosts = _hosts(sock)
    res, boxes = _check(cli_inproc, tmp_path, sw, _log(tmp_path, SHM), sock)
    assert list(boxes) == ["gpu2", hosts[0]], list(boxes)
    assert boxes["gpu2"]["N1"]["status"] == "FAIL"            # nothing contradicted proxmox: today's join
    assert boxes[hosts[0]]["N2"]["status"] == "FAIL"
    assert f"host {', '.join(hosts)} is not the box of gpu2 (host proxmox)" in res.stderr


def test_one_box_and_one_log_with_nothing_against_it_is_unchanged(cli_inproc, tmp_path):
    sw = _sweep(cli_inproc, tmp_path, NO_HOST, "gpu2")
    res, boxes = _check(cli_inproc, tmp_path, sw, _log(tmp_path, SHM))
    assert list(boxes) == ["gpu2"] and boxes["gpu2"]["N1"]["status"] == "FAIL"
    assert "its own box" not in res.stderr
    # a log alone is its own (only) box, as before
    res, boxes = _check(cli_inproc, tmp_path, _log(tmp_path, SHM))
    assert list(boxes) == [SHM] and "its own box" not in res.stderr


def test_the_same_host_joins_its_box_whatever_the_order(cli_inproc, tmp_path):
    """The A100 nccl-tests log's rank lines name host 'modal'; renamed here to the SHM log's host
    (proxmox), the log joins that box and not the box before it on the command line."""
    renamed = tmp_path / "all_reduce_perf_proxmox.log"
    renamed.write_text(open(A100).read().replace(" on      modal device", " on    proxmox device"))
    pm = _sweep(cli_inproc, tmp_path, str(renamed), "pm")
    other = _sweep(cli_inproc, tmp_path, RTX5090, "rtx5090")
    res, boxes = _check(cli_inproc, tmp_path, pm, other, _log(tmp_path, SHM))
    assert list(boxes) == ["pm", "rtx5090"] and boxes["pm"]["N1"]["status"] == "FAIL"
    assert not any(k.startswith("N") for k in boxes["rtx5090"]) and "its own box" not in res.stderr


def test_more_gpus_than_the_boxs_topo_is_another_box(cli_inproc, tmp_path):
    sw = _sweep(cli_inproc, tmp_path, NO_HOST, "gpu2")
    topo = tmp_path / "topo4"
    assert cli_inproc("import", "nvidia-smi-topo", TOPO4, "--out", str(topo)).returncode == 0
    res, boxes = _check(cli_inproc, tmp_path, sw, str(topo), _log(tmp_path, IB))
    assert list(boxes) == ["gpu2", "deepseek-v2-5-0"], list(boxes)
    assert "host deepseek-v2-5-0 used 8 GPUs, more than the 4 of the box of gpu2 (its topo.json)" in res.stderr
    res, boxes = _check(cli_inproc, tmp_path, sw, str(topo), _log(tmp_path, SHM))     # 2 GPUs: fits
    assert list(boxes) == ["gpu2"] and "N1" in boxes["gpu2"]


def test_a_label_names_the_box_first(cli_inproc, tmp_path):
    sw = _sweep(cli_inproc, tmp_path, RTX5090, "rtx5090", "--label", "5090 box")
    res, boxes = _check(cli_inproc, tmp_path, sw, _log(tmp_path, SHM, label="5090 box", cli=cli_inproc))
    assert list(boxes) == ["5090 box"] and boxes["5090 box"]["N1"]["status"] == "FAIL"
    assert "its own box" not in res.stderr
    res, boxes = _check(cli_inproc, tmp_path, sw, _log(tmp_path, SOCKET, label="rack 2", cli=cli_inproc))
    assert list(boxes) == ["5090 box", "rack 2"]
    assert "labelled 'rack 2', which names no box here ('5090 box'): judged as its own box" in res.stderr


def test_inspector_records_of_another_host_are_not_set_beside_the_sweep(cli_inproc, tmp_path):
    sw = _sweep(cli_inproc, tmp_path, A100, "a100")
    insp = tmp_path / "insp"
    assert cli_inproc("import", "nccl-inspector", TP8, "--out", str(insp)).returncode == 0
    res, boxes = _check(cli_inproc, tmp_path, sw, str(insp))
    assert list(boxes) == ["a100", "nodeA"] and "I1" not in boxes["a100"]
    assert boxes["nodeA"]["I1"]["status"] == "SKIP" and "no sweep of this box" in boxes["nodeA"]["I1"]["value"]
    assert "nccl-inspector dir" in res.stderr and "host nodeA is not the box of a100 (host modal)" in res.stderr


def test_report_shows_each_box_and_the_line_that_split_them(cli_inproc, tmp_path):
    sw = _sweep(cli_inproc, tmp_path, RTX5090, "rtx5090")
    res = cli_inproc("report", sw, _log(tmp_path, SHM), "--out", str(tmp_path / "rep"))
    assert res.returncode == 0, res.stderr
    assert "  proxmox: FAIL" in res.stdout and "  rtx5090: PASS" in res.stdout
    md = (tmp_path / "rep" / "report.md").read_text()
    box2 = md[md.index("## Box 2: proxmox"):]
    assert "host proxmox is not the box of rtx5090 (host crazy): judged as its own box" in box2
    assert "### proxmox: NCCL's own account (transports)" in box2
    assert "NCCL's own account" not in md[md.index("## Box 1: rtx5090"):md.index("## Box 2: proxmox")]


def test_gather_keeps_boxes_without_engine_dirs_as_they_were(tmp_path, cli_inproc):
    a = _sweep(cli_inproc, tmp_path, RTX5090, "a")
    b = _sweep(cli_inproc, tmp_path, A100, "b")
    assert [x.label for x in gather_boxes([a, b])] == ["a", "b"]
    assert [x.label for x in gather_boxes([a, b], "x,y")] == ["x", "y"]


def test_a_second_account_of_one_box_says_it_replaces_the_first(cli_inproc, tmp_path):
    sw = _sweep(cli_inproc, tmp_path, RTX5090, "rtx5090", "--label", "5090 box")
    a = _log(tmp_path, SHM, label="5090 box", cli=cli_inproc)
    b = _log(tmp_path, IB, label="5090 box", cli=cli_inproc)
    res, boxes = _check(cli_inproc, tmp_path, sw, a, b)
    assert list(boxes) == ["5090 box"] and boxes["5090 box"]["N1"]["status"] == "PASS"     # the IB log's
    assert f"{IB}' replaces '" in res.stderr and f"{SHM}' as this box's NCCL_DEBUG account" in res.stderr


def test_a_two_node_log_beside_another_two_node_sweep_is_its_own_box_in_check_and_report(cli_inproc, tmp_path):
    """Both sides real and multi-node: the 2x8 H100 A3 Mega nccl-tests log (hosts ztan-mig-*) and the
    2x8 A100 vLLM log over TCP (hosts deepseek-v2-5-0*). The H100 box gets no N item (its C10n stays
    its own); the A100 log is a box of its own with its N2 FAIL, in check and in report."""
    import shutil

    neutral = tmp_path / "nccl.log"
    shutil.copy(shared_data("nccl-tests", "h100x16_2node_allreduce_a3mega.txt"), neutral)
    sw = _sweep(cli_inproc, tmp_path, str(neutral), "a3mega")
    sock = _log(tmp_path, SOCKET)
    host = _hosts(sock)[0]
    res, boxes = _check(cli_inproc, tmp_path, sw, sock)
    assert list(boxes) == ["a3mega", host], list(boxes)
    assert not any(k.startswith("N") for k in boxes["a3mega"]) and boxes["a3mega"]["C10n"]["status"] == "WARN"
    assert boxes[host]["N2"]["status"] == "FAIL" and boxes[host]["N1"]["status"] == "PASS"
    assert "is not the box of a3mega (host ztan-mig-235z, ztan-mig-gq73): judged as its own box" in res.stderr
    res = cli_inproc("report", sw, sock, "--out", str(tmp_path / "rep"))
    assert res.returncode == 0 and "checklist verdict FAIL over 2 boxes" in res.stdout, res.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    own = md[md.index(f"## Box 2: {host}"):]
    assert f"### {host}: NCCL's own account (transports)" in own and "NET/Socket" in own
    assert "NCCL's own account" not in md[md.index("## Box 1: a3mega"):md.index(f"## Box 2: {host}")]
