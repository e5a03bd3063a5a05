"""Inputs for fuzzing commprof's parsers, and the property every outcome must have.

Each target pairs a generator ``gen(rnd) -> input`` (``rnd`` is a ``random.Random``) with a check
``check(input, tmp_dir) -> "accepted" | "rejected"``. The check runs the parser and asserts the
property: the parser either raises commprof's own error (a ``CommprofError`` of one line) or
returns a result with no NaN, infinite or negative figure. Any other exception propagates: that
is a crash. Generators mutate real inputs (the nccl-tests logs under tests/data
(public logs with their SOURCE.md), the -J fixture, the built-in models written out as config.json) and build
synthetic ones from the grammar of each format.

tests/test_fuzz_parsers.py lets hypothesis drive ``rnd`` (a few hundred examples, shrinking on
failure); scripts/fuzz.py feeds each target 10,000 seeded inputs and writes results/bench/fuzz.md.
"""
from __future__ import annotations

import copy
import functools
import glob
import json
import math
import os
import re
import random

from commprof.model.errors import CommprofError
from commprof.ingest.nccltests import MAX_BW_GBPS, MAX_TIME_US, _section_rows, read_nccl_tests
from commprof.model.models import BUILTIN, ModelShape, get_model
from commprof.model.sizes import MAX_MESSAGE_BYTES, decode_sizes, parse_sizes
from commprof.model.units import MAX_BYTES, MAX_LIST_INT, parse_bytes, parse_int_list

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "tests", "data")

# Placeholders put into JSON before it is written: json.dumps cannot write an integer over
# Python's 4,300-digit limit, and a deep nest is easier to splice in as text.
HUGE = "__COMMPROF_FUZZ_HUGE_INT__"
DEEP = "__COMMPROF_FUZZ_DEEP__"


# --- real inputs ------------------------------------------------------------------------------------

def real_log_paths() -> list[str]:
    """Every real nccl-tests text log in tests/data/nccl-tests (``*.log`` and the public ``*.txt``)."""
    return (sorted(glob.glob(os.path.join(DATA, "nccl-tests", "*.log")))
            + sorted(glob.glob(os.path.join(DATA, "nccl-tests", "*.txt"))))


@functools.cache
def real_logs() -> tuple[tuple[str, str], ...]:
    """(file name, text) of every real nccl-tests text log (:func:`real_log_paths`)."""
    out = []
    for p in real_log_paths():
        with open(p, encoding="utf-8") as f:
            out.append((os.path.basename(p), f.read()))
    return tuple(out)


def real_json() -> dict:
    """The -J fixture (a fresh copy each call)."""
    return copy.deepcopy(_real_json())


@functools.cache
def _real_json() -> dict:
    with open(os.path.join(DATA, "nccl-tests", "all_reduce_perf_8xA100_v3.json"), encoding="utf-8") as f:
        return json.load(f)


def hf_config(m: ModelShape) -> dict:
    """A built-in model written as the Hugging Face config.json it came from."""
    d = {"_name_or_path": m.name, "hidden_size": m.hidden, "num_hidden_layers": m.layers,
         "num_attention_heads": m.q_heads, "num_key_value_heads": m.kv_heads, "head_dim": m.head_dim,
         "intermediate_size": m.ffn, "vocab_size": m.vocab, "tie_word_embeddings": m.tie_word_embeddings}
    if m.experts:
        d.update(num_experts=m.experts, num_experts_per_tok=m.top_k, moe_intermediate_size=m.expert_ffn,
                 first_k_dense_replace=m.dense_layers, n_shared_experts=m.shared_experts)
    if m.sliding_window:
        d["sliding_window"] = m.sliding_window
        d["layer_types"] = ["full_attention" if i in m.global_layers else "sliding_attention"
                            for i in range(m.layers)]
    if m.kv_lora_rank:
        d.update(q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank, qk_rope_head_dim=m.qk_rope_head_dim,
                 qk_nope_head_dim=m.qk_nope_head_dim, v_head_dim=m.v_head_dim)
    return d


@functools.cache
def real_configs() -> tuple[dict, ...]:
    """Every built-in model as a config.json, the toy config, and Gemma 3's multimodal layout
    (shared: copy before changing one)."""
    cfgs = [hf_config(m) for m in BUILTIN.values()]
    with open(os.path.join(DATA, "toy-dense-config.json"), encoding="utf-8") as f:
        cfgs.append(json.load(f))
    gemma = hf_config(get_model("Gemma-3-27B"))
    del gemma["layer_types"]
    cfgs.append({"model_type": "gemma3", "text_config": {**gemma, "sliding_window_pattern": 6}})
    return tuple(cfgs)


# --- building blocks --------------------------------------------------------------------------------

TOKENS = ["0", "-0", "1", "-1", "-5", "1.5", "-2.50", "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e308",
          "1e309", "-1e309", "9" * 25, "9" * 400, "2147483648", "9007199254740993", "N/A", "0x10", "",
          "1_000", "\u0663", "\u00bd", "float", "sum", "none", "2026-03-01", "10:11:12", "#", ",", "\t"]
JSON_VALUES = [0, -1, 1, 1.5, -0.0, 64.0, float("nan"), float("inf"), -float("inf"), 1e30, 10 ** 30, 2 ** 31,
               2 ** 53 + 1, True, False, None, "", "four", "nan", "1024", "  -1", "sixtyfour", "\n", [], [1],
               [None], {}, {"a": 1}, HUGE, DEEP]
SUFFIXES = ["", "", "K", "M", "G", "B", "KB", "KiB", "MiB", "GiB", "GB", "k", "gib", "T", "TiB", "Q", "KK", "e5",
            " K", "B ", "\u212a"]
JUNK_CHARS = "0123456789.,:-+eE_KMGBikmg pow2PODECdecode\t\n\x00\u0663\u00b2\uff11\u2028"


def _choice(rnd: random.Random, seq):
    return seq[rnd.randrange(len(seq))]


def _digits(rnd: random.Random) -> str:
    n = _choice(rnd, [1, 1, 1, 2, 3, 4, 6, 10, 16, 20, 60, 400])
    return str(rnd.randint(1, 9)) + "".join(str(rnd.randint(0, 9)) for _ in range(n - 1))


