"""``commprof trace``: each token's latency split into compute and communication, layer by layer.

A synthetic TP decode engine (``microbench.decode_engine``) runs at the model's real shapes with
random weights; every segment is stamped on every rank; rank 0 attributes each run
(:mod:`commprof.analysis.attribution`) and appends it to the results dir (:mod:`commprof.results.trace`).
This module validates the flags, guards memory, starts the ranks, and predicts another box
(``--predict``: compute measured here + that box's collective latency).
"""
from __future__ import annotations

from commprof.model.registry import TraceConfig  # noqa: F401 - the flags, declared once

import os
import sys
import time
from dataclasses import asdict

from commprof import results
from commprof.analysis.latency import CommTable
from commprof.results.trace import open_trace
from commprof.model.traceconfig import TraceRunConfig, plan_runs, repeat_count
from commprof.model.runconfig import MAX_REPEAT
from commprof.model.collectives import DTYPE_BYTES
from commprof.model.errors import UsageError
from commprof.model.fileio import shown_path
from commprof.model.machine import machine
from commprof.model.models import ModelShape
from commprof.analysis.stepmodel import check_tp
from commprof.model.models import get_model
from commprof.analysis.stepmodel import check_phase
from commprof.model.units import parse_int_list
from commprof.capture import launch
from commprof.capture.nvmltopo import save_topology
from commprof.model.machine import rank_info
from commprof.capture.launch import shared_core_note, torchrun_env
from commprof.views.show import show
from commprof.views.console import progress_bar
from commprof.model.models import BUILTIN
from commprof.analysis.costmodel import resolve_comm_source


# --- shapes, memory -------------------------------------------------------------------------------

def check_shapes(model: dict, tps) -> None:
    """TP must split the heads as the plan does (``commprof.analysis.stepmodel.check_tp``): one rule, one place."""
    shape = ModelShape(**{k: v for k, v in model.items() if k in ModelShape.__dataclass_fields__})
    for tp in tps:
        check_tp(shape, tp)


def engine_bytes_per_rank(model: dict, tp: int, batch: int, context: int, layers: int, dtype: str,
                          chunk: int = 0) -> dict:
    """What the engine allocates on one rank (weights, KV cache), from the same dims it uses. With a
    prefill ``chunk``: the prefill sequence's own cache and the chunk's attention scores (fp32,
    chunk x query heads x context, and their softmax) count too."""
    from microbench.decode_engine import engine_dims, sliding_layers

    d = engine_dims(model, tp)
    e = DTYPE_BYTES[dtype]
    h = d["hidden"]
    per_layer = (h * (d["q_heads_r"] + 2 * d["kv_heads_r"]) * d["head_dim"] + d["q_heads_r"] * d["head_dim"] * h
                 + 3 * h * d["ffn_r"] + 2 * h)
    weights = (2 * d["vocab_r"] * h + h + layers * per_layer) * e
    window = model.get("sliding_window") or 0
    kv = 0
    seqs = batch + (1 if chunk else 0)
    widest = 0
    for s in sliding_layers(model, layers):
        ctx = min(context, window) if (s and window) else context
        kv += 2 * seqs * d["kv_heads_r"] * ctx * d["head_dim"] * e
        widest = max(widest, ctx)
    logits = tp * (batch + (1 if chunk else 0)) * d["vocab_r"] * e
    scores = chunk * d["q_heads_r"] * widest * (4 + 4 + e) if chunk else 0
    return {"weights_bytes": int(weights), "kv_cache_bytes": int(kv), "logits_bytes": int(logits),
            "scores_bytes": int(scores), "total_bytes": int(weights + kv + logits + scores)}


