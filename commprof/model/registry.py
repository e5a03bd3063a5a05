"""Every verb of commprof, declared once: its config (the flags, their defaults and help), its
``run``, the result kinds it writes and the views that show them; the kinds of ``import``.

``cli.py`` builds its commands from :data:`VERBS`, ``results.load`` reads the files of
:data:`RESULT_KINDS`, ``show`` calls their views in order, ``import`` dispatches over
:data:`IMPORT_KINDS`, and ``tests/test_architecture.py`` checks that every verb module is in the
verbs-are-leaves contract. Only data here: nothing is imported until a verb runs.

To add a flag: one :func:`~commprof.model.spec.flag` field on the verb's config below."""
from __future__ import annotations

from dataclasses import dataclass, field

from commprof.model.spec import ImportKind, ResultKind, VerbSpec, arg, flag

_MODEL_HELP = "Built-in model name or a Hugging Face config.json path."
_TIMEOUT_HELP = "Seconds without progress before a rank counts as hung."
_CHARTS_HELP = "Skip chart rendering."


@dataclass
class SweepConfig:
    """``commprof sweep``'s flags, before validation (``verbs.sweep.build_config``) turns them into
    the :class:`~commprof.model.sweepconfig.SweepRunConfig` every rank receives."""
    tp: str = flag("2,4,8", "--tp", help="TP degrees, e.g. 2,4,8; one launch of max(tp) ranks.")
    ops: str | None = flag(None, "--ops", help="all_reduce,all_gather (default); also reduce_scatter, all_to_all, broadcast.")
    sizes: str = flag("decode", "--sizes", help="decode (from --model/--batch), prefill (from --model/--prompt/--chunk), pow2:4K-64M, or a list like 4K,64K,1M.")
    prompt: str | None = flag(None, "--prompt", help="With --sizes prefill: prompt lengths in tokens, e.g. 512,2048,8192.")
    chunk: str | None = flag(None, "--chunk", help="With --sizes prefill: chunk sizes in tokens (chunked prefill); default the whole prompt.")
    model: str | None = flag(None, "--model", help="Built-in model name or a Hugging Face config.json path (default Qwen2.5-32B).")
    batch: str = flag("1,8,32,128", "--batch", help="Decode batch sizes (tokens per step) for --sizes decode.")
    dtype: str = flag("bf16", "--dtype", help="bf16, fp16 or fp32.")
    backend: str = flag("auto", "--backend", help="auto, nccl or gloo.")
    modes: str | None = flag(None, "--modes", help="eager and/or graph (graph: NCCL only; default both on NCCL).")
    iters: int | None = flag(None, "--iters", help="Timed iterations per cell (default 200 NCCL, 40 gloo).")
    warmup: int | None = flag(None, "--warmup", help="Warm-up iterations per cell (default 20 NCCL, 3 gloo).")
    concurrent: bool = flag(False, "--concurrent", help="Run all disjoint groups of a TP degree at once.")
    timeout_s: float = flag(120.0, "--timeout", help=_TIMEOUT_HELP)
    out: str | None = flag(None, "--out", help="Results dir (default results/runs/<timestamp>-<host>/).")
    resume: bool = flag(False, "--resume", help="Continue the sweep in --out, skipping finished rows.")
    impl: str | None = flag(None, "--impl", help="nccl,custom: time commprof's one-shot all-reduce (cuda_ext/) beside NCCL's, eager, all_reduce only.")
    verify: bool = flag(False, "--verify", help="With --impl custom: check every timed custom call against torch's all_reduce.")
    timing: str = flag("per-call", "--timing", help="per-call (one barrier-aligned call per sample, what a decode step pays) or back-to-back (nccl-tests' method: a loop of --loop calls timed as one, averaged).")
    loop: int = flag(20, "--loop", help="With --timing back-to-back: calls per timed loop (nccl-tests -n).")
    charts: bool = flag(True, "--no-charts", invert=True, help=_CHARTS_HELP)
    repeat: int = flag(1, "--repeat", help="Measure each cell N times (1-100), the repeats interleaved over the sweep; sweep.csv keeps each repeat's p50 (p50_us_repeats) and column unstable says when they are more than 2x apart or the p95 is over 3x the p50.")
    argv: list = field(default_factory=list)        # the command line, for meta.json (the CLI fills it)
    progress: bool = True


