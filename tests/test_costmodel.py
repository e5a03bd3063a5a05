"""The alpha-beta cost model: fitting sweeps, the reference profiles, and profiles as sweep dirs."""
import math
import os

import numpy as np
import pandas as pd
import pytest

from commprof.analysis import costmodel, profiles
from commprof import results
from commprof.model.collectives import COLLECTIVES
from commprof.model.errors import UsageError
from commprof.analysis.latency import CommTable

SIZES = [1 << k for k in range(10, 27)]          # 1 KiB .. 64 MiB


def _frame(groups, noise=None, seed=0):
    """A sweep-like frame: groups is {(op, tp, mode): (alpha_us, beta_gbps)}."""
    rng = np.random.default_rng(seed)
    rows = []
    for (op, tp, mode), (a, b) in groups.items():
        for s in SIZES:
            lat = a + s / (b * 1e3)
            if noise:
                lat *= float(np.exp(rng.normal(0.0, noise)))
            rows.append({"op": op, "tp": tp, "group": 0, "mode": mode, "size_bytes": s, "latency_us_p50": lat})
    return pd.DataFrame(rows)


def test_fit_recovers_alpha_beta_from_exact_data():
    truth = {("all_reduce", 8, "eager"): (19.2, 211.4), ("all_reduce", 2, "graph"): (5.75, 370.0),
             ("all_gather", 4, "eager"): (42.0, 23.3)}
    fits = costmodel.fit_sweep(_frame(truth))
    assert [(f.op, f.tp, f.mode) for f in fits] == sorted(truth)
    for f in fits:
        a, b = truth[(f.op, f.tp, f.mode)]
        assert f.alpha_us == pytest.approx(a, rel=0.01)
        assert f.beta_gbps == pytest.approx(b, rel=0.01)
        assert f.n_points == len(SIZES) and f.n_sizes == len(SIZES)
        assert f.max_rel_err_pct < 1e-6 and f.note == ""
        assert f.latency_us(1 << 20) == pytest.approx(a + (1 << 20) / (b * 1e3), rel=1e-6)


def test_fit_reports_its_error_on_noisy_data():
    truth = {("all_reduce", 4, "eager"): (12.0, 150.0)}
    f, = costmodel.fit_sweep(_frame(truth, noise=0.08, seed=3))
    assert 0.5 < f.mean_rel_err_pct < 20 and f.max_rel_err_pct >= f.mean_rel_err_pct
    assert f.alpha_us == pytest.approx(12.0, rel=0.2) and f.beta_gbps == pytest.approx(150.0, rel=0.2)
    d = f.to_dict()
    assert d["statistic"] == "latency_us_p50" and d["mean_rel_err_pct"] == f.mean_rel_err_pct


def test_fit_keeps_parameters_positive():
    one = pd.DataFrame([{"op": "all_reduce", "tp": 2, "group": 0, "mode": "eager", "size_bytes": 4096,
                         "latency_us_p50": v} for v in (10.0, 12.0)])
    f, = costmodel.fit_sweep(one)
    assert 10 < f.alpha_us < 12 and math.isinf(f.beta_gbps) and "one size" in f.note
    assert f.to_dict()["beta_gbps"] is None                 # JSON-safe
    flat = _frame({("all_reduce", 2, "eager"): (30.0, 1e12)})
    flat.loc[flat.index[-1], "latency_us_p50"] = 29.0       # shrinks with size: no bandwidth term
    f, = costmodel.fit_sweep(flat)
    assert f.alpha_us > 0 and math.isinf(f.beta_gbps) and "not determined" in f.note
    neg = _frame({("all_gather", 8, "eager"): (0.0, 50.0)})
    neg["latency_us_p50"] -= 0.001                          # pure bandwidth minus a bit: alpha < 0
    neg = neg[neg["latency_us_p50"] > 0]
    f, = costmodel.fit_sweep(neg)
    assert f.alpha_us == 0.0 and f.beta_gbps == pytest.approx(50.0, rel=0.05) and "clipped" in f.note


