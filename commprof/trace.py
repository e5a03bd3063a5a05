"""``commprof trace``: each token's latency split into compute and communication, layer by layer.

A synthetic TP decode engine (``microbench.decode_engine``) runs at the model's real shapes with
random weights; every segment is stamped on every rank. Attribution, per token and rank:

* compute: the engine's compute segments;
* transfer: for each collective, the *minimum* duration over the group's ranks (the rank that
  arrived last waits least; its duration is the collective itself);
* wait: the rank's own duration of that collective minus the transfer (arrival skew);
* gaps: time inside the token covered by no segment (host and launch overhead);
* residual: token latency minus the four (should be ~0; reported, not hidden).

The last-arriving rank of a collective is its straggler. With ``--layers N`` below the model's
layer count, the per-layer parts are scaled to the full depth and every row says so.
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field

from . import results
from .collectives import DTYPE_BYTES
from .errors import UsageError
from .runinfo import machine, now_iso

TOKENS_CSV = "trace_tokens.csv"
LAYERS_CSV = "trace_layers.csv"
SUMMARY_CSV = "trace_summary.csv"
TRACE_META = "meta.json"
TOKEN_COLUMNS = ["kind", "scaled", "layers_run", "layers_model", "tp", "batch", "mode", "token", "rank",
                 "latency_us", "compute_us", "transfer_us", "wait_us", "gaps_us", "residual_us",
                 "comm_share_pct", "latency_us_measured"]
LAYER_COLUMNS = ["kind", "tp", "batch", "mode", "layer", "rank", "compute_us", "transfer_us", "wait_us",
                 "comm_share_pct", "straggler_count", "collectives"]
SUMMARY_COLUMNS = ["kind", "scaled", "tp", "batch", "mode", "ms_per_token", "tokens_per_s",
                   "collectives_per_step", "collectives_per_token", "comm_share_pct", "transfer_share_pct",
                   "wait_share_pct", "compute_ms", "transfer_ms", "wait_ms", "gaps_ms", "max_residual_pct",
                   "tokens", "layers_run", "layers_model"]


@dataclass
class TraceConfig:
    model: dict
    tps: list[int]
    batches: list[int]
    context: int
    tokens: int
    warmup: int
    layers: int                 # layers actually run
    dtype: str = "bf16"
    modes: list[str] = field(default_factory=lambda: ["eager"])
    backend: str = "gloo"
    backend_reason: str = ""
    timeout_s: float = 120.0
    out_dir: str = ""
    progress: bool = False
    argv: list[str] = field(default_factory=list)
    world_size: int = 0
    launch: str = "local"
    seed: int = 0
    memory: dict = field(default_factory=dict)

    @property
    def layers_model(self) -> int:
        return int(self.model["layers"])

    @property
    def scaled(self) -> bool:
        return self.layers < self.layers_model

    def to_dict(self) -> dict:
        return asdict(self)


def plan_runs(cfg: TraceConfig) -> list[tuple[int, int, str]]:
    return [(tp, b, m) for tp in cfg.tps for b in cfg.batches for m in cfg.modes]


# --- shapes, memory -------------------------------------------------------------------------------

def check_shapes(model: dict, tps) -> None:
    """TP must split the heads as the plan does (``commprof.plan.check_tp``): one rule, one place."""
    from .models import ModelShape
    from .plan import check_tp

    shape = ModelShape(**{k: v for k, v in model.items() if k in ModelShape.__dataclass_fields__})
    for tp in tps:
        check_tp(shape, tp)


def engine_bytes_per_rank(model: dict, tp: int, batch: int, context: int, layers: int, dtype: str) -> dict:
    """What the engine allocates on one rank (weights, KV cache), from the same dims it uses."""
    from microbench.decode_engine import engine_dims, sliding_layers

    d = engine_dims(model, tp)
    e = DTYPE_BYTES[dtype]
    h = d["hidden"]
    per_layer = (h * (d["q_heads_r"] + 2 * d["kv_heads_r"]) * d["head_dim"] + d["q_heads_r"] * d["head_dim"] * h
                 + 3 * h * d["ffn_r"] + 2 * h)
    weights = (2 * d["vocab_r"] * h + h + layers * per_layer) * e
    window = model.get("sliding_window") or 0
    kv = 0
    for s in sliding_layers(model, layers):
        ctx = min(context, window) if (s and window) else context
        kv += 2 * batch * d["kv_heads_r"] * ctx * d["head_dim"] * e
    logits = tp * batch * d["vocab_r"] * e
    return {"weights_bytes": int(weights), "kv_cache_bytes": int(kv), "logits_bytes": int(logits),
            "total_bytes": int(weights + kv + logits)}


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
    return int(avail * 0.8 / ranks_on_node), f"80% of MemAvailable shared by {ranks_on_node} CPU ranks"


def memory_guard(model: dict, tps, batches, context: int, layers: int | None, dtype: str, backend: str,
                 ranks_on_node: int) -> tuple[int, dict]:
    """Choose the layers to run: all of them if they fit, else refuse with the numbers (or run
    ``--layers N`` and scale). Returns (layers, report)."""
    L = int(model["layers"])
    avail, how = available_bytes_per_rank(backend, ranks_on_node)
    worst = lambda n: max(engine_bytes_per_rank(model, tp, b, context, n, dtype)["total_bytes"]  # noqa: E731
                          for tp in tps for b in batches)
    want = L if layers is None else layers
    need = worst(want)
    report = {"available_bytes_per_rank": avail, "available_how": how, "needed_bytes_per_rank": need,
              "layers_run": want}
    if need <= avail:
        return want, report
    fit = 0
    for n in range(1, min(want, L) + 1):
        if worst(n) > avail:
            break
        fit = n
    gb = lambda v: f"{v / 1e9:.2f} GB"  # noqa: E731
    hint = (f"pass --layers {fit} (or fewer) to run {fit} of {L} layers and scale" if fit else
            "even one layer does not fit: lower --batch/--context or use a larger device")
    raise UsageError(f"trace: {model['name']} at tp={min(tps)} needs {gb(need)} per rank for {want} layers "
                     f"but {gb(avail)} are available ({how}); {hint}")


# --- attribution -----------------------------------------------------------------------------------

def attribute(recs: list[dict], layers_model: int, tp: int | None = None) -> dict:
    """Per token and rank: compute/transfer/wait/gaps/residual (us), scaled to the model's depth
    when fewer layers ran; per layer and rank: means over tokens and straggler counts.

    At tp=1 no collective runs: the (empty) collective segments count as gaps."""
    import numpy as np

    recs = sorted(recs, key=lambda r: r["rank"])
    segs = recs[0]["segments"]
    no_comm = (tp or len(recs)) == 1
    comm = np.array([s.is_comm and not no_comm for s in segs])
    layer_of = np.array([s.layer for s in segs])
    in_layer = layer_of >= 0
    n_layers_run = int(layer_of.max()) + 1 if in_layer.any() else 0
    scale = layers_model / n_layers_run if n_layers_run else 1.0
    lat = np.stack([r["lat"] for r in recs])              # (R, T)
    offs = np.stack([r["offs"] for r in recs])            # (R, T, S)
    durs = np.stack([r["durs"] for r in recs])            # (R, T, S)
    R, T, S = durs.shape
    transfer = np.where(comm, np.broadcast_to(durs.min(axis=0), durs.shape), 0.0)   # (R, T, S), same for all r
    wait = np.where(comm, durs - transfer, 0.0)
    compute = np.where(comm, 0.0, durs)
    straggler = durs.argmin(axis=0)                                            # (T, S) rank index
    ends = offs + durs
    gaps_between = np.concatenate([offs[:, :, :1], offs[:, :, 1:] - ends[:, :, :-1]], axis=2)
    trailing = lat - ends[:, :, -1]

    def split(a):
        """(non-layer sum, layer sum) over segments, per rank and token."""
        return (a * ~in_layer).sum(-1), (a * in_layer).sum(-1)

    out = {}
    parts = {}
    for name, arr in (("compute_us", compute), ("transfer_us", transfer), ("wait_us", wait),
                      ("gaps_us", gaps_between)):
        outer, inner = split(arr)
        if name == "gaps_us":
            outer = outer + trailing
        parts[name] = outer + inner * scale
    latency = lat + (scale - 1.0) * sum(split(a)[1] for a in (compute, transfer, wait, gaps_between))
    residual = latency - sum(parts.values())
    comm_us = parts["transfer_us"] + parts["wait_us"]
    out["tokens"] = [{
        "rank": recs[r]["rank"], "token": t, "latency_us": float(latency[r, t]),
        "latency_us_measured": float(lat[r, t]),
        **{k: float(v[r, t]) for k, v in parts.items()}, "residual_us": float(residual[r, t]),
        "comm_share_pct": float(100.0 * comm_us[r, t] / latency[r, t]) if latency[r, t] > 0 else 0.0,
    } for r in range(R) for t in range(T)]
    layers = []
    for i in range(n_layers_run):
        sel = layer_of == i
        ncoll = int((sel & comm).sum())
        for r in range(R):
            c = float(compute[r][:, sel].sum(-1).mean())
            tr = float(transfer[r][:, sel].sum(-1).mean())
            w = float(wait[r][:, sel].sum(-1).mean())
            strag = int((straggler[:, sel & comm] == r).sum())
            layers.append({"layer": i, "rank": recs[r]["rank"], "compute_us": c, "transfer_us": tr, "wait_us": w,
                           "comm_share_pct": 100.0 * (tr + w) / (c + tr + w) if c + tr + w > 0 else 0.0,
                           "straggler_count": strag, "collectives": ncoll * T})
    out["layers"] = layers
    n_comm_run = int(comm.sum())
    n_layer_comm = int((comm & in_layer).sum())
    out["collectives_per_step"] = int(round(n_comm_run - n_layer_comm + n_layer_comm * scale))
    out["scaled"] = scale != 1.0
    out["layers_run"] = n_layers_run
    return out


def summarize(tokens: list[dict], batch: int, collectives_per_step: int) -> dict:
    """One line per run. ms/token: median over tokens of the slowest rank's latency. Shares: of
    all token time on all ranks, the part in each component (so communication = transfer + wait)."""
    import numpy as np

    by_t = {}
    for row in tokens:
        by_t.setdefault(row["token"], []).append(row)
    lat = np.array([max(r["latency_us"] for r in rs) for rs in by_t.values()])
    mean = lambda k: np.array([np.mean([r[k] for r in rs]) for rs in by_t.values()])  # noqa: E731
    total = float(sum(r["latency_us"] for r in tokens))
    share = lambda k: 100.0 * float(sum(r[k] for r in tokens)) / total if total > 0 else 0.0  # noqa: E731
    ms = float(np.median(lat)) / 1e3
    resid = max(abs(r["residual_us"]) / r["latency_us"] for r in tokens if r["latency_us"] > 0)
    return {
        "ms_per_token": ms, "tokens_per_s": batch * 1e3 / ms if ms > 0 else float("nan"),
        "collectives_per_step": collectives_per_step, "collectives_per_token": collectives_per_step / batch,
        "comm_share_pct": share("transfer_us") + share("wait_us"),
        "transfer_share_pct": share("transfer_us"), "wait_share_pct": share("wait_us"),
        "compute_ms": float(np.median(mean("compute_us"))) / 1e3,
        "transfer_ms": float(np.median(mean("transfer_us"))) / 1e3,
        "wait_ms": float(np.median(mean("wait_us"))) / 1e3, "gaps_ms": float(np.median(mean("gaps_us"))) / 1e3,
        "max_residual_pct": 100.0 * resid, "tokens": len(by_t),
    }


# --- results dir -----------------------------------------------------------------------------------

class TraceWriter:
    """Rank 0's handle on a trace results dir: rows appended one run at a time."""

    def __init__(self, cfg: TraceConfig, meta: dict, kind: str = "measured"):
        self.cfg, self.meta, self.kind = cfg, meta, kind
        p = cfg.out_dir
        self.tokens = results.TableAppender(os.path.join(p, TOKENS_CSV), TOKEN_COLUMNS)
        self.layers = results.TableAppender(os.path.join(p, LAYERS_CSV), LAYER_COLUMNS)
        self.summary = results.TableAppender(os.path.join(p, SUMMARY_CSV), SUMMARY_COLUMNS)

    def add_run(self, tp: int, batch: int, mode: str, recs: list[dict]):
        att = attribute(recs, self.cfg.layers_model, tp)
        self.add_attributed(tp, batch, mode, att)

    def add_attributed(self, tp, batch, mode, att):
        common = {"kind": self.kind, "tp": tp, "batch": batch, "mode": mode}
        self.tokens.write([{**common, "scaled": int(att["scaled"]), "layers_run": att["layers_run"],
                            "layers_model": self.cfg.layers_model, **r} for r in att["tokens"]])
        self.layers.write([{**common, **r} for r in att["layers"]])
        s = summarize(att["tokens"], batch, att["collectives_per_step"])
        self.summary.write([{**common, "scaled": int(att["scaled"]), "layers_run": att["layers_run"],
                             "layers_model": self.cfg.layers_model, **s}])

    def close(self, status: str = "complete"):
        for c in (self.tokens, self.layers, self.summary):
            c.close()
        results.finish_meta(self.cfg.out_dir, status)


