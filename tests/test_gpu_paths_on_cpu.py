"""The GPU breakers found by review, each reproduced on CPU: a full model's engine build, the
memory guard's one shared decision, TP=1 rows that measure no communication, a trace dir whose
run died before its first row."""
import sys

import pytest
from helpers import TOY_MODEL as TOY
from helpers import write_sweep_dir
from fake_nvml import FakeNVML

from commprof.verbs import trace as T
from commprof.analysis.checkitems import run_items
from commprof.analysis.evidence import gather
from commprof.analysis.thresholds import load_thresholds
from microbench import decode_engine

GIB = 1 << 30


# --- trace: the engine build ------------------------------------------------------------------

class SpyTorch:
    """Real torch; records where the weights are drawn."""

    def __init__(self):
        import torch

        self._t = torch
        self.generators, self.randn_devices = [], []

    def Generator(self, device=None):
        self.generators.append(str(device))
        return self._t.Generator(device="cpu")

    def randn(self, *size, generator=None, dtype=None, device=None):
        self.randn_devices.append(str(device))
        return self._t.randn(*size, generator=generator, dtype=dtype)

    def __getattr__(self, name):
        return getattr(self._t, name)


def _toy_shape():
    from commprof.model.models import get_model

    return get_model(TOY).to_dict()


def test_engine_weights_are_drawn_on_its_device_with_a_beat_per_layer():
    import torch

    spy = SpyTorch()
    beats = []
    shape = _toy_shape()
    eng = decode_engine.DecodeEngine(spy, None, shape, 1, 0, 1, 16, torch.bfloat16, torch.device("cpu"), 3,
                                     comm=False, on_layer=lambda: beats.append(1))
    assert len(beats) == 3
    # every weight comes from a generator on the engine's device, drawn there in its dtype
    # (the CPU generator + .to(device) took ~140 s for Qwen2.5-32B at TP=1)
    assert spy.generators == ["cpu"] and set(spy.randn_devices) == {"cpu"}
    assert eng.layers[0]["qkv"].dtype == torch.bfloat16


def test_predict_builds_one_engine_per_tp_and_batch(monkeypatch, tmp_path):
    built = []
    real = decode_engine.DecodeEngine

    def counting(*a, **k):
        built.append((a[3], a[5]))
        return real(*a, **k)
    monkeypatch.setattr(decode_engine, "DecodeEngine", counting)
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))
    cfg = T.build_config(model=TOY, tp="2", batch="1", context=16, tokens=2, warmup=1, layers=None, dtype="bf16",
                         backend="gloo", modes="eager", timeout_s=60, out=str(tmp_path / "p"), argv=["t"],
                         predict=True, comm_from="reference:nvlink4")
    cfg.modes = ["eager", "eager"]      # two modes of one (tp, batch): on a GPU, eager and graph
    T.run_prediction(cfg, cfg.comm_from)
    assert built == [(2, 1)]


# --- the memory guard -------------------------------------------------------------------------

def _nvml_with_free(free_gib):
    fake = FakeNVML("h100-sxm-8x-nvswitch.json")
    for g, free in zip(fake.fx["gpus"], free_gib):
        g["nvmlDeviceGetMemoryInfo"] = {"total": 80 * GIB, "free": free * GIB, "used": (80 - free) * GIB}
    return fake


def test_memory_guard_is_one_decision_from_nvml_without_a_cuda_context(monkeypatch):
    import torch

    fake = _nvml_with_free([70, 12, 70, 70, 70, 70, 5, 70])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def no_context(*a, **k):
        raise AssertionError("the guard opened a CUDA context (torch.cuda.mem_get_info)")
    monkeypatch.setattr(torch.cuda, "mem_get_info", no_context)
    # ranks 0..3 use GPUs 0..3: the least free of them decides, for every rank alike
    avail, how = T.available_bytes_per_rank("nccl", 4)
    assert avail == int(12 * GIB * 0.9) and "GPU 1" in how
    assert T.available_bytes_per_rank("nccl", 8)[0] == int(5 * GIB * 0.9)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,0")
    assert T.gpu_free_bytes(1, fake)[0] == 5 * GIB
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert T.gpu_free_bytes(2, fake)[0] == 70 * GIB
    with pytest.raises(LookupError, match="3 GPUs needed"):
        T.gpu_free_bytes(3, fake)


# --- TP=1 rows and dead trace dirs in check and report ----------------------------------------

def _dir(tmp_path, name, tp, trace_rows=True):
    d = tmp_path / name
    meta = {"kind": "measured", "backend": "nccl", "hosts": ["box"], "gpus": ["NVIDIA H200"], "start_time": "t",
            "command": ["synthetic test data"], "model": {"name": "Qwen2.5-32B"}}
    write_sweep_dir(d, meta, [
        {"op": "all_reduce", "tp": tp, "group": 0, "mode": "graph", "size_bytes": size, "count": 1,
         "iters": 1, "warmup": 0, "concurrent": 0, "comm": "none (1 rank)" if tp == 1 else "collective",
         "latency_us_p50": p50, "latency_us_p99": p50, "busbw_gbps": bus, "wrong": 0, "status": "ok"}
        for size, p50, bus in ((16384, 3.0, 0.0), (268435456, 300.0, 900.0))])
    head = "kind,scaled,tp,batch,mode,ms_per_token,comm_share_pct\n"
    (d / "trace_summary.csv").write_text(head + (f"measured,0,{tp},1,graph,20.0,0.0\n" if trace_rows else ""))
    return str(d)


def test_tp1_rows_never_pass_a_communication_item(tmp_path):
    items = {i.id: i for i in run_items(gather([_dir(tmp_path, "one", 1)]), load_thresholds())}
    for k in ("C10", "C9", "C11"):
        assert items[k].status == "SKIP", (k, items[k])
        assert "TP=1" in items[k].value
    items = {i.id: i for i in run_items(gather([_dir(tmp_path, "two", 2)]), load_thresholds())}
    assert items["C10"].status != "SKIP" and items["C11"].status != "SKIP"


def test_trace_dir_whose_run_died_is_a_skip_with_a_reason(tmp_path, cli):
    d = _dir(tmp_path, "dead", 2, trace_rows=False)
    items = {i.id: i for i in run_items(gather([d]), load_thresholds())}
    assert items["C11"].status == "SKIP" and "no rows" in items["C11"].value
    res = cli("report", d, "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    assert "holds no rows" in (tmp_path / "r" / "report.md").read_text()
    res = cli("check", d, "--out", str(tmp_path / "c"))
    assert res.returncode in (0, 8), res.stderr
    assert "unexpected" not in res.stderr


def test_gloo_rows_say_tp1_has_no_communication(cli, tmp_path):
    from helpers import sweep_rows

    out = str(tmp_path / "s")
    res = cli("sweep", "--tp", "1,2", "--ops", "all_reduce", "--sizes", "4K", "--iters", "3", "--warmup", "1",
              "--out", out, "--no-charts")
    assert res.returncode == 0, res.stderr
    comm = {r["tp"]: r["comm"] for r in sweep_rows(out)}
    assert comm == {"1": "none (1 rank)", "2": "collective"}
    rows = sweep_rows(out)
    assert all(r["clock"] == "perf_counter" and r["host_us_p50"] == "" and float(r["skew_us_p50"]) >= 0
               for r in rows)
