"""commprof predict: the GPU table, the compute model against hand-computed bytes and FLOPs, and the
verb end to end (reference profiles, an imported nccl-tests log, bad input)."""
from __future__ import annotations

import json
import os

import pytest

from commprof.analysis.computemodel import CALIBRATION, causal_pairs, experts_touched, step_kernels
from commprof.model.errors import UsageError
from commprof.model.gpus import FIGURES, get_gpu, gpu_table
from commprof.model.models import get_model

from conftest import csv_rows

DATA = os.path.join(os.path.dirname(__file__), "data", "nccl-tests")
REQUIRED_SKUS = ("rtx4090", "rtx5090", "rtx-pro-6000", "l40s", "l20", "a100-sxm", "a100-pcie", "h100-sxm",
                 "h100-pcie", "h800", "h20", "h200", "b200")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))


def test_gpu_table_has_every_sku_with_a_source_beside_every_figure():
    t = gpu_table()
    for sku in REQUIRED_SKUS:
        g = t[sku]
        assert set(g.sources) == set(FIGURES)
        assert all(isinstance(s, str) and len(s) >= 8 for s in g.sources.values())
        assert g.mem_bandwidth_gbps > 0 and g.bf16_tflops > 0 and g.memory_gb > 0 and g.sm_count > 0
    assert get_gpu("H100").key == "h100-sxm" and get_gpu("5090").key == "rtx5090"
    with pytest.raises(UsageError, match="unknown GPU"):
        get_gpu("rtx9090")


def _by_name(ks):
    return {k.name: k for k in ks}


def test_decode_kernels_of_qwen25_32b_tp8_match_hand_computed_bytes_and_flops():
    # Qwen2.5-32B: hidden 5120, 40 query / 8 KV heads of 128, FFN 27648, 64 layers, vocab 152064.
    # TP=8: 5 query heads (640 columns) and 1 KV head (128) per rank, FFN 3456 per rank; bf16.
    m, g = get_model("Qwen2.5-32B"), get_gpu("h100-sxm")
    ks = _by_name(step_kernels(m, g, tp=8, tokens=1, seqs=1, context=4096))
    act = 5120 * 2
    assert ks["qkv_proj"].count == 64
    assert ks["qkv_proj"].bytes_read == 5120 * (640 + 2 * 128) * 2 + act == 9_185_280
    assert ks["qkv_proj"].flops == 2 * 5120 * 896 == 9_175_040
    assert ks["o_proj"].bytes_read == 640 * 5120 * 2 + act
    assert ks["gate_up_proj"].bytes_read == 2 * 5120 * 3456 * 2 + act == 70_789_120
    assert ks["down_proj"].flops == 2 * 5120 * 3456
    # attention: one KV head per rank, K and V of 128 bf16 each = 512 bytes per token and layer
    assert ks["attention"].bytes_read == 4096 * 512 == 2_097_152
    assert ks["attention"].flops == 2 * 4096 * 5 * (128 + 128)
    assert "attention_sliding" not in ks
    assert ks["lm_head"].bytes_read == 19008 * 5120 * 2 + 19008 * 2      # 152064 / 8 = 19008 rows
    # at batch 1 every GEMM is memory bound: time = (bytes + half_bytes) / (bandwidth x bw_frac) + fill_us
    # (an A100's, x 108 / 132 SMs on an H100 when fill_sm_scaled is on, x 1410 / 1980 MHz when
    # fill_clock_scaled is on too; half_bytes x 3350 / 2039 GB/s when half_bytes_bw_scaled is on), or the floor
    fill = CALIBRATION["fill_us"] * (108 / 132 if CALIBRATION["fill_sm_scaled"] else 1.0) * (1410 / 1980 if CALIBRATION["fill_sm_scaled"] and CALIBRATION["fill_clock_scaled"] else 1.0)
    half = CALIBRATION["half_bytes"] * (3350 / 2039 if CALIBRATION["half_bytes_bw_scaled"] else 1.0)
    bw_us = ((ks["gate_up_proj"].bytes_read + half) / (3350 * 1e3 * CALIBRATION["bw_frac"])
             + fill)
    assert ks["gate_up_proj"].bound == "memory" and ks["gate_up_proj"].us == pytest.approx(bw_us)


