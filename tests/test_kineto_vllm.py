"""``commprof import kineto`` on vLLM's own traces: real ones captured on CPU with TP=2
(tests/data/vllm-cpu, see its SOURCE.md: shared-memory collectives, iteration marks, the API
server's rank-less trace beside the ranks'), and GPU-shaped ones written here with the kernel
names of vLLM's source (NCCL, vLLM's custom all-reduce) under the same iteration marks."""
import collections
import glob
import gzip
import json
import os
import re

import pandas as pd

from conftest import REPO, csv_rows, results_meta

VLLM_CPU = os.path.join(REPO, "tests", "data", "vllm-cpu")
TP2 = sorted(glob.glob(os.path.join(VLLM_CPU, "tp2-batch4", "*.json.gz")))
TINY = os.path.join(VLLM_CPU, "tiny-llama-config.json")      # 2 layers: 2L + 2 = 6 collectives per step


def _marks_and_ops(path):
    """Per iteration mark of one rank's trace (read here independently of commprof): the mark's
    name and the shm collectives that start inside it."""
    with gzip.open(path, "rt") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    marks = sorted((e for e in ev if e["name"].startswith("execute_context_")), key=lambda e: e["ts"])
    ops = [e for e in ev if e["name"].startswith("_C::shm_")]
    return [(m["name"], [o["name"] for o in ops if m["ts"] <= o["ts"] < m["ts"] + m["dur"]]) for m in marks]


def _phase(mark):
    prefill, decode = (int(x) for x in re.findall(r"_(\d+)\(", mark))
    return "mixed" if prefill and decode else "prefill" if prefill else "decode"


def test_vllm_cpu_tp2_trace_steps_phases_batch_backend(cli_inproc, tmp_path):
    out = str(tmp_path / "imp")
    res = cli_inproc("import", "kineto", *TP2, "--model", TINY, "--out", out)
    assert res.returncode == 0, res.stderr
    assert "vllm-cpu-shm" in res.stdout and "plan: 6, matches" in res.stdout
    assert "skipped vm_" in res.stderr                        # the API server's trace: no rank, no ops
    want = _marks_and_ops(next(p for p in TP2 if "rank0" in os.path.basename(p)))
    kept = [(n, ops) for n, ops in want if n != "execute_context_0(0)_generation_0(0)"]
    assert len(kept) == len(want) - 1 and all(len(ops) == 6 for _, ops in kept)
    m = results_meta(out)
    run = m["runs"][0]
    assert m["backend"] == run["backend"] == "vllm-cpu-shm"      # not the process group's "gloo"
    assert run["step_source"].startswith("vLLM 'execute_context")
    assert run["dropped_steps"] == {"empty": 1, "no collectives": 0}
    assert run["steps"] == len(kept) and run["collectives_per_step"] == 6 and run["matches_plan"]
    phases = collections.Counter(_phase(n) for n, _ in kept)
    assert run["steps_by_phase"] == dict(phases)
    assert run["batch"] == 4 and run["batch_source"].startswith("vLLM iteration marks")
    steps = pd.read_csv(os.path.join(out, "kineto_steps.csv"))
    r0 = steps[steps["rank"] == 0].reset_index(drop=True)
    assert list(r0["phase"]) == [_phase(n) for n, _ in kept]
    assert (r0["collectives"] == 6).all()
    # tokens per step from the marks: T + K of execute_context_N(T)_generation_M(K)
    assert list(r0["step_tokens"]) == [sum(map(int, re.findall(r"\((\d+)\)", n))) for n, _ in kept]
    summ = {r["phase"]: r for r in csv_rows(out, "trace_summary.csv")}
    assert set(summ) == set(phases) and summ["decode"]["batch"] == "4" and summ["prefill"]["batch"] == "0"
    colls = pd.read_csv(os.path.join(out, "kineto_collectives.csv"))
    per_step = colls[colls["rank"] == 0].groupby("step")["op"].apply(list)
    assert all(ops.count("all_reduce") == 5 and ops.count("all_gather") == 1 for ops in per_step)
    assert (colls["site"].fillna("") != "").all()             # sites from the plan: every step matches it


