"""Model shapes: a built-in table and an offline Hugging Face ``config.json`` reader.

The built-in values are the models' published ``config.json`` figures as collected in
the models' published ``config.json`` on Hugging Face (source named per entry).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from commprof.model.errors import UsageError, shown, warn
from commprof.model.fileio import read_json_object, shown_path


@dataclass(frozen=True)
class ModelShape:
    """The shapes a decode step's collectives and memory depend on."""

    name: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int                      # dense MLP intermediate size (0 when every layer is MoE)
    vocab: int
    experts: int = 0              # routed experts (0 = dense)
    top_k: int = 0
    expert_ffn: int = 0
    source: str = ""              # where the figures come from
    extra: dict = field(default_factory=dict, compare=False)
    # Sliding-window attention: window in tokens (0 = every layer attends to the whole context).
    # With a window, every layer is sliding except the indices in ``global_layers``.
    sliding_window: int = 0
    global_layers: tuple = ()     # 0-based indices of full-attention layers (ints)
    # MoE: leading dense layers (HF ``first_k_dense_replace``) and always-on shared experts.
    dense_layers: int = 0
    shared_experts: int = 0
    shared_expert_ffn: int = 0    # intermediate size of one shared expert (0 = same as expert_ffn)
    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank > 0 marks an MLA model.
    q_lora_rank: int = 0          # 0 = queries projected straight from hidden (no low-rank q)
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    tie_word_embeddings: bool = False   # lm_head shares the embedding matrix

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["global_layers"] = list(self.global_layers)
        return d


def is_sliding(model: ModelShape, layer_index: int) -> bool:
    """True when layer ``layer_index`` (0-based) keeps only the last ``sliding_window`` tokens."""
    return model.sliding_window > 0 and layer_index not in model.global_layers


def is_moe_layer(model: ModelShape, layer_index: int) -> bool:
    """True when layer ``layer_index`` (0-based) has routed experts instead of a dense MLP."""
    return model.experts > 0 and layer_index >= model.dense_layers


def _every_nth_global(layers: int, pattern: int) -> tuple:
    """Layers i with (i + 1) % pattern == 0 are full attention (Gemma 2/3 layout)."""
    return tuple(i for i in range(layers) if (i + 1) % pattern == 0)


def _hf(repo: str) -> str:
    """The model's published config.json (the figures here are copied from it)."""
    return f"config.json of https://huggingface.co/{repo}"