def test_decode_kernels_of_gemma3_27b_cap_sliding_layers_at_their_window():
    # Gemma-3-27B: 62 layers, every 6th global (10), the other 52 slide over 1024 tokens; 16 KV heads
    # of 128 -> 2 per rank at TP=8: K+V = 2 x 2 x 128 x 2 bytes = 1024 bytes per token and layer.
    m, g = get_model("Gemma-3-27B"), get_gpu("rtx5090")
    ks = _by_name(step_kernels(m, g, tp=8, tokens=2, seqs=2, context=4096))
    assert ks["attention"].count == 10 and ks["attention_sliding"].count == 52
    assert ks["attention"].bytes_read == 2 * 4096 * 1024
    assert ks["attention_sliding"].bytes_read == 2 * 1024 * 1024
    assert ks["attention"].flops == 2 * 2 * 4096 * 4 * 256          # 32 / 8 = 4 query heads per rank
    vocab_r = -(-262208 // 8)
    assert ks["lm_head"].bytes_read == vocab_r * 5376 * 2 + 2 * vocab_r * 2   # tied: read once as lm_head
    assert ks["qkv_proj"].flops == 2 * 2 * 5376 * (4 * 128 + 2 * 2 * 128)


def test_fp8_weights_halve_the_weight_bytes_and_use_the_fp8_rate():
    m, g = get_model("Llama-3.1-70B"), get_gpu("h100-sxm")
    bf = _by_name(step_kernels(m, g, 2, 1, 1, 1024))
    f8 = _by_name(step_kernels(m, g, 2, 1, 1, 1024, weights="fp8"))
    act = 8192 * 2
    assert f8["down_proj"].bytes_read - act == (bf["down_proj"].bytes_read - act) / 2
    assert f8["attention"].bytes_read == bf["attention"].bytes_read           # the KV cache stays bf16


def test_large_batch_turns_gemms_compute_bound_and_floors_hold_tiny_kernels():
    m, g = get_model("Qwen2.5-32B"), get_gpu("rtx4090")
    ks = _by_name(step_kernels(m, g, 8, 4096, 1, 4096, prefill=True))
    assert ks["gate_up_proj"].bound == "compute"
    fl = ks["gate_up_proj"].flops / (165.2 * 1e6 * CALIBRATION["prefill_flop_frac"])
    assert ks["gate_up_proj"].us == pytest.approx(fl)
    small = _by_name(step_kernels(m, g, 8, 1, 1, 16))["small"]
    # a norm/add kernel moves 2 x 5120 x 2 bytes: the ramp (half_bytes, fill_us) or the floor sets its time
    # 4090: 128 SMs at 2520 MHz, 1008 GB/s of GDDR6X (gddr_bw_frac where it is set)
    want = max(CALIBRATION["floor_us"], (2 * 5120 * 2 + CALIBRATION["half_bytes"] * (1008 / 2039 if CALIBRATION["half_bytes_bw_scaled"] else 1.0)) / (1008 * 1e3 * (CALIBRATION["gddr_bw_frac"] or CALIBRATION["bw_frac"]))
               + CALIBRATION["fill_us"] * (108 / 128 if CALIBRATION["fill_sm_scaled"] else 1.0) * (1410 / 2520 if CALIBRATION["fill_sm_scaled"] and CALIBRATION["fill_clock_scaled"] else 1.0))
    assert small.us == pytest.approx(want)


def test_helpers():
    assert causal_pairs(4, 10) == 10 and causal_pairs(4, 2) == 3 + 2 * 2
    assert experts_touched(128, 8, 1) == pytest.approx(8)
    assert 8 < experts_touched(128, 8, 32) < 128


def test_predict_every_gpu_on_every_reference_profile():
    from commprof.analysis.predictmodel import predict_point
    from commprof.analysis.commsource import comm_source
    from commprof.analysis.profiles import list_profiles

    m = get_model("Qwen2.5-32B")
    for p in list_profiles():
        comm = comm_source(f"reference:{p['name']}")
        for g in gpu_table().values():
            r = predict_point(m, g, comm, 8, 8, 2048, prompt=512)
            assert r["ms_per_token"] == pytest.approx(r["compute_ms"] + r["comm_ms"])
            assert 0 < r["comm_share_pct"] < 100 and r["ttft_ms"] > r["ttft_comm_ms"] > 0
            assert r["collectives_per_step"] == 2 * 64 + 2


def test_comm_ms_is_the_plans_collectives_priced_by_the_profile():
    from commprof.analysis.costmodel import profile_latency_us
    from commprof.analysis.stepmodel import decode_collectives
    from commprof.analysis.predictmodel import predict_point
    from commprof.analysis.commsource import comm_source

    m, g = get_model("Gemma-3-27B"), get_gpu("rtx5090")
    from commprof.analysis.computemodel import CALIBRATION as C

    r = predict_point(m, g, comm_source("reference:pcie5-nop2p"), 8, 1, 4096, mode="eager")
    sites = decode_collectives(m, 8, 1)
    direct = sum(profile_latency_us("pcie5-nop2p", s.op, 8, s.size_bytes) for s in sites)
    # the profile evaluated at the exact size, then as the engine pays it (analysis/enginecomm.py):
    # no custom all-reduce on 8 GPUs without P2P, the PCIe rank skew (eager mode's) and the per-call cost
    engine = direct * (1 + C["pcie_skew_frac"]) + len(sites) * (C["pcie_call_us"] + C["coll_graph_us"] + C["coll_eager_us"])
    assert r["comm_ms"] * 1e3 == pytest.approx(engine, rel=1e-9)


def test_predict_cli_writes_csv_meta_and_chart(cli_inproc, tmp_path):
    out = tmp_path / "p"
    r = cli_inproc("predict", "--model", "Gemma-3-27B", "--gpu", "rtx5090,h100-sxm",
                   "--comm", "reference:pcie5-nop2p,reference:nvlink4", "--tp", "4,8", "--batch", "1,8",
                   "--prompt", "1024", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "ms/token = compute" in r.stdout and "communication" in r.stdout
    rows = csv_rows(str(out), "predict.csv")
    assert len(rows) == 2 * 2 * 2
    assert {x["comm_kind"] for x in rows} == {"modelled"}
    meta = json.load(open(out / "meta.json"))
    assert meta["verb"] == "predict" and meta["kind"] == "predicted"
    assert meta["column_kinds"]["compute_ms"] == "modelled" and meta["column_kinds"]["comm_ms"] == "comm_kind"
    assert meta["boxes"][0]["gpu"]["sources"]["mem_bandwidth_gbps"].startswith("https://")
    assert os.path.getsize(out / "predict.png") > 1000
    from commprof import results
    assert results.load(str(out)).verb == "predict"


def test_predict_from_an_imported_log_skips_tp_it_lacks(cli_inproc, tmp_path):
    imp = tmp_path / "imp"
    r = cli_inproc("import", "nccl-tests", os.path.join(DATA, "rtx5090x4_pcie5_nop2p_allreduce_nccltests287.txt"),
                   "--out", str(imp))
    assert r.returncode == 0, r.stderr
    r = cli_inproc("predict", "--model", "Qwen2.5-32B", "--gpu", "rtx5090", "--comm", str(imp), "--tp", "4,8",
                   "--batch", "1", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["tp"] for x in doc["rows"]] == [4]
    assert doc["rows"][0]["comm_kind"] == "imported" and doc["rows"][0]["comm_timing"] == "back-to-back"
    assert any("tp=8 skipped" in n for n in doc["notes"]) and any("all_gather" in n for n in doc["notes"])
    r = cli_inproc("predict", "--gpu", "rtx5090", "--comm", str(imp), "--tp", "8")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no TP degree" in r.stderr


@pytest.mark.parametrize("args, words", [
    (["--gpu", "rtx9090"], "unknown GPU"),
    (["--comm", "no/such/dir"], "no/such/dir"),
    (["--comm", "reference:nope"], "unknown reference profile"),
    (["--gpu", "h100,rtx5090,l40s", "--comm", "reference:nvlink4,reference:pcie5-p2p"], "as many of each"),
    (["--weights", "int3"], "--weights"),
    (["--mode", "fast"], "--mode"),
    (["--sampling", "top-p"], "--sampling"),
    (["--tp", "3"], "--tp 3"),
])
def test_predict_bad_input_is_one_line_and_exit_2(cli_inproc, args, words):
    r = cli_inproc("predict", *args)
    assert r.returncode == 2
    assert words in r.stderr and r.stderr.strip().count("\n") == 0


def test_benchmark_figures_reproduce_from_their_inputs():
    """The committed benchmark over the published corpus (results/bench/predict_figures.json) follows
    from its inputs with today's model and constants."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts"))
    import bench_predict_figures as b

    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "results", "bench", "predict_figures.json")
    doc = json.load(open(path))
    assert doc["calibration"] == CALIBRATION
    figs = {f["id"]: f for f in b.as_judged(b.load_figures())}
    assert {r["id"] for r in doc["figures"]} == set(figs)
    for row in doc["figures"]:
        f = figs[row["id"]]
        assert f["measured_ms"] == pytest.approx(row["measured_ms"], abs=1e-4) and f["role"] == row["role"]
        if "predicted_ms" in row:
            assert b.predict_figure(f)["ms"] == pytest.approx(row["predicted_ms"], abs=1e-3)


def test_the_fitted_constants_are_what_the_fit_finds_on_the_fit_figures_alone():
    """The fitted constants of CALIBRATION are scripts/bench_predict_figures.py --fit's answer given
    only the figures whose role is fit (no held-out figure can have moved them)."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts"))
    import bench_predict_figures as b
    from commprof.analysis.computemodel import FIT_GRID

    # the boxes a source's figures were measured on are told by its fit figures alone too
    fit_only = b.as_judged([f for f in b.load_figures() if f["role"] == "fit"])
    assert b.fit(fit_only)["cal"] == {k: CALIBRATION[k] for k in FIT_GRID}