@dataclass
class TraceConfig:
    """``commprof trace``'s flags, before validation (``verbs.trace.build_config``) turns them into
    the :class:`~commprof.model.traceconfig.TraceRunConfig` every rank receives."""
    model: str = flag("Qwen2.5-32B", "--model", help=_MODEL_HELP)
    tp: str = flag("2,4,8", "--tp", help="TP degrees; one launch of max(tp) ranks.")
    batch: str = flag("1,8", "--batch", help="Sequences decoded together (tokens per step).")
    context: int = flag(2048, "--context", help="KV-cache length each step attends over (tokens).")
    tokens: int = flag(32, "--tokens", help="Decode steps timed per run.")
    warmup: int = flag(3, "--warmup", help="Untimed decode steps first.")
    layers: int | None = flag(None, "--layers", help="Run N layers and scale to the model's depth.")
    dtype: str = flag("bf16", "--dtype", help="bf16, fp16 or fp32.")
    backend: str = flag("auto", "--backend", help="auto, nccl or gloo.")
    modes: str | None = flag(None, "--modes", help="eager and/or graph (graph: NCCL only).")
    predict: bool = flag(False, "--predict", help="Predict another box: compute measured here + --comm-from.")
    comm_from: str | None = flag(None, "--comm-from", help="Sweep/import results dir of the box to predict, or reference:<profile> (e.g. reference:nvlink4).")
    timeout_s: float = flag(120.0, "--timeout", help=_TIMEOUT_HELP)
    out: str | None = flag(None, "--out", help="Results dir (default results/runs/<timestamp>-<host>/).")
    charts: bool = flag(True, "--no-charts", invert=True, help=_CHARTS_HELP)
    phase: str = flag("decode", "--phase", help="decode, prefill (one prompt in chunk steps: TTFT and its communication) or mixed (chunk steps carrying --batch decode tokens too).")
    prompt: int | None = flag(None, "--prompt", help="Prompt length in tokens (--phase prefill or mixed); the prefill sequence's cache holds it.")
    chunk: int | None = flag(None, "--chunk", help="Prefill tokens per step (default the whole prompt; needed for mixed).")
    repeat: int = flag(1, "--repeat", help="Time each run (TP x batch x mode) N times (1-100), the repeats interleaved over the trace; trace_repeats.csv keeps each repeat's ms/token, trace_summary.csv's figures are over every repeat's tokens, and column unstable says when the repeats' ms/token are more than 2x apart.")
    argv: list = field(default_factory=list)
    seed: int = 0


@dataclass
class PlanConfig:
    """``commprof plan``'s flags."""
    model: str = flag("Qwen2.5-32B", "--model", help=_MODEL_HELP)
    tp: int = flag(8, "--tp", help="TP degree.")
    batch: int = flag(1, "--batch", help="Sequences decoded together (tokens per step).")
    context: int = flag(4096, "--context", help="Context length per sequence (tokens).")
    gpu_mem: str | None = flag(None, "--gpu-mem", help="GPU memory per device, e.g. 80G or 141GB.")
    mem_util: float = flag(0.9, "--mem-util", help="Share of GPU memory usable for weights and KV cache.")
    dtype: str = flag("bf16", "--dtype", help="bf16, fp16 or fp32.")
    sp: bool = flag(False, "--sp", help="Sequence parallelism: each all-reduce becomes reduce-scatter + all-gather.")
    moe: str = flag("tp", "--moe", help="MoE layers: tp (experts sharded, one all-reduce) or ep (all-to-all dispatch + combine).")
    out: str | None = flag(None, "--out", help="Write plan.json and plan.csv into this dir.")
    as_json: bool = flag(False, "--json", help="Print the plan as JSON.")
    phase: str = flag("decode", "--phase", help="decode (one token per sequence), prefill (a prompt in chunks) or mixed (one step: a prefill chunk + --batch decode tokens).")
    prompt: int | None = flag(None, "--prompt", help="Prompt length in tokens (--phase prefill or mixed).")
    chunk: int | None = flag(None, "--chunk", help="Prefill tokens per step (chunked prefill; default the whole prompt; needed for mixed).")