def open_trace(cfg: TraceConfig, rank_infos: list[dict], kind: str = "measured", extra: dict | None = None):
    """Create the results dir and its ``meta.json`` (provenance), return the writer."""
    results.check_out_dir(cfg.out_dir, resume=False)
    os.makedirs(cfg.out_dir, exist_ok=True)
    what = ("per-token decode latency split into compute / transfer / wait / gaps (commprof trace)"
            if kind == "measured" else
            "predicted per-token decode latency: compute measured here + collective latency from another box")
    meta = results.provenance(
        "trace", kind, what, command=cfg.argv,
        runs=[{"start_time": now_iso(), "command": cfg.argv, "status": "running"}],
        backend=cfg.backend, backend_reason=cfg.backend_reason, launch=cfg.launch,
        **results.rank_fields(rank_infos),
        model=cfg.model, scaled=cfg.scaled,
        scaling=(f"{cfg.layers} of {cfg.layers_model} layers ran; per-layer parts scaled by "
                 f"{cfg.layers_model}/{cfg.layers}" if cfg.scaled else "all layers ran"),
        engine_approximations=["random weights", "MLA attention runs as grouped-query attention",
                               "an MoE MLP runs as a dense MLP as wide as the active experts",
                               "Gemma extra norms and soft-capping left out"],
        memory=cfg.memory, config=cfg.to_dict(),
        columns={"transfer_us": "per collective, the minimum duration over the group's ranks",
                 "wait_us": "own duration of the collective minus the transfer (arrival skew)",
                 "gaps_us": "time in the token covered by no segment (host/launch overhead)",
                 "residual_us": "latency - (compute + transfer + wait + gaps)",
                 "straggler_count": "collectives of that layer for which this rank arrived last"},
    )
    meta.update(extra or {})
    results.write_meta(cfg.out_dir, meta)
    return TraceWriter(cfg, meta, kind)