def _gpu_vllm_rank(rank, steps=(("execute_context_1(16)_generation_0(0)", 1),
                                ("execute_context_0(0)_generation_4(4)", 0),
                                ("execute_context_0(0)_generation_4(4)", 0),
                                ("execute_context_0(0)_generation_0(0)", 0)), layers=2):
    """A vLLM GPU worker's trace as Kineto writes it: the iteration mark on the CPU thread, each
    kernel launched from inside it (cudaLaunchKernel with a correlation id); per layer a GEMM then
    vLLM's custom all-reduce (``vllm::cross_device_reduce_1stage``, csrc/custom_all_reduce.cuh),
    the logits gathered by NCCL (``ncclDevKernel_AllGather_RING_LL``). The last mark schedules nothing."""
    ev, corr, t = [], 0, 1000.0
    for name, _ in steps:
        start = t
        n_ops = 0 if name.endswith("_generation_0(0)") and "context_0(" in name else 2 * layers + 1
        for k in range(n_ops):
            kern = ("ncclDevKernel_AllGather_RING_LL" if k == n_ops - 1 else
                    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*, vllm::RankSignals, "
                    "vllm::Signal*, __nv_bfloat16*, int, int)")
            for kname, dur in (("sm90_xmma_gemm_bf16bf16_bf16f32", 30.0), (kern, 8.0 + rank)):
                corr += 1
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7,
                           "ts": t, "dur": 3.0, "args": {"correlation": corr}})
                ev.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": 7, "ts": t + 20.0,
                           "dur": dur, "args": {"correlation": corr}})
                t += 45.0
        t += 10.0
        ev.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 7, "tid": 7, "ts": start,
                   "dur": t - start})
        t += 100.0
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "deviceProperties": [{"id": rank, "name": "NVIDIA H100 80GB HBM3"}], "traceEvents": ev}


def test_vllm_gpu_marks_custom_allreduce_and_nccl(cli_inproc, tmp_path):
    paths = []
    for r in (0, 1):
        p = tmp_path / f"rank{r}.json"
        p.write_text(json.dumps(_gpu_vllm_rank(r)))
        paths.append(str(p))
    out = str(tmp_path / "imp")
    res = cli_inproc("import", "kineto", *paths, "--out", out)
    assert res.returncode == 0, res.stderr
    run = results_meta(out)["runs"][0]
    assert run["step_source"].startswith("vLLM 'execute_context")
    assert run["steps_by_phase"] == {"prefill": 1, "decode": 2} and run["dropped_steps"]["empty"] == 1
    assert run["batch"] == 4 and run["collectives_per_step"] == 5
    assert run["backend"] == "nccl+vllm-custom-allreduce"
    colls = pd.read_csv(os.path.join(out, "kineto_collectives.csv"))
    assert collections.Counter(colls[colls["rank"] == 0]["op"]) == {"all_reduce": 12, "all_gather": 3}
    # rank 0's kernels are 1 us shorter: per collective 1 us of rank 1's time is wait
    assert colls[colls["rank"] == 1]["wait_us"].round(6).eq(1.0).all()


def test_a_profile_dir_imports_as_its_files_and_the_line_is_per_token(cli_inproc, tmp_path):
    """vLLM's profiler dir given as it is: its *.json.gz files (the front end's trace skipped as with
    files); the line gives the decode batch and the exposed communication per token (per step /
    batch, from the run's own figures). A dir with no trace in it is one line, exit 2."""
    by_files, by_dir = str(tmp_path / "files"), str(tmp_path / "dir")
    assert cli_inproc("import", "kineto", *TP2, "--model", TINY, "--out", by_files).returncode == 0
    res = cli_inproc("import", "kineto", os.path.dirname(TP2[0]), "--model", TINY, "--out", by_dir)
    assert res.returncode == 0, res.stderr
    assert csv_rows(by_dir, "trace_summary.csv") == csv_rows(by_files, "trace_summary.csv")
    run = results_meta(by_dir)["runs"][0]
    summ = next(r for r in csv_rows(by_dir, "trace_summary.csv") if r["phase"] == "decode")
    per_token = float(summ["ms_per_token"]) * float(summ["comm_share_pct"]) / 100 / int(summ["batch"])
    assert abs(run["comm_ms_per_token"] - per_token) < 1e-4 * per_token      # the CSV keeps 6 digits
    assert f"(batch 4, {run['tokens_per_s']:,.0f} tokens/s: {run['comm_ms_per_token']:.3f} ms of it per token)" in res.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no trace here\n")
    res = cli_inproc("import", "kineto", str(empty), "--out", str(tmp_path / "o"))
    errors = [x for x in res.stderr.splitlines() if x.startswith("commprof: error:")]
    assert res.returncode == 2 and len(errors) == 1 and "no trace files" in errors[0], res.stderr
    assert not (tmp_path / "o").exists()