def test_fit_uses_group_zero_only():
    df = _frame({("all_reduce", 2, "eager"): (10.0, 100.0)})
    other = df.copy()
    other["group"] = 1
    other["latency_us_p50"] *= 5
    f, = costmodel.fit_sweep(pd.concat([df, other]))
    assert f.alpha_us == pytest.approx(10.0, rel=0.01) and f.n_points == len(SIZES)


# --- profiles ---------------------------------------------------------------------------------------

EXPECTED = {"pcie4-nop2p", "pcie4-p2p", "pcie5-nop2p", "pcie5-p2p", "nvlink3", "nvlink4", "nvlink5"}
PREFIXES = ("published: ", "derived: ", "proposed: ", "calibrated: ")


def test_profiles_cover_the_reference_boxes():
    assert {p["name"] for p in costmodel.list_profiles()} == EXPECTED
    for name, p in profiles.PROFILES.items():
        assert p["name"] == name and p["kind"] == "modelled" and p["title"] and p["link"]
        have = {(q["op"], q["tp"], q["mode"]) for q in p["params"]}
        for op in ("all_reduce", "all_gather"):
            for tp in (2, 4, 8):
                assert (op, tp, "eager") in have, (name, op, tp)
                if any(m == "graph" for _, _, m in have):
                    assert (op, tp, "graph") in have, (name, op, tp)
    assert any(q["mode"] == "graph" for q in profiles.PROFILES["nvlink4"]["params"])


def test_every_parameter_has_a_source_and_published_values_are_the_sources_numbers():
    n_published = 0
    for name, p in profiles.PROFILES.items():
        assert p["sources"] and all(isinstance(v, str) and v for v in p["sources"].values())
        for q in p["params"]:
            for key, src in (("alpha_us", q["alpha_source"]), ("busbw_gbps", q["busbw_source"]),
                             ("beta_gbps", q["beta_source"])):
                assert src.startswith(PREFIXES), (name, q, key)
                if src.startswith("calibrated: "):
                    # calibrated on a real log: the log is a cited source, and the value is its own figure
                    cited = src[len("calibrated: "):].split(" ", 1)[0].rstrip(":,")
                    assert cited in p["sources"] and cited in profiles.REAL_LOGS and cited in p["calibrated_on"], \
                        (name, cited)
                    assert f"{q[key]:g}" in src or f"{q[key]:g}" in p["sources"][cited], (name, q, key)
                elif src.startswith("published: "):
                    n_published += 1
                    cited = src[len("published: "):].split(":", 1)[0]
                    assert cited in p["sources"], (name, cited)
                    # a value called published must be a number the source states, not a computed one
                    assert f"{q[key]:g}" in src or f"{q[key]:g}" in p["sources"][cited], (name, q, key)
                else:
                    assert len(src) > len("derived: ") + 20, (name, q, key)   # says how
            assert q["beta_source"].startswith("derived: ")
            assert q["beta_gbps"] == pytest.approx(q["busbw_gbps"] / COLLECTIVES[q["op"]].busbw_factor(q["tp"]),
                                                   rel=1e-3)
    assert n_published >= 12