def gpu_free_bytes(n: int, nvml=None) -> tuple[int, str]:
    """The least free memory among the first ``n`` CUDA-visible GPUs (those this node's ranks
    use), read through NVML: no CUDA context is opened, and every process of the node that asks
    gets the same answer from the same devices. CUDA_VISIBLE_DEVICES (indexes or UUIDs) is
    honoured; NVML's order is the PCI bus order, CUDA's default for identical GPUs.

    Raises ``LookupError`` when NVML cannot answer."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as e:
            raise LookupError(f"no NVML bindings ({e})") from None
    try:
        nvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - pynvml raises its own NVMLError subclasses
        raise LookupError(f"nvmlInit failed ({e})") from None
    try:
        count = nvml.nvmlDeviceGetCount()
        order = list(range(count))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and visible.strip():
            order = []
            for item in (v.strip() for v in visible.split(",")):
                if item.lstrip("-").isdigit():
                    if not 0 <= int(item) < count:
                        break                     # CUDA stops at the first invalid entry too
                    order.append(int(item))
                else:
                    uuids = {}
                    for i in range(count):
                        u = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))
                        uuids[u.decode() if isinstance(u, bytes) else str(u)] = i
                    match = [i for u, i in uuids.items() if u.startswith(item)]
                    if len(match) != 1:
                        raise LookupError(f"CUDA_VISIBLE_DEVICES entry '{item}' matches no single GPU")
                    order.append(match[0])
        used = order[:max(1, n)]
        if len(used) < n or not used:
            raise LookupError(f"{n} GPUs needed, {len(used)} visible to NVML")
        free = [int(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i)).free) for i in used]
    except LookupError:
        raise
    except Exception as e:  # noqa: BLE001
        raise LookupError(f"NVML memory query failed ({e})") from None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    worst = min(range(len(used)), key=lambda k: free[k])
    return min(free), f"the least free among GPU(s) {','.join(map(str, used))} (NVML GPU {used[worst]})"


def available_bytes_per_rank(backend: str, ranks_on_node: int) -> tuple[int, str]:
    """Memory one rank may use: 90% of the least free GPU memory among the node's GPUs in use on
    NCCL (one decision for every rank), MemAvailable / ranks on CPU."""
    if backend == "nccl":
        try:
            free, which = gpu_free_bytes(ranks_on_node)
            return int(free * 0.9), f"90% of free GPU memory, {which}"
        except LookupError as e:
            import torch

            # Without NVML: this process's own device only (a context on it; the ranks then agree
            # on the smallest decision once they start).
            dev = int(os.environ.get("LOCAL_RANK", "0"))
            free, _ = torch.cuda.mem_get_info(dev)
            return int(free * 0.9), f"90% of free memory of GPU {dev} (torch.cuda.mem_get_info; NVML: {e})"
    avail = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except OSError:
        avail = 0
    if not avail:
        return 1 << 62, "unknown (no /proc/meminfo)"
    return int(avail * 0.8 / ranks_on_node), (f"80% of MemAvailable shared by the {ranks_on_node} CPU ranks that "
                                              "build engines at this TP degree")


def memory_guard(model: dict, tps, batches, context: int, layers: int | None, dtype: str, backend: str,
                 ranks_on_node: int, chunk: int = 0) -> tuple[int, dict]:
    """Choose the layers to run: all of them if they fit, else refuse with the numbers (or run
    ``--layers N`` and scale). Returns (layers, report). Only the ranks of the TP degree being
    traced build an engine (the others wait, theirs released), so on CPU a run at TP=t shares the
    machine's memory among ``min(t, ranks_on_node)`` ranks, not among every rank started."""
    L = int(model["layers"])
    budgets = {tp: available_bytes_per_rank(backend, ranks_on_node if backend == "nccl" else min(tp, ranks_on_node))
               for tp in sorted(set(tps))}

    def worst(n):
        """(need, available, how, tp) of the (tp, batch) whose engine overshoots its share the most."""
        cells = [(engine_bytes_per_rank(model, tp, b, context, n, dtype, chunk)["total_bytes"], *budgets[tp], tp)
                 for tp in budgets for b in batches]
        return max(cells, key=lambda c: c[0] / max(c[1], 1))

    want = L if layers is None else layers
    need, avail, how, at_tp = worst(want)
    report = {"available_bytes_per_rank": avail, "available_how": how, "needed_bytes_per_rank": need,
              "layers_run": want, "judged_at_tp": at_tp}
    if need <= avail:
        return want, report
    fit = 0
    for n in range(1, min(want, L) + 1):
        if worst(n)[0] > worst(n)[1]:
            break
        fit = n
    gb = lambda v: f"{v / 1e9:.2f} GB"  # noqa: E731
    hint = (f"pass --layers {fit} (or fewer) to run {fit} of {L} layers and scale" if fit else
            "even one layer does not fit: lower --batch/--context/--prompt/--chunk or use a larger device")
    raise UsageError(f"trace: {model['name']} at tp={at_tp} needs {gb(need)} per rank for {want} layers "
                     f"but {gb(avail)} are available ({how}); {hint}")