def test_gap_prices_one_token_box_by_box_from_each_boxs_own_log(cli_inproc, tmp_path):
    from commprof.analysis.boxgap import compute_gap
    from commprof.model.models import get_model
    from commprof.analysis.stepmodel import decode_collectives
    from commprof.analysis.commsource import comm_source
    from commprof.views.gap import token_box_lines

    dirs = []
    for name in ("all_reduce_perf_8xA100.log", "rtx5090x8_pcie5_p2p_allreduce_aikitoria.txt"):
        d = tmp_path / name.split(".")[0]
        assert cli_inproc("import", "nccl-tests", os.path.join(DATA, name), "--out", str(d)).returncode == 0
        dirs.append(str(d))
    g = compute_gap(dirs, reference="nvlink4")
    tb = g.token_boxes
    row = tb[(tb["tp"] == 8) & (tb["batch"] == 1)]
    assert len(row) == 2 and set(row["collectives"]) == {130}
    for d, ms in zip(dirs, row["comm_ms_per_token"]):
        price = comm_source(d).price(8, "eager")         # the predict path: an independent lookup
        want = sum(price(s.op, s.size_bytes) for s in decode_collectives(get_model("Qwen2.5-32B"), 8, 1)) / 1e3
        assert ms == pytest.approx(want, rel=0.01)
    text = "\n".join(token_box_lines(g))
    assert "TP=8 batch 1 (130 collectives" in text and "x)" in text and "priced as an all_reduce" in text
    # the stand-in note holds for both boxes in every line: said once, after the lines, not per box
    assert text.count("priced as an all_reduce") == 1 and "every box in each line above: no all_gather" in text