# --- configuration and running ---------------------------------------------------------------------

def build_config(*, model: str, tp: str, batch: str, context: int, tokens: int, warmup: int,
                 layers: int | None, dtype: str, backend: str, modes: str | None, timeout_s: float,
                 out: str | None, argv: list[str], predict: bool = False, seed: int = 0) -> TraceConfig:
    """Validate the flags, pick the backend, check memory (nothing is started)."""
    from .launch import check_counts, choose_world, parse_modes, resolve_backend, torchrun_env
    from .models import get_model
    from .units import parse_int_list

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
    check_counts(timeout_s, warmup=warmup)
    check_shapes(shape, tps)
    if predict:
        trun = torchrun_env()
        name, reason = ("nccl", "predict: compute on one GPU") if backend == "nccl" else \
            resolve_backend(backend, 1, None)
        world = 1
    else:
        world, name, reason, trun = choose_world(backend, max(tps), "--tp")
    mode_list = parse_modes(modes, name)
    # predict: one device runs one rank's shard of each TP degree in turn (the largest is min(tp))
    ranks_on_node = 1 if predict else (trun["local_world"] if trun else world)
    n_layers, mem = memory_guard(shape, [min(tps)] if predict else tps, batches, context, layers, dtype, name,
                                 ranks_on_node)
    out_dir = out or results.default_out_dir()
    if not trun or trun["rank"] == 0:
        results.check_out_dir(out_dir, resume=False)
    return TraceConfig(model=shape, tps=tps, batches=batches, context=context, tokens=tokens, warmup=warmup,
                       layers=n_layers, dtype=dtype, modes=mode_list, backend=name, backend_reason=reason,
                       timeout_s=float(timeout_s), out_dir=out_dir, progress=True, argv=argv, world_size=world,
                       launch="torchrun" if (trun and not predict) else "local", seed=seed, memory=mem)


