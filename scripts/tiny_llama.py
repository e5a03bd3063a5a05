"""The tiny Llama the serve tests, the committed serve examples and the engine tests run: random
weights and a word-level tokenizer over commprof serve's prompt words (one token per word, so
prompt lengths are exact), written to a dir; nothing is downloaded.

    python scripts/tiny_llama.py DIR [HIDDEN LAYERS]

Runs in whichever venv holds torch and transformers (.venv-serve from scripts/serve_venv.sh, or
.venv-vllm): only commprof's prompt words are taken from the checkout (commprof.model.serveconfig,
which imports nothing outside the standard library)."""
from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_tiny_model(out: str, hidden: int = 64, layers: int = 2) -> str:
    """A tiny Llama with random weights and a word-level tokenizer written to ``out``. The model
    never emits a special token (suppressed) and has no EOS, so every request streams max_tokens tokens."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from commprof.model.serveconfig import WORDS

    os.makedirs(out, exist_ok=True)
    words = ["<unk>", "<s>", "</s>"] + [f"\u2581{w}" for w in WORDS] + [f"\u2581w{i}" for i in range(64)]
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    fast.save_pretrained(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=8192, bos_token_id=1, eos_token_id=None, pad_token_id=0,
                      tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(out)
    gen_path = os.path.join(out, "generation_config.json")
    with open(gen_path) as f:
        gen = json.load(f)
    gen["suppress_tokens"] = [0, 1, 2]
    with open(gen_path, "w") as f:
        json.dump(gen, f, indent=2)
    return out


if __name__ == "__main__":
    if len(sys.argv) not in (2, 4):
        sys.exit("usage: python scripts/tiny_llama.py DIR [HIDDEN LAYERS]")
    print(build_tiny_model(sys.argv[1], **({"hidden": int(sys.argv[2]), "layers": int(sys.argv[3])}
                                          if len(sys.argv) == 4 else {})))