BUILTIN: dict[str, ModelShape] = {m.name.lower(): m for m in [
    ModelShape("Qwen2.5-32B", 64, 5120, 40, 8, 128, 27648, 152064, source=_hf("Qwen/Qwen2.5-32B")),
    ModelShape("Qwen3-32B", 64, 5120, 64, 8, 128, 25600, 151936, source=_hf("Qwen/Qwen3-32B")),
    ModelShape("Llama-3.1-70B", 80, 8192, 64, 8, 128, 28672, 128256, source=_hf("meta-llama/Llama-3.1-70B")),
    # 52 sliding-window layers (window 1024) + 10 global: sliding_window_pattern 6, so every 6th
    # layer is global; embeddings tied (lm_head reuses them) as in Gemma's config.
    ModelShape("Gemma-3-27B", 62, 5376, 32, 16, 128, 21504, 262208, source=_hf("google/gemma-3-27b-it"),
               sliding_window=1024, global_layers=_every_nth_global(62, 6), tie_word_embeddings=True),
    ModelShape("Qwen3-30B-A3B", 48, 2048, 32, 4, 128, 0, 151936, experts=128, top_k=8,
               expert_ffn=768, source=_hf("Qwen/Qwen3-30B-A3B")),
    ModelShape("Qwen3-235B-A22B", 94, 4096, 64, 4, 128, 0, 151936, experts=128, top_k=8,
               expert_ffn=1536, source=_hf("Qwen/Qwen3-235B-A22B")),
    # MLA figures from DeepSeek-V3's config.json (q_lora_rank 1536, kv_lora_rank 512,
    # qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128; first_k_dense_replace 3).
    ModelShape("DeepSeek-V3", 61, 7168, 128, 128, 128, 18432, 129280, experts=256, top_k=8,
               expert_ffn=2048, source=_hf("deepseek-ai/DeepSeek-V3"), dense_layers=3, shared_experts=1,
               q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
               v_head_dim=128),
    # --- more dense models (shapes from each model's config.json on Hugging Face) -----------------
    ModelShape("Llama-2-70B", 80, 8192, 64, 8, 128, 28672, 32000, source=_hf("meta-llama/Llama-2-70b-hf")),
    ModelShape("Qwen2.5-72B", 80, 8192, 64, 8, 128, 29568, 152064, source=_hf("Qwen/Qwen2.5-72B")),
    ModelShape("Qwen3-8B", 36, 4096, 32, 8, 128, 12288, 151936, source=_hf("Qwen/Qwen3-8B")),
    ModelShape("Llama-3.1-8B", 32, 4096, 32, 8, 128, 14336, 128256, source=_hf("meta-llama/Llama-3.1-8B")),
    ModelShape("Llama-3.3-70B", 80, 8192, 64, 8, 128, 28672, 128256, source=_hf("meta-llama/Llama-3.3-70B-Instruct")),
    # --- the dense models of the published decode figures predict is calibrated and judged on -------
    # (tests/data/published-decode/figures.csv); tied embeddings where the config.json ties them.
    ModelShape("Qwen2.5-1.5B", 28, 1536, 12, 2, 128, 8960, 151936, source=_hf("Qwen/Qwen2.5-1.5B-Instruct"),
               tie_word_embeddings=True),
    ModelShape("Qwen2.5-3B", 36, 2048, 16, 2, 128, 11008, 151936, source=_hf("Qwen/Qwen2.5-3B-Instruct"),
               tie_word_embeddings=True),
    ModelShape("Qwen2.5-7B", 28, 3584, 28, 4, 128, 18944, 152064, source=_hf("Qwen/Qwen2.5-7B-Instruct")),
    ModelShape("Qwen2-7B", 28, 3584, 28, 4, 128, 18944, 152064, source=_hf("Qwen/Qwen2-7B-Instruct")),
    ModelShape("Qwen2.5-14B", 48, 5120, 40, 8, 128, 13824, 152064, source=_hf("Qwen/Qwen2.5-14B-Instruct")),
    # QwQ-32B: Qwen2.5-32B's architecture (its config.json gives the same figures)
    ModelShape("QwQ-32B", 64, 5120, 40, 8, 128, 27648, 152064, source=_hf("Qwen/QwQ-32B")),
    ModelShape("Qwen2-72B", 80, 8192, 64, 8, 128, 29568, 152064, source=_hf("Qwen/Qwen2-72B-Instruct")),
    ModelShape("Qwen1.5-72B", 80, 8192, 64, 64, 128, 24576, 152064, source=_hf("Qwen/Qwen1.5-72B-Chat")),
    ModelShape("Qwen3-1.7B", 28, 2048, 16, 8, 128, 6144, 151936, source=_hf("Qwen/Qwen3-1.7B"),
               tie_word_embeddings=True),
    ModelShape("Qwen3-4B", 36, 2560, 32, 8, 128, 9728, 151936, source=_hf("Qwen/Qwen3-4B"),
               tie_word_embeddings=True),
    ModelShape("Qwen3-14B", 40, 5120, 40, 8, 128, 17408, 151936, source=_hf("Qwen/Qwen3-14B")),
    # --- more MoE models ---------------------------------------------------------------------------
    # DeepSeek-R1: DeepSeek-V3's architecture and config.json figures (same shapes, other weights).
    ModelShape("DeepSeek-R1", 61, 7168, 128, 128, 128, 18432, 129280, experts=256, top_k=8,
               expert_ffn=2048, source=_hf("deepseek-ai/DeepSeek-R1"), dense_layers=3, shared_experts=1,
               q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
               v_head_dim=128),
    # GLM-4.5 (model_type glm4_moe): 92 layers, the first 3 dense (first_k_dense_replace 3); 96 query
    # heads of 128 (head_dim 128, wider than hidden 5120), 8 KV heads; 160 routed experts of 1536, top-8,
    # 1 shared expert; its multi-token-prediction layer (num_nextn_predict_layers 1) is left out.
    ModelShape("GLM-4.5", 92, 5120, 96, 8, 128, 12288, 151552, experts=160, top_k=8, expert_ffn=1536,
               source=_hf("zai-org/GLM-4.5"), dense_layers=3, shared_experts=1, shared_expert_ffn=1536),
    # Kimi-K2: DeepSeek-V3's MLA architecture with 384 routed experts, 64 heads and one leading dense
    # layer (first_k_dense_replace 1), vocabulary 163840.
    ModelShape("Kimi-K2", 61, 7168, 64, 64, 128, 18432, 163840, experts=384, top_k=8, expert_ffn=2048,
               source=_hf("moonshotai/Kimi-K2-Instruct"), dense_layers=1, shared_experts=1,
               q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
               v_head_dim=128),
]}

