"""GPU-only: NCCL sweeps with CUDA-event timing, eager and CUDA-graph modes. Skipped without a GPU."""
import csv
import json
import os

import pytest

from helpers import sweep_rows as _rows

pytestmark = pytest.mark.gpu


def test_nccl_tp1_eager_and_graph(cli, tmp_path):
    out = str(tmp_path / "nccl")
    res = cli("sweep", "--backend", "nccl", "--tp", "1", "--ops", "all_reduce,all_gather",
              "--sizes", "4K,1M", "--iters", "50", "--warmup", "5", "--out", out, "--no-charts")
    assert res.returncode == 0, res.stderr
    with open(os.path.join(out, "sweep.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["mode"] for r in rows} == {"eager", "graph"}
    assert len(rows) == 2 * 2 * 2
    for r in rows:
        assert r["backend"] == "nccl" and r["clock"] == "cuda_event_spin"
        assert r["wrong"] == "0" and r["comm"] == "none (1 rank)"
        assert float(r["enqueue_us_p50"]) > 0
        if r["op"] == "all_reduce":
            # one rank, in place: NCCL does no device work at all (its one-rank path), so the two
            # events are back to back: about the events' resolution, possibly 0
            assert 0 <= float(r["latency_us_p50"]) < 5
        else:
            assert float(r["latency_us_p50"]) > 0           # all_gather copies into the output
        # device time of the op alone sits below what the host sees of one call
        assert float(r["latency_us_p50"]) < float(r["host_us_p50"])
        assert float(r["spin_us"]) > 0 and int(r["spin_short"]) < 50
    with open(os.path.join(out, "meta.json")) as f:
        meta = json.load(f)
    assert meta["gpus"] and "none" not in meta["gpus"][0]
    assert meta["versions"]["nccl"] != "n/a"


def test_nccl_refuses_more_ranks_than_gpus(cli_inproc, tmp_path):
    import torch

    n = torch.cuda.device_count()
    res = cli_inproc("sweep", "--backend", "nccl", "--tp", str(n + 1), "--out", str(tmp_path / "x"))
    assert res.returncode == 3
    assert "one GPU per rank" in res.stderr


def test_p2p_same_gpu_probes(cli, tmp_path):
    out = tmp_path / "p2p"
    res = cli("p2p", "--size", "16M", "--rounds", "2000", "--out", str(out))
    assert res.returncode == 0, res.stderr
    import csv as _csv
    rows = list(_csv.DictReader(open(out / "p2p.csv")))
    same = [r for r in rows if r["src_device"] == r["dst_device"] == "0"]
    assert {r["probe"] for r in same} == {"sm_copy", "copy_engine", "pingpong"}
    assert all(r["verified"] in ("True", "") for r in same)


def _custom_sweep(cli, out, tp: int, sizes: str, modes: str):
    """sweep --impl nccl,custom --verify on NCCL: (result, rows)."""
    pytest.importorskip("cupy", reason="--impl custom needs cupy (pip install 'commprof[gpu-cuda13]' or [gpu-cuda12])")
    res = cli("sweep", "--backend", "nccl", "--tp", str(tp), "--ops", "all_reduce", "--sizes", sizes,
              "--modes", modes, "--impl", "nccl,custom", "--verify", "--iters", "50", "--warmup", "5",
              "--out", out, "--no-charts")
    assert res.returncode == 0, res.stderr
    return res, _rows(out)


def test_sweep_custom_single_rank_path_verifies_every_call(cli, tmp_path):
    """One GPU: TP=1 runs the one-shot kernel's single-rank path inside the sweep, checked on every call."""
    res, rows = _custom_sweep(cli, str(tmp_path / "custom"), 1, "16,24,4K,1M", "eager,graph")
    custom = {r["size_bytes"]: r for r in rows if r["impl"] == "custom"}
    assert set(custom) == {"16", "4096", "1048576"}          # 24 B is not a multiple of 16 bytes
    assert all(r["wrong"] == "0" and r["mode"] == "eager" and float(r["latency_us_p50"]) > 0 for r in custom.values())
    assert {(r["mode"], r["impl"]) for r in rows if r["size_bytes"] == "24"} == {("eager", "nccl"), ("graph", "nccl")}
    assert "custom all_reduce refused at TP=1 for 1 size(s) (24B)" in res.stderr


def test_sweep_custom_beside_nccl_on_two_gpus(cli, tmp_path):
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    res, rows = _custom_sweep(cli, str(tmp_path / "custom2"), 2, "4K,64K,1M", "eager")
    assert all(r["wrong"] == "0" for r in rows)
    # Either the P2P probe passed and custom ran, or every custom cell was refused with a reason.
    if "custom" not in {r["impl"] for r in rows}:
        assert "custom all_reduce refused at TP=2" in res.stderr
    else:
        assert len([r for r in rows if r["impl"] == "custom"]) == 3
