"""GPU-only: NCCL sweeps with CUDA-event timing, eager and CUDA-graph modes. Skipped without a GPU."""
import csv
import json
import os

import pytest

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
        assert r["backend"] == "nccl" and r["clock"] == "cuda_event"
        assert r["wrong"] == "0"
        assert float(r["latency_us_p50"]) > 0 and float(r["enqueue_us_p50"]) > 0
    with open(os.path.join(out, "meta.json")) as f:
        meta = json.load(f)
    assert meta["gpus"] and "none" not in meta["gpus"][0]
    assert meta["versions"]["nccl"] != "n/a"


def test_nccl_refuses_more_ranks_than_gpus(cli, tmp_path):
    import torch

    n = torch.cuda.device_count()
    res = cli("sweep", "--backend", "nccl", "--tp", str(n + 1), "--out", str(tmp_path / "x"))
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