def _junk(rnd: random.Random, n: int | None = None) -> str:
    return "".join(_choice(rnd, JUNK_CHARS) for _ in range(n if n is not None else rnd.randint(0, 12)))


def _mutate_text(rnd: random.Random, text: str) -> str:
    """One character-level edit: insert, delete or replace a character."""
    if not text:
        return _junk(rnd)
    i = rnd.randrange(len(text) + 1)
    op = rnd.randrange(3)
    if op == 0:
        return text[:i] + _choice(rnd, JUNK_CHARS) + text[i:]
    if op == 1:
        return text[:i] + text[i + 1:]
    return text[:i] + _choice(rnd, JUNK_CHARS) + text[i + 1:]


def _mutate_bytes(rnd: random.Random, data: bytes) -> bytes:
    """A byte-level edit: a byte that is not UTF-8, a NUL, a cut, or a BOM."""
    op = rnd.randrange(5)
    i = rnd.randrange(len(data) + 1)
    if op == 0:
        return data[:i] + bytes([rnd.choice([0xff, 0xfe, 0xc3, 0x80, 0xe9, 0xed])]) + data[i:]
    if op == 1:
        return data[:i] + b"\x00" + data[i:]
    if op == 2:
        return data[:i]
    if op == 3:
        return _choice(rnd, [b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"]) + data
    return bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 64)))


def _dumps(value) -> str:
    text = json.dumps(value)
    return text.replace(json.dumps(HUGE), "9" * 4400).replace(json.dumps(DEEP), "[" * 3000 + "]" * 3000)


# --- sizes and integer lists ----------------------------------------------------------------------

def gen_size_token(rnd: random.Random) -> str:
    """One byte size as typed for --gpu-mem or p2p --size: digits, a fraction, a suffix, spaces."""
    kind = rnd.randrange(10)
    if kind == 0:
        return _junk(rnd)
    if kind == 1:
        return _mutate_text(rnd, gen_size_token(rnd))
    text = _digits(rnd)
    if rnd.random() < 0.25:
        text += "." + _digits(rnd)[:rnd.randint(1, 4)]
    if rnd.random() < 0.1:
        text = _choice(rnd, ["-", "+", " ", "0", "00"]) + text
    return text + _choice(rnd, SUFFIXES) + (" " if rnd.random() < 0.1 else "")


def _size_or_good(rnd: random.Random) -> str:
    """A size token for a list or a range: most of them valid, so whole lists get accepted too."""
    if rnd.random() < 0.3:
        return gen_size_token(rnd)
    return f"{rnd.randint(1, 4096)}{_choice(rnd, ['', 'K', 'M', 'KiB', 'MB', 'G'])}"


def gen_int_list(rnd: random.Random) -> str:
    """A value of --tp, --batch, --ep or --tokens: integers and commas, some of them wrong."""
    if rnd.random() < 0.1:
        return _junk(rnd)
    parts = []
    for _ in range(rnd.randint(1, 5)):
        r = rnd.random()
        parts.append(_choice(rnd, TOKENS) if r < 0.15 else "" if r < 0.2 else _digits(rnd) if r < 0.35
                     else str(_choice(rnd, [1, 2, 4, 8, 16, 32, 128])))
    text = ",".join(parts)
    return _mutate_text(rnd, text) if rnd.random() < 0.15 else text


def gen_size_spec(rnd: random.Random) -> tuple[str, list[str], str, str]:
    """(--sizes, ops, model name, --batch): decode, pow2:MIN-MAX or a list."""
    ops = rnd.sample(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"], rnd.randint(1, 3))
    model = _choice(rnd, sorted(BUILTIN))
    batch = gen_int_list(rnd) if rnd.random() < 0.3 else _choice(rnd, ["1,8,32,128", "1", "4096", "100000000"])
    kind = rnd.randrange(6)
    if kind == 0:
        spec = _choice(rnd, ["decode", "DECODE", " decode ", "decode,", "decod"])
    elif kind == 1:
        spec = (_choice(rnd, ["pow2:", "pow2:", "POW2:", "pow2: ", "pow2"]) + _size_or_good(rnd)
                + _choice(rnd, ["-", "-", "-", "--", "-pow2:", "", ","]) + _size_or_good(rnd))
    elif kind == 2:
        spec = _junk(rnd, rnd.randint(0, 30))
    else:
        spec = _choice(rnd, [",", ",", ", ", ",,"]).join(_size_or_good(rnd) for _ in range(rnd.randint(1, 5)))
        if rnd.random() < 0.15:
            spec = _choice(rnd, [",", ""]) + spec + _choice(rnd, [",", " ,", ""])
    return spec, ops, model, batch


def _rejected(e: CommprofError) -> str:
    msg = str(e)
    assert msg.strip() and "\n" not in msg and "\r" not in msg, f"not one line: {msg!r}"
    return "rejected"


def check_size_token(text: str, tmp: str | None = None) -> str:
    try:
        n = parse_bytes(text)
    except CommprofError as e:
        assert isinstance(e, ValueError)            # callers catch ValueError to name their flag
        return _rejected(e)
    assert type(n) is int and 1 <= n <= MAX_BYTES, n
    return "accepted"


def check_int_list(text: str, tmp: str | None = None) -> str:
    try:
        values = parse_int_list(text, "--tp")
    except CommprofError as e:
        return _rejected(e)
    assert values and all(type(v) is int and 1 <= v <= MAX_LIST_INT for v in values), values
    return "accepted"


def check_size_spec(case, tmp: str | None = None) -> str:
    spec, ops, model, batch = case
    try:
        batches = parse_int_list(batch, "--batch")
        points = parse_sizes(spec, ops, get_model(model), batches, 2)
    except CommprofError as e:
        return _rejected(e)
    assert points, spec
    for p in points:
        assert p.op in ops and type(p.size_bytes) is int and 1 <= p.size_bytes <= MAX_MESSAGE_BYTES, p
    return "accepted"


# --- config.json --------------------------------------------------------------------------------

CONFIG_FIELDS = ["hidden_size", "d_model", "vocab_size", "num_hidden_layers", "n_layer", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "intermediate_size", "ffn_dim", "num_experts",
                 "n_routed_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
                 "shared_expert_intermediate_size", "n_shared_experts", "first_k_dense_replace", "q_lora_rank",
                 "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "sliding_window",
                 "sliding_window_pattern", "use_sliding_window", "max_window_layers", "layer_types",
                 "tie_word_embeddings", "model_type", "_name_or_path", "text_config"]


def _config_value(rnd: random.Random, key: str, cfg: dict):
    r = rnd.random()
    if r < 0.45:
        return _choice(rnd, JSON_VALUES)
    if r < 0.6 and isinstance(cfg.get(key), int) and not isinstance(cfg.get(key), bool):
        return cfg[key] + _choice(rnd, [-cfg[key], -cfg[key] - 1, 1, -1, cfg[key], cfg[key] * 1000])
    if key == "layer_types":
        return [_choice(rnd, ["sliding_attention", "full_attention", 1, None])
                for _ in range(_choice(rnd, [0, 1, cfg.get("num_hidden_layers", 4) if isinstance(
                    cfg.get("num_hidden_layers"), int) and cfg.get("num_hidden_layers", 4) < 5000 else 4]))]
    if key == "text_config":
        return {k: v for k, v in cfg.items() if k != "text_config"}
    return rnd.randint(-3, 5) if r < 0.8 else _choice(rnd, [2 ** 31 - 1, 2 ** 31, 4096, 4097, 1 << 20, 1 << 24])


def mutate_config(rnd: random.Random, cfg: dict) -> dict:
    """Replace, delete or add fields of one config (inside ``text_config`` when it has one)."""
    cfg = copy.deepcopy(cfg)
    target = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) and rnd.random() < 0.7 else cfg
    for _ in range(rnd.randint(1, 3)):
        key = _choice(rnd, CONFIG_FIELDS + list(target))
        if rnd.random() < 0.2:
            target.pop(key, None)
        else:
            target[key] = _config_value(rnd, key, target)
    return cfg