# --- configuration and running ---------------------------------------------------------------------

def build_config(*, model: str, tp: str, batch: str, context: int, tokens: int, warmup: int,
                 layers: int | None, dtype: str, backend: str, modes: str | None, timeout_s: float,
                 out: str | None, argv: list[str], predict: bool = False, seed: int = 0, phase: str = "decode",
                 prompt: int | None = None, chunk: int | None = None, comm_from: str | None = None,
                 repeat: int = 1) -> TraceRunConfig:
    """Validate the flags, pick the backend, check memory (nothing is started). ``phase``
    prefill runs one ``prompt``-token prompt in chunks of ``chunk`` tokens (default the whole
    prompt); mixed runs those chunk steps with each ``batch``'s decode tokens in them. ``predict``
    needs ``comm_from`` (a results dir or ``reference:<profile>``), resolved and read here.
    ``repeat``: each run timed that many times, the repeats interleaved."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= MAX_REPEAT:
        raise UsageError(f"--repeat {repeat!r}: times each run is timed, a whole number from 1 to {MAX_REPEAT}")
    if predict and not comm_from:
        raise UsageError("--predict needs --comm-from DIR (a sweep results dir of the box to predict)")
    if comm_from and not predict:
        raise UsageError("--comm-from is only used with --predict")
    source = comm_source(comm_from) if comm_from else None
    phase, prompt, chunk = check_phase(phase, prompt, chunk)
    shape = get_model(model).to_dict()
    tps = parse_int_list(tp, "--tp")
    batches = parse_int_list(batch, "--batch")
    for name, v in (("--context", context), ("--tokens", tokens)):
        if v is None or v < 1:
            raise UsageError(f"{name} {v}: must be a positive integer")
    if layers is not None and not (1 <= layers <= shape["layers"]):
        raise UsageError(f"--layers {layers}: must be between 1 and the model's {shape['layers']} layers")
    if dtype not in DTYPE_BYTES:
        raise UsageError(f"--dtype '{dtype}': use {', '.join(DTYPE_BYTES)}")
    launch.check_counts(timeout_s, warmup=warmup)
    check_shapes(shape, tps)
    if predict:
        trun = torchrun_env()
        # one GPU (or CPU); nccl without a CUDA GPU is one line and exit 3, as for a live run
        name, reason = launch.resolve_backend(backend, 1, None)
        if name == "nccl" and backend == "nccl":
            reason = "predict: compute on one GPU"
        world = 1
    else:
        world, name, reason, trun = launch.choose_world(backend, max(tps), "--tp")
    mode_list = launch.parse_modes(modes, name)
    # predict: one device runs one rank's shard of each TP degree in turn (the largest is min(tp))
    ranks_on_node = 1 if predict else (trun["local_world"] if trun else world)
    n_layers, mem = memory_guard(shape, [min(tps)] if predict else tps, [0] if phase == "prefill" else batches,
                                 prompt if phase != "decode" else context, layers, dtype, name, ranks_on_node,
                                 chunk or 0)
    out_dir = out or results.default_out_dir()
    if not trun or trun["rank"] == 0:
        results.check_out_dir(out_dir, resume=False)
    return TraceRunConfig(model=shape, tps=tps, batches=batches, context=context, tokens=tokens, warmup=warmup,
                       layers=n_layers, dtype=dtype, modes=mode_list, backend=name, backend_reason=reason,
                       timeout_s=float(timeout_s), out_dir=out_dir, progress=True, argv=argv, world_size=world,
                       launch="torchrun" if (trun and not predict) else "local", seed=seed, memory=mem,
                       phase=phase, prompt=prompt or 0, chunk=chunk or 0, comm_from=source, repeat=repeat)


def run_ranks(cfg: TraceRunConfig) -> bool:
    """Run the live trace; True on the process that holds the results."""
    try:
        return launch.run_ranks(cfg, "microbench.trace_rank:run_trace_rank", progress=progress_bar)
    finally:
        save_topology(cfg.out_dir)          # beside the rows whenever NVML answers, also after a failure


# --- prediction ------------------------------------------------------------------------------------

COMM_OP = {"embedding": "all_reduce", "attn_out": "all_reduce", "mlp_out": "all_reduce", "logits": "all_gather"}


def predicted_record(rec: dict, comm_us: dict) -> dict:
    """Replace the (skipped) collectives of a single-device run by predicted latencies, shifting
    the later segments so the token's timeline stays tiled."""
    import numpy as np

    segs = rec["segments"]
    offs, durs, lat = rec["offs"].copy(), rec["durs"].copy(), rec["lat"].copy()
    shift = np.zeros(len(lat))
    for j, s in enumerate(segs):
        offs[:, j] += shift
        if s.is_comm:
            new = comm_us[s.kind]
            shift += new - durs[:, j]
            durs[:, j] = new
    return {"rank": 0, "lat": lat + shift, "offs": offs, "durs": durs, "segments": segs}