def test_anchor_values_match_facts():
    def alpha(name, op, tp, mode="eager"):
        return costmodel.profile_param(name, op, tp, mode)["alpha_us"]

    assert alpha("nvlink4", "all_reduce", 8) == 19.2
    assert alpha("nvlink4", "all_reduce", 2, "graph") == pytest.approx(5.75)
    assert [alpha("nvlink3", "all_reduce", n) for n in (2, 4)] == [10.0, 16.9]
    # calibrated: the LL piece fitted to the real 8x A100 / 8x RTX 4090 log (medians 34.94 / 42.495 us)
    assert alpha("nvlink3", "all_reduce", 8) == pytest.approx(34.94, rel=0.02)
    assert alpha("pcie4-nop2p", "all_reduce", 8) == pytest.approx(42.495, rel=0.02)
    # the Simple piece of the real 8x RTX 4090 log: its busbw peak is 15.04 GB/s
    assert costmodel.profile_param("pcie4-nop2p", "all_reduce", 8)["busbw_gbps"] == pytest.approx(15.04, rel=0.03)
    # NVLS from 64 MiB: the piece fitted to nccl-tests#290 (busbw 473.6 GB/s at 4 GiB)
    assert costmodel.profile_param("nvlink4", "all_reduce", 8)["busbw_gbps"] == pytest.approx(473.6, rel=0.01)
    assert costmodel.profile_param("nvlink4", "all_reduce", 4)["busbw_gbps"] == 370.0   # Ring
    assert costmodel.profile_param("nvlink5", "all_reduce", 8)["busbw_gbps"] == 682.0
    assert costmodel.profile_param("pcie5-nop2p", "all_reduce", 8)["busbw_gbps"] == 28.0
    # calibrated: the Simple piece of the real 4x RTX 5090 P2P-off log (busbw peak 27.26 GB/s)
    assert costmodel.profile_param("pcie5-nop2p", "all_reduce", 4)["busbw_gbps"] == pytest.approx(27.26, rel=0.03)
    # beta is the algorithm bandwidth: busbw / 2(n-1)/n for all-reduce at 8 GPUs
    assert costmodel.profile_param("nvlink4", "all_reduce", 8)["beta_gbps"] == pytest.approx(473.6 / 1.75, rel=0.01)


def test_profiles_are_physically_ordered():
    for name, p in profiles.PROFILES.items():
        for q in p["params"]:
            # above the per-direction link ceiling only with NVLS (the switch reduces in-network)
            ceiling = p["link_ceiling_gbps"] * (1.25 if "NVLS" in q["busbw_source"] else 1.0)
            assert 0 < q["busbw_gbps"] <= ceiling, (name, q)
            assert q["alpha_us"] > 0
            if q["mode"] == "graph":
                assert q["alpha_us"] < costmodel.profile_param(p, q["op"], q["tp"], "eager")["alpha_us"]
        for op in ("all_reduce", "all_gather"):
            for mode in {q["mode"] for q in p["params"]}:
                alphas = [costmodel.profile_param(p, op, tp, mode)["alpha_us"] for tp in (2, 4, 8)]
                assert alphas == sorted(alphas), (name, op, mode)


def test_profile_latency_is_monotone_in_size():
    for name, p in profiles.PROFILES.items():
        for q in p["params"]:
            lat = [costmodel.profile_latency_us(name, q["op"], q["tp"], s, q["mode"]) for s in [0] + SIZES]
            assert lat[0] == pytest.approx(q["alpha_us"])
            # non-decreasing (an LL piece may be flat), and rising over the range
            assert all(b >= a for a, b in zip(lat, lat[1:])) and lat[-1] > lat[0], (name, q["op"], q["tp"], q["mode"])
            for piece in q.get("pieces", ()):     # a piece's line is its curve from its first size on
                assert costmodel.profile_latency_us(name, q["op"], q["tp"], piece["from_bytes"], q["mode"]) <= \
                    profiles.param_latency_us({**piece}, piece["from_bytes"]) + 1e-9


def test_profile_lookup_errors_name_what_exists():
    with pytest.raises(UsageError, match="unknown reference profile 'nvlink9'.*nvlink4"):
        costmodel.profile_latency_us("nvlink9", "all_reduce", 8, 1024)
    with pytest.raises(UsageError, match="no all_reduce tp=8 graph parameters.*tp=8 eager"):
        costmodel.profile_latency_us("nvlink3", "all_reduce", 8, 1024, mode="graph")
    assert costmodel.profile_latency_us("reference:nvlink4", "all_reduce", 8, 0) == 19.2


def test_profile_checks_show_the_model_error():
    checks = costmodel.profile_checks("nvlink4")
    assert len(checks) == 4 and all(c["source"] == "Triton-distributed#57" for c in checks)
    assert checks[0]["error_pct"] == pytest.approx((checks[0]["model_us"] - 20.7) / 20.7 * 100, abs=0.1)


# --- profiles as sweep dirs -------------------------------------------------------------------------