def gen_config(rnd: random.Random) -> bytes:
    """A config.json's bytes: a real config with fields broken, or a broken file."""
    cfg = _choice(rnd, real_configs())
    if rnd.random() < 0.9:
        cfg = mutate_config(rnd, cfg)
    r = rnd.random()
    if r < 0.04:
        cfg = _choice(rnd, [[cfg], "config", 3, None, True])
    text = _dumps(cfg).encode("utf-8")
    if r > 0.9:
        text = _mutate_bytes(rnd, text)
    elif r > 0.85:
        text = _mutate_text(rnd, text.decode("utf-8")).encode("utf-8", "surrogatepass")
    return text


def check_config(data: bytes, tmp: str) -> str:
    try:
        m = get_model(_file(tmp, "config.json", data))
    except CommprofError as e:
        return _rejected(e)
    ints = {k: v for k, v in m.to_dict().items() if k not in ("name", "source", "extra", "global_layers",
                                                               "tie_word_embeddings")}
    for k, v in ints.items():
        assert type(v) is int and v >= 0, (k, v)
    for k in ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "vocab"):
        assert ints[k] >= 1, (k, ints[k])
    assert m.layers <= 4096 and m.hidden <= 1 << 20 and m.vocab <= 1 << 24 and m.q_heads % m.kv_heads == 0
    assert (m.top_k == 0) if m.experts == 0 else (1 <= m.top_k <= m.experts and m.expert_ffn >= 1)
    assert all(type(i) is int and 0 <= i < m.layers for i in m.global_layers) and m.dense_layers <= m.layers
    assert isinstance(m.name, str) and m.name.isprintable() and type(m.tie_word_embeddings) is bool
    for p in decode_sizes(["all_reduce", "all_gather"], m, [1, 128], 2):       # the sizes it gives a sweep
        assert 1 <= p.size_bytes <= MAX_MESSAGE_BYTES
    return "accepted"


# --- nccl-tests text ------------------------------------------------------------------------------

LOG_NAMES = ["all_reduce_perf.log", "all_gather_perf.log", "alltoall.txt", "broadcast.log", "rs.log", "x.txt"]
LOG_LINES = [
    "# Out of bounds values", "# Avg bus bandwidth", "# Collective test starting: sendrecv_perf",
    "# Collective test starting: all_gather_perf", "# Collective test concluded: all_reduce_perf",
    "# nThread 0 nGpus 0 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 validation: 1",
    "# nThread 1 nGpus " + "9" * 30 + " graph: 1 iters: " + "9" * 5000,
    "#  Rank " + "9" * 30 + " Group 0 Pid 1 on h device 0 [0x00] X",
    "#  Rank  0 Group  0 Pid   2001 on      boxA device  0 [0000:18:00] NVIDIA H100 80GB HBM3",
    "#  Rank  1 Group  1 Pid   2002 on      boxB device  1 [0000:2a:00] NVIDIA H100 80GB HBM3",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#  size count type time",
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99",
    "# nccl-tests version 2.17.9 nccl-headers=22903 nccl-library=" + "9" * 50,
    "        1024           256     float     sum      -1     5.81    0.18    0.18      0     5.79    0.18    0.18      0",
    "     1048576        262144     float     sum      -1    20.00   52.43   52.43    inf    20.00   52.43   52.43      0",
    "        4096          1024     float     sum    12.35    0.33    0.33  0e+00    12.11    0.34    0.34  nan",
    "     " + "9" * 5000 + "   1   float   sum   -1   1.0   1.0   1.0   0   1.0   1.0   1.0   0",
    "h:1:1 [0] NCCL INFO Launch mode Parallel", "[1,0]<stdout>:", " 0: ", "random text that is not a log",
]