def test_trace_summary_line_prints_the_communication_in_ms():
    import pandas as pd

    from commprof.views.trace import summary_lines

    df = pd.DataFrame([{"kind": "predicted", "tp": 8, "batch": 1, "mode": "graph", "ms_per_token": 10.0,
                        "tokens_per_s": 100.0, "collectives_per_step": 130, "collectives_per_token": 130,
                        "comm_share_pct": 25.0, "transfer_share_pct": 20.0, "wait_share_pct": 5.0}])
    assert "communication 25.0% = 2.500 ms" in summary_lines(df)[0]


def test_the_seed_box_result_reproduces_from_its_inputs():
    """results/predict-seed-rtx5090x8-gemma-3-27b (quoted in the README) follows from today's model and profile."""
    from commprof.analysis.predictmodel import predict_point
    from commprof.analysis.commsource import comm_source

    root = os.path.join(os.path.dirname(os.path.dirname(__file__)), "results")
    rows = csv_rows(os.path.join(root, "predict-seed-rtx5090x8-gemma-3-27b"), "predict.csv")
    row = next(r for r in rows if r["comm"] == "reference:pcie5-nop2p" and r["tp"] == "8" and r["batch"] == "1")
    r = predict_point(get_model("Gemma-3-27B"), get_gpu("rtx5090"), comm_source("reference:pcie5-nop2p"), 8, 1, 4096,
                      prompt=4096)
    assert float(row["compute_ms"]) == pytest.approx(r["compute_ms"], rel=1e-4)
    assert float(row["comm_ms"]) == pytest.approx(r["comm_ms"], rel=2e-3)   # the committed dir priced the cached sweep log-log; now the exact size
    assert float(row["comm_share_pct"]) == pytest.approx(58.7, abs=0.05)          # the README's figure
    assert float(row["ms_per_token_lo"]) == pytest.approx(r["ms_per_token_lo"], rel=2e-3)
    assert (float(row["comm_share_lo_pct"]), float(row["comm_share_hi_pct"])) == pytest.approx((51.9, 68.4), abs=0.1)


