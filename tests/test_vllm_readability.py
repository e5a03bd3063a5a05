"""What a person reads after a run against a real vLLM (issue 34, "Against a real vLLM"): help and
docs name what the code uses, per-token figures beside per-step ones, bounds not written as values,
CPU traces not reported as zero compute, and medians that say they do not add."""
import dataclasses
import os
import re

from helpers import REPO

from commprof.model import registry


def _help(cls, name: str) -> str:
    return next(f for f in dataclasses.fields(cls) if f.name == name).metadata["cli"]["help"]


def test_step_marker_help_names_vllms_execute_context_marks():
    from commprof.ingest.kinetoread import STEP_RES, VLLM_STEP_RE

    help_text = _help(registry.ImportConfig, "step_marker")
    assert "execute_context_N(T)_generation_M(K)" in help_text, help_text
    assert "ProfilerStep#N" in help_text and "gpu_model_runner: forward" in help_text
    assert len(STEP_RES) == 3       # every default mark is named above
    # the example the help gives matches a real vLLM iteration mark
    example = re.search(r"--step-marker '([^']+)'", help_text).group(1)
    assert re.search(example, "execute_context_0(0)_generation_4(4)")
    assert VLLM_STEP_RE.match("execute_context_0(0)_generation_4(4)")


def test_serve_docs_usage_names_every_serve_flag():
    with open(os.path.join(REPO, "docs", "serve.md")) as f:
        text = f.read()
    usage = text.split("## Usage", 1)[1].split("```", 2)[1]
    names = [d for f in dataclasses.fields(registry.ServeFlags) if "cli" in f.metadata
             for d in f.metadata["cli"]["decls"]]
    assert "--prompt-tokens" in names and "--output-tokens" in names
    missing = [n for n in names if n not in usage]
    assert not missing, missing


VLLM_TP2 = os.path.join(REPO, "tests", "data", "vllm-cpu", "tp2-batch4")


def _import_vllm_cpu(tmp_path):
    import glob

    from commprof.ingest.kineto import import_kineto

    out = str(tmp_path / "imp")
    import_kineto(sorted(glob.glob(os.path.join(VLLM_TP2, "*.json.gz"))), out, command=["test"])
    return out


def _rows(path):
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_cpu_trace_ranks_say_compute_is_cpu_ops_not_zero_kernels(tmp_path):
    out = _import_vllm_cpu(tmp_path)
    ranks = _rows(os.path.join(out, "kineto_ranks.csv"))
    steps = _rows(os.path.join(out, "kineto_steps.csv"))
    assert len(ranks) == 2
    for r in ranks:
        # no kernels on a CPU trace: not known, so empty (was 0 and 0)
        assert r["compute_kernels"] == "" and r["compute_kernel_us"] == "" and r["hta_overlap_pct"] == ""
        assert "CPU-only" in r["na_reason"]
        assert int(r["compute_cpu_ops"]) > 100
        busy = float(r["compute_cpu_us"])
        # the steps compute: the rank's CPU compute covers at least what its steps counted as compute
        step_compute = sum(float(s["compute_us"]) for s in steps if s["rank"] == r["rank"])
        assert busy > 0 and busy >= 0.99 * step_compute, (busy, step_compute)
    with open(os.path.join(out, "meta.json")) as f:
        import json

        cols = json.load(f)["columns"]
    assert "empty on a CPU-only trace" in cols["hta_overlap_pct"]


def test_trace_summary_remainder_says_what_the_component_medians_leave(tmp_path):
    out = _import_vllm_cpu(tmp_path)
    rows = _rows(os.path.join(out, "trace_summary.csv"))
    assert rows
    for r in rows:
        parts = sum(float(r[k]) for k in ("compute_ms", "transfer_ms", "wait_ms", "gaps_ms"))
        ms = float(r["ms_per_token"])
        assert float(r["remainder_ms"]) == __import__("pytest").approx(ms - parts, rel=1e-4, abs=1e-5)
    # on this real vLLM trace the medians do not add up: the remainder is not a rounding error
    assert any(abs(float(r["remainder_ms"])) > 0.05 * float(r["ms_per_token"]) for r in rows)
    with open(os.path.join(REPO, "docs", "trace.md")) as f:
        assert "medians do not add" in f.read()
    with open(os.path.join(out, "meta.json")) as f:
        import json

        assert "medians do not add" in json.load(f)["columns"]["remainder_ms"]