def gen_log_text(rnd: random.Random) -> tuple[str, bytes]:
    """(file name, bytes): a real log with lines and tokens changed, or bytes that are no log at all."""
    name, text = _choice(rnd, real_logs())
    if rnd.random() < 0.5:
        name = _choice(rnd, LOG_NAMES)
    lines = text.splitlines()
    for _ in range(rnd.randint(1, 4)):
        op = rnd.randrange(8)
        i = rnd.randrange(len(lines) + 1) if lines else 0
        if op <= 2 and lines:                                   # one token of a line
            i = min(i, len(lines) - 1)
            toks = lines[i].split()
            if toks:
                toks[rnd.randrange(len(toks))] = _choice(rnd, TOKENS) if op < 2 else _digits(rnd)
                lines[i] = " ".join(toks)
        elif op == 3 and lines:
            del lines[min(i, len(lines) - 1)]
        elif op == 4 and lines:
            lines.insert(i, lines[min(i, len(lines) - 1)])
        elif op == 5:
            lines.insert(i, _choice(rnd, LOG_LINES))
        elif op == 6 and lines:
            j = min(i, len(lines) - 1)
            lines[j] = _mutate_text(rnd, lines[j])
        else:
            lines = lines[:i]
    text = "\n".join(lines) + ("\n" if rnd.random() < 0.8 else "")
    r = rnd.random()
    if r < 0.05:
        data = text.encode("utf-16")
    else:
        data = text.encode("utf-8", "surrogatepass")
        if r > 0.9:
            data = _mutate_bytes(rnd, data)
    return name, data


def _check_rows(secs) -> None:
    for sec in secs:
        rows, info = _section_rows(sec, in_place=True)
        json.dumps(info, allow_nan=False)                       # meta.json: no NaN or inf
        for row in rows:
            lat = row["latency_us_p50"] or row["latency_us_avg"]
            assert row["size_bytes"] >= 1 and row["tp"] >= 1 and lat > 0, row
            assert lat <= MAX_TIME_US and row["algbw_gbps"] <= MAX_BW_GBPS \
                and row["busbw_gbps"] <= MAX_BW_GBPS, row                  # physical, not merely finite
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    assert math.isfinite(v) and v >= 0, (k, v)


def check_log(case, tmp: str) -> str:
    name, data = case
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    try:
        _check_rows(read_nccl_tests(path))
    except CommprofError as e:
        return _rejected(e)
    return "accepted"


# --- nccl-tests -J JSON -----------------------------------------------------------------------------

def _paths(value, prefix=()):
    """Every (path, value) inside a JSON value, the root included."""
    yield prefix, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def mutate_json(rnd: random.Random, doc):
    """Replace, delete or retype values anywhere in a JSON document (a copy)."""
    doc = copy.deepcopy(doc)
    for _ in range(rnd.randint(1, 3)):
        paths = [p for p, _ in _paths(doc) if p]
        if not paths:
            break
        path = _choice(rnd, paths)
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        op = rnd.random()
        if op < 0.6:
            parent[key] = _choice(rnd, JSON_VALUES)
        elif op < 0.75 and isinstance(parent, dict):
            del parent[key]
        elif op < 0.85 and isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):
            parent[key] = -parent[key] if parent[key] else -1
        elif op < 0.92 and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        else:
            parent[key] = [parent[key]] if rnd.random() < 0.5 else str(parent[key])
    return doc


def gen_log_json(rnd: random.Random) -> tuple[str, bytes]:
    """(file name, bytes): the -J fixture with values broken anywhere, or its text broken."""
    doc = real_json()
    if rnd.random() < 0.2:                              # the key variants nccl-tests versions write
        for r in doc["results"]:
            r["out_of_place"]["cpu_time"] = r["out_of_place"].pop("time")
            r["in_place"]["nwrong"] = None
    if rnd.random() < 0.95:
        doc = mutate_json(rnd, doc)
    name = _choice(rnd, ["all_reduce_perf.json", "ar.json", "all_gather.json"])
    data = _dumps(doc).encode("utf-8")
    if rnd.random() < 0.08:
        data = _mutate_bytes(rnd, data) if rnd.random() < 0.5 else _mutate_text(rnd, data.decode()).encode(
            "utf-8", "surrogatepass")
    return name, data


# --- thresholds files, MoE replay files, nvidia-smi topo text -----------------------------------------

THRESHOLD_KEYS = ["[allreduce_latency]", "[busbw]", "[comm_share]", "[kv_headroom]", "[inventory]",
                  "nvlink_pass_us", "pcie_warn_us", "pass_fraction", "max_bytes", "tp", "expected_gpus",
                  "source", "version", "context", "min_sequences", "bogus_key", "[nope]"]


def gen_thresholds(rnd: random.Random) -> bytes:
    """A thresholds TOML override: real keys with mutated values, junk keys, broken syntax, bytes."""
    lines = []
    for _ in range(rnd.randint(0, 8)):
        key = _choice(rnd, THRESHOLD_KEYS)
        if key.startswith("["):
            lines.append(key)
        else:
            val = _choice(rnd, TOKENS + ['"text"', "true", "[1, 2]", "{a = 1}", _digits(rnd), "1_000"])
            lines.append(f"{key} = {val}")
    text = "\n".join(lines)
    if rnd.random() < 0.3:
        text = _mutate_text(rnd, text)
    data = text.encode("utf-8", "surrogatepass") if rnd.random() < 0.9 else \
        _mutate_bytes(rnd, text.encode("utf-8", "surrogatepass") or b"x = 1")
    return data


def check_thresholds(data: bytes, tmp: str) -> str:
    from commprof.analysis.thresholds import load_thresholds

    path = os.path.join(tmp, "thresholds.toml")
    with open(path, "wb") as f:
        f.write(data)
    try:
        th = load_thresholds(path)
    except CommprofError as e:
        return _rejected(e)
    for section in th.values():
        if isinstance(section, dict):
            for k, v in section.items():
                if isinstance(v, float):
                    assert math.isfinite(v) and v >= 0, (k, v)
    return "accepted"


def gen_replay(rnd: random.Random) -> tuple[str, bytes]:
    """A MoE replay load file (``--skew file:PATH``): CSV expert,load or JSON list/object."""
    experts = 8
    if rnd.random() < 0.5:
        rows = ["expert,load"] if rnd.random() < 0.5 else []
        for _ in range(rnd.randint(0, 12)):
            e = _choice(rnd, [str(rnd.randint(-2, experts + 2)), _junk(rnd, 2), "", "1.5"])
            v = _choice(rnd, TOKENS + [_digits(rnd), ""])
            rows.append(f"{e},{v}" if rnd.random() < 0.9 else f"{e}")
        text = "\n".join(rows)
        if rnd.random() < 0.3:
            text = _mutate_text(rnd, text)
        return "load.csv", text.encode("utf-8", "surrogatepass")
    doc = [_choice(rnd, JSON_VALUES) if not isinstance(_choice(rnd, JSON_VALUES), str) else 1
           for _ in range(rnd.randint(0, 10))]
    if rnd.random() < 0.4:
        doc = {str(rnd.randint(-1, 10)): v for v in doc} if doc else {}
    text = _dumps(doc)
    if rnd.random() < 0.3:
        text = _mutate_text(rnd, text)
    return "load.json", text.encode("utf-8", "surrogatepass")