def test_write_profile_sweep_is_a_comm_from_source(tmp_path):
    out = str(tmp_path / "ref")
    assert costmodel.write_profile_sweep("nvlink4", out) == out
    meta = results.read_meta(out)
    assert meta["kind"] == "modelled" and meta["backend"] == "model" and meta["hosts"] == ["reference:nvlink4"]
    assert meta["sources"] and meta["params"] and any("no spread" in n for n in meta["notes"])
    df = results.load_frame(out)
    assert list(df.columns) == results.COLUMNS
    assert set(df["mode"]) == {"eager", "graph"} and set(df["tp"]) == {2, 4, 8}
    assert (df["status"] == "ok").all() and (df["wrong"] == 0).all()
    for c in ("latency_us_p95", "latency_us_p99", "latency_us_min", "latency_us_max", "latency_us_mean",
              "latency_us_rankavg_p50", "latency_us_rankavg_mean"):
        assert np.allclose(df[c], df["latency_us_p50"])
    r = df[(df["op"] == "all_reduce") & (df["tp"] == 8) & (df["mode"] == "eager") & (df["size_bytes"] == 1 << 20)].iloc[0]
    model = costmodel.profile_latency_us("nvlink4", "all_reduce", 8, 1 << 20)
    assert r["latency_us_p50"] == pytest.approx(model, rel=1e-5)
    algbw, busbw = COLLECTIVES["all_reduce"].bandwidth_gbps(1 << 20, model, 8)
    assert r["busbw_gbps"] == pytest.approx(busbw, rel=1e-4) and r["algbw_gbps"] == pytest.approx(algbw, rel=1e-4)
    table = CommTable(out)
    assert table.stat == "latency_us_rankavg_mean"
    for op, tp, mode, size in (("all_reduce", 8, "graph", 10240), ("all_gather", 2, "eager", 311296),
                               ("all_reduce", 4, "eager", 1 << 20)):
        want = costmodel.profile_latency_us("nvlink4", op, tp, size, mode)
        assert table.latency_us(op, tp, mode, size) == pytest.approx(want, rel=0.03)
    # a fit of the written sweep gives the profile back where it is one alpha-beta line
    for f in costmodel.fit_sweep(df):
        q = costmodel.profile_param("nvlink4", f.op, f.tp, f.mode)
        if q.get("pieces"):
            continue
        assert f.alpha_us == pytest.approx(q["alpha_us"], rel=0.01)
        assert f.beta_gbps == pytest.approx(q["beta_gbps"], rel=0.01)


def test_write_profile_sweep_options_and_refusals(tmp_path):
    out = str(tmp_path / "small")
    costmodel.write_profile_sweep("pcie5-nop2p", out, tps=(8,), sizes=(4096, 65536), ops=["all_reduce"])
    df = results.load_frame(out)
    assert len(df) == 2 and set(df["mode"]) == {"eager"}
    with pytest.raises(UsageError, match="already holds files"):
        costmodel.write_profile_sweep("pcie5-nop2p", out)
    with pytest.raises(UsageError, match="no all_reduce tp=16 eager"):
        costmodel.write_profile_sweep("nvlink4", str(tmp_path / "x"), tps=(16,))


def test_resolve_comm_source_writes_the_profile_once(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))
    assert costmodel.resolve_comm_source("results/some-sweep") == "results/some-sweep"
    path = costmodel.resolve_comm_source("reference:pcie5-nop2p")
    assert path == str(tmp_path / "cache" / "reference" / "pcie5-nop2p")
    csv_path = os.path.join(path, results.SWEEP_CSV)
    mtime = os.stat(csv_path).st_mtime_ns
    assert costmodel.resolve_comm_source("reference:pcie5-nop2p") == path
    assert os.stat(csv_path).st_mtime_ns == mtime              # reused, not rewritten
    os.remove(csv_path)                                         # a damaged cache entry is rewritten
    assert costmodel.resolve_comm_source("reference:pcie5-nop2p") == path and os.path.exists(csv_path)
    assert CommTable(path).latency_us("all_reduce", 8, "eager", 10240) > 40
    assert sorted(os.listdir(tmp_path / "cache" / "reference")) == ["pcie5-nop2p"]   # no temp dirs left
    with pytest.raises(UsageError, match="unknown reference profile"):
        costmodel.resolve_comm_source("reference:nope")