def test_show_reads_a_predict_dir_back(cli_inproc, tmp_path):
    out = tmp_path / "p"
    assert cli_inproc("predict", "--gpu", "l40s", "--comm", "reference:pcie4-nop2p", "--tp", "2", "--batch", "1",
                      "--no-charts", "--out", str(out)).returncode == 0
    r = cli_inproc("show", str(out))
    assert r.returncode == 0, r.stderr
    assert "l40s TP=2 batch 1:" in r.stdout and "TTFT" not in r.stdout and "KV fits" in r.stdout
    assert os.path.exists(out / "predict.png")                    # show redraws the chart


def test_predict_from_a_measured_sweep_dir_sums_its_latencies(cli_inproc, tmp_path):
    """A sweep of the real box: flat synthetic latencies (50 us all-reduce, 30 us all-gather at every
    size) make the step's 2L+2 collectives exactly 129 x 50 + 30 us."""
    from helpers import write_sweep_dir

    meta = {"kind": "measured", "verb": "sweep", "backend": "nccl", "hosts": ["box"], "gpus": ["g"],
            "start_time": "t", "command": ["synthetic test data"]}
    rows = [{"op": op, "tp": 2, "group": 0, "mode": "graph", "size_bytes": size, "count": 1, "iters": 1,
             "warmup": 0, "concurrent": 0, "latency_us_p50": us, "latency_us_mean": us,
             "latency_us_rankavg_mean": us, "busbw_gbps": 1.0, "wrong": 0, "status": "ok", "timing": "per-call"}
            for op, us in (("all_reduce", 50.0), ("all_gather", 30.0)) for size in (1024, 1 << 20, 64 << 20)]
    d = write_sweep_dir(tmp_path / "sweep", meta, rows)
    r = cli_inproc("predict", "--model", "Qwen2.5-32B", "--gpu", "h100", "--comm", d, "--tp", "2", "--batch", "1",
                   "--json")
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout)["rows"][0]
    assert row["comm_kind"] == "measured" and row["comm_timing"] == "per-call"
    per_call = CALIBRATION["coll_graph_us"]          # the engine's cost per collective (a measured dir keeps its own prices)
    assert row["comm_ms"] == pytest.approx((129 * 50 + 30 + 130 * per_call) / 1e3)


