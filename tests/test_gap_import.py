"""commprof gap and import through the CLI (in-process); reference profiles as --comm-from sources."""
import json
import os

import pytest
from helpers import REPO
from helpers import TOY_MODEL as TOY

from commprof.analysis.costmodel import write_profile_sweep
from commprof.model.errors import UsageError

NCCL_LOG = os.path.join(REPO, "tests", "data", "nccl-tests", "all_reduce_perf_8xA100.log")


def test_gap_pcie_box_vs_nvlink_reference(cli_inproc, tmp_path):
    box = write_profile_sweep("pcie5-nop2p", str(tmp_path / "box"), tps=(2, 8),
                              sizes=(16384, 1 << 20, 256 << 20))
    res = cli_inproc("gap", box, "--reference", "nvlink4")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "reference: nvlink4" in out and "modelled" in out
    lat = [l for l in out.splitlines() if "all_reduce" in l and "│ 8 " in l and "latency" in l and "16KiB" in l]
    assert len(lat) == 1 and float(lat[0].split("│")[-2].strip().rstrip("x")) > 1.5   # TP=8: PCIe pays
    assert any("busbw" in l and "256MiB" in l for l in out.splitlines())
    assert "fit all_reduce tp=8" in out


def test_gap_with_trace_gives_per_token_impact(cli_inproc, gloo_trace, tmp_path):
    box = write_profile_sweep("pcie5-nop2p", str(tmp_path / "box"), tps=(2,))
    res = cli_inproc("gap", box, gloo_trace, "--reference", "nvlink4")
    assert res.returncode == 0, res.stderr
    assert "communication share" in res.stdout and "on nvlink4 (modelled" in res.stdout


def test_gap_bad_reference_and_no_sweep(cli_inproc, tmp_path):
    box = write_profile_sweep("nvlink4", str(tmp_path / "box"), tps=(8,))
    res = cli_inproc("gap", box, "--reference", "nvlink9")
    assert res.returncode == 2 and "unknown" in res.stderr and "nvlink4" in res.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    res = cli_inproc("gap", str(empty))
    assert res.returncode == 2 and "holds no" in res.stderr


def test_import_nccl_tests_then_check_and_predict(cli_inproc, tmp_path):
    out = str(tmp_path / "imp")
    res = cli_inproc("import", "nccl-tests", NCCL_LOG, "--out", out)
    assert res.returncode == 0, res.stderr
    meta = json.load(open(os.path.join(out, "meta.json")))
    assert meta["kind"] == "imported" and meta["source_files"]
    res = cli_inproc("show", out, "--no-charts")
    assert res.returncode == 0 and "imported on" in res.stdout
    malformed = os.path.join(REPO, "tests", "data", "nccl-tests", "all_reduce_perf_malformed.log")
    res = cli_inproc("import", "nccl-tests", malformed, "--out", str(tmp_path / "bad"))
    assert res.returncode == 2 and "line 12" in res.stderr
    res = cli_inproc("import", "osu", NCCL_LOG, "--out", str(tmp_path / "osu"))
    assert res.returncode == 2


def test_predict_from_reference_profile(cli_inproc, tmp_path):
    out = str(tmp_path / "pred")
    res = cli_inproc("trace", "--predict", "--comm-from", "reference:nvlink4", "--model", TOY, "--tp", "2,8",
                     "--batch", "1", "--context", "64", "--tokens", "4", "--no-charts", "--out", out,
                     env={"COMMPROF_CACHE_DIR": str(tmp_path / "cache")})
    # toy has 4 KV heads: tp 8 replicates them; 16 query heads split 8 ways
    assert res.returncode == 0, res.stderr
    meta = json.load(open(os.path.join(out, "meta.json")))
    assert meta["kind"] == "predicted" and meta["inputs"]["communication"]["kind"] == "modelled"
    assert "[predicted]" in res.stdout and "% = " in res.stdout          # the share's milliseconds beside it
    # CPU compute says nothing of a GPU box: the line names the verb that models one, with this model
    assert f"commprof predict --model {os.path.abspath(TOY)} --gpu SKU --comm " in res.stderr


def _p2p_dir(tmp_path):
    """A p2p results dir as `commprof p2p` writes it (synthetic figures for the test)."""
    d = tmp_path / "p2p"
    d.mkdir()
    rows = ["src_device,dst_device,probe,kind,p2p,size_bytes,gbps,gbps_best,time_us_p50,roundtrip_us,oneway_us,verified"]
    for a, b in ((0, 1), (1, 0)):
        rows.append(f"{a},{b},sm_copy,read,on,67108864,50.0,52.0,1342.0,,,True")
        rows.append(f"{a},{b},pingpong,,on,,,,,1.0,0.5,")
        rows.append(f"{a},{b},host_staged,peer,off,67108864,12.0,13.0,5592.0,,,True")
    (d / "p2p.csv").write_text("\n".join(rows) + "\n")
    (d / "meta.json").write_text(json.dumps({"kind": "measured", "what": "synthetic p2p for a test"}))
    return str(d)