DEFAULT_MODEL = "Qwen2.5-32B"


def _first(cfg: dict, *keys, default=None):
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return default


def _present(cfg: dict, *keys) -> str:
    """The first of ``keys`` the config gives (for messages), else the first of ``keys``."""
    return next((k for k in keys if cfg.get(k) is not None), keys[0])


# Upper bounds on config.json figures: each is far above every published model (largest today:
# 126 layers, hidden 16384, 262k vocabulary, 256 experts), and keeps every figure derived from
# them (layer lists, weight and KV bytes) finite and small enough to compute at once.
MAX_LAYERS = 4096
MAX_WIDTH = 1 << 20                 # hidden_size: 1,048,576
MAX_FFN = 1 << 24                   # intermediate sizes: 16,777,216
MAX_VOCAB = 1 << 24                 # vocab_size: 16,777,216
MAX_HEADS = 1 << 16                 # heads, head dims, MLA ranks, experts: 65,536
MAX_TOKENS = (1 << 31) - 1          # sliding_window, sliding_window_pattern: a C int


def load_config(path: str) -> ModelShape:
    """Read a Hugging Face ``config.json`` (offline) into a :class:`ModelShape`.

    Multimodal configs (Gemma 3) keep the language model under ``text_config``; that is used.
    Which layers slide, in order of precedence: ``layer_types`` (any type other than
    ``sliding_attention`` counts as full attention), ``sliding_window_pattern`` (every n-th layer
    global; Gemma 2 alternates, pattern 2), ``max_window_layers`` (Qwen2: layers from that index on
    slide, only with ``use_sliding_window``), else every layer slides when a window is given.
    A missing ``tie_word_embeddings`` means the default of the config's ``model_type`` in
    transformers (:func:`tie_word_embeddings`: Llama, Qwen, Mistral, DeepSeek untied; Gemma tied;
    unknown types True as ``PretrainedConfig``): transformers leaves the key out when it equals
    its class's default. The name is :func:`config_label`. Routed experts without ``moe_intermediate_size`` (Mixtral) use
    ``intermediate_size`` as each expert's size.

    Every figure must be a JSON integer (not a string, float, bool, list, NaN or inf) in its
    range (see ``MAX_*``); a bad one is a UsageError of one line naming the field and the rule.
    Legal but odd figures (hidden not a multiple of the heads, no MLP size) print a warning.
    """
    label = f"model config {shown(path, 200)}"
    cfg = read_json_object(path, label)
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}

    def whole(keys, lo: int, hi: int, default=None, rule: str = ""):
        """The first of ``keys`` given, an int in lo..hi; ``default`` when none is given."""
        v = _first(cfg, *keys)
        if v is None:
            if default is None:
                raise UsageError(f"{label}: missing field '{keys[0]}'")
            return default
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            what = (f"a positive integer (at most {hi:,})" if lo == 1 else
                    f"a whole number from {lo} to {hi:,}")
            raise UsageError(f"{label}: field '{_present(cfg, *keys)}' must be {rule or what}, got {shown(v)}")
        return v

    hidden = whole(("hidden_size", "d_model", "n_embd"), 1, MAX_WIDTH)
    vocab = whole(("vocab_size",), 1, MAX_VOCAB)
    layers = whole(("num_hidden_layers", "n_layer", "num_layers"), 1, MAX_LAYERS)
    q_heads = whole(("num_attention_heads", "n_head"), 1, MAX_HEADS)
    kv_heads = whole(("num_key_value_heads",), 1, MAX_HEADS, default=q_heads)
    experts = whole(("num_experts", "n_routed_experts", "num_local_experts"), 0, MAX_HEADS, default=0)
    ffn = whole(("intermediate_size", "ffn_dim"), 0, MAX_FFN, default=0)
    name = config_label(cfg, path)

    mla = {k: whole((k,), 0, MAX_HEADS, default=0) for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
                                                             "qk_nope_head_dim", "v_head_dim")}
    if _first(cfg, "head_dim") is not None:
        head_dim = whole(("head_dim",), 1, MAX_HEADS)
    elif mla["kv_lora_rank"] and mla["v_head_dim"]:
        head_dim = mla["v_head_dim"]
    else:
        head_dim = hidden // q_heads
        if head_dim < 1:
            raise UsageError(f"{label}: no field 'head_dim', and hidden_size {hidden} / num_attention_heads "
                             f"{q_heads} rounds to 0; give head_dim or fewer heads")
        if hidden % q_heads:
            warn(f"{label}: no field 'head_dim', and hidden_size {hidden} is not a multiple of "
                 f"num_attention_heads {q_heads}; using head_dim {head_dim} (rounded down)")

    window = 0 if cfg.get("use_sliding_window") is False else whole(("sliding_window",), 0, MAX_TOKENS, default=0)
    global_layers = _global_layers(cfg, layers, window, label) if window else ()

    shared_ffn = whole(("shared_expert_intermediate_size",), 0, MAX_FFN, default=0)
    shared = whole(("n_shared_experts",), 0, MAX_HEADS, default=1 if shared_ffn else 0)
    dense_layers = whole(("first_k_dense_replace",), 0, MAX_LAYERS, default=0)
    tie, tie_source = tie_word_embeddings(cfg)
    if not isinstance(tie, bool):
        raise UsageError(f"{label}: field 'tie_word_embeddings' must be true or false, got {shown(tie)}")

    # Rules between fields, once each field is sound on its own.
    if q_heads % kv_heads:
        raise UsageError(f"{label}: field 'num_key_value_heads' ({kv_heads}) must divide 'num_attention_heads' "
                         f"({q_heads}): each key/value head serves a whole group of query heads")
    top_k = expert_ffn = 0
    if experts:
        if _first(cfg, "num_experts_per_tok") is None:
            raise UsageError(f"{label}: missing field 'num_experts_per_tok' (routed experts per token), "
                             f"needed with {_present(cfg, 'num_experts', 'n_routed_experts', 'num_local_experts')}")
        top_k = whole(("num_experts_per_tok",), 1, experts,
                      rule=f"a whole number from 1 to the {experts} routed experts")
        expert_ffn = whole(("moe_intermediate_size",), 1, MAX_FFN, default=ffn)
        if expert_ffn < 1:
            raise UsageError(f"{label}: missing field 'moe_intermediate_size' (or 'intermediate_size'), "
                             "the size of one routed expert")
        if dense_layers > layers:
            warn(f"{label}: field 'first_k_dense_replace' ({dense_layers}) is more than the {layers} layers; "
                 "every layer is dense")
    elif ffn == 0:
        warn(f"{label}: no field 'intermediate_size' in a model without experts; its MLP weights count as 0")
    return ModelShape(
        name=name, layers=layers, hidden=hidden, q_heads=q_heads, kv_heads=kv_heads,
        head_dim=head_dim, ffn=ffn, vocab=vocab, experts=experts, top_k=top_k, expert_ffn=expert_ffn,
        source=f"config.json at {shown_path(path)}",
        sliding_window=window, global_layers=global_layers,
        dense_layers=min(dense_layers, layers) if experts else 0,
        shared_experts=shared, shared_expert_ffn=shared_ffn, tie_word_embeddings=tie, **mla,
        extra={"tie_word_embeddings_source": tie_source},
    )


