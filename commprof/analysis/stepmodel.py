"""What one decode step does to the interconnect and to GPU memory, without running anything.

This module is the one place the decode step (and a prefill's chunk steps) and its memory are
modelled: ``commprof plan`` (``verbs/plan.py``) prints it, the trace engine imports
:func:`decode_collectives` to know which collectives a step must contain, and gap, report, predict
and the Kineto importer price the same step.

The model is Megatron-style tensor parallelism (TP) as vLLM runs it (Megatron-LM's
tensor-parallel layers, arXiv:1909.08053; vLLM's VocabParallelEmbedding and RowParallelLinear): a vocab-parallel embedding ends in one all-reduce, each layer
ends its attention (o_proj) and its MLP (down_proj) in one all-reduce each, and the logits are
all-gathered. Dense, no sequence parallelism: ``2 x layers + 2`` collectives per step, whatever the
TP degree. Sizes are in nccl-tests' meaning (``commprof.model.collectives``) and rounded the way the
sweep rounds them, so a sweep row can be found by ``(op, size_bytes)``.

Only the standard library is imported here.
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

from commprof.model.collectives import COLLECTIVES, DTYPE_BYTES
from commprof.model.errors import UsageError, shown
from commprof.model.models import ModelShape, is_moe_layer, is_sliding

MOE_MODES = ("tp", "ep")

# How each kind of site reads in a table.


@dataclass(frozen=True)
class CollectiveSite:
    """One collective of a decode step.

    ``size_bytes`` is the nccl-tests size of the call (after the sweep's rounding) and
    ``send_bytes_per_rank`` what one rank puts into it (its input buffer).
    """

    site: str                 # "embedding", "layer 3 attention-out", "layer 3 MoE dispatch", "logits"
    kind: str                 # a key of KIND_LABEL
    layer: int | None         # 0-based layer index; None for embedding and logits
    op: str                   # a key of commprof.model.collectives.COLLECTIVES
    size_bytes: int
    send_bytes_per_rank: int

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# input checks


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype`` (bf16, fp16, fp32)."""
    if dtype not in DTYPE_BYTES:
        raise UsageError(f"--dtype '{dtype}': use one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


#: The largest value each integer flag of ``plan`` takes: far past any real deployment, and small
#: enough that every figure the plan prints stays a plain number (no 9.54e+08 GiB).
MAX_TP = 65_536               # a config's head count is at most 65,536, and TP must divide it
MAX_BATCH = 1 << 20           # sequences decoded together
MAX_CONTEXT = 1 << 24         # tokens per sequence (16,777,216)


def _positive_int(value, flag: str, maximum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{flag} {shown(value)}: expected a whole number >= 1")
    if maximum is not None and value > maximum:
        raise UsageError(f"{flag} {shown(value)}: expected a whole number from 1 to {maximum:,}")
    return value


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def check_tp(model: ModelShape, tp: int) -> None:
    """Raise :class:`UsageError` unless ``tp`` splits the model's heads the way vLLM requires.

    Query heads must divide evenly. KV heads must divide evenly when there are at least ``tp`` of
    them; with fewer, each KV head is replicated, so ``tp`` must be a multiple of their number.
    """
    _positive_int(tp, "--tp")
    if model.q_heads % tp:
        raise UsageError(f"model {model.name}: --tp {tp} does not divide its {model.q_heads} query heads; "
                         f"use one of {_divisors(model.q_heads)}")
    if model.is_mla:
        return
    kv = model.kv_heads
    if kv >= tp and kv % tp:
        raise UsageError(f"model {model.name}: --tp {tp} does not divide its {kv} KV heads; "
                         f"use one of {_divisors(kv)}, or a multiple of {kv} that divides {model.q_heads}")
    if kv < tp and tp % kv:
        raise UsageError(f"model {model.name}: --tp {tp} is not a multiple of its {kv} KV heads "
                         f"(each rank needs whole, replicated KV heads)")


def _check_moe(model: ModelShape, moe: str) -> None:
    if moe not in MOE_MODES:
        raise UsageError(f"--moe '{moe}': use tp (experts sharded by tensor parallelism) "
                         "or ep (expert parallelism)")
    if moe == "ep" and model.experts == 0:
        raise UsageError(f"--moe ep: model {model.name} has no routed experts; "
                         "use --moe tp (the default) or an MoE model")


def kv_heads_per_rank(model: ModelShape, tp: int) -> int:
    """KV heads one rank holds: ``kv_heads / tp``, at least 1 (replicated when tp > kv_heads)."""
    return max(1, model.kv_heads // tp)


# --------------------------------------------------------------------------------------------
# collectives


def decode_collectives(model: ModelShape, tp: int, batch: int, dtype: str = "bf16", sp: bool = False,
                       moe: str = "tp") -> list[CollectiveSite]:
    """Every collective of one decode step of ``batch`` sequences, in execution order.

    * embedding: one all-reduce of ``batch x hidden`` elements (vocab-parallel embedding);
    * each layer: an attention-out all-reduce and an MLP-out all-reduce of ``batch x hidden``;
    * logits: one all-gather whose output is ``batch x vocab`` elements (each rank gives vocab/tp).

    ``sp=True`` (sequence parallelism) replaces every all-reduce by a reduce-scatter followed by an
    all-gather of the same total bytes. ``moe="ep"`` (expert parallelism) replaces the MLP-out
    all-reduce of each MoE layer (not the leading dense layers) by a dispatch and a combine
    all-to-all, each sending ``batch x top_k x hidden`` elements per rank. That size assumes
    uniform routing, i.e. every rank sends and receives the same share; a skewed router sends more
    to the ranks holding hot experts. ``moe="tp"`` shards each expert over the TP ranks, so an MoE
    layer ends in one all-reduce like a dense one.

    With ``tp == 1`` a single GPU holds the whole model and the list is empty.

    Sizes are bytes: ``size_bytes`` in nccl-tests' meaning after ``COLLECTIVES[op].layout`` rounding.
    """
    dtype_bytes(dtype)
    check_tp(model, tp)
    _positive_int(batch, "--batch")
    return step_collectives(model, tp, batch, batch, dtype, sp, moe)


def step_collectives(model: ModelShape, tp: int, tokens: int, logits_tokens: int, dtype: str = "bf16",
                     sp: bool = False, moe: str = "tp") -> list[CollectiveSite]:
    """Every collective of one forward step (:func:`_step_collectives`); a new list of the same frozen
    sites each call (the sites of a shape are computed once: a fit prices the same steps thousands of times)."""
    try:
        hash(model)
    except TypeError:       # a shape read from a config.json may hold lists: priced without the cache
        return list(_step_collectives.__wrapped__(model, tp, tokens, logits_tokens, dtype, sp, moe))
    return list(_step_collectives(model, tp, tokens, logits_tokens, dtype, sp, moe))


@functools.lru_cache(maxsize=4096)
def _step_collectives(model: ModelShape, tp: int, tokens: int, logits_tokens: int, dtype: str = "bf16",
                      sp: bool = False, moe: str = "tp") -> tuple[CollectiveSite, ...]:
    """Every collective of one forward step that carries ``tokens`` tokens and takes the logits of
    ``logits_tokens`` of them, in execution order (see :func:`decode_collectives`, whose step has
    ``tokens = logits_tokens = batch``). A prefill chunk of K tokens has ``tokens = K`` and
    ``logits_tokens = 1`` (its last token); a mixed step of B decode tokens and a chunk of K has
    ``tokens = B + K`` and ``logits_tokens = B + 1``."""
    elem = dtype_bytes(dtype)
    check_tp(model, tp)
    _positive_int(tokens, "tokens per step")
    _check_moe(model, moe)
    if tp == 1:
        return []
    batch = tokens

    sites: list[CollectiveSite] = []

    def add(site: str, kind: str, layer: int | None, op: str, total_bytes: int) -> None:
        lay = COLLECTIVES[op].layout(total_bytes, tp, elem)
        sites.append(CollectiveSite(site, kind, layer, op, lay.size_bytes, lay.in_numel * elem))

    def reduce(site: str, kind: str, layer: int | None, total_bytes: int) -> None:
        if sp:
            add(site, kind, layer, "reduce_scatter", total_bytes)
            add(site, kind, layer, "all_gather", total_bytes)
        else:
            add(site, kind, layer, "all_reduce", total_bytes)

    activation = batch * model.hidden * elem
    reduce("embedding", "embedding", None, activation)
    for i in range(model.layers):
        reduce(f"layer {i} attention-out", "attn_out", i, activation)
        if moe == "ep" and is_moe_layer(model, i):
            routed = batch * model.top_k * model.hidden * elem
            add(f"layer {i} MoE dispatch", "moe_dispatch", i, "all_to_all", routed)
            add(f"layer {i} MoE combine", "moe_combine", i, "all_to_all", routed)
        else:
            reduce(f"layer {i} MLP-out", "mlp_out", i, activation)
    add("logits", "logits", None, "all_gather", logits_tokens * model.vocab * elem)
    return tuple(sites)


def step_counts(sites: list[CollectiveSite], batch: int) -> dict:
    """Totals of one step: collectives per step and per generated token (``per step / batch``),
    bytes per step (nccl-tests sizes summed, and one rank's send bytes summed), counts by op
    and by kind."""
    _positive_int(batch, "--batch")
    by_op: dict[str, int] = {}
    by_kind: dict[str, int] = {}
    for s in sites:
        by_op[s.op] = by_op.get(s.op, 0) + 1
        by_kind[s.kind] = by_kind.get(s.kind, 0) + 1
    return {
        "collectives_per_step": len(sites),
        "collectives_per_token": len(sites) / batch,
        "size_bytes_per_step": sum(s.size_bytes for s in sites),
        "send_bytes_per_rank_per_step": sum(s.send_bytes_per_rank for s in sites),
        "by_op": by_op,
        "by_kind": by_kind,
    }


# --------------------------------------------------------------------------------------------
# memory


def _shard(n: int, tp: int) -> int:
    """The largest rank's share of ``n`` rows split over ``tp`` ranks."""
    return -(-n // tp)


def weights_per_rank(model: ModelShape, tp: int, dtype: str = "bf16") -> dict:
    """Weight bytes one TP rank holds, by part, and ``total``.

    * embedding and lm_head: ``vocab x hidden / tp`` each (lm_head 0 when tied to the embedding);
    * attention: q, k, v, o sharded by heads, KV heads replicated when tp > kv_heads; for MLA the
      low-rank down-projections (q_a, kv_a) are replicated and q_b, kv_b, o sharded by heads;
    * dense MLP: ``3 x hidden x ffn / tp`` (gate, up, down) on each dense layer;
    * MoE layers: ``experts x 3 x hidden x expert_ffn / tp``, the router ``hidden x experts``
      (replicated) and the shared experts sharded like a dense MLP. Expert parallelism places
      ``experts / tp`` whole experts per rank: the same bytes when tp divides the expert count;
    * norms: two per layer plus the final one (and MLA's two latent norms), replicated.

    Biases (e.g. Qwen2's q/k/v bias) are left out: they are well under 0.1% of the weights.
    """
    elem = dtype_bytes(dtype)
    check_tp(model, tp)
    h, L = model.hidden, model.layers
    heads = model.q_heads // tp

    embedding = _shard(model.vocab, tp) * h
    lm_head = 0 if model.tie_word_embeddings else embedding
    if model.is_mla:
        qk_dim = model.qk_nope_head_dim + model.qk_rope_head_dim
        if model.q_lora_rank:
            q = h * model.q_lora_rank + model.q_lora_rank * heads * qk_dim
        else:
            q = h * heads * qk_dim
        kv = (h * (model.kv_lora_rank + model.qk_rope_head_dim)
              + model.kv_lora_rank * heads * (model.qk_nope_head_dim + model.v_head_dim))
        o = heads * model.v_head_dim * h
        attention_layer = q + kv + o
        norms_layer = 2 * h + model.q_lora_rank + model.kv_lora_rank
    else:
        q_cols = heads * model.head_dim
        kv_cols = kv_heads_per_rank(model, tp) * model.head_dim
        attention_layer = h * q_cols + 2 * h * kv_cols + q_cols * h
        norms_layer = 2 * h

    moe_layers = sum(1 for i in range(L) if is_moe_layer(model, i))
    dense_mlp = (L - moe_layers) * 3 * h * _shard(model.ffn, tp)
    experts = moe_layers * model.experts * 3 * h * _shard(model.expert_ffn, tp)
    router = moe_layers * h * model.experts
    shared_ffn = model.shared_expert_ffn or model.expert_ffn
    shared = moe_layers * model.shared_experts * 3 * h * _shard(shared_ffn, tp)
    norms = L * norms_layer + h

    parts = {
        "embedding": embedding,
        "lm_head": lm_head,
        "attention": L * attention_layer,
        "attention_per_layer": attention_layer,
        "dense_mlp": dense_mlp,
        "moe_experts": experts,
        "moe_shared_experts": shared,
        "moe_router": router,
        "norms": norms,
    }
    out = {k: v * elem for k, v in parts.items()}
    out["total"] = sum(v for k, v in out.items() if k != "attention_per_layer")
    return out


def _kv_bytes_per_token_of_layer(model: ModelShape, tp: int, elem: int) -> int:
    if model.is_mla:
        # The compressed latent and the shared rope key, whole on every rank (as vLLM does).
        return (model.kv_lora_rank + model.qk_rope_head_dim) * elem
    return 2 * kv_heads_per_rank(model, tp) * model.head_dim * elem


def kv_bytes_per_token_per_rank(model: ModelShape, tp: int, dtype: str = "bf16") -> int:
    """KV-cache bytes one rank holds for one token, over every layer.

    Per layer: ``2 x kv_heads_per_rank x head_dim x dtype`` (K and V); MLA caches
    ``(kv_lora_rank + qk_rope_head_dim) x dtype`` replicated on every TP rank. Sliding-window
    layers stop growing past their window: see :func:`kv_bytes_per_sequence_per_rank`.
    """
    elem = dtype_bytes(dtype)
    check_tp(model, tp)
    return model.layers * _kv_bytes_per_token_of_layer(model, tp, elem)


def kv_bytes_per_sequence_per_rank(model: ModelShape, tp: int, context: int, dtype: str = "bf16") -> int:
    """KV-cache bytes one rank holds for one sequence of ``context`` tokens; a sliding-window
    layer holds at most ``sliding_window`` tokens."""
    elem = dtype_bytes(dtype)
    check_tp(model, tp)
    _positive_int(context, "--context")
    per_layer = _kv_bytes_per_token_of_layer(model, tp, elem)
    total = 0
    for i in range(model.layers):
        tokens = min(context, model.sliding_window) if is_sliding(model, i) else context
        total += tokens * per_layer
    return total


# --------------------------------------------------------------------------------------------
# the plan


@dataclass(frozen=True)
class Plan:
    """A modelled decode step: its collectives, its totals and one rank's memory."""

    model: ModelShape
    tp: int
    batch: int
    context: int
    dtype: str
    sp: bool
    moe: str
    gpu_mem_bytes: int | None
    mem_util: float
    sites: tuple
    counts: dict
    weights: dict                      # bytes per rank, by part (see weights_per_rank)
    kv_bytes_per_token_per_rank: int
    kv_bytes_per_sequence_per_rank: int
    usable_bytes: int | None           # gpu_mem_bytes x mem_util
    kv_budget_bytes: int | None        # usable_bytes - weights total (negative: weights do not fit)
    max_sequences: int | None          # None without gpu_mem_bytes
    weights_fit: bool | None
    assumptions: tuple
    phase: str = "decode"              # decode, prefill or mixed (see PHASES)
    prefill: dict | None = None        # prefill and mixed: the prompt's chunks, totals, activations

    def to_dict(self) -> dict:
        return {
            "kind": "modelled",
            "phase": self.phase,
            "model": self.model.name,
            "source": self.model.source,
            "tp": self.tp,
            "batch": self.batch,
            "context": self.context,
            "dtype": self.dtype,
            "sp": self.sp,
            "moe": self.moe,
            "gpu_mem_bytes": self.gpu_mem_bytes,
            "mem_util": self.mem_util,
            "counts": dict(self.counts),
            "memory": {
                "weights_bytes_per_rank": dict(self.weights),
                "kv_bytes_per_token_per_rank": self.kv_bytes_per_token_per_rank,
                "kv_bytes_per_sequence_per_rank": self.kv_bytes_per_sequence_per_rank,
                "usable_bytes": self.usable_bytes,
                "kv_budget_bytes": self.kv_budget_bytes,
                "max_sequences": self.max_sequences,
                "weights_fit": self.weights_fit,
                "batch_fits": None if self.max_sequences is None else self.max_sequences >= self.batch,
            },
            "prefill": self.prefill,
            "assumptions": list(self.assumptions),
            "model_shape": self.model.to_dict(),
            "collectives": [s.to_dict() for s in self.sites],
        }


def _assumptions(model: ModelShape, tp: int, sp: bool, moe: str) -> tuple:
    a = ["Modelled, not measured: Megatron-style tensor parallelism as vLLM runs it; one decode step "
         "gives each of the batch's sequences one new token."]
    if tp == 1:
        a.append("tp 1: one GPU holds the whole model, so a step has no collectives.")
    a.append("Vocab-parallel embedding ends in one all-reduce of batch x hidden; the logits are "
             "all-gathered, batch x vocab in total (vocab not padded).")
    a.append("Sequence parallelism: each all-reduce becomes a reduce-scatter plus an all-gather of the "
             "same total bytes." if sp else "No sequence parallelism.")
    if model.experts:
        if moe == "ep":
            a.append("Expert parallelism: each MoE layer's all-reduce becomes a dispatch and a combine "
                     "all-to-all of batch x top_k x hidden per rank, assuming uniform routing (skew sends "
                     "more to hot experts); shared experts add no collective.")
        else:
            a.append("MoE experts sharded by tensor parallelism: each MoE layer ends in one all-reduce, "
                     "like a dense MLP.")
    a.append("Sizes are nccl-tests sizes rounded as the sweep rounds them, so a sweep row can be looked "
             "up by (op, size_bytes).")
    a.append("Weights in the plan's dtype, biases left out, norms included; KV heads replicated when "
             "tp exceeds them.")
    tie_src = (model.extra or {}).get("tie_word_embeddings_source")
    a.append(("lm_head tied to the embedding (no weights of its own)" if model.tie_word_embeddings else
              "lm_head has its own weights (vocab x hidden / tp per rank)")
             + (f": tie_word_embeddings from {tie_src}." if tie_src else "."))
    kv = "KV cache in the plan's dtype"
    if model.sliding_window:
        kv += f"; sliding-window layers hold at most {model.sliding_window} tokens"
    if model.is_mla:
        kv += "; MLA caches kv_lora_rank + qk_rope_head_dim per token per layer on every rank"
    a.append(kv + ".")
    a.append("Sequences that fit = (GPU memory x mem_util - weights per rank) / KV per sequence; "
             "activations, workspace, CUDA graphs and NCCL buffers are ignored, so it is an upper bound.")
    return tuple(a)


def kv_budget(gpu_mem_bytes: int | None, mem_util: float, weights_bytes: int, kv_seq_bytes: int):
    """(usable bytes, KV-cache budget after the weights, weights fit?, sequences that fit) of one
    GPU's memory; all None without ``gpu_mem_bytes``."""
    if gpu_mem_bytes is None:
        return None, None, None, None
    usable = math.floor(gpu_mem_bytes * mem_util)
    budget = usable - weights_bytes
    fit = budget >= 0
    return usable, budget, fit, (budget // kv_seq_bytes if fit else 0)


def build_plan(model: ModelShape, tp: int, batch: int, context: int, gpu_mem_bytes: int | None = None,
               mem_util: float = 0.9, dtype: str = "bf16", sp: bool = False, moe: str = "tp",
               phase: str = "decode", prompt: int | None = None, chunk: int | None = None) -> Plan:
    """Model one decode step of ``model`` on ``tp`` ranks; ``gpu_mem_bytes`` (one GPU, bytes) adds
    how many sequences of ``context`` tokens fit in its KV cache.

    ``phase="prefill"`` models the prefill of one ``prompt``-token prompt in chunks of ``chunk``
    tokens (default: the whole prompt in one step): ``sites`` are one full chunk's collectives and
    ``prefill`` holds the chunks, the totals over the prompt and one chunk's activations; the KV
    cache is the prompt's. ``phase="mixed"`` models one scheduler step of chunked prefill: a chunk
    of ``chunk`` tokens of a ``prompt``-token prompt and ``batch`` decode tokens together."""
    _positive_int(tp, "--tp", MAX_TP)
    _positive_int(batch, "--batch", MAX_BATCH)
    _positive_int(context, "--context", MAX_CONTEXT)
    phase, prompt, chunk = check_phase(phase, prompt, chunk)
    if phase != "decode":
        return _build_prefill_plan(model, tp, batch, context, gpu_mem_bytes, mem_util, dtype, sp, moe, phase,
                                   prompt, chunk)
    if isinstance(mem_util, bool) or not isinstance(mem_util, (int, float)) or not 0 < mem_util <= 1:
        raise UsageError(f"--mem-util {mem_util!r}: expected a fraction in (0, 1], e.g. 0.9")
    if gpu_mem_bytes is not None and (isinstance(gpu_mem_bytes, bool) or not isinstance(gpu_mem_bytes, int)
                                      or gpu_mem_bytes <= 0):
        raise UsageError(f"--gpu-mem {gpu_mem_bytes!r}: expected a positive byte count, e.g. 80G")

    sites = decode_collectives(model, tp, batch, dtype, sp, moe)
    weights = weights_per_rank(model, tp, dtype)
    kv_token = kv_bytes_per_token_per_rank(model, tp, dtype)
    kv_seq = kv_bytes_per_sequence_per_rank(model, tp, context, dtype)
    usable, budget, fit, max_seq = kv_budget(gpu_mem_bytes, mem_util, weights["total"], kv_seq)
    return Plan(model=model, tp=tp, batch=batch, context=context, dtype=dtype, sp=sp, moe=moe,
                gpu_mem_bytes=gpu_mem_bytes, mem_util=float(mem_util), sites=tuple(sites),
                counts=step_counts(sites, batch), weights=weights, kv_bytes_per_token_per_rank=kv_token,
                kv_bytes_per_sequence_per_rank=kv_seq, usable_bytes=usable, kv_budget_bytes=budget,
                max_sequences=max_seq, weights_fit=fit, assumptions=_assumptions(model, tp, sp, moe))


# --------------------------------------------------------------------------------------------
# prefill and mixed steps (chunked prefill)

PHASES = ("decode", "prefill", "mixed")


def check_phase(phase: str, prompt, chunk) -> tuple[str, int | None, int | None]:
    """Validate ``--phase``, ``--prompt`` and ``--chunk`` together; returns them (a prefill's
    chunk defaults to the whole prompt, a mixed step needs one)."""
    if phase not in PHASES:
        raise UsageError(f"--phase {shown(phase)}: use decode, prefill or mixed")
    if phase == "decode":
        if prompt is not None or chunk is not None:
            flag = "--prompt" if prompt is not None else "--chunk"
            raise UsageError(f"{flag} describes a prefill: add --phase prefill or --phase mixed")
        return phase, None, None
    if prompt is None:
        raise UsageError(f"--phase {phase} needs --prompt N (the prompt's length in tokens, e.g. 4096)")
    _positive_int(prompt, "--prompt", MAX_CONTEXT)
    if chunk is None:
        if phase == "mixed":
            raise UsageError("--phase mixed needs --chunk K (the prefill tokens the step carries beside the "
                             "decode tokens, e.g. 512)")
        chunk = prompt
    _positive_int(chunk, "--chunk", MAX_CONTEXT)
    return phase, prompt, min(chunk, prompt)


def prefill_chunks(prompt: int, chunk: int) -> list[int]:
    """The chunk sizes of a ``prompt``-token prefill in chunks of ``chunk`` tokens:
    ``ceil(prompt / chunk)`` chunks, the last one holding the remainder."""
    _positive_int(prompt, "--prompt")
    _positive_int(chunk, "--chunk")
    n, last = divmod(prompt, chunk)
    return [chunk] * n + ([last] if last else [])


def _ffn_active(model: ModelShape) -> int:
    """MLP width one token passes through: the dense FFN, or the active experts (top_k x expert
    FFN, plus the shared experts) of an MoE layer, as the trace engine runs it."""
    if model.experts:
        return model.top_k * model.expert_ffn + model.shared_experts * (model.shared_expert_ffn or model.expert_ffn)
    return model.ffn


def activation_bytes_per_rank(model: ModelShape, tp: int, tokens: int, logits_tokens: int,
                              dtype: str = "bf16") -> dict:
    """Peak activation bytes one rank holds while a step of ``tokens`` tokens runs (layers run one
    after another, so one layer's tensors are live at a time), by part, and ``total``:

    * ``hidden``: the residual stream, the normed input and the all-reduce buffer, 3 x tokens x hidden;
    * ``layer_peak``: the larger of attention's (QKV output and attention output, tokens x
      (2 q_heads + 2 kv_heads) / tp x head_dim) and the MLP's (gate, up and their product,
      3 x tokens x FFN / tp) tensors; attention is taken as flash attention (no tokens x context
      score matrix);
    * ``logits``: ``logits_tokens`` x vocab / tp local and ``logits_tokens`` x vocab gathered.

    Workspace, the allocator's slack and CUDA graphs are not counted: an estimate of the order of
    magnitude, modelled."""
    elem = dtype_bytes(dtype)
    check_tp(model, tp)
    h, d = model.hidden, model.head_dim
    attn = tokens * (2 * (model.q_heads // tp) + 2 * kv_heads_per_rank(model, tp)) * d
    mlp = 3 * tokens * _shard(_ffn_active(model), tp)
    parts = {"hidden": 3 * tokens * h, "layer_peak": max(attn, mlp),
             "logits": logits_tokens * (_shard(model.vocab, tp) + model.vocab)}
    out = {k: v * elem for k, v in parts.items()}
    out["total"] = sum(out.values())
    return out


def prefill_totals(model: ModelShape, tp: int, prompt: int, chunk: int, decode_tokens: int = 0,
                   dtype: str = "bf16", sp: bool = False, moe: str = "tp") -> dict:
    """Totals over a whole prompt's prefill: ``ceil(prompt / chunk)`` steps, each carrying a chunk
    (and ``decode_tokens`` decode tokens in mixed steps), each ending in a logits all-gather of
    the chunk's last token (and the decode tokens). Counts and bytes by op, per chunk size."""
    chunks = prefill_chunks(prompt, chunk)
    total = {"collectives": 0, "size_bytes": 0, "send_bytes_per_rank": 0, "by_op": {}}
    per_size = []
    for tokens in sorted(set(chunks), reverse=True):
        n = chunks.count(tokens)
        sites = step_collectives(model, tp, tokens + decode_tokens, 1 + decode_tokens, dtype, sp, moe)
        c = step_counts(sites, tokens + decode_tokens)
        per_size.append({"chunk_tokens": tokens, "steps": n, "collectives_per_step": c["collectives_per_step"],
                         "size_bytes_per_step": c["size_bytes_per_step"],
                         "send_bytes_per_rank_per_step": c["send_bytes_per_rank_per_step"]})
        total["collectives"] += n * c["collectives_per_step"]
        total["size_bytes"] += n * c["size_bytes_per_step"]
        total["send_bytes_per_rank"] += n * c["send_bytes_per_rank_per_step"]
        for op, k in c["by_op"].items():
            total["by_op"][op] = total["by_op"].get(op, 0) + n * k
    return {"prompt": prompt, "chunk": chunk, "steps": len(chunks), "last_chunk_tokens": chunks[-1],
            "per_chunk_size": per_size, "total": total}


def prefill_comm_us(model: ModelShape, tp: int, prompt: int, chunk: int, price, decode_tokens: int = 0,
                    dtype: str = "bf16", sp: bool = False, moe: str = "tp") -> float:
    """The collectives of a whole prompt's prefill in chunks of ``chunk`` tokens, priced by
    ``price(op, size_bytes) -> us`` (a sweep's interpolation or a reference profile), in us: the
    part of the time to first token spent in collectives when nothing overlaps them."""
    total = 0.0
    chunks = prefill_chunks(prompt, chunk)
    for tokens in set(chunks):
        sites = step_collectives(model, tp, tokens + decode_tokens, 1 + decode_tokens, dtype, sp, moe)
        total += chunks.count(tokens) * sum(price(s.op, s.size_bytes) for s in sites)
    return total


#: How close to the least communication a chunk size must come to count as "favoured": the
#: smallest such chunk keeps decode steps short (what chunking is for) at almost no cost.
FAVOURED_WITHIN_PCT = 5.0


def chunk_candidates(prompt: int, smallest: int = 64) -> list[int]:
    """Powers of two from ``smallest`` up to below the prompt, and the whole prompt (no chunking)."""
    out, c = [], smallest
    while c < prompt:
        out.append(c)
        c *= 2
    return out + [prompt]


def favoured_chunk(model: ModelShape, tp: int, prompt: int, price, dtype: str = "bf16", candidates=None,
                   within_pct: float = FAVOURED_WITHIN_PCT) -> dict:
    """The prefill's collectives at each candidate chunk size (:func:`chunk_candidates`), priced by
    ``price``: ``least_chunk`` (the least communication; with an alpha-beta price it is always the
    largest chunk, since every chunk pays each collective's fixed cost again) and
    ``favoured_chunk``, the smallest chunk within ``within_pct`` % of that least, with ``rows``
    (chunk, steps, comm_us)."""
    cands = list(candidates or chunk_candidates(prompt))
    rows = [{"chunk": c, "steps": len(prefill_chunks(prompt, c)),
             "comm_us": prefill_comm_us(model, tp, prompt, c, price, dtype=dtype)} for c in cands]
    least = min(rows, key=lambda r: (r["comm_us"], -r["chunk"]))
    fav = min((r for r in rows if r["comm_us"] <= least["comm_us"] * (1 + within_pct / 100.0)),
              key=lambda r: r["chunk"])
    return {"least_chunk": least["chunk"], "least_comm_us": least["comm_us"], "favoured_chunk": fav["chunk"],
            "favoured_comm_us": fav["comm_us"], "within_pct": within_pct, "rows": rows}


def _prefill_assumptions(phase: str) -> list[str]:
    a = ["Prefill: the prompt runs in ceil(prompt / chunk) steps (chunked prefill, as vLLM and TensorRT-LLM "
         "schedule it with max_num_batched_tokens); each step's all-reduces carry its tokens x hidden, so the "
         "count per step is the decode step's (2L+2 for a dense model) and only the sizes grow."]
    a.append("Logits: each chunk step all-gathers the logits of 1 token, the chunk's last (vLLM computes logits "
             "at every scheduled sequence's last position and drops the sample of an unfinished prompt; the "
             "last chunk's token is the first output token). The synthetic engine does the same.")
    if phase == "mixed":
        a.append("Mixed step: the decode tokens ride in the same step as the chunk, so each all-reduce carries "
                 "(batch + chunk) x hidden and the logits all-gather batch + 1 tokens.")
    a.append("Activations of one step: modelled peak of one layer (flash attention, no score matrix) plus "
             "the logits; workspace not counted.")
    return a


def _build_prefill_plan(model, tp, batch, context, gpu_mem_bytes, mem_util, dtype, sp, moe, phase, prompt,
                        chunk) -> Plan:
    decode_tokens = batch if phase == "mixed" else 0
    sites = step_collectives(model, tp, chunk + decode_tokens, 1 + decode_tokens, dtype, sp, moe)
    totals = prefill_totals(model, tp, prompt, chunk, decode_tokens, dtype, sp, moe)
    act = activation_bytes_per_rank(model, tp, chunk + decode_tokens, 1 + decode_tokens, dtype)
    kv_prompt = kv_bytes_per_sequence_per_rank(model, tp, prompt, dtype)
    if phase == "prefill":
        context = prompt          # the KV cache the plan counts is the prompt's
    weights = weights_per_rank(model, tp, dtype)
    kv_token = kv_bytes_per_token_per_rank(model, tp, dtype)
    kv_seq = kv_bytes_per_sequence_per_rank(model, tp, context, dtype)
    usable, budget, fit, max_seq = kv_budget(gpu_mem_bytes, mem_util, weights["total"], kv_seq)
    prefill = {**totals, "decode_tokens": decode_tokens,
               "tokens_per_step": chunk + decode_tokens,
               "logits_tokens_per_step": 1 + decode_tokens,
               "activation_bytes_per_rank": act, "kv_bytes_prompt_per_rank": kv_prompt}
    return Plan(model=model, tp=tp, batch=batch, context=context, dtype=dtype, sp=sp, moe=moe,
                gpu_mem_bytes=gpu_mem_bytes, mem_util=float(mem_util), sites=tuple(sites),
                counts=step_counts(sites, chunk + decode_tokens), weights=weights,
                kv_bytes_per_token_per_rank=kv_token, kv_bytes_per_sequence_per_rank=kv_seq, usable_bytes=usable,
                kv_budget_bytes=budget, max_sequences=max_seq, weights_fit=fit,
                assumptions=_assumptions(model, tp, sp, moe) + tuple(_prefill_assumptions(phase)),
                phase=phase, prefill=prefill)