def test_wire_line_in_gap_and_report(cli_inproc, tmp_path):
    box = write_profile_sweep("pcie5-p2p", str(tmp_path / "box"), tps=(2,), sizes=(16384, 1 << 20))
    p2p = _p2p_dir(tmp_path)
    res = cli_inproc("gap", box, p2p, "--reference", "nvlink4")
    assert res.returncode == 0, res.stderr
    assert "wire (measured by commprof p2p over GPU pairs): one-way latency 0.50 us, SM read 50.0 GB/s" in res.stdout
    # 16 KiB at TP=2: one hop + reading one peer's 16 KiB at 50 GB/s = 0.5 + 0.33 us
    assert "the wire bound 0.8 us" in res.stdout
    out = tmp_path / "rep"
    res = cli_inproc("report", box, p2p, "--out", str(out))
    assert res.returncode == 0, res.stderr
    html = (out / "report.html").read_text()
    assert "NCCL vs the wire" in html and (out / "wire_vs_nccl.png").stat().st_size > 5000
    (tmp_path / "p2p" / "p2p.csv").write_text("a,b\n1,2\n")
    res = cli_inproc("gap", box, p2p)
    assert res.returncode == 2 and "p2p.csv" in res.stderr and "missing column" in res.stderr


# --- what gap compares -------------------------------------------------------------------

def _imported(tmp_path, name, log):
    from commprof.ingest.nccltests import import_nccl_tests

    out = str(tmp_path / name)
    import_nccl_tests([log], out)
    return out


def _one_gpu_log(tmp_path):
    rows = [f"{s:12d} {s // 4:13d}     float     sum      -1     2.10    0.00    0.00      0     2.05    0.00    0.00      0"
            for s in (8, 1024, 65536, 256 << 20)]
    p = tmp_path / "all_reduce_perf_1gpu.log"
    p.write_text("\n".join(["# nThread 1 nGpus 1 minBytes 8 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20 "
                            "agg iters: 1 validation: 1 graph: 0", "#", "# Using devices",
                            "#  Rank  0 Group  0 Pid   1000 on       boxa device  0 [0x01] NVIDIA GeForce RTX 5090", "#",
                            "#       size         count      type   redop    root     time   algbw   busbw #wrong     "
                            "time   algbw   busbw #wrong", *rows, "# Out of bounds values : 0 OK", "#"]) + "\n")
    return str(p)


def test_gap_never_sets_tp1_rows_against_a_tp2_reference(tmp_path):
    """A single RTX 5090 came out '0.2x of NVLink 4': its TP=1 rows stood against the TP=2 profile."""
    from commprof.analysis.boxgap import compute_gap

    one = _imported(tmp_path, "one", _one_gpu_log(tmp_path))
    with pytest.raises(UsageError, match="only TP=1 rows: one rank runs no communication"):
        compute_gap([one])
    # beside a multi-GPU box its TP=1 rows are left out and said so
    src = os.path.join(REPO, "tests", "data", "nccl-tests", "rtx5090x8_pcie5_p2p_allreduce_aikitoria.txt")
    g = compute_gap([_imported(tmp_path, "eight", src), one])
    assert not len(g.boxes[1].table) and not len(g.pairs)
    assert any("4 TP=1 rows (one rank: no communication) are not compared" in n for n in g.boxes[1].notes)


def test_gap_leaves_wrong_rows_out_of_every_ratio_and_says_so(tmp_path):
    from commprof.analysis.boxgap import compute_gap

    src = os.path.join(REPO, "tests", "data", "nccl-tests", "rtx5090x8_pcie5_p2p_allreduce_aikitoria.txt")
    lines = open(src).read().splitlines()
    k = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["16384"])
    tok = lines[k].rsplit(None, 5)
    lines[k] = f"{tok[0]}      99 {' '.join(tok[2:])}"          # the out-of-place #wrong of 16 KiB: commprof's change
    log = tmp_path / "all_reduce_perf_wrong.txt"
    log.write_text("\n".join(lines) + "\n")
    bad = _imported(tmp_path, "bad", str(log))
    good = _imported(tmp_path, "good", src)
    g = compute_gap([good, bad])
    assert 16384 not in set(g.boxes[1].table["size_bytes"]) and 16384 in set(g.boxes[0].table["size_bytes"])
    assert any("1 rows with wrong results (status WRONG" in n for n in g.boxes[1].notes)
    at = g.pairs[g.pairs["size_bytes"] == 16384]
    # left empty, never filled from the neighbours (issue 33: 357.65 us "interpolated" at a size marked wrong)
    assert len(at) == 1 and at["ratio"].isna().all() and at["b"].isna().all()
    assert at["matched"].iloc[0] == "left empty: bad returned wrong data at this size"


def test_gap_across_hosts_says_so_and_one_gpu_per_host_is_the_network(tmp_path):
    """Two hosts with one GPU each: the TP group is joined by the network, never 'nvlink', and every
    comparison says it crosses hosts (not only when the TP degrees differ)."""
    from helpers import nccl_log

    from commprof.analysis.boxgap import compute_gap
    from commprof.views.gap import pair_lines

    log = nccl_log(str(tmp_path), "NVIDIA H100 80GB HBM3", ranks=2, hosts=("nodea", "nodeb"), alpha_us=25.0,
                   busbw_gbps=40.0)
    d = _imported(tmp_path, "net", log)
    local = write_profile_sweep("nvlink4", str(tmp_path / "local"), tps=(2,), sizes=(16384, 256 << 20))
    g = compute_gap([local, d])
    net = g.boxes[1]
    assert net.box_kind == "network"
    assert any("spans 2 hosts" in n and "one GPU per host: the network carries every collective" in n
               for n in net.notes)
    lines = pair_lines(g)
    assert lines and all("across hosts: net's TP group spans 2 hosts" in ln for ln in lines)
    from commprof.analysis.checkitems import run_items
    from commprof.analysis.evidence import gather
    from commprof.analysis.thresholds import load_thresholds

    c2 = {i.id: i for i in run_items(gather([d]), load_thresholds())}["C2"]
    assert c2.value.startswith("multinode, network: its largest TP group has one GPU per host (2 ranks on 2 hosts: "
                               "nodea, nodeb)")