def check_replay(case, tmp: str) -> str:
    from commprof.analysis.moeroute import _load_file

    name, data = case
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    try:
        loads = _load_file(path, 8, f"file:{path}")
    except CommprofError as e:
        return _rejected(e)
    assert all(math.isfinite(float(v)) and v >= 0 for v in loads), loads
    return "accepted"


@functools.cache
def real_smi_topos() -> tuple[tuple[str, str], ...]:
    out = []
    for p in sorted(glob.glob(os.path.join(DATA, "nvidia-smi", "*.txt"))):
        with open(p, encoding="utf-8") as f:
            out.append((os.path.basename(p), f.read()))
    return tuple(out)


SMI_TOKENS = ["NV0", "NV99", "NV19", "NV\u0664", "\u00b2", "100000000000000000000", "X", "NV1", "NV4", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC", "OK", "CNS", "GNS",
              "TNS", "NS", "DR", "U", "GPU0", "GPU1", "NIC0", "0-63", "N/A", "Legend:", "\t", "  "]


def gen_smi_topo(rnd: random.Random) -> tuple[str, bytes]:
    """``nvidia-smi topo -m`` (or ``-p2p``) text: a real one mutated, or lines of its tokens."""
    reals = real_smi_topos()
    if reals and rnd.random() < 0.7:
        name, text = _choice(rnd, reals)
        for _ in range(rnd.randint(1, 4)):
            lines = text.splitlines()
            if lines and rnd.random() < 0.6:
                i = rnd.randrange(len(lines))
                cells = lines[i].split()
                if cells:
                    cells[rnd.randrange(len(cells))] = _choice(rnd, SMI_TOKENS + TOKENS)
                lines[i] = "\t".join(cells)
                text = "\n".join(lines)
            else:
                text = _mutate_text(rnd, text)
    else:
        name = _choice(rnd, ["topo.txt", "p2p-r.txt", "x.txt"])
        text = "\n".join("\t".join(_choice(rnd, SMI_TOKENS) for _ in range(rnd.randint(1, 9)))
                         for _ in range(rnd.randint(0, 10)))
    return name, text.encode("utf-8", "surrogatepass")


def check_smi_topo(case, tmp: str) -> str:
    from commprof.ingest.smitopo import parse_smi_topo

    name, data = case
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    try:
        topo = parse_smi_topo([path])
    except CommprofError as e:
        return _rejected(e)
    json.dumps(topo, allow_nan=False)           # writable as topo.json, no NaN/inf
    assert isinstance(topo.get("gpus"), list) and isinstance(topo.get("matrix"), list)
    for row in topo["matrix"]:              # a link count taken is one a GPU can have
        for c in row:
            assert not c.startswith("NV") or (c[2:].isascii() and 1 <= int(c[2:]) <= 18), c
    for g in topo["gpus"]:
        node = g["numa_node"]               # one node, or a node list nvidia-smi printed ("0-1", sglang#7888)
        assert node == "n/a" or (type(node) is int and 0 <= node <= 1023) or (
            isinstance(node, str) and node.isascii() and all(int(x) <= 1023 for x in re.split(r"[,-]", node))), g
    return "accepted"


# --- Kineto (PyTorch profiler) traces ---------------------------------------------------------------

def _kineto_doc(rank: int, world: int = 2) -> dict:
    """A small Kineto-shaped trace of one rank: ProfilerStep marks, compute and NCCL kernels."""
    ev = []
    for s in range(2):
        base = 1_000_000.0 + s * 600
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1,
                   "ts": base, "dur": 590})
        for k in range(4):
            t = base + 10 + k * 130
            ev.append({"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": t, "dur": 100.0})
            ev.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0,
                       "tid": 7, "ts": t + 100, "dur": 20.0 + rank,
                       "args": {"Collective name": "allreduce", "In msg nelems": 4096, "Out msg nelems": 4096,
                                "dtype": "BFloat16", "Group size": world}})
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
            "traceEvents": ev}


KINETO_KEYS = ["ph", "cat", "name", "ts", "dur", "pid", "tid", "args", "traceEvents", "distributedInfo", "rank",
               "world_size", "In msg nelems", "Collective name"]


#: What the real Kineto seeds are (HTA's test data, out of a fetched snapshot of its repository: read
#: beside the checkout, never committed; :func:`helpers.hta_subsampled`).
KINETO_REAL = [f"facebookresearch/HolisticTraceAnalysis tests/data/trace_filter/sampled_rank-{r}.json.gz, subsampled"
               for r in (0, 1)]


@functools.cache
def _real_kineto() -> tuple[str, ...]:
    """The two real HTA traces, subsampled, as JSON text; () where they are not beside the checkout
    (the generator then makes synthetic traces only)."""
    from helpers import hta_subsampled, shared_path

    paths = [shared_path("kineto", f"trace_filter__sampled_rank-{r}.json.gz") for r in (0, 1)]
    return tuple(hta_subsampled(r, p) for r, p in enumerate(paths)) if all(paths) else ()


#: Values that break an event's physics or types: huge, negative, far-future or non-finite times,
#: containers where a scalar belongs, labels that are no numbers.
KINETO_HOSTILE = [0, -1, 1e308, 1e300, -1e300, 10 ** 30, HUGE, 1.5e16, [1, 2], {"a": 1}, "x", None, True,
                  float("nan"), float("inf")]
KINETO_LABELS = ["tp=x batch=1 mode=eager", "tp=2 batch=-3 mode=eager", "tp=0 batch=1", "tp=99999999999",
                 "tp=2 batch=\u0663 mode=eager", "tp=2 batch=1 mode=warp", "tp=2 batch=1 mode=eager"]


