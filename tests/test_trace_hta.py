"""commprof trace's per-rank Kineto traces (``kineto/rank<r>.trace.json``) as Holistic Trace
Analysis (HTA) reads them: rank found, collectives counted as communication, and HTA's
communication / computation time per rank equal to commprof's own split of the same run.

HTA runs in its own venv (``bash scripts/hta_venv.sh`` makes ``.venv-hta``; ``.ci/run`` does);
without it the HTA test skips with the reason."""
import json
import os
import re

import pandas as pd
import pytest

from helpers import HTA_PYTHON, TOY_MODEL, hta_figures, run_inproc

from commprof.results.trace import as_nccl, rank_trace_path, write_rank_traces

RANK_RE = re.compile(r'"rank":\s+(\d+)')      # how HTA 0.5.0 finds a file's rank (hta/common/trace_file.py)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("hta")
    out = str(d / "tr")
    res = run_inproc(["trace", "--tp", "2", "--batch", "1", "--model", TOY_MODEL, "--context", "64",
                      "--tokens", "4", "--warmup", "1", "--no-charts", "--out", out], cwd=d)
    assert res.returncode == 0, res.stderr
    return out


def _same_split(run, imp):
    """The import's per-token split equals the run's own (both CSVs keep 6 significant digits)."""
    a = pd.read_csv(os.path.join(run, "trace_tokens.csv")).sort_values(["token", "rank"]).reset_index(drop=True)
    b = pd.read_csv(os.path.join(imp, "trace_tokens.csv")).sort_values(["token", "rank"]).reset_index(drop=True)
    for k in ("latency_us", "compute_us", "transfer_us", "wait_us"):
        assert (abs(a[k] - b[k]) <= 0.05 + 2e-5 * a[k]).all(), k


def test_one_file_per_rank_with_distributed_info(run, cli_inproc, tmp_path):
    folder = os.path.join(run, "kineto")
    assert sorted(os.listdir(folder)) == ["rank0.trace.json", "rank1.trace.json"]
    for r in (0, 1):
        text = open(rank_trace_path(folder, r)).read()
        assert int(RANK_RE.search(text).group(1)) == r           # HTA's rank is the first "rank": N
        doc = json.loads(text)
        assert doc["distributedInfo"] == {"backend": "gloo", "rank": r, "world_size": 2}
        assert {e["pid"] % 1000 for e in doc["traceEvents"]} == {r}
    # import kineto reads the per-rank files as it reads trace.json: same split
    res = cli_inproc("import", "kineto", rank_trace_path(folder, 0), rank_trace_path(folder, 1),
                     "--model", TOY_MODEL, "--out", str(tmp_path / "imp"))
    assert res.returncode == 0, res.stderr
    assert "18 collectives/step (plan: 18, matches)" in res.stdout
    _same_split(run, str(tmp_path / "imp"))


def test_nccl_form_names_collectives_as_nccl_kernels(run):
    doc = json.load(open(os.path.join(run, "trace.json")))
    ev = as_nccl(doc["traceEvents"], "bf16")
    kern = [e for e in ev if e.get("cat") == "kernel"]
    comm = [e for e in kern if e["name"].startswith("ncclDevKernel_")]
    assert {e["name"] for e in comm} == {"ncclDevKernel_AllReduce_Sum_bf16", "ncclDevKernel_AllGather"}
    assert {e["args"]["label"] for e in comm} >= {"embedding", "layer 0 attention-out", "logits"}
    assert all(e["args"]["stream"] > 0 and e["args"]["device"] == e["pid"] % 1000 for e in kern)
    assert not any(e.get("cat") == "cpu_op" for e in ev)
    assert sum(e.get("cat") == "gpu_user_annotation" for e in ev) == sum(
        e.get("cat") == "user_annotation" for e in ev)


def _hta(folder):
    return hta_figures([os.path.join(folder, f) for f in sorted(os.listdir(folder))])


def test_hta_breakdown_agrees_with_commprof(run, tmp_path):
    """The same stamps written as an NCCL run writes them (``as_nccl``: the writer's GPU form), read
    by HTA: its COMMUNICATION time per rank is commprof's transfer + wait, its COMPUTATION time
    commprof's compute, over the run's tokens. Tolerance: HTA keeps whole microseconds (it rounds
    each event's start up and its end down, hta/common/trace_parser.py ``round_down_time_stamps``),
    so its sum is at most 2 us per kernel below the exact one; applied to our events that rule
    gives HTA's figure exactly."""
    import math

    doc = json.load(open(os.path.join(run, "trace.json")))
    doc["traceEvents"] = as_nccl(doc["traceEvents"], doc["commprof"]["dtype"])
    write_rank_traces(str(tmp_path / "gpu"), doc)
    theirs = _hta(str(tmp_path / "gpu"))["ranks"]
    tok = pd.read_csv(os.path.join(run, "trace_tokens.csv"))
    assert sorted(theirs) == ["0", "1"]
    for r, g in tok.groupby("rank"):
        kern = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["pid"] == r]
        h = theirs[str(r)]
        for kind, mine, comm in (("COMMUNICATION", (g["transfer_us"] + g["wait_us"]).sum(), True),
                                 ("COMPUTATION", g["compute_us"].sum(), False)):
            ev = [e for e in kern if e["name"].startswith("ncclDevKernel_") == comm]
            whole_us = sum(math.floor(e["ts"] + e["dur"]) - math.ceil(e["ts"]) for e in ev)
            assert h[kind] == pytest.approx(whole_us, abs=1e-6), (r, kind, h, whole_us)
            # commprof's CSV keeps 6 significant digits: 1e-5 relative on top of the rounding
            assert -1e-5 * mine <= mine - h[kind] < 2 * len(ev) + 1e-5 * mine, (r, kind, mine, h, len(ev))


_HTA_RANKS = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
kinds, _ = a.get_gpu_kernel_breakdown(visualize=False)
print(json.dumps({"ranks": sorted(int(r) for r in a.t.traces), "kernel_types": list(kinds["kernel_type"])}))
"""


def test_hta_reads_cpu_traces_ranks_but_counts_no_kernels(run):
    """On CPU (gloo) the per-rank files carry CPU ops: HTA finds both ranks, and its kernel breakdown
    is empty, because HTA counts only events on a GPU stream (it has no notion of a CPU collective)."""
    import subprocess

    if not os.path.exists(HTA_PYTHON):
        pytest.skip(f"no HTA venv at {HTA_PYTHON} (make it: bash scripts/hta_venv.sh)")
    res = subprocess.run([HTA_PYTHON, "-c", _HTA_RANKS, os.path.join(run, "kineto")], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-1500:]
    assert json.loads(res.stdout.strip().splitlines()[-1]) == {"ranks": [0, 1], "kernel_types": []}


def test_import_reads_the_nccl_form_back(run, cli_inproc, tmp_path):
    """What an NCCL run writes (the same stamps through ``as_nccl``), one file per rank, imports with
    the same per-token split and collectives per step as the run's own tables."""
    doc = json.load(open(os.path.join(run, "trace.json")))
    doc["traceEvents"] = as_nccl(doc["traceEvents"], doc["commprof"]["dtype"])
    files = write_rank_traces(str(tmp_path / "gpu"), doc)
    res = cli_inproc("import", "kineto", *files, "--model", TOY_MODEL, "--out", str(tmp_path / "imp"))
    assert res.returncode == 0, res.stderr
    assert "18 collectives/step (plan: 18, matches)" in res.stdout
    _same_split(run, str(tmp_path / "imp"))