@dataclass
class PredictConfig:
    """``commprof predict``'s flags (the lists parsed from their comma-separated text)."""
    model: str = flag("Qwen2.5-32B", "--model", help=_MODEL_HELP)
    gpus: list = flag(["rtx5090"], "--gpu", parse="list", text="rtx5090", help="GPU SKU(s) of the box(es), e.g. rtx5090 or h100-sxm,rtx5090 (commprof/data/gpus.toml).")
    comms: list = flag([], "--comm", parse="list", text="", help="Each box's collectives: reference:<profile> (pcie4-nop2p, pcie4-p2p, pcie5-nop2p, pcie5-p2p, nvlink3, nvlink4, nvlink5) or a results dir (commprof import of nccl-tests logs, or a sweep); comma-separated, one per --gpu. Default: the GPU's class (NVLink generation; PCIe generation, no P2P on GeForce cards), named in the output.")
    tps: list = flag([2, 4, 8], "--tp", parse="ints", text="2,4,8", help="TP degrees.")
    batches: list = flag([1, 8, 32], "--batch", parse="ints", text="1,8,32", help="Sequences decoded together.")
    context: int = flag(4096, "--context", help="Tokens each sequence attends over (KV cache).")
    prompt: int | None = flag(None, "--prompt", help="Prompt tokens: adds the time to first token.")
    dtype: str = flag("bf16", "--dtype", help="bf16 or fp16 (activations, KV cache, collectives).")
    weights: str = flag("bf16", "--weights", help="bf16, fp16 (not quantized), fp8 (per tensor), fp8-block (128x128 scales), int4-awq, int4-gptq, w4a16 (4-bit, group 128), nvfp4 (FP4, an FP8 scale per 16) or mxfp4 (FP4, a power-of-two scale per 32): the linear layers' bytes, scales included; FP8 GEMMs on FP8 tensor cores where the GPU has them, 4-bit weights dequantized to --dtype (commprof/analysis/quant.py).")
    mode: str = flag("graph", "--mode", help="graph (CUDA graphs capture the whole decode step: SGLang, TensorRT-LLM, "
                     "vLLM V0, vLLM >= 0.11), piecewise (vLLM V1 0.7-0.10.x: attention run from Python between "
                     "captured pieces; for an MLA model, that engine's DeepSeek kernels too) or eager.")
    mem_util: float = flag(0.9, "--mem-util", help="Share of GPU memory for weights and KV cache.")
    sampling: str = flag("greedy", "--sampling", help="greedy (argmax or a temperature draw: in the step's host work) or "
                         "full (top-p/top-k over the whole vocabulary with repetition, presence or frequency penalties: "
                         "vLLM V0's slow sampler path, priced once a step).")
    out: str | None = flag(None, "--out", help="Write predict.csv, meta.json and predict.png into this new dir.")
    charts: bool = flag(True, "--no-charts", invert=True, help="Skip the chart.")
    as_json: bool = flag(False, "--json", help="Print the rows as JSON.")
    serve: str | None = flag(None, "--serve", help="A commprof serve dir: adds the measured queue, TTFT and served TPOT beside the modelled ones.")
    ep: int = flag(1, "--ep", help="MoE expert parallelism: E/ep whole experts per expert group (each over tp/ep GPUs); each MoE layer's all-reduce becomes a dispatch and a combine all-to-all over ep ranks, priced by --comm (or stays, --ep-comm all-reduce). Must divide the experts and each --tp.")
    ep_comm: str = flag("all-to-all", "--ep-comm", help="With --ep: all-to-all (dispatch and combine over the ep ranks: SGLang with an all-to-all backend or DP attention, vLLM with data parallelism) or all-reduce (each rank computes its experts for every token and the MoE output is summed by the TP all-reduce: vLLM --enable-expert-parallel at data parallel 1, SGLang --ep-size without an all-to-all backend).")
    moe_skew: str | None = flag(None, "--moe-skew", help="With --ep: a commprof moe dir; its measured max/mean rank load (contiguous placement, the nearest token count, the worst skew) scales the busiest rank's experts and all-to-alls.")
    concurrency: list = flag([], "--concurrency", parse="list", text="", help="Closed-loop users (comma list): the engine's real decode batch and the prompt tokens chunked into each step follow from --isl/--osl; prints TPOT/ITL and end-to-end / output tokens. Replaces --batch.")
    qps: list = flag([], "--qps", parse="list", text="", help="Poisson request rates in requests/s (comma list): the batch by Little's law (requests in flight = rate x end-to-end time), solved with the step time. Replaces --batch.")
    isl: int = flag(1024, "--isl", help="With --concurrency/--qps: input (prompt) tokens per request.")
    osl: int = flag(256, "--osl", help="With --concurrency/--qps: output tokens per request.")
    chunk: int = flag(2048, "--chunk", help="With --concurrency/--qps: tokens one step carries at most (the engine's max_num_batched_tokens: decode tokens + a prompt chunk).")
    prefill_steps: str = flag("mixed", "--prefill-steps", help="With --concurrency/--qps: how the engine runs a waiting prompt's chunk: mixed (it rides in the decode step: vLLM, TensorRT-LLM) or separate (its own eager forward while the running requests wait: SGLang's default, whose chunk is 8192 tokens on GPUs under 160 GB and 16384 above, 2048 under 35 GB).")
    calibration: dict = field(default_factory=dict)
    comm_overhead_from: str | None = flag(None, "--comm-overhead-from", help="An 'import nccl-inspector' dir: each collective's price times the engine's in-service factor (its mean per call / the --comm source's at the same op, TP and size).")