def _hostile_kineto(rnd: random.Random, doc: dict) -> dict:
    """One event's ts, dur, args field or the header set to a hostile value."""
    evs = doc.get("traceEvents") if isinstance(doc, dict) else None
    r = rnd.random()
    if isinstance(evs, list) and evs and r < 0.7:
        e = _choice(rnd, evs)
        if isinstance(e, dict):
            key = _choice(rnd, ["ts", "dur", "ts", "dur", "args.correlation", "args.In msg nelems",
                                "args.Out msg nelems", "args.dtype", "args.Collective name", "pid", "cat", "name"])
            if key.startswith("args."):
                if not isinstance(e.get("args"), dict):
                    e["args"] = {}
                e["args"][key[5:]] = copy.deepcopy(_choice(rnd, KINETO_HOSTILE))
            else:
                e[key] = copy.deepcopy(_choice(rnd, KINETO_HOSTILE))
    elif isinstance(doc, dict) and r < 0.85:
        key = _choice(rnd, ["deviceProperties", "baseTimeNanoseconds", "distributedInfo.backend",
                            "distributedInfo.rank", "distributedInfo.world_size"])
        if key.startswith("distributedInfo."):
            if not isinstance(doc.get("distributedInfo"), dict):
                doc["distributedInfo"] = {}
            doc["distributedInfo"][key[16:]] = copy.deepcopy(_choice(rnd, KINETO_HOSTILE + [["nccl", 1], "gloo"]))
        else:
            doc[key] = copy.deepcopy(_choice(rnd, KINETO_HOSTILE + [[{"name": 5}], [{"name": "H100"}]]))
    elif isinstance(evs, list):                      # a commprof trace.json's run label
        doc["commprof"] = {"format": "commprof trace timeline", "world_size": 2}
        label = _choice(rnd, KINETO_LABELS)
        for pid in (0, 1):
            evs.insert(0, {"ph": "M", "name": "process_labels", "pid": pid, "args": {"labels": label}})
            evs.insert(0, {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"rank {pid}"}})
    return doc


def gen_kineto(rnd: random.Random) -> tuple[bytes, bytes]:
    """Two ranks' traces: the real (subsampled) HTA traces half the time, else the synthetic
    decode-shaped ones; one or both mutated in their JSON values (hostile times, types and labels
    among them), structure or bytes (a corrupt gzip stream too)."""
    real = rnd.random() < 0.5 and bool(_real_kineto())
    docs = [json.loads(t) for t in _real_kineto()] if real else [_kineto_doc(0), _kineto_doc(1)]
    if rnd.random() < 0.5:
        i = rnd.randrange(2)
        docs[i] = _hostile_kineto(rnd, docs[i])
    for _ in range(rnd.randint(1, 4)):
        i = rnd.randrange(2)
        r = rnd.random()
        try:                                  # own copy, no shared or self-referencing values
            docs[i] = json.loads(_dumps(docs[i]).replace(HUGE, "1").replace(DEEP, "1"))
        except (ValueError, RecursionError):
            docs[i] = {"traceEvents": "self-referencing"}
        if r < 0.3:
            docs[i] = mutate_json(rnd, docs[i])
        elif r < 0.8:
            evs = docs[i].get("traceEvents") if isinstance(docs[i], dict) else None
            if isinstance(evs, list) and evs:
                e = _choice(rnd, evs)
                if isinstance(e, dict):
                    e[_choice(rnd, KINETO_KEYS)] = copy.deepcopy(
                        _choice(rnd, JSON_VALUES + ["X", "kernel", "nccl", "", None, [], {}]))
        elif isinstance(docs[i], dict):
            docs[i][_choice(rnd, ["traceEvents", "distributedInfo"])] = copy.deepcopy(
                _choice(rnd, JSON_VALUES + [None, [], {}, "x"]))
    def text(d):
        try:
            return _dumps(d)
        except ValueError:          # a mutation made a value contain itself: not writable JSON
            return _dumps({"traceEvents": "self-referencing"})
    data = [text(d).encode("utf-8", "surrogatepass") for d in docs]
    r = rnd.random()
    if r < 0.2:
        i = rnd.randrange(2)
        data[i] = _mutate_bytes(rnd, data[i])
    elif r < 0.3:                                   # gzipped, then the deflate stream or the trailer broken
        import gzip

        i = rnd.randrange(2)
        z = bytearray(gzip.compress(data[i]))
        for _ in range(rnd.randint(1, 8)):
            z[rnd.randrange(10, len(z))] ^= rnd.randrange(1, 256)
        data[i] = bytes(z[:rnd.randint(10, len(z))] if rnd.random() < 0.3 else z)
    return data[0], data[1]


def check_kineto(case, tmp: str) -> str:
    """Read both ranks' traces and attribute them as ``import kineto`` does (commprof.ingest.kineto:
    read_file, check_ranks, attribute_steps), in memory: every figure finite and >= 0."""
    from commprof.ingest.kineto import run_label
    from commprof.ingest.kinetoread import MAX_SPAN_US, MAX_TP, read_file
    from commprof.ingest.kinetosteps import attribute_steps, check_ranks

    ranks = []
    try:
        for rank, data in enumerate(case):
            p = os.path.join(tmp, f"rank{rank}.json")
            with open(p, "wb") as f:
                f.write(data)
            ranks.extend(read_file(p))
        if not any(r.kernels or r.colls for r in ranks):
            return "rejected"
        labels = [run_label(r.run) for r in ranks]
        check_ranks(ranks, None)
        att = attribute_steps(ranks)
    except CommprofError as e:
        return _rejected(e)
    for lab in labels:                  # a run label taken is a physical one
        assert all(1 <= int(lab[k]) <= (MAX_TP if k == "tp" else 1 << 20) for k in ("tp", "batch") if k in lab), lab
    for row in att.get("tokens", []):
        for k, v in row.items():
            if isinstance(v, float):
                assert math.isfinite(v) and (v >= 0 or k == "residual_us"), (k, v)
                assert abs(v) <= MAX_SPAN_US, (k, v)            # no step longer than a day
    for c in att.get("collectives", []):
        sb = c.get("size_bytes")
        assert sb in (None, "") or (type(sb) is int and 0 <= sb <= 2 ** 53 * 8), c
    return "accepted"