def run(cfg: TraceConfig) -> bool:
    """Run the live trace; True on the process that holds the results."""
    from . import launch
    from .topo import save_topology

    try:
        return launch.run_ranks(cfg, "microbench.trace_rank:run_trace_rank")
    finally:
        save_topology(cfg.out_dir)          # beside the rows whenever NVML answers, also after a failure


# --- prediction ------------------------------------------------------------------------------------

COMM_OP = {"embedding": "all_reduce", "attn_out": "all_reduce", "mlp_out": "all_reduce", "logits": "all_gather"}


PREDICT_STATS = ("latency_us_rankavg_mean", "latency_us_mean")   # first present wins


class CommTable:
    """Collective latency of another box, from a sweep results dir, interpolated log-log.

    The statistic is the *mean*: a token sums 2L+2 collectives, so its expected time is the sum of
    their expected latencies, and small-message latency is skewed (p50 below the mean). It is the
    average rank's time in the op (``latency_us_rankavg_mean``), as a rank of a decode step
    spends it; sweeps older than that column give the slowest rank's (``latency_us_mean``)."""

    def __init__(self, path: str):
        self.path = path
        self.meta = results.read_meta(path)
        self.df = results.load_frame(path)
        if self.df.empty:
            raise UsageError(f"--comm-from '{path}': holds no sweep rows")
        self.stat = next(c for c in PREDICT_STATS if c in self.df.columns and self.df[c].notna().all())
        self.lookups: list[dict] = []

    def latency_us(self, op: str, tp: int, mode: str, size_bytes: int) -> float:
        import numpy as np

        df = self.df
        sub = df[(df["op"] == op) & (df["tp"] == tp) & (df["group"] == 0)]
        if sub.empty:
            have = sorted({(o, int(t)) for o, t in zip(df["op"], df["tp"])})
            raise UsageError(f"--comm-from '{self.path}': no {op} rows at tp={tp} "
                             f"(it has {', '.join(f'{o} tp={t}' for o, t in have)})")
        if mode in set(sub["mode"]):
            sub = sub[sub["mode"] == mode]
        else:
            mode = sub["mode"].iloc[0]
        sub = sub.groupby("size_bytes", as_index=False)[self.stat].median().sort_values("size_bytes")
        x = np.log(sub["size_bytes"].to_numpy(dtype=float))
        y = np.log(sub[self.stat].to_numpy(dtype=float))
        lx = math.log(size_bytes)
        if len(x) == 1:
            val, how = float(np.exp(y[0])), "single point"
        elif x[0] <= lx <= x[-1]:
            val, how = float(np.exp(np.interp(lx, x, y))), "interpolated"
        else:
            i = (0, 1) if lx < x[0] else (-2, -1)
            slope = (y[i[1]] - y[i[0]]) / (x[i[1]] - x[i[0]])
            val, how = float(np.exp(y[i[0]] + slope * (lx - x[i[0]]))), "extrapolated"
        self.lookups.append({"op": op, "tp": tp, "mode": mode, "size_bytes": size_bytes,
                             self.stat: val, "how": how})
        return val


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