@dataclass
class TopoConfig:
    """``commprof topo``'s flags."""
    as_json: bool = flag(False, "--json", help="Print the topology as JSON.")
    out: str | None = flag(None, "--out", help="Also write topo.json into this dir.")


@dataclass
class CheckConfig:
    """``commprof check``'s argument and flags."""
    dirs: list = arg(many=True, required=False, help="Results dirs (sweep, trace, topo); none = measure now.")
    thresholds: str | None = flag(None, "--thresholds", help="TOML file overriding the default thresholds.")
    model: str | None = flag(None, "--model", help="Model for KV-cache headroom (default: the trace's).")
    out: str | None = flag(None, "--out", help="Where check.json/check.md go (default: a new results/runs/<timestamp>-<host>-check/).")
    interconnect: str | None = flag(None, "--interconnect", help="Judge the box(es) as this interconnect: nvswitch, nvlink[2-5], pcie[3-6][-p2p|-no-p2p], mixed; a comma list gives one per box. Default: from topo.json, else the GPU names in the logs, else unknown.")
    budget_s: float | None = flag(None, "--budget", help="With no dirs: the time the measuring run may take, in seconds (default: 20 s on a machine without GPUs, where a CPU sweep judges no GPU item, so none is run; 900 s on a GPU box). Steps that do not fit are not run and said so.")


@dataclass
class ReportConfig:
    """``commprof report``'s arguments and flags."""
    dirs: list = arg(many=True, help="Results dirs (sweep, trace, topo).")
    out: str | None = flag(None, "--out", help="Where report.html/report.md go (default: the first dir).")
    thresholds: str | None = flag(None, "--thresholds", help="TOML file overriding the check thresholds.")
    model: str | None = flag(None, "--model", help="Model for KV-cache headroom.")
    reference: str | None = flag(None, "--reference", help="Reference profile for the gap section.")
    interconnect: str | None = flag(None, "--interconnect", help="Judge the box(es) as this interconnect (see check --help); a comma list gives one per box.")
    tp: int | None = flag(None, "--tp", help="The served TP degree: the serve section ties the served token time to the trace's row at this TP, or (no trace) to --model's collectives priced by the box's sweep.")
    labels: str | None = flag(None, "--label", help="Short names of the boxes, comma-separated, in order (default: each sweep's import --label, else its dir's name).")


@dataclass
class GapConfig:
    """``commprof gap``'s arguments and flags."""
    dirs: list = arg(many=True, help="Results dirs: each dir with a sweep (measured or imported) is one box; a trace, topo or p2p dir joins its box.")
    reference: str | None = flag(None, "--reference", help="Reference profile (default: the other kind).")
    interconnect: str | None = flag(None, "--interconnect", help="Take the box(es) as this interconnect (see check --help); a comma list gives one per box.")
    out: str | None = flag(None, "--out", help="Also write gap.md, gap.csv, gap_boxes.csv, gap.png and meta.json into this new dir.")
    labels: str | None = flag(None, "--label", help="Short names of the boxes, comma-separated, in order (default: each sweep's import --label, else its dir's name).")