def check_kineto_import(case, tmp: str) -> str:
    """The whole ``import kineto`` on both ranks' traces, results dir written and read back."""
    import shutil

    from commprof.ingest.kineto import import_kineto
    from commprof.results import load

    paths = []
    for rank, data in enumerate(case):
        p = os.path.join(tmp, f"rank{rank}.json")
        with open(p, "wb") as f:
            f.write(data)
        paths.append(p)
    out = os.path.join(tmp, "kineto-out")
    shutil.rmtree(out, ignore_errors=True)
    try:
        import_kineto(paths, out, command=["fuzz"])
    except CommprofError as e:
        return _rejected(e)
    summ = load(out)["trace_summary"]
    for c in ("ms_per_token", "comm_share_pct"):
        v = summ[c].astype(float)
        assert v.notna().all() and (v >= 0).all() and (v.abs() < float("inf")).all(), (c, list(v))
    return "accepted"


# --- serve: --url and --workload FILE ------------------------------------------------------------

URL_PARTS = ["http://", "https://", "ftp://", "", "http:/", "HTTP://", "http://[::1", "http://[::1]", "[", "]",
             "127.0.0.1", "localhost", "h", "a b", "\x00", "\n", "\u0663", ":8000", ":99999", ":-1", ":", ":0",
             ":\u0668\u0660", "/v1", "/v1/completions", "/chat/completions", "/", "?q=1", "#f", "@", "user:pw@"]


def gen_url(rnd: random.Random) -> str:
    """A --url: scheme, host, port and path pieces, some of them broken."""
    if rnd.random() < 0.5:                       # mostly well-formed: scheme, host, maybe a port and a path
        text = (_choice(rnd, ["http://", "https://"]) + _choice(rnd, ["127.0.0.1", "localhost", "[::1]", "h.example"])
                + _choice(rnd, ["", ":8000", ":1", ":65535", ":65536", ":0"]) + _choice(rnd, ["", "/", "/v1", "/p/v1/"]))
    else:
        text = "".join(_choice(rnd, URL_PARTS) for _ in range(rnd.randint(1, 5)))
    return _mutate_text(rnd, text) if rnd.random() < 0.2 else text


def check_url(text: str, tmp: str | None = None) -> str:
    from urllib.parse import urlsplit

    from commprof.model.serveconfig import base_url

    try:
        url = base_url(text)
    except CommprofError as e:
        return _rejected(e)
    parts = urlsplit(url)
    assert parts.scheme in ("http", "https") and parts.hostname, url
    assert parts.port is None or 1 <= parts.port <= 65535, url
    assert url.isprintable() and " " not in url, url
    return "accepted"


def gen_workload(rnd: random.Random) -> bytes:
    """A replay file: JSON lines of prompt_tokens/output_tokens, values and lines broken."""
    lines = []
    for _ in range(rnd.randint(0, 8)):
        r = rnd.random()
        if r < 0.6:
            obj = {_choice(rnd, ["prompt_tokens", "input_tokens", "output_tokens", "max_tokens", "x"]):
                   _choice(rnd, JSON_VALUES + [rnd.randint(1, 4096)]) for _ in range(rnd.randint(1, 3))}
            lines.append(_dumps(obj))
        elif r < 0.7:
            lines.append(_choice(rnd, ["", "#", "# note", "[]", "3", "null", "{"]))
        else:
            lines.append(json.dumps({"prompt_tokens": rnd.randint(1, 4096), "output_tokens": rnd.randint(1, 512)}))
    text = "\n".join(lines)
    if rnd.random() < 0.2:
        text = _mutate_text(rnd, text)
    data = text.encode("utf-8", "surrogatepass")
    return _mutate_bytes(rnd, data) if rnd.random() < 0.1 else data


def _file(tmp: str, name: str, data: bytes) -> str:
    """``data`` written as ``tmp/name``; its path."""
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def check_workload(data: bytes, tmp: str) -> str:
    from commprof.capture.serveworkload import load_replay

    try:
        rows = load_replay(_file(tmp, "workload.jsonl", data))
    except CommprofError as e:
        return _rejected(e)
    for r in rows:
        for v in r.values():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                assert 1 <= v <= 1 << 20, r
    return "accepted"


# --- a results dir (sweep.csv + meta.json), as every reader loads it ------------------------------

@functools.cache
def _real_sweep() -> tuple[str, str]:
    """A real sweep dir's files: the A100 nccl-tests log imported (sweep.csv and meta.json text)."""
    import tempfile

    from commprof.ingest.nccltests import import_nccl_tests

    d = tempfile.mkdtemp(prefix="commprof-fuzz-sweep-")
    out = os.path.join(d, "imp")
    import_nccl_tests([os.path.join(DATA, "nccl-tests", "all_reduce_perf_8xA100.log")], out, command=["fuzz"])
    with open(os.path.join(out, "sweep.csv"), encoding="utf-8") as f, \
            open(os.path.join(out, "meta.json"), encoding="utf-8") as g:
        return f.read(), g.read()


def gen_results_dir(rnd: random.Random) -> tuple[bytes, bytes]:
    """(sweep.csv, meta.json) of a real imported dir, cells, lines, fields or bytes broken."""
    csv_text, meta_text = _real_sweep()
    lines = csv_text.splitlines()
    for _ in range(rnd.randint(1, 4)):
        if not lines:
            break
        r, i = rnd.random(), rnd.randrange(len(lines))
        if r < 0.5:
            cells = lines[i].split(",")
            cells[rnd.randrange(len(cells))] = _choice(rnd, TOKENS + [_digits(rnd), '"', "a,b"])
            lines[i] = ",".join(cells)
        elif r < 0.65:
            del lines[i]
        elif r < 0.8:
            lines[i] = _mutate_text(rnd, lines[i])
        else:
            lines = lines[:i]
    meta = json.loads(meta_text)
    if rnd.random() < 0.5:
        try:
            meta = mutate_json(rnd, json.loads(meta_text))
        except (RecursionError, ValueError):    # a mutation made a value contain itself
            meta = json.loads(meta_text)
    if rnd.random() < 0.3:
        meta[_choice(rnd, ["status", "writer", "cells_planned", "verb", "kind", "hosts", "gpus"])] = copy.deepcopy(
            _choice(rnd, JSON_VALUES + ["running", "failed", {"host": "x", "pid": -1}, {"pid": 2 ** 70}]))
    csv_data = ("\n".join(lines) + ("\n" if rnd.random() < 0.9 else "")).encode("utf-8", "surrogatepass")
    try:
        meta_data = _dumps(meta).encode("utf-8", "surrogatepass")
    except ValueError:              # a mutation made a value contain itself: not writable JSON
        meta_data = meta_text.encode("utf-8")
    if rnd.random() < 0.1:
        csv_data = _mutate_bytes(rnd, csv_data)
    if rnd.random() < 0.05:
        meta_data = _mutate_bytes(rnd, meta_data)
    return csv_data, meta_data


