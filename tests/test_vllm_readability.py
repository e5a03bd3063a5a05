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