# transformers' default of ``tie_word_embeddings`` per ``model_type``: each config class's own default
# (huggingface/transformers src/transformers/models/<type>/configuration_<type>.py; e.g. LlamaConfig,
# Qwen2Config and DeepseekV3Config say False, Gemma3TextConfig True). A saved config.json leaves the key
# out when it equals its class's default, so a missing key means that default, not always True.
TIE_WORD_EMBEDDINGS_DEFAULT = {
    "llama": False, "mistral": False, "mixtral": False, "qwen2": False, "qwen2_moe": False, "qwen3": False,
    "qwen3_moe": False, "deepseek_v2": False, "deepseek_v3": False, "phi3": False, "phimoe": False,
    "gpt_neox": False, "olmo": False, "olmo2": False, "olmoe": False, "granite": False, "granitemoe": False,
    "glm": False, "glm4": False, "exaone": False, "nemotron": False, "internlm2": False, "arcee": False,
    "gemma": True, "gemma2": True, "gemma3": True, "gemma3_text": True, "starcoder2": True, "cohere": True,
    "cohere2": True, "gpt2": True, "gptj": False, "falcon": True, "opt": True, "bloom": True,
}


def tie_word_embeddings(cfg: dict) -> tuple:
    """(tied, where that came from): the config's own key; else transformers' default for its
    ``model_type`` (:data:`TIE_WORD_EMBEDDINGS_DEFAULT`; Llama: False, so its lm_head counts); else
    ``PretrainedConfig``'s default, True."""
    if "tie_word_embeddings" in cfg:
        return cfg["tie_word_embeddings"], "config.json"
    mtype = cfg.get("model_type")
    if isinstance(mtype, str) and mtype in TIE_WORD_EMBEDDINGS_DEFAULT:
        v = TIE_WORD_EMBEDDINGS_DEFAULT[mtype]
        return v, f"transformers' default for model_type '{mtype}' ({v}): the key is absent"
    return True, ("PretrainedConfig's default (True): the key is absent and model_type "
                  + (f"'{shown(mtype, 40)}' is not in commprof's table" if mtype else "is not given"))