def check_results_dir(case, tmp: str) -> str:
    """``results.load`` (what show, check, report and gap read): a typed table or one line."""
    from commprof.results import load

    d = os.path.join(tmp, "dir")
    os.makedirs(d, exist_ok=True)
    for name, data in zip(("sweep.csv", "meta.json"), case):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    try:
        r = load(d)
    except CommprofError as e:
        return _rejected(e)
    assert r.state in ("complete", "failed", "interrupted", "running", "dead", "unknown"), r.state
    assert r.unfinished is None or ("\n" not in r.unfinished and r.unfinished.startswith("unfinished")), r.unfinished
    return "accepted"


# --- the targets ------------------------------------------------------------------------------------

# --- a serving engine's /metrics (Prometheus text) ---------------------------------------------------

_METRIC_NAMES = ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds", "tgi_request_queue_duration")
_METRIC_VALUES = ("0", "1", "2.5", "-1", "NaN", "+Inf", "-Inf", "1e308", "1e-320", "", "x", "0x10", "1_000",
                  "9" * 400, "3 1712345678000", "4 nope")


def _metrics_text(rnd: random.Random, name: str) -> str:
    """A histogram family as an engine writes it: one or two series of cumulative buckets, sum, count."""
    lines = [f"# HELP {name} queue time", f"# TYPE {name} histogram"]
    for series in range(rnd.randint(1, 2)):
        total, cum = 0.0, 0
        for le in ("0.01", "0.1", "1.0", "+Inf"):
            cum += rnd.randint(0, 5)
            lines.append(f'{name}_bucket{{le="{le}",model_name="m{series}"}} {cum}')
        total = cum * rnd.random()
        lines.append(f'{name}_sum{{model_name="m{series}"}} {total}')
        lines.append(f'{name}_count{{model_name="m{series}"}} {cum}')
    return "\n".join(lines) + "\n"


def gen_metrics(rnd: random.Random) -> tuple[str, str]:
    """(before, after) answers of GET /metrics: real-shaped histograms, then values, labels and
    lines broken, characters edited, junk added."""
    name = _choice(rnd, _METRIC_NAMES)
    out = []
    for _ in range(2):
        lines = _metrics_text(rnd, name).splitlines()
        for _ in range(rnd.randint(0, 4)):
            r, i = rnd.random(), rnd.randrange(len(lines))
            if r < 0.35:                                  # a value replaced
                head = lines[i].rsplit(" ", 1)[0]
                lines[i] = f"{head} {_choice(rnd, _METRIC_VALUES)}"
            elif r < 0.5:                                 # a bucket bound replaced
                lines[i] = lines[i].replace('le="', f'le="{_choice(rnd, _METRIC_VALUES)}', 1)
            elif r < 0.65:
                lines[i] = _mutate_text(rnd, lines[i])
            elif r < 0.8:
                lines.insert(i, _junk(rnd))
            elif r < 0.9:
                del lines[i]
            else:
                lines.insert(i, lines[i].replace(name, _choice(rnd, _METRIC_NAMES)))
        out.append("\n".join(lines))
    return out[0], out[1]


def check_metrics(case, tmp: str | None = None) -> str:
    """Parsing never raises; a level's queue figures are each not reported (NaN) or finite >= 0."""
    from commprof.capture.servescrape import queue_figures
    from commprof.ingest.servermetrics import queue_histogram

    before, after = (queue_histogram(t) for t in case)
    figs = queue_figures(before, after)
    assert all(v != v or (math.isfinite(v) and v >= 0) for v in figs.values()), figs
    return "accepted" if figs["queue_requests"] == figs["queue_requests"] else "rejected"


TARGETS = {
    # name: (what it parses, generator, check)
    "units.parse_bytes": ("--gpu-mem, p2p --size: one byte size", gen_size_token, check_size_token),
    "units.parse_int_list": ("--tp, --batch, --ep, --tokens", gen_int_list, check_int_list),
    "sizes.parse_sizes": ("sweep --sizes: decode, pow2:MIN-MAX, lists", gen_size_spec, check_size_spec),
    "models.load_config": ("a Hugging Face config.json", gen_config, check_config),
    "importers text": ("nccl-tests text output", gen_log_text, check_log),
    "importers -J JSON": ("nccl-tests -J JSON output", gen_log_json, check_log),
    "check.load_thresholds": ("--thresholds FILE (TOML)", gen_thresholds, check_thresholds),
    "routing replay file": ("moe --skew file:PATH (CSV or JSON loads)", gen_replay, check_replay),
    "smitopo.parse_smi_topo": ("nvidia-smi topo -m / -p2p text", gen_smi_topo, check_smi_topo),
    "kineto.import_kineto": ("PyTorch profiler (Kineto) traces, 2 ranks", gen_kineto, check_kineto),
    "servermetrics (serve)": ("a server's GET /metrics: queue-time histograms", gen_metrics, check_metrics),
    "serve --url": ("serve --url: an OpenAI server's base URL", gen_url, check_url),
    "serve --workload FILE": ("serve --workload: a JSONL replay file", gen_workload, check_workload),
    "results.load": ("a results dir (sweep.csv + meta.json) as show/check/report/gap read it", gen_results_dir,
                     check_results_dir),
}