#: ``commprof import``'s kinds, in the order ``--help`` names them.
IMPORT_KINDS = (
    ImportKind("nccl-tests", "commprof.verbs.import_:import_nccl_tests_dir", label=True,
               help="logs of one box (nccl-tests text output or -J JSON), as a sweep results dir"),
    ImportKind("nccl-debug", "commprof.verbs.import_:import_nccl_debug_dir", options=("expect_gpus", "expect_nodes"), label=True,
               help="NCCL_DEBUG=INFO logs: NCCL's own account of the transports, network and overrides, with check items"),
    ImportKind("nvidia-smi-q", "commprof.ingest.nvidiasmiq:run_import_nvidia_smi_q",
               help="'nvidia-smi -q' text or 'nvidia-smi -q -x' XML of a box: the GPUs' health, for check"),
    ImportKind("nvidia-smi-topo", "commprof.ingest.smitopo:run_import_smi_topo",
               help="the text of 'nvidia-smi topo -m', and of 'nvidia-smi topo -p2p r' when given, as topo.json"),
    ImportKind("kineto", "commprof.ingest.kineto:run_import_kineto", label=True,
               options=("step_marker", "model", "tp"),
               help="PyTorch profiler traces of a serving engine (.json/.json.gz), one per rank, as a trace results dir"),
    ImportKind("nccl-inspector", "commprof.verbs.import_:import_nccl_inspector_dir", label=True,
               help="NCCL Inspector JSON (a file or NCCL_INSPECTOR_DUMP_DIR): every collective the engine ran, "
                    "as it paid it, per communicator and rank"),
)


def _import_kind_help() -> str:
    return "What to import: " + "; ".join(f"{k.name} ({k.help})" for k in IMPORT_KINDS) + "."


@dataclass
class ImportConfig:
    """``commprof import``'s arguments and flags (``step_marker``, ``model``, ``tp``: kineto only)."""
    kind: str = arg(default="nccl-tests", help=_import_kind_help())
    paths: list = arg(many=True, help="The files to import (see KIND).")
    out: str | None = flag(None, "--out", help="Results dir to write.")
    step_marker: str | None = flag(None, "--step-marker", help="kineto: a regex of the annotation that marks one step (default: the first of these the trace holds: ProfilerStep#N; vLLM's record_function iteration marks 'execute_context_N(T)_generation_M(K)' (vllm/v1/worker/gpu_worker.py), e.g. --step-marker '^execute_context_'; vLLM's 'gpu_model_runner: forward').")
    model: str | None = flag(None, "--model", help="kineto: the served model (built-in name or config.json), to compare collectives per step with the plan's 2L+2 and name each collective's site.")
    tp: int | None = flag(None, "--tp", help="kineto: the TP degree of the traced group (default: the number of rank traces given).")
    label: str | None = flag(None, "--label", help="nccl-tests, kineto: the box's short name in gap, check and report (default: the dir's name); nccl-debug, nccl-inspector: the box the log belongs to (that box's --label), else it is matched by hostname.")
    expect_gpus: int | None = flag(None, "--expect-gpus", help="nccl-debug: the GPUs the box was sold with (FAIL when the log's largest communicator has fewer ranks).")
    expect_nodes: int | None = flag(None, "--expect-nodes", help="nccl-debug: the nodes the box was sold with (FAIL when the log shows fewer).")


@dataclass
class P2pConfig:
    """``commprof p2p``'s flags: ``size`` as given (binary suffixes), ``rounds``, ``out``."""
    size: str = flag("64M", "--size", help="Bytes per bandwidth probe (binary suffixes).")
    rounds: int = flag(10000, "--rounds", help="Ping-pong round trips per latency probe.")
    out: str | None = flag(None, "--out", help="Results dir (default results/runs/<timestamp>-<host>-p2p/).")


@dataclass
class MoeConfig:
    """``commprof moe``'s flags, before validation (``verbs.moe.build_config``) turns them into the
    :class:`~commprof.model.moeconfig.MoeRunConfig` every rank receives."""
    model: str | None = flag(None, "--model", help="MoE model: Qwen3-30B-A3B (default), Qwen3-235B-A22B, DeepSeek-V3 or a config.json.")
    ep: str = flag("2,4,8", "--ep", help="Expert-parallel degrees; one launch of max(ep) ranks.")
    tokens: str = flag("1,64,512", "--tokens", help="Tokens per step (split over the EP ranks).")
    skew: str = flag("uniform,zipf:1.0,hot:4", "--skew", help="uniform, zipf:S, hot:K[:SHARE], file:PATH (CSV expert,load or JSON).")
    iters: int | None = flag(None, "--iters", help="Timed steps per cell (default 100 NCCL, 20 gloo).")
    warmup: int | None = flag(None, "--warmup", help="Warm-up steps per cell (default 10 NCCL, 2 gloo).")
    rebalance: int | None = flag(None, "--rebalance", help="Redundant expert slots for the what-if (default ep).")
    seed: int = flag(0, "--seed", help="Routing seed.")
    backend: str = flag("auto", "--backend", help="auto, nccl or gloo.")
    timeout_s: float = flag(120.0, "--timeout", help=_TIMEOUT_HELP)
    out: str | None = flag(None, "--out", help="Results dir (default results/runs/<timestamp>-<host>-moe/).")
    charts: bool = flag(True, "--no-charts", invert=True, help=_CHARTS_HELP)
    argv: list = field(default_factory=list)