def run_prediction(cfg: TraceRunConfig, comm_from: str) -> None:
    """Compute of one rank's shard measured here (collectives skipped) + the collective latency
    table of another box: that box's per-token breakdown, labelled predicted."""
    import torch

    from microbench.decode_engine import DecodeEngine, engine_dims
    from microbench.trace_rank import TORCH_DTYPES, add_repeat, run_tokens

    table = CommTable(comm_from)
    table.check_covers({tp for tp, _, _ in plan_runs(cfg)})    # refused before the dir is made
    if cfg.backend == "gloo":
        torch.set_num_threads(1)       # as one gloo rank runs
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", 0)
    dtype = getattr(torch, TORCH_DTYPES[cfg.dtype])
    src = table.meta
    inputs = {"compute": f"measured here on {machine()['host']} ({cfg.backend} device {device}), one rank's "
                         "shard per TP degree, collectives skipped",
              "communication": {"results_dir": shown_path(comm_from), "kind": src.get("kind"),
                                "hosts": src.get("hosts"), "backend": src.get("backend"),
                                "gpus": src.get("gpus"), "start_time": src.get("start_time"),
                                "statistic": f"{table.stat}, log-log interpolation in size",
                                "timing": table.timing + (" (an average over back-to-back calls, not one call as "
                                                          "a decode step issues it)" if table.timing != "per-call"
                                                          else "")}}
    writer = open_trace(cfg, [rank_info(0, 0, device)], kind="predicted", extra={"inputs": inputs})
    e = DTYPE_BYTES[cfg.dtype]
    eng, built_for = None, None
    reps = repeat_count(cfg)
    pending: dict = {}                    # run -> its repeats' stamps so far (--repeat)
    t0 = time.perf_counter()
    for rep, (tp, batch, mode) in ((r, run) for r in range(reps) for run in plan_runs(cfg)):
        if built_for != (tp, batch):      # one engine per (tp, batch), reused across modes
            eng = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
            eng = DecodeEngine(torch, None, cfg.model, tp, 0, batch, cfg.engine_context, dtype, device, cfg.layers,
                               comm=False, seed=cfg.seed, chunk=cfg.chunk)
            built_for = (tp, batch)
        started = time.perf_counter() - t0
        lat, offs, durs = run_tokens(torch, eng, cfg.steps, cfg.warmup, mode)
        d = engine_dims(cfg.model, tp)
        ar = (batch + cfg.chunk) * d["hidden"] * e
        rows_out = batch + (1 if cfg.chunk else 0)      # logits: decode tokens and the chunk's last token
        sizes = {"embedding": ar, "attn_out": ar, "mlp_out": ar, "logits": tp * rows_out * d["vocab_r"] * e}
        comm_us = {k: (table.latency_us(COMM_OP[k], tp, mode, v) if tp > 1 else 0.0) for k, v in sizes.items()}
        rec = predicted_record({"rank": 0, "lat": lat, "offs": offs, "durs": durs, "segments": eng.segments},
                               comm_us)
        add_repeat(writer, cfg, (tp, batch, mode), [rec], rep, started, pending, keep_timeline=False)
    eng = None
    meta = results.read_meta(cfg.out_dir)
    meta["comm_lookups"] = table.lookups
    if table.notes:
        meta["comm_notes"] = table.notes
    results.write_meta(cfg.out_dir, meta)
    writer.close()
    for n in table.notes:
        print(f"commprof: note: {n}", file=sys.stderr)


