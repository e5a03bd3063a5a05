"""Model shapes: a built-in table and an offline Hugging Face ``config.json`` reader.

The built-in values are the models' published ``config.json`` figures as collected in
``shared/FACTS.md`` and ``shared/research/tracer-anchors.md`` section 3.3 (source named per entry).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from .errors import UsageError
from .jsonfile import read_json_object


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

    def to_dict(self) -> dict:
        return asdict(self)


_FACTS = "shared/FACTS.md model table (from the models' published config.json)"
_ANCHORS = "shared/research/tracer-anchors.md section 3.3 (from the model's published config.json)"

BUILTIN: dict[str, ModelShape] = {m.name.lower(): m for m in [
    ModelShape("Qwen2.5-32B", 64, 5120, 40, 8, 128, 27648, 152064, source=_FACTS),
    ModelShape("Qwen3-32B", 64, 5120, 64, 8, 128, 25600, 151936, source=_FACTS),
    ModelShape("Llama-3.1-70B", 80, 8192, 64, 8, 128, 28672, 128256, source=_FACTS),
    ModelShape("Gemma-3-27B", 62, 5376, 32, 16, 128, 21504, 262208, source=_ANCHORS,
               extra={"sliding_window_layers": 52, "global_layers": 10, "sliding_window": 1024}),
    ModelShape("Qwen3-30B-A3B", 48, 2048, 32, 4, 128, 0, 151936, experts=128, top_k=8,
               expert_ffn=768, source=_FACTS),
    ModelShape("Qwen3-235B-A22B", 94, 4096, 64, 4, 128, 0, 151936, experts=128, top_k=8,
               expert_ffn=1536, source=_FACTS),
    ModelShape("DeepSeek-V3", 61, 7168, 128, 128, 128, 18432, 129280, experts=256, top_k=8,
               expert_ffn=2048, source=_FACTS,
               extra={"dense_layers": 3, "shared_experts": 1, "attention": "MLA",
                      "q_lora_rank": 1536, "kv_lora_rank": 512}),
]}

DEFAULT_MODEL = "Qwen2.5-32B"


def _first(cfg: dict, *keys, default=None):
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return default


def load_config(path: str) -> ModelShape:
    """Read a Hugging Face ``config.json`` (offline) into a :class:`ModelShape`.

    Multimodal configs (Gemma 3) keep the language model under ``text_config``; that is used.
    """
    cfg = read_json_object(path, f"model config '{path}'")
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}

    def need(*keys):
        v = _first(cfg, *keys)
        if v is None:
            raise UsageError(f"model config '{path}': missing field '{keys[0]}'")
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise UsageError(f"model config '{path}': field '{keys[0]}' must be a positive integer, got {v!r}")
        return v

    hidden = need("hidden_size", "d_model", "n_embd")
    vocab = need("vocab_size")
    layers = need("num_hidden_layers", "n_layer", "num_layers")
    q_heads = need("num_attention_heads", "n_head")
    kv_heads = _first(cfg, "num_key_value_heads", default=q_heads)
    head_dim = _first(cfg, "head_dim", default=hidden // q_heads)
    experts = _first(cfg, "num_experts", "n_routed_experts", "num_local_experts", default=0) or 0
    name = _first(cfg, "_name_or_path", default=None) or os.path.basename(os.path.dirname(os.path.abspath(path))) or path
    return ModelShape(
        name=str(name), layers=layers, hidden=hidden, q_heads=q_heads, kv_heads=int(kv_heads),
        head_dim=int(head_dim), ffn=int(_first(cfg, "intermediate_size", "ffn_dim", default=0) or 0),
        vocab=vocab, experts=int(experts), top_k=int(_first(cfg, "num_experts_per_tok", default=0) or 0),
        expert_ffn=int(_first(cfg, "moe_intermediate_size", default=0) or 0),
        source=f"config.json at {os.path.abspath(path)}",
    )


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