def run_predict(cfg: TraceConfig, comm_from: str) -> None:
    """Compute of one rank's shard measured here (collectives skipped) + the collective latency
    table of another box: that box's per-token breakdown, labelled predicted."""
    import torch

    from microbench.decode_engine import DecodeEngine, engine_dims
    from microbench.trace_rank import TORCH_DTYPES, run_tokens

    from .runinfo import rank_info

    table = CommTable(comm_from)
    if cfg.backend == "gloo":
        torch.set_num_threads(1)       # as one gloo rank runs
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", 0)
    dtype = getattr(torch, TORCH_DTYPES[cfg.dtype])
    src = table.meta
    inputs = {"compute": f"measured here on {machine()['host']} ({cfg.backend} device {device}), one rank's "
                         "shard per TP degree, collectives skipped",
              "communication": {"results_dir": os.path.abspath(comm_from), "kind": src.get("kind"),
                                "hosts": src.get("hosts"), "backend": src.get("backend"),
                                "gpus": src.get("gpus"), "start_time": src.get("start_time"),
                                "statistic": f"{table.stat}, log-log interpolation in size"}}
    writer = open_trace(cfg, [rank_info(0, 0, device)], kind="predicted", extra={"inputs": inputs})
    e = DTYPE_BYTES[cfg.dtype]
    eng, built_for = None, None
    for tp, batch, mode in plan_runs(cfg):
        if built_for != (tp, batch):      # one engine per (tp, batch), reused across modes
            eng = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
            eng = DecodeEngine(torch, None, cfg.model, tp, 0, batch, cfg.context, dtype, device, cfg.layers,
                               comm=False, seed=cfg.seed)
            built_for = (tp, batch)
        lat, offs, durs = run_tokens(torch, eng, cfg.tokens, cfg.warmup, mode)
        d = engine_dims(cfg.model, tp)
        ar = batch * d["hidden"] * e
        sizes = {"embedding": ar, "attn_out": ar, "mlp_out": ar, "logits": tp * batch * d["vocab_r"] * e}
        comm_us = {k: (table.latency_us(COMM_OP[k], tp, mode, v) if tp > 1 else 0.0) for k, v in sizes.items()}
        rec = predicted_record({"rank": 0, "lat": lat, "offs": offs, "durs": durs, "segments": eng.segments},
                               comm_us)
        writer.add_run(tp, batch, mode, [rec])
    eng = None
    meta = results.read_meta(cfg.out_dir)
    meta["comm_lookups"] = table.lookups
    results.write_meta(cfg.out_dir, meta)
    writer.close()


# --- views -----------------------------------------------------------------------------------------

def summary_lines(out_dir: str) -> list[str]:
    import pandas as pd

    df = pd.read_csv(os.path.join(out_dir, SUMMARY_CSV))
    lines = []
    for r in df.itertuples():
        label = r.kind + (f", scaled from {r.layers_run} of {r.layers_model} layers" if r.scaled else "")
        lines.append(f"TP={r.tp} batch={r.batch} {r.mode}: {r.ms_per_token:.3f} ms/token, "
                     f"{r.tokens_per_s:.1f} tokens/s, {r.collectives_per_step} collectives/step "
                     f"({r.collectives_per_token:g}/token), communication {r.comm_share_pct:.1f}% "
                     f"(transfer {r.transfer_share_pct:.1f}%, wait {r.wait_share_pct:.1f}%) [{label}]")
    return lines
