"""The commprof command line: parse options, call the core, render, map errors to one line."""
from __future__ import annotations

import errno
import os
import sys
from typing import Optional

import typer

from commprof.model.errors import CommprofError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="commprof: GPU interconnect and collective-communication profiler for LLM inference.")


def _fail(e: CommprofError):
    typer.echo(f"commprof: error: {e}", err=True)
    raise typer.Exit(e.exit_code)


def _exit_with(fn, *args, **kwargs):
    """Run a verb's ``run(config)``, which returns the exit code; known errors become one line."""
    try:
        code = fn(*args, **kwargs)
    except CommprofError as e:
        _fail(e)
    except KeyboardInterrupt as e:
        if getattr(e, "exit_code", None):       # SIGTERM while ranks ran (launch.Terminated): 143
            raise typer.Exit(e.exit_code) from e
        raise
    raise typer.Exit(code or 0)


@app.command()
def sweep(
    tp: str = typer.Option("2,4,8", "--tp", help="TP degrees, e.g. 2,4,8; one launch of max(tp) ranks."),
    ops: Optional[str] = typer.Option(None, "--ops", help="all_reduce,all_gather (default); also reduce_scatter, all_to_all, broadcast."),
    sizes: str = typer.Option("decode", "--sizes", help="decode (from --model/--batch), prefill (from --model/--prompt/--chunk), pow2:4K-64M, or a list like 4K,64K,1M."),
    prompt: Optional[str] = typer.Option(None, "--prompt", help="With --sizes prefill: prompt lengths in tokens, e.g. 512,2048,8192."),
    chunk: Optional[str] = typer.Option(None, "--chunk", help="With --sizes prefill: chunk sizes in tokens (chunked prefill); default the whole prompt."),
    model: Optional[str] = typer.Option(None, "--model", help="Built-in model name or a Hugging Face config.json path (default Qwen2.5-32B)."),
    batch: str = typer.Option("1,8,32,128", "--batch", help="Decode batch sizes (tokens per step) for --sizes decode."),
    dtype: str = typer.Option("bf16", "--dtype", help="bf16, fp16 or fp32."),
    backend: str = typer.Option("auto", "--backend", help="auto, nccl or gloo."),
    modes: Optional[str] = typer.Option(None, "--modes", help="eager and/or graph (graph: NCCL only; default both on NCCL)."),
    iters: Optional[int] = typer.Option(None, "--iters", help="Timed iterations per cell (default 200 NCCL, 40 gloo)."),
    warmup: Optional[int] = typer.Option(None, "--warmup", help="Warm-up iterations per cell (default 20 NCCL, 3 gloo)."),
    concurrent: bool = typer.Option(False, "--concurrent", help="Run all disjoint groups of a TP degree at once."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds without progress before a rank counts as hung."),
    out: Optional[str] = typer.Option(None, "--out", help="Results dir (default results/runs/<timestamp>-<host>/)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the sweep in --out, skipping finished rows."),
    impl: Optional[str] = typer.Option(None, "--impl", help="nccl,custom: time commprof's one-shot all-reduce (cuda_ext/) beside NCCL's, eager, all_reduce only."),
    verify: bool = typer.Option(False, "--verify", help="With --impl custom: check every timed custom call against torch's all_reduce."),
    timing: str = typer.Option("per-call", "--timing", help="per-call (one barrier-aligned call per sample, what a decode step pays) or back-to-back (nccl-tests' method: a loop of --loop calls timed as one, averaged)."),
    loop: int = typer.Option(20, "--loop", help="With --timing back-to-back: calls per timed loop (nccl-tests -n)."),
    no_charts: bool = typer.Option(False, "--no-charts", help="Skip chart rendering."),
):
    """Collective latency at decode sizes across TP degrees (NCCL on GPUs, gloo on CPU)."""
    from commprof.verbs.sweep import SweepConfig, run

    _exit_with(run, SweepConfig(
        tp=tp, ops=ops, sizes=sizes, model=model, batch=batch, dtype=dtype, backend=backend, modes=modes,
        iters=iters, warmup=warmup, concurrent=concurrent, timeout_s=timeout, out=out, resume=resume,
        argv=["commprof"] + sys.argv[1:], impl=impl, verify=verify, timing=timing, loop=loop, prompt=prompt,
        chunk=chunk, charts=not no_charts))


@app.command()
def trace(
    model: str = typer.Option("Qwen2.5-32B", "--model", help="Built-in model name or a Hugging Face config.json path."),
    tp: str = typer.Option("2,4,8", "--tp", help="TP degrees; one launch of max(tp) ranks."),
    batch: str = typer.Option("1,8", "--batch", help="Sequences decoded together (tokens per step)."),
    context: int = typer.Option(2048, "--context", help="KV-cache length each step attends over (tokens)."),
    tokens: int = typer.Option(32, "--tokens", help="Decode steps timed per run."),
    warmup: int = typer.Option(3, "--warmup", help="Untimed decode steps first."),
    layers: Optional[int] = typer.Option(None, "--layers", help="Run N layers and scale to the model's depth."),
    dtype: str = typer.Option("bf16", "--dtype", help="bf16, fp16 or fp32."),
    backend: str = typer.Option("auto", "--backend", help="auto, nccl or gloo."),
    modes: Optional[str] = typer.Option(None, "--modes", help="eager and/or graph (graph: NCCL only)."),
    predict: bool = typer.Option(False, "--predict", help="Predict another box: compute measured here + --comm-from."),
    comm_from: Optional[str] = typer.Option(None, "--comm-from", help="Sweep/import results dir of the box to predict, or reference:<profile> (e.g. reference:nvlink4)."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds without progress before a rank counts as hung."),
    out: Optional[str] = typer.Option(None, "--out", help="Results dir (default results/runs/<timestamp>-<host>/)."),
    no_charts: bool = typer.Option(False, "--no-charts", help="Skip chart rendering."),
    phase: str = typer.Option("decode", "--phase", help="decode, prefill (one prompt in chunk steps: TTFT and its communication) or mixed (chunk steps carrying --batch decode tokens too)."),
    prompt: Optional[int] = typer.Option(None, "--prompt", help="Prompt length in tokens (--phase prefill or mixed); the prefill sequence's cache holds it."),
    chunk: Optional[int] = typer.Option(None, "--chunk", help="Prefill tokens per step (default the whole prompt; needed for mixed)."),
):
    """Per-token, per-layer compute vs communication of a synthetic TP decode engine (or of a prefill's chunk steps)."""
    from commprof.verbs.trace import TraceConfig, run

    _exit_with(run, TraceConfig(
        model=model, tp=tp, batch=batch, context=context, tokens=tokens, warmup=warmup, layers=layers, dtype=dtype,
        backend=backend, modes=modes, timeout_s=timeout, out=out, argv=["commprof"] + sys.argv[1:], predict=predict,
        phase=phase, prompt=prompt, chunk=chunk, comm_from=comm_from, charts=not no_charts))


@app.command()
def plan(
    model: str = typer.Option("Qwen2.5-32B", "--model", help="Built-in model name or a Hugging Face config.json path."),
    tp: int = typer.Option(8, "--tp", help="TP degree."),
    batch: int = typer.Option(1, "--batch", help="Sequences decoded together (tokens per step)."),
    context: int = typer.Option(4096, "--context", help="Context length per sequence (tokens)."),
    gpu_mem: Optional[str] = typer.Option(None, "--gpu-mem", help="GPU memory per device, e.g. 80G or 141GB."),
    mem_util: float = typer.Option(0.9, "--mem-util", help="Share of GPU memory usable for weights and KV cache."),
    dtype: str = typer.Option("bf16", "--dtype", help="bf16, fp16 or fp32."),
    sp: bool = typer.Option(False, "--sp", help="Sequence parallelism: each all-reduce becomes reduce-scatter + all-gather."),
    moe: str = typer.Option("tp", "--moe", help="MoE layers: tp (experts sharded, one all-reduce) or ep (all-to-all dispatch + combine)."),
    out: Optional[str] = typer.Option(None, "--out", help="Write plan.json and plan.csv into this dir."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    phase: str = typer.Option("decode", "--phase", help="decode (one token per sequence), prefill (a prompt in chunks) or mixed (one step: a prefill chunk + --batch decode tokens)."),
    prompt: Optional[int] = typer.Option(None, "--prompt", help="Prompt length in tokens (--phase prefill or mixed)."),
    chunk: Optional[int] = typer.Option(None, "--chunk", help="Prefill tokens per step (chunked prefill; default the whole prompt; needed for mixed)."),
):
    """Collectives and memory of one decode step (or a prefill, or a mixed step), from the model's shapes alone (nothing runs)."""
    from commprof.verbs.plan import PlanConfig, run

    _exit_with(run, PlanConfig(model=model, tp=tp, batch=batch, context=context, gpu_mem=gpu_mem,
                                    mem_util=mem_util, dtype=dtype, sp=sp, moe=moe, out=out, as_json=as_json,
                                    phase=phase, prompt=prompt, chunk=chunk))


@app.command()
def predict(
    model: str = typer.Option("Qwen2.5-32B", "--model", help="Built-in model name or a Hugging Face config.json path."),
    gpu: str = typer.Option("rtx5090", "--gpu", help="GPU SKU(s) of the box(es), e.g. rtx5090 or h100-sxm,rtx5090 (commprof/data/gpus.toml)."),
    comm: str = typer.Option("", "--comm", help="Each box's collectives: reference:<profile> (pcie4-nop2p, pcie4-p2p, pcie5-nop2p, pcie5-p2p, nvlink3, nvlink4, nvlink5) or a results dir (commprof import of nccl-tests logs, or a sweep); comma-separated, one per --gpu. Default: the GPU's class (NVLink generation; PCIe generation, no P2P on GeForce cards), named in the output."),
    tp: str = typer.Option("2,4,8", "--tp", help="TP degrees."),
    batch: str = typer.Option("1,8,32", "--batch", help="Sequences decoded together."),
    context: int = typer.Option(4096, "--context", help="Tokens each sequence attends over (KV cache)."),
    prompt: Optional[int] = typer.Option(None, "--prompt", help="Prompt tokens: adds the time to first token."),
    dtype: str = typer.Option("bf16", "--dtype", help="bf16 or fp16 (activations, KV cache, collectives)."),
    weights: str = typer.Option("bf16", "--weights", help="bf16, fp16 or fp8 (1-byte weights, GEMMs at the GPU's FP8 rate)."),
    mode: str = typer.Option("graph", "--mode", help="graph (CUDA graphs, as engines decode) or eager."),
    mem_util: float = typer.Option(0.9, "--mem-util", help="Share of GPU memory for weights and KV cache."),
    out: Optional[str] = typer.Option(None, "--out", help="Write predict.csv, meta.json and predict.png into this new dir."),
    no_charts: bool = typer.Option(False, "--no-charts", help="Skip the chart."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON."),
    serve: Optional[str] = typer.Option(None, "--serve", help="A commprof serve dir: adds the measured queue, TTFT and served TPOT beside the modelled ones."),
):
    """Each token's time on a box you don't own: modelled GPU compute + the box's own communication."""
    from commprof.verbs.predict import PredictConfig, run
    from commprof.model.units import parse_int_list

    def parts(text):
        return [p.strip() for p in text.split(",") if p.strip()]

    _exit_with(lambda: run(PredictConfig(
        model=model, gpus=parts(gpu), comms=parts(comm), tps=parse_int_list(tp, "--tp"),
        batches=parse_int_list(batch, "--batch"), context=context, prompt=prompt, dtype=dtype, weights=weights, mode=mode,
        mem_util=mem_util, out=out, charts=not no_charts, as_json=as_json, serve=serve)))


@app.command()
def topo(
    as_json: bool = typer.Option(False, "--json", help="Print the topology as JSON."),
    out: Optional[str] = typer.Option(None, "--out", help="Also write topo.json into this dir."),
):
    """GPUs, PCIe links, NVLink, P2P status and the nvidia-smi topo -m matrix, from NVML."""
    from commprof.verbs.topo import TopoConfig, run

    _exit_with(run, TopoConfig(as_json=as_json, out=out))


@app.command()
def check(
    dirs: Optional[list[str]] = typer.Argument(None, help="Results dirs (sweep, trace, topo); none = measure now."),
    thresholds: Optional[str] = typer.Option(None, "--thresholds", help="TOML file overriding the default thresholds."),
    model: Optional[str] = typer.Option(None, "--model", help="Model for KV-cache headroom (default: the trace's)."),
    out: Optional[str] = typer.Option(None, "--out", help="Where check.json/check.md go (default: a new results/runs/<timestamp>-<host>-check/)."),
    interconnect: Optional[str] = typer.Option(None, "--interconnect", help="Judge the box(es) as this interconnect: nvswitch, nvlink[2-5], pcie[3-6][-p2p|-no-p2p], mixed; a comma list gives one per box. Default: from topo.json, else the GPU names in the logs, else unknown."),
):
    """The pre-purchase checklist: PASS/WARN/FAIL/SKIP per item with value, threshold and source."""
    from commprof.verbs.check import CheckConfig, run

    _exit_with(run, CheckConfig(dirs=list(dirs or []), thresholds=thresholds, model=model, out=out,
                                interconnect=interconnect))


@app.command()
def report(
    dirs: list[str] = typer.Argument(..., help="Results dirs (sweep, trace, topo)."),
    out: Optional[str] = typer.Option(None, "--out", help="Where report.html/report.md go (default: the first dir)."),
    thresholds: Optional[str] = typer.Option(None, "--thresholds", help="TOML file overriding the check thresholds."),
    model: Optional[str] = typer.Option(None, "--model", help="Model for KV-cache headroom."),
    reference: Optional[str] = typer.Option(None, "--reference", help="Reference profile for the gap section."),
    interconnect: Optional[str] = typer.Option(None, "--interconnect", help="Judge the box(es) as this interconnect (see check --help); a comma list gives one per box."),
    tp: Optional[int] = typer.Option(None, "--tp", help="The served TP degree: the serve section ties the served token time to the trace's row at this TP, or (no trace) to --model's collectives priced by the box's sweep."),
    label: Optional[str] = typer.Option(None, "--label", help="Short names of the boxes, comma-separated, in order (default: each sweep's import --label, else its dir's name)."),
):
    """One self-contained HTML page and a Markdown twin: topology, sweep, trace, gap, checklist."""
    from commprof.verbs.report import ReportConfig, run

    _exit_with(run, ReportConfig(dirs=list(dirs), out=out, thresholds=thresholds, model=model,
                                 reference=reference, interconnect=interconnect, tp=tp, labels=label))


@app.command()
def gap(
    dirs: list[str] = typer.Argument(..., help="Results dirs: each dir with a sweep (measured or imported) is one box; a trace, topo or p2p dir joins its box."),
    reference: Optional[str] = typer.Option(None, "--reference", help="Reference profile (default: the other kind)."),
    interconnect: Optional[str] = typer.Option(None, "--interconnect", help="Take the box(es) as this interconnect (see check --help); a comma list gives one per box."),
    out: Optional[str] = typer.Option(None, "--out", help="Also write gap.md, gap.csv, gap_boxes.csv, gap.png and meta.json into this new dir."),
    label: Optional[str] = typer.Option(None, "--label", help="Short names of the boxes, comma-separated, in order (default: each sweep's import --label, else its dir's name)."),
):
    """Each box against a reference (PCIe vs NVLink) and, with several boxes (one per dir with a sweep), the boxes against each other."""
    from commprof.verbs.gap import GapConfig, run

    _exit_with(run, GapConfig(dirs=list(dirs), reference=reference, interconnect=interconnect, out=out,
                              labels=label))


@app.command(name="import")
def import_(
    kind: str = typer.Argument(..., help="What to import: nccl-tests (logs of one box), nccl-debug (NCCL_DEBUG=INFO logs: NCCL's own account of the transports, network and overrides, with check items), nvidia-smi-topo (the text of 'nvidia-smi topo -m', and of 'nvidia-smi topo -p2p r' when given, as topo.json), or kineto (PyTorch profiler traces of a serving engine, one per rank, as a trace results dir)."),
    paths: list[str] = typer.Argument(..., help="Files: nccl-tests text output or -J JSON; nvidia-smi topo text; or Kineto .json/.json.gz traces."),
    out: Optional[str] = typer.Option(None, "--out", help="Results dir to write."),
    step_marker: Optional[str] = typer.Option(None, "--step-marker", help="kineto: a regex of the annotation that marks one step (default ProfilerStep#N, or vLLM's 'gpu_model_runner: forward')."),
    model: Optional[str] = typer.Option(None, "--model", help="kineto: the served model (built-in name or config.json), to compare collectives per step with the plan's 2L+2 and name each collective's site."),
    tp: Optional[int] = typer.Option(None, "--tp", help="kineto: the TP degree of the traced group (default: the number of rank traces given)."),
    label: Optional[str] = typer.Option(None, "--label", help="nccl-tests, kineto: the box's short name in gap, check and report (default: the dir's name)."),
    expect_gpus: Optional[int] = typer.Option(None, "--expect-gpus", help="nccl-debug: the GPUs the box was sold with (FAIL when the log's largest communicator has fewer ranks)."),
    expect_nodes: Optional[int] = typer.Option(None, "--expect-nodes", help="nccl-debug: the nodes the box was sold with (FAIL when the log shows fewer)."),
):
    """Import another tool's output into the results format (e.g. a vendor's nccl-tests logs)."""
    from commprof.verbs.import_ import ImportConfig, run

    _exit_with(run, ImportConfig(kind=kind, paths=list(paths), out=out, step_marker=step_marker, model=model,
                                 tp=tp, label=label, expect_gpus=expect_gpus, expect_nodes=expect_nodes))


@app.command()
def p2p(
    size: str = typer.Option("64M", "--size", help="Bytes per bandwidth probe (binary suffixes)."),
    rounds: int = typer.Option(10000, "--rounds", help="Ping-pong round trips per latency probe."),
    out: Optional[str] = typer.Option(None, "--out", help="Results dir (default results/runs/<timestamp>-<host>-p2p/)."),
):
    """Raw link probes (CUDA): per-pair latency and bandwidth matrix, P2P on and off."""
    from commprof.verbs.p2p import P2pConfig, run

    _exit_with(run, P2pConfig(size=size, rounds=rounds, out=out))


@app.command()
def moe(
    model: Optional[str] = typer.Option(None, "--model", help="MoE model: Qwen3-30B-A3B (default), Qwen3-235B-A22B, DeepSeek-V3 or a config.json."),
    ep: str = typer.Option("2,4,8", "--ep", help="Expert-parallel degrees; one launch of max(ep) ranks."),
    tokens: str = typer.Option("1,64,512", "--tokens", help="Tokens per step (split over the EP ranks)."),
    skew: str = typer.Option("uniform,zipf:1.0,hot:4", "--skew", help="uniform, zipf:S, hot:K[:SHARE], file:PATH (CSV expert,load or JSON)."),
    iters: Optional[int] = typer.Option(None, "--iters", help="Timed steps per cell (default 100 NCCL, 20 gloo)."),
    warmup: Optional[int] = typer.Option(None, "--warmup", help="Warm-up steps per cell (default 10 NCCL, 2 gloo)."),
    rebalance: Optional[int] = typer.Option(None, "--rebalance", help="Redundant expert slots for the what-if (default ep)."),
    seed: int = typer.Option(0, "--seed", help="Routing seed."),
    backend: str = typer.Option("auto", "--backend", help="auto, nccl or gloo."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds without progress before a rank counts as hung."),
    out: Optional[str] = typer.Option(None, "--out", help="Results dir (default results/runs/<timestamp>-<host>-moe/)."),
    no_charts: bool = typer.Option(False, "--no-charts", help="Skip chart rendering."),
):
    """MoE expert-parallel dispatch/combine all-to-all under skewed routing, before/after rebalancing."""
    from commprof.verbs.moe import MoeConfig, run

    _exit_with(run, MoeConfig(model=model, ep=ep, tokens=tokens, skew=skew, iters=iters, warmup=warmup,
                              rebalance=rebalance, seed=seed, backend=backend, timeout_s=timeout, out=out,
                              argv=["commprof"] + sys.argv[1:], charts=not no_charts), echo=typer.echo)


@app.command()
def show(
    results_dir: str = typer.Argument(..., help="A results dir written by any commprof verb (sweep, trace, moe, p2p, topo, plan, check, import...)."),
    no_charts: bool = typer.Option(False, "--no-charts", help="Only print the table."),
):
    """Show any verb's results dir again (tables, summary lines) and redraw its charts, measuring nothing."""
    from commprof.views.show import ShowConfig, run

    _exit_with(run, ShowConfig(results_dir=results_dir, charts=not no_charts))


@app.command()
def serve(
    url: str = typer.Option(..., "--url", help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000."),
    model: str = typer.Option(..., "--model", help="The model name the server serves (GET /v1/models)."),
    concurrency: str = typer.Option("1,4,16", "--concurrency", help="Closed-loop levels: requests in flight, e.g. 1,4,16,64."),
    rate: Optional[str] = typer.Option(None, "--rate", help="Also open-loop levels at these requests/s (Poisson arrivals), e.g. 0.5,1,2."),
    workload: str = typer.Option("qa", "--workload", help="qa, rag, multiturn, or a JSONL file of {\"prompt_tokens\": N, \"output_tokens\": M} lines."),
    prompt_tokens: Optional[int] = typer.Option(None, "--prompt-tokens", help="Override the workload's prompt length (tokens)."),
    output_tokens: Optional[int] = typer.Option(None, "--output-tokens", help="Override the workload's output length (max_tokens)."),
    requests: Optional[int] = typer.Option(None, "--requests", help="Requests per level (default max(101, 4 x concurrency): enough that p99 is not the largest)."),
    duration: float = typer.Option(60.0, "--duration", help="Seconds per level after which no new request is sent."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds one request may take before it counts as a timeout."),
    api: str = typer.Option("completions", "--api", help="completions (/v1/completions) or chat (/v1/chat/completions)."),
    slo: str = typer.Option("ttft_p99=2s,tpot_p99=100ms", "--slo", help="Targets for the knee: ttft|tpot|itl|e2e _p50|_p90|_p99 and error_pct."),
    seed: int = typer.Option(0, "--seed", help="Seed of the prompts and arrivals."),
    warmup: int = typer.Option(2, "--warmup", help="Requests sent one by one before the first level, not recorded."),
    label: str = typer.Option("", "--label", help="A note kept in meta.json and the charts (e.g. 'CPU emulation')."),
    out: Optional[str] = typer.Option(None, "--out", help="Results dir (default results/runs/<timestamp>-<host>-serve/)."),
    no_charts: bool = typer.Option(False, "--no-charts", help="Skip chart rendering."),
    profile: Optional[str] = typer.Option(None, "--profile", help="The server's profiler dir on this machine (vLLM --profiler-config torch_profiler_dir): after the levels, one more round at the highest concurrency between POST /start_profile and /stop_profile, its traces imported (import kineto) into OUT/kineto."),
    client_cpus: str = typer.Option("any", "--client-cpus", help="CPUs the client may run on: any (where the kernel puts it), or a list (1,3 or 2-3). meta.json says which CPUs a server on this machine pins its threads to."),
):
    """TTFT, time per output token, tokens/s and jitter of an OpenAI-compatible server under load; the knee;
    the server's queue time where it publishes it on GET /metrics (vLLM, SGLang, TGI)."""
    from commprof.verbs.serve import build_config, run

    _exit_with(lambda: run(build_config(
        url=url, model=model, concurrency=concurrency, rate=rate, workload=workload, prompt_tokens=prompt_tokens,
        output_tokens=output_tokens, requests=requests, duration=duration, timeout=timeout, api=api, slo=slo,
        seed=seed, warmup=warmup, label=label, out=out, argv=["commprof"] + sys.argv[1:], charts=not no_charts,
        profile=profile, client_cpus=client_cpus)))


# --- accept (issue 33: one acceptance run on a box; a separate block) --------------------------
@app.command()
def accept(
    out: Optional[str] = typer.Option(None, "--out", help="The results dir tree (default results/<timestamp>-accept/)."),
    budget: float = typer.Option(900.0, "--budget", help="Time budget of the whole run in seconds."),
    url: Optional[str] = typer.Option(None, "--url", help="The buyer's engine (OpenAI-compatible base URL): serve runs against it."),
    model: Optional[str] = typer.Option(None, "--model", help="Model of the sweep's decode sizes and the trace."),
    tp: Optional[str] = typer.Option(None, "--tp", help="TP degrees (default 2,4,8 on GPUs, 2 on CPU)."),
):
    """One acceptance run: topo and GPU health, p2p, sweep (graph and eager), trace, NCCL's log, serve (--url), the report."""
    from commprof.verbs.accept import AcceptConfig, run

    _exit_with(run, AcceptConfig(out=out, budget_s=budget, url=url, model=model, tp=tp))



def _is(exc: BaseException, name: str) -> bool:
    """Match click's exception classes by name: typer ships click itself or a vendored copy."""
    return any(cls.__name__ == name for cls in type(exc).__mro__)


#: OSErrors of a file system that refuses a write (full, over quota, read-only, failing, too big).
_DISK_ERRNOS = {getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EROFS", "EIO", "EFBIG") if hasattr(errno, n)}


def main():
    """Console entry: every failure, flag errors included, ends as one line and an exit code."""
    debug = os.environ.get("COMMPROF_DEBUG") == "1"
    if len(sys.argv) == 1:
        sys.argv.append("--help")
    try:
        code = app(standalone_mode=False)
    except KeyboardInterrupt as e:      # Ctrl-C (130), or SIGTERM while ranks run (launch.Terminated: 143)
        code = getattr(e, "exit_code", 130)
    except Exception as e:  # noqa: BLE001 - unknown failures still get one line
        if _is(e, "UsageError"):
            ctx = getattr(e, "ctx", None)
            where = ctx.command_path if ctx is not None else "commprof"
            msg = " ".join(e.format_message().split())
            typer.echo(f"commprof: error: {msg} (see '{where} --help')", err=True)
            sys.exit(2)
        if _is(e, "Abort"):
            code = getattr(e.__cause__, "exit_code", 130)     # click wraps a KeyboardInterrupt in Abort
        elif isinstance(e, OSError) and e.filename and not debug:
            # A file the core did not expect to fail (a full disk under a chart): name it.
            target = f"'{e.filename}'" + (f" -> '{e.filename2}'" if e.filename2 else "")
            typer.echo(f"commprof: error: {target}: {e.strerror or e} (COMMPROF_DEBUG=1 shows the traceback)",
                       err=True)
            sys.exit(2)
        elif isinstance(e, OSError) and e.errno in _DISK_ERRNOS and not debug:
            # The same without a file name (a library's own write): still exit 2, with the reason.
            typer.echo(f"commprof: error: cannot write a file: {e.strerror or os.strerror(e.errno)} "
                       "(COMMPROF_DEBUG=1 shows the traceback)", err=True)
            sys.exit(2)
        else:
            if debug:
                raise
            msg = (str(e).strip().splitlines() or [""])[0]
            typer.echo(f"commprof: error: unexpected {type(e).__name__}: {msg} "
                       "(COMMPROF_DEBUG=1 shows the traceback)", err=True)
            sys.exit(70)
    if code == 130:
        typer.echo("commprof: interrupted; rows written so far are kept", err=True)
    elif code == 143:
        typer.echo("commprof: terminated (SIGTERM); the ranks were stopped, rows written so far are kept",
                   err=True)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