def config_label(cfg: dict, path: str) -> str:
    """The model's name from the config itself: ``_name_or_path``, else ``model_type`` with the
    file's own name, else the file's own name (never its parent folder, e.g. "configs")."""
    def ok(v) -> bool:
        return isinstance(v, str) and bool(v.strip()) and v.isprintable() and len(v) <= 200

    name = cfg.get("_name_or_path")
    if ok(name):
        return name.strip()
    fname = os.path.basename(path) or path
    mtype = cfg.get("model_type")
    return f"{mtype.strip()} ({fname})" if ok(mtype) else fname


def _global_layers(cfg: dict, layers: int, window: int, label: str) -> tuple:
    """Indices of the full-attention layers of a model whose config gives a sliding window."""
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) for t in types):
            raise UsageError(f"{label}: field 'layer_types' must list one attention type per layer ({layers}), "
                             f"got {shown(types)}")
        return tuple(i for i, t in enumerate(types) if t != "sliding_attention")
    pattern = _first(cfg, "sliding_window_pattern", default=2 if cfg.get("model_type") == "gemma2" else None)
    if pattern is not None:
        if not isinstance(pattern, int) or isinstance(pattern, bool) or not 1 <= pattern <= MAX_TOKENS:
            raise UsageError(f"{label}: field 'sliding_window_pattern' must be a positive integer (at most "
                             f"{MAX_TOKENS:,}), got {shown(pattern)}")
        return _every_nth_global(layers, pattern)
    if cfg.get("use_sliding_window") and cfg.get("max_window_layers") is not None:
        mwl = cfg["max_window_layers"]
        if not isinstance(mwl, int) or isinstance(mwl, bool) or mwl < 0:
            raise UsageError(f"{label}: field 'max_window_layers' must be a whole number >= 0, got {shown(mwl)}")
        return tuple(range(min(mwl, layers)))
    return ()


def get_model(spec: str) -> ModelShape:
    """A built-in model by name (case-insensitive) or a path to a ``config.json`` or its folder."""
    key = spec.strip().lower()
    if key in BUILTIN:
        return BUILTIN[key]
    if os.path.isdir(spec):
        return load_config(os.path.join(spec, "config.json"))
    if spec.endswith(".json") or os.path.exists(spec):
        return load_config(spec)
    names = ", ".join(m.name for m in BUILTIN.values())
    raise UsageError(f"unknown model '{spec}': use one of {names}, or a path to a Hugging Face config.json")