# --- the verb --------------------------------------------------------------------------------------



def run(cfg: TraceConfig) -> int:
    """``commprof trace``: validate the flags, run (or predict), show the results; the exit code."""
    flags = {k: v for k, v in asdict(cfg).items() if k != "charts"}
    return measure(build_config(**flags), charts=cfg.charts)


def measure(cfg: TraceRunConfig, charts: bool = True) -> int:
    """A validated trace: the live run (or, with ``cfg.comm_from``, the prediction of that box),
    then the summary lines and charts on the process that holds the results. Exit code."""
    comm_from = cfg.comm_from
    import sys

    trun = torchrun_env()
    lead = comm_from is not None or trun is None or trun["rank"] == 0
    if lead:
        scaled = f"; {cfg.layers} of {cfg.layers_model} layers, scaled" if cfg.scaled else ""
        if cfg.phase != "decode":
            scaled += (f"; {cfg.phase}: a {cfg.prompt}-token prompt in {cfg.steps} chunk step(s) of {cfg.chunk} "
                       "tokens")
        print(f"commprof: trace {cfg.model['name']}: backend {cfg.backend} ({cfg.backend_reason}); "
              f"{'predicting from ' + comm_from if comm_from else str(cfg.world_size) + ' ranks'}{scaled}; "
              f"results -> {cfg.out_dir}", file=sys.stderr)
        note = shared_core_note(cfg.backend, trun) if comm_from is None else None
        if note:
            print(f"commprof: {note}", file=sys.stderr)
    if comm_from is not None:
        run_prediction(cfg, comm_from)
    elif not run_ranks(cfg):
        return 0
    with results.failing(cfg.out_dir):
        show(results.load(cfg.out_dir), charts=charts)
    if comm_from is not None and cfg.backend == "gloo":
        # CPU compute says nothing about a GPU box: point at the verb that models it

        tps = ",".join(str(t) for t in sorted({t for t, _, _ in plan_runs(cfg)}))
        name = str(cfg.model["name"])
        spec = name if name.lower() in BUILTIN else str(cfg.model.get("source", name)).removeprefix("config.json at ")
        print(f"commprof: the compute above was measured on this CPU; for a GPU box, model it with: commprof predict "
              f"--model {spec} --gpu SKU --comm {comm_from} --tp {tps}", file=sys.stderr)
    return 0


def comm_source(spec: str) -> str:
    """``--comm-from``: a results dir, or ``reference:<profile>`` written as a modelled sweep dir;
    a bad one fails here, before anything runs."""
    path = resolve_comm_source(spec)
    results.load_frame(path)
    results.read_meta(path)
    return path