# The error each calibrated profile keeps against each real log it is calibrated on, per size band:
# (median within, every size within), as model / log. docs/gap.md quotes the figures from
# results/bench/profile_calibration.md.
CALIBRATION_ERROR = {
    ("pcie4-nop2p", "chlc-4090x8"): {"<= 64 KiB": (0.03, 0.1), "128 KiB - 2 MiB": (0.05, 0.1),
                                     ">= 64 MiB": (0.05, 0.05)},
    ("pcie5-nop2p", "nccl-tests#287"): {"<= 64 KiB": (0.03, 0.1), "128 KiB - 2 MiB": (0.05, 0.1),
                                        ">= 64 MiB": (0.03, 0.05)},
    ("pcie5-p2p", "aikitoria-5090x8"): {"<= 64 KiB": (0.03, 0.05), "128 KiB - 2 MiB": (0.03, 0.1),
                                        ">= 64 MiB": (0.07, 0.1)},
    ("nvlink3", "superbench-a100"): {"<= 64 KiB": (0.03, 0.05), "128 KiB - 2 MiB": (0.03, 0.15),
                                     ">= 64 MiB": (0.05, 0.05)},
    ("nvlink4", "nccl-tests#290"): {">= 64 MiB": (0.03, 0.05)},
}


@pytest.mark.parametrize("profile,log", sorted(CALIBRATION_ERROR))
def test_profile_within_its_stated_error_of_each_real_log_it_is_calibrated_on(profile, log):
    rows = {r["log"]: r for r in costmodel.profile_calibration(profile)}
    bands = {b["band"]: b for b in rows[log]["bands"]}
    assert sorted(bands) == sorted(CALIBRATION_ERROR[profile, log])
    for band, (med_err, any_err) in CALIBRATION_ERROR[profile, log].items():
        b = bands[band]
        assert abs(b["median_ratio"] - 1) <= med_err, (band, b)
        assert 1 - any_err <= b["min_ratio"] and b["max_ratio"] <= 1 + any_err, (band, b)


def test_profiles_calibrated_on_the_real_logs_and_their_error_stated():
    """Each profile with a real log of its class is calibrated on it; the 2x RTX 4090 log is a
    latency reference only (its 2.24 GB/s is not taken as the class's bandwidth)."""
    cal = {p: {r["log"]: {b["band"]: b for b in r["bands"]} for r in costmodel.profile_calibration(p)}
           for p in profiles.PROFILES}
    r2 = cal["pcie4-nop2p"]["kalavai-4090x2"]
    assert r2[">= 64 MiB"]["median_ratio"] < 0.15
    assert {(p, log) for p in cal for log in cal[p]} == set(CALIBRATION_ERROR) | {("pcie4-nop2p", "kalavai-4090x2")}
    # protocol pieces where the logs step: 8x RTX 5090 P2P at 4 KiB, 4x RTX 5090 P2P-off at 2 KiB
    step = {q["tp"]: q for q in profiles.PROFILES["pcie5-p2p"]["params"] if q["op"] == "all_reduce"}[8]
    assert [e["from_bytes"] for e in step["pieces"]][:2] == [0, 4096]
    assert costmodel.profile_latency_us("pcie5-p2p", "all_reduce", 8, 4096) / \
        costmodel.profile_latency_us("pcie5-p2p", "all_reduce", 8, 2048) > 1.4       # the log: 36.29 / 24.54
    assert costmodel.profile_latency_us("pcie5-nop2p", "all_reduce", 4, 2048) / \
        costmodel.profile_latency_us("pcie5-nop2p", "all_reduce", 4, 1024) > 1.5     # the log: 26.16 / 15.88
    # one alpha-beta line where no log of that (op, TP) exists
    assert not any("pieces" in q for q in profiles.PROFILES["nvlink5"]["params"])