def test_predict_chart_legend_covers_no_bar_and_no_share_label(tmp_path):
    """The legend sits in the headroom above the bars: its box overlaps no bar and no '%' label."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from commprof.views import predict as view

    rows = [{"box": "b", "gpu": "rtx5090", "tp": tp, "batch": b, "kernel_ms": 6.0 + b / 8, "floor_ms": 0.8, "gaps_ms": 0.0,
             "comm_ms": 5.4 + b / 10, "comm_share_pct": 44.0 + b / 8, "comm_kind": "modelled", "ms_per_token": 0.0}
            for tp in (4, 8) for b in (1, 8)]
    shown = []
    real_close = plt.close
    plt.close = lambda fig=None: shown.append(fig)          # keep the figure to measure it
    try:
        view.predict_chart(rows, str(tmp_path / "p.png"), {"command": ["commprof", "predict"]})
    finally:
        plt.close = real_close
    fig = next(f for f in shown if f is not None and hasattr(f, "axes"))
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(r)
    bars = [p.get_window_extent(r) for p in ax.patches if isinstance(p, Rectangle)]
    labels = [t.get_window_extent(r) for t in ax.texts if t.get_text().endswith("%")]
    assert bars and len(labels) == 4
    assert not any(legend.overlaps(b) for b in bars + labels)
    real_close(fig)


def test_predict_piecewise_cli_says_the_mode_in_its_note_csv_and_chart(cli_inproc, tmp_path, monkeypatch):
    """--mode piecewise (vLLM V1 before 0.11): the note gives the host's time per step, the CSV and meta.json
    the mode, the chart's panel title says it; a mode that is none of the three is one line, exit 2."""
    import matplotlib.axes

    titles = []
    real = matplotlib.axes.Axes.set_title
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title", lambda self, t, *a, **k: (titles.append(t), real(self, t, *a, **k))[1])
    out = tmp_path / "pw"
    r = cli_inproc("predict", "--model", "Qwen3-8B", "--gpu", "h100-sxm", "--tp", "1", "--batch", "1",
                   "--mode", "piecewise", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "--mode piecewise (vLLM V1 0.7-0.10.x)" in r.stdout and "36 layers" in r.stdout
    # the note's A/B figures are the committed benchmark's (results/bench/piecewise_ab.json)
    from commprof.analysis.predictmodel import PIECEWISE_CHECK
    ab = json.load(open(os.path.join(os.path.dirname(__file__), "..", "results", "bench", "piecewise_ab.json")))
    checks = [x["diff_ratio"] for x in ab["rows"] if x["role"] == "check"]
    assert f"on {len(checks)} published" in PIECEWISE_CHECK
    assert f"{min(checks):.2f}-{max(checks):.2f}x" in PIECEWISE_CHECK
    assert f"median {ab['summary']['median_diff_ratio']:.2f}" in PIECEWISE_CHECK
    assert f"below it on {sum(c < 1 for c in checks)} " in PIECEWISE_CHECK
    assert PIECEWISE_CHECK in " ".join(r.stdout.split())
    assert {x["mode"] for x in csv_rows(str(out), "predict.csv")} == {"piecewise"}
    assert json.load(open(out / "meta.json"))["mode"] == "piecewise"
    assert any("piecewise CUDA graphs" in t for t in titles)
    bad = cli_inproc("predict", "--mode", "full", "--tp", "1", "--batch", "1")
    assert bad.returncode == 2 and "--mode 'full': use graph" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_predict_sampling_full_adds_its_constant_once_a_step_in_gaps_and_says_so(cli_inproc, tmp_path):
    """--sampling full (top-p and penalties): every row's step is sampling_full_us longer than greedy's, in
    gaps ms; the note names the constant and where it was fitted; the CSV's rows and meta.json say it."""
    from commprof.analysis.computemodel import CALIBRATION

    cal_us = CALIBRATION["sampling_full_us"]
    rows = {}
    for s in ("greedy", "full"):
        out = tmp_path / s
        r = cli_inproc("predict", "--model", "Qwen2.5-1.5B", "--gpu", "a100-sxm", "--tp", "1", "--batch", "1,8",
                       "--sampling", s, "--out", str(out))
        assert r.returncode == 0, r.stderr
        rows[s] = csv_rows(str(out), "predict.csv")
        assert json.load(open(out / "meta.json"))["sampling"] == s
        assert ("--sampling full:" in r.stdout) == (s == "full")
    for g, f in zip(rows["greedy"], rows["full"]):
        for col in ("ms_per_token", "gaps_ms", "compute_ms"):
            assert float(f[col]) - float(g[col]) == pytest.approx(cal_us / 1e3, abs=2e-5)
        assert float(f["kernel_ms"]) == pytest.approx(float(g["kernel_ms"]))