@dataclass
class ShowConfig:
    """``commprof show``'s argument and flag."""
    results_dir: str = arg(default=".", help="A results dir written by any commprof verb (sweep, trace, moe, p2p, topo, plan, check, import...).")
    charts: bool = flag(True, "--no-charts", invert=True, help="Only print the table.")


@dataclass
class ServeFlags:
    """``commprof serve``'s flags, before ``verbs.serve.build_config`` checks them into the
    :class:`~commprof.model.serveconfig.ServeConfig` its ``run`` takes."""
    url: str = flag(None, "--url", required=True, help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000.")
    model: str = flag(None, "--model", required=True, help="The model name the server serves (GET /v1/models).")
    concurrency: str = flag("1,4,16", "--concurrency", help="Closed-loop levels: requests in flight, e.g. 1,4,16,64.")
    rate: str | None = flag(None, "--rate", help="Also open-loop levels at these requests/s (Poisson arrivals), e.g. 0.5,1,2.")
    workload: str = flag("qa", "--workload", help="qa, rag, multiturn, or a JSONL file of {\"prompt_tokens\": N, \"output_tokens\": M} lines.")
    prompt_tokens: int | None = flag(None, "--prompt-tokens", help="Override the workload's prompt length (tokens).")
    output_tokens: int | None = flag(None, "--output-tokens", help="Override the workload's output length (max_tokens).")
    requests: int | None = flag(None, "--requests", help="Requests per level (default max(101, 4 x concurrency): enough that p99 is not the largest).")
    duration: float = flag(60.0, "--duration", help="Seconds per level after which no new request is sent.")
    timeout: float = flag(60.0, "--timeout", help="Seconds one request may take before it counts as a timeout.")
    api: str = flag("completions", "--api", help="completions (/v1/completions) or chat (/v1/chat/completions).")
    slo: str = flag("ttft_p99=2s,tpot_p99=100ms", "--slo", help="Targets for the knee: ttft|tpot|itl|e2e _p50|_p90|_p99 and error_pct.")
    seed: int = flag(0, "--seed", help="Seed of the prompts and arrivals.")
    warmup: int = flag(2, "--warmup", help="Requests sent one by one before the first level, not recorded.")
    label: str = flag("", "--label", help="A note kept in meta.json and the charts (e.g. 'CPU emulation').")
    out: str | None = flag(None, "--out", help="Results dir (default results/runs/<timestamp>-<host>-serve/).")
    charts: bool = flag(True, "--no-charts", invert=True, help=_CHARTS_HELP)
    profile: str | None = flag(None, "--profile", help="The server's profiler dir on this machine (vLLM --profiler-config torch_profiler_dir): after the levels, one more round at the highest concurrency between POST /start_profile and /stop_profile, its traces imported (import kineto) into OUT/kineto.")
    client_cpus: str = flag("any", "--client-cpus", help="CPUs the client may run on: any (where the kernel puts it), or a list (1,3 or 2-3). meta.json says which CPUs a server on this machine pins its threads to.")
    argv: list = field(default_factory=list)


_S = "commprof.views.show"

#: Every kind of result a dir can hold, in the order ``show`` shows them.
RESULT_KINDS = (
    ResultKind("sweep", tables={"sweep.csv": ("sweep", ("op", "tp", "size_bytes", "mode", "latency_us_p50")),
                                "sweep_repeats.csv": ("sweep_repeats", ("op", "tp", "size_bytes", "mode", "repeat",
                                                                        "latency_us_p50"))},
               view=f"{_S}:show_sweep"),
    ResultKind("trace", tables={
        "trace_summary.csv": ("trace_summary", ("tp", "batch", "comm_share_pct", "ms_per_token")),
        "trace_tokens.csv": ("trace_tokens", ("tp", "batch", "token", "rank", "latency_us")),
        "trace_layers.csv": ("trace_layers", ("tp", "batch", "layer", "rank")),
        "trace_repeats.csv": ("trace_repeats", ("tp", "batch", "repeat", "ms_per_token"))}, view=f"{_S}:show_trace"),
    ResultKind("moe", tables={
        "moe_steps.csv": ("moe_steps", ("ep", "tokens", "skew", "imbalance")),
        "moe_ranks.csv": ("moe_ranks", ("ep", "tokens", "skew", "rank"))}, view=f"{_S}:show_moe"),
    ResultKind("p2p", tables={"p2p.csv": ("p2p", ("src_device", "dst_device", "probe", "gbps", "oneway_us"))},
               view=f"{_S}:show_p2p"),
    ResultKind("kineto", tables={
        "kineto_steps.csv": ("kineto_steps", ("step", "rank", "window_us")),
        "kineto_collectives.csv": ("kineto_collectives", ("step", "index", "rank", "duration_us")),
        "kineto_ranks.csv": ("kineto_ranks", ("rank", "comm_kernel_us", "compute_kernel_us"))}),
    ResultKind("check", docs={"check.json": "check"}, view=f"{_S}:show_check"),
    ResultKind("plan", tables={"plan.csv": ("plan", ())}, docs={"plan.json": "plan"}, view=f"{_S}:show_plan"),
    ResultKind("gap", tables={"gap.csv": ("gap", ()), "gap_boxes.csv": ("gap_boxes", ()),
                              "gap_predict.csv": ("gap_predict", ("tp", "batch", "box", "ms_per_token", "comm_ms"))},
               view=f"{_S}:show_gap"),
    ResultKind("predict", tables={"predict.csv": ("predict", ("box", "tp", "batch", "ms_per_token", "comm_ms"))},
               view=f"{_S}:show_predict"),
    ResultKind("serve", tables={
        "serve_levels.csv": ("serve_levels", ("level", "mode", "concurrency", "ttft_ms_p99", "tpot_ms_p99")),
        "serve_requests.csv": ("serve_requests", ("level", "status", "ttft_ms", "tpot_ms"))}, view=f"{_S}:show_serve"),
    ResultKind("hostbw", docs={"hostbw.json": "hostbw"}),
    ResultKind("topo", docs={"topo.json": "topo"}, view=f"{_S}:show_topo"),
    ResultKind("nccl-debug", tables={
        "nccl_comms.csv": ("nccl_comms", ("comm", "nranks", "summary")),
        "nccl_pairs.csv": ("nccl_pairs", ("comm", "src_rank", "dst_rank", "transport")),
        "nccl_verdict.csv": ("nccl_verdict", ("id", "verdict", "what_now"))}, view=f"{_S}:show_nccl_debug"),
    ResultKind("health", docs={"health.json": "health"}, view=f"{_S}:show_health"),
    ResultKind("report", view=f"{_S}:show_report"),
    ResultKind("nccl-inspector", tables={
        "nccl_inspector.csv": ("nccl_inspector", ("comm", "rank", "op", "size_bytes", "calls", "time_us_p50")),
        "nccl_inspector_comms.csv": ("nccl_inspector_comms", ("comm", "nranks", "summary"))},
               view=f"{_S}:show_nccl_inspector"),
)

@dataclass
class AcceptConfig:
    """``commprof accept``'s flags."""
    out: str | None = flag(None, "--out", help="The results dir tree (default results/runs/<timestamp>-accept/).")
    budget_s: float = flag(900.0, "--budget", help="Time budget of the whole run in seconds.")
    url: str | None = flag(None, "--url", help="The buyer's engine (OpenAI-compatible base URL): serve runs against it.")
    model: str | None = flag(None, "--model", help="Model of the sweep's decode sizes and the trace.")
    tp: str | None = flag(None, "--tp", help="TP degrees (default 2,4,8 on GPUs, 2 on CPU).")
    steps: list = field(default_factory=list)     # tests: the steps to run (default: all)


#: Every verb, in the order ``commprof --help`` lists them.
VERBS = [
    VerbSpec("sweep", SweepConfig, "commprof.verbs.sweep:run", table=True, kinds=("sweep", "topo"),
             report_section="sweep",
             help="Collective latency at decode sizes across TP degrees (NCCL on GPUs, gloo on CPU)."),
    VerbSpec("trace", TraceConfig, "commprof.verbs.trace:run", table=True, kinds=("trace",), report_section="trace",
             help="Per-token, per-layer compute vs communication of a synthetic TP decode engine (or of a prefill's chunk steps)."),
    VerbSpec("plan", PlanConfig, "commprof.verbs.plan:run", table=True, kinds=("plan",),
             help="Collectives and memory of one decode step (or a prefill, or a mixed step), from the model's shapes alone (nothing runs)."),
    VerbSpec("predict", PredictConfig, "commprof.verbs.predict:run", table=True, kinds=("predict",),
             report_section="predict",
             help="Each token's time on a box you don't own: modelled GPU compute + the box's own communication."),
    VerbSpec("topo", TopoConfig, "commprof.verbs.topo:run", table=True, kinds=("topo",), report_section="topology",
             help="GPUs, PCIe links, NVLink, P2P status and the nvidia-smi topo -m matrix, from NVML."),
    VerbSpec("check", CheckConfig, "commprof.verbs.check:run", table=True, kinds=("check", "hostbw"),
             report_section="checklist",
             help="The pre-purchase checklist: PASS/WARN/FAIL/SKIP per item with value, threshold and source."),
    VerbSpec("report", ReportConfig, "commprof.verbs.report:run", kinds=("report",),
             help="One self-contained HTML page and a Markdown twin: topology, sweep, trace, gap, checklist."),
    VerbSpec("gap", GapConfig, "commprof.verbs.gap:run", table=True, kinds=("gap",), report_section="gap",
             help="Each box against a reference (PCIe vs NVLink) and, with several boxes (one per dir with a sweep), the boxes against each other."),
    VerbSpec("import", ImportConfig, "commprof.verbs.import_:run",
             kinds=("sweep", "topo", "trace", "kineto", "nccl-debug", "health", "nccl-inspector"),
             help="Import another tool's output into the results format (e.g. a vendor's nccl-tests logs)."),
    VerbSpec("p2p", P2pConfig, "commprof.verbs.p2p:run", table=True, kinds=("p2p",), report_section="p2p",
             help="Raw link probes (CUDA): per-pair latency and bandwidth matrix, P2P on and off."),
    VerbSpec("moe", MoeConfig, "commprof.verbs.moe:run", table=True, kinds=("moe",), report_section="moe",
             help="MoE expert-parallel dispatch/combine all-to-all under skewed routing, before/after rebalancing."),
    VerbSpec("show", ShowConfig, "commprof.views.show:run", table=True,
             help="Show any verb's results dir again (tables, summary lines) and redraw its charts, measuring nothing."),
    VerbSpec("serve", ServeFlags, "commprof.verbs.serve:run_flags", table=True, kinds=("serve",), report_section="serve",
             help="TTFT, time per output token, tokens/s and jitter of an OpenAI-compatible server under load; the knee; "
                  "the server's queue time where it publishes it on GET /metrics (vLLM, SGLang, TGI)."),
    VerbSpec("accept", AcceptConfig, "commprof.verbs.accept:run",
             help="One acceptance run: topo and GPU health, p2p, sweep (graph and eager), trace, NCCL's log, serve (--url), the report."),
]


def verb(name: str) -> VerbSpec:
    """The spec of verb ``name`` (a KeyError names the known ones)."""
    for v in VERBS:
        if v.name == name:
            return v
    raise KeyError(f"no verb '{name}' (known: {', '.join(v.name for v in VERBS)})")


def import_kind(name: str) -> ImportKind | None:
    return next((k for k in IMPORT_KINDS if k.name == name), None)


def verb_modules() -> list[str]:
    """The modules under ``commprof.verbs`` that hold a verb (the verbs-are-leaves contract's list)."""
    return [v.module for v in VERBS if v.module.startswith("commprof.verbs.")]


def table_files() -> dict:
    """Every table of every result kind: file name -> (key, required columns)."""
    return {f: spec for k in RESULT_KINDS for f, spec in k.tables.items()}


def doc_files() -> dict:
    """Every JSON document of every result kind: file name -> key."""
    return {f: key for k in RESULT_KINDS for f, key in k.docs.items()}
