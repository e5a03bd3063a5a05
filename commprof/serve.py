"""``commprof serve``: the buyer's three service metrics under load, from any OpenAI-compatible
endpoint over streaming HTTP.

Each concurrency level runs in turn as a closed loop (N clients, each sending its next request
when the last one finished); ``--rate`` adds open-loop levels (Poisson arrivals at R requests/s).
Every request streams and records time to first token (TTFT), the gaps between token chunks
(inter-token latency, ITL), time per output token (TPOT: (end-to-end - TTFT) / (tokens out - 1)),
end-to-end time and tokens in/out (from the server's ``usage`` where it reports it, else counted).
Per level: p50/p90/p99 of each, output tokens/s, requests/s, errors by kind, and jitter (TPOT
p99/p50 and its growth over the first level). The knee is the highest concurrency that meets the
SLOs. Every wait is bounded: a level stops issuing requests after ``--duration`` or ``--requests``,
and each request after ``--timeout`` seconds, so a dead, stalled or broken server never hangs it.
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import random
import re
import socket
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from . import results, servermetrics
from .errors import EXIT_DEVICE, CommprofError, UsageError, shown
from .units import parse_int_list

SERVE_REQUESTS_CSV = "serve_requests.csv"
SERVE_LEVELS_CSV = "serve_levels.csv"

REQUEST_COLUMNS = ["level", "mode", "concurrency", "rate_rps", "request", "session", "turn", "start_s", "status",
                   "error", "http_status", "tokens_in", "tokens_in_source", "tokens_out", "tokens_out_source",
                   "max_tokens", "chunks", "ttft_ms", "tpot_ms", "e2e_ms", "itl_ms_p50", "itl_ms_p99", "itl_ms_max", "burst"]
_PCTS = (("p50", 50), ("p90", 90), ("p99", 99))
LEVEL_COLUMNS = (["level", "mode", "concurrency", "rate_rps", "status", "requests", "ok", "errors", "error_kinds",
                  "duration_s", "output_tokens_per_s", "requests_per_s", "tokens_in_mean", "tokens_out_mean"]
                 + [f"{m}_ms_{p}" for m in ("ttft", "tpot", "itl", "e2e") for p, _ in _PCTS]
                 + ["jitter_tpot_p99_p50", "jitter_growth", "meets_slo", "slo_missed"]
                 + ["queue_requests", "queue_ms_mean"] + [f"queue_ms_{p}" for p, _ in _PCTS]
                 + ["queue_first_bucket_ms", "input_tokens_per_s", "goodput_rps", "goodput_pct"]
                 + [f"{m}_ms_{s}" for m in ("ttft", "tpot", "itl", "e2e") for s in ("mean", "std")]
                 + ["burst_requests", "burst_note", "client_cpu_ms_per_request"]
                 + [f"server_{m}_ms_mean" for m in ("ttft", "tpot", "itl", "e2e")]
                 + [f"{m}_vs_server_pct" for m in ("ttft", "tpot", "itl", "e2e")])

#: A request whose output arrived faster than this per token (e2e - TTFT over tokens - 1) came in
#: one burst: 0.1 ms a token is 10,000 tokens/s for one request, five times the fastest per-user
#: decode published (Cerebras, "Llama 3.1-70B breaks 2,100 tokens/s", cerebras.ai blog, 2024-10),
#: so its TPOT and ITL are the delivery of text already made, not decode time.
BURST_TPOT_MS = 0.1
BURST_MIN_TOKENS = 4
#: Requests per closed-loop level by default: with numpy's linear percentile, p99 of n values lies
#: at or below the second largest only from n = 101 on (rank 0.99 (n - 1) <= n - 2); with fewer the
#: largest single request moves it.
MIN_REQUESTS_FOR_P99 = 101

#: Error kinds counted per level (``status`` of a request that did not finish).
ERROR_KINDS = ("connect", "http_4xx", "http_5xx", "timeout", "malformed", "disconnect", "server_error",
               "no_tokens", "client")

#: Built-in workloads: prompt tokens, output tokens (each drawn uniformly in [0.5x, 1.5x] of the
#: nominal prompt length with ``--seed``; outputs are forced with ``max_tokens``).
WORKLOADS = {
    "qa": {"prompt_tokens": 128, "output_tokens": 128, "turns": 1,
           "what": "short QA: short prompts, short answers"},
    "rag": {"prompt_tokens": 2048, "output_tokens": 128, "turns": 1,
            "what": "RAG: long context, short answers"},
    "multiturn": {"prompt_tokens": 96, "output_tokens": 128, "turns": 4,
                  "what": "multi-turn: each turn resends the conversation so far plus a new question"},
}

#: Prompts are made of common English words: one token each (with its leading space) in the BPE and
#: SentencePiece vocabularies of the served model families, so N words is close to N tokens; the
#: server's ``usage.prompt_tokens`` is recorded as the true count where it is reported.
WORDS = tuple("the of and to in is was for on as with by at from his an were are which this be has had not "
              "one their its new after but who have they two been first also more time all other than over "
              "into some year would when only city most three school made such can under where state many "
              "system during used part known world well about people work out years later while so both".split())

MAX_CONCURRENCY = 4096
MAX_REQUESTS = 100_000
SLO_METRICS = ("ttft", "tpot", "itl", "e2e")


class EndpointError(CommprofError):
    """The server cannot be measured: unreachable, not OpenAI-compatible, or dead mid-run."""

    exit_code = EXIT_DEVICE


@dataclass(kw_only=True)
class ServeConfig:
    """What ``commprof serve`` measures. Times in seconds unless the name says otherwise."""
    url: str
    model: str
    concurrency: list[int] = field(default_factory=lambda: [1, 4, 16])
    rates_rps: list[float] = field(default_factory=list)
    workload: str = "qa"
    prompt_tokens: int | None = None      # override the workload's prompt length
    output_tokens: int | None = None      # override the workload's output length
    requests: int | None = None           # per level; default max(8, 4 x concurrency)
    duration_s: float = 60.0              # per level: no new request after this
    timeout_s: float = 60.0               # per request, from send to last chunk
    api: str = "completions"              # completions or chat
    slo: dict = field(default_factory=lambda: parse_slo("ttft_p99=2s,tpot_p99=100ms"))
    seed: int = 0
    warmup: int = 2                       # requests sent one by one before the first level, not recorded
    label: str = ""
    out_dir: str = ""
    argv: list[str] = field(default_factory=list)
    charts: bool = True
    profile_dir: str = ""                 # the server's profiler dir (same machine): profile one more round


# ---------------------------------------------------------------------------------------------
# Flags


def base_url(url: str) -> str:
    """``http://host:port`` (or with a path prefix) from what a user types; ``/v1`` is added per call."""
    text = (url or "").strip()
    try:
        parts = urlsplit(text)
        _ = parts.hostname              # an unclosed IPv6 bracket fails only here or in urlsplit
    except ValueError as e:
        raise UsageError(f"--url {shown(url)}: not a URL ({e}); expected http://HOST:PORT, "
                         "e.g. http://127.0.0.1:8000") from None
    if any(ch.isspace() or ord(ch) < 32 for ch in text):
        raise UsageError(f"--url {shown(url)}: holds a space or a control character")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url {shown(url)}: expected http://HOST:PORT of an OpenAI-compatible server, "
                         "e.g. http://127.0.0.1:8000")
    try:
        port = parts.port               # urllib checks the port only when asked
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise UsageError(f"--url {shown(url)}: the port is not a number in 1..65535")
    path = parts.path.rstrip("/")
    for tail in ("/chat/completions", "/completions", "/v1"):
        if path.endswith(tail):
            path = path[: -len(tail)]
    path = path.removesuffix("/v1")
    return f"{parts.scheme}://{parts.netloc}{path}"


_DUR_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*(ms|us|s|min)?$")
_DUR_UNIT_MS = {"s": 1000.0, "ms": 1.0, "us": 0.001, "min": 60000.0, None: 1000.0}


def parse_slo(text: str) -> dict:
    """``ttft_p99=2s,tpot_p99=100ms[,error_pct=1]`` -> {'ttft_ms_p99': 2000.0, ...}. Keys are
    ttft/tpot/itl/e2e with p50/p90/p99, and error_pct (the share of failed requests a level may
    have; 0 when not given). A bare number of seconds is taken as seconds."""
    example = "expected e.g. ttft_p99=2s,tpot_p99=100ms (keys ttft|tpot|itl|e2e _p50|_p90|_p99, error_pct)"
    out: dict = {}
    parts = [p.strip() for p in (text or "").split(",")]
    if not any(parts):
        raise UsageError(f"--slo {shown(text)}: empty; {example}")
    for p in parts:
        if not p:
            raise UsageError(f"--slo {shown(text)}: an empty element; {example}")
        key, eq, value = p.partition("=")
        key, value = key.strip().lower(), value.strip().lower()
        if not eq or not value:
            raise UsageError(f"--slo {shown(text)}: {shown(p, 30)} has no value; {example}")
        if key == "error_pct":
            m = re.match(r"^([0-9]+(?:\.[0-9]+)?)\s*%?$", value)
            if not m or float(m.group(1)) > 100:
                raise UsageError(f"--slo {shown(text)}: error_pct {shown(value, 20)} is not a percentage in 0..100")
            out["error_pct"] = float(m.group(1))
            continue
        m = re.match(r"^(ttft|tpot|itl|e2e)_(p50|p90|p99)$", key)
        if not m:
            raise UsageError(f"--slo {shown(text)}: unknown key {shown(key, 30)}; {example}")
        d = _DUR_RE.match(value)
        if not d:
            raise UsageError(f"--slo {shown(text)}: {shown(value, 20)} is not a duration like 2s or 100ms")
        ms = float(d.group(1)) * _DUR_UNIT_MS[d.group(2)]
        if not (0 < ms <= 3_600_000):
            raise UsageError(f"--slo {shown(text)}: {key}={value} must be above 0 and at most 1 hour")
        out[f"{m.group(1)}_ms_{m.group(2)}"] = ms
    if not any(k != "error_pct" for k in out):
        raise UsageError(f"--slo {shown(text)}: no latency target; {example}")
    return out


def parse_rates(text: str) -> list[float]:
    example = "expected requests per second separated by commas, e.g. 0.5,1,2"
    rates = []
    for p in [p.strip() for p in text.split(",")]:
        try:
            r = float(p)
        except ValueError:
            raise UsageError(f"--rate {shown(text)}: {shown(p, 20)} is not a number; {example}") from None
        if not (0 < r <= 10_000) or math.isnan(r):
            raise UsageError(f"--rate {shown(text)}: {shown(p, 20)} must be above 0 and at most 10000 requests/s")
        rates.append(r)
    return rates


def build_config(*, url: str, model: str, concurrency: str = "1,4,16", rate: str | None = None,
                 workload: str = "qa", prompt_tokens: int | None = None, output_tokens: int | None = None,
                 requests: int | None = None, duration: float = 60.0, timeout: float = 60.0,
                 api: str = "completions", slo: str = "ttft_p99=2s,tpot_p99=100ms", seed: int = 0,
                 warmup: int = 2, label: str = "", out: str | None = None, argv=None, charts: bool = True,
                 profile: str | None = None) -> ServeConfig:
    """A checked :class:`ServeConfig` from the CLI's flag values; a bad value is one UsageError."""
    if not (model or "").strip():
        raise UsageError("--model: empty; give the model name the server serves (GET /v1/models lists them)")
    levels = parse_int_list(concurrency, "--concurrency", maximum=MAX_CONCURRENCY)
    if len(set(levels)) != len(levels):
        raise UsageError(f"--concurrency {shown(concurrency)}: a level is repeated")
    if workload not in WORKLOADS:
        if not os.path.isfile(workload):
            raise UsageError(f"--workload {shown(workload)}: use qa, rag, multiturn or a JSONL file of "
                             '{"prompt_tokens": N, "output_tokens": M} lines (no such file)')
        load_replay(workload)                       # refuse a bad file before anything runs
    if api not in ("completions", "chat"):
        raise UsageError(f"--api {shown(api)}: use completions (/v1/completions) or chat (/v1/chat/completions)")
    for flag, v, hi in (("--prompt-tokens", prompt_tokens, 1 << 20), ("--output-tokens", output_tokens, 1 << 20),
                        ("--requests", requests, MAX_REQUESTS)):
        if v is not None and not (1 <= v <= hi):
            raise UsageError(f"{flag} {v}: must be in 1..{hi}")
    if not (0 <= warmup <= 1000):
        raise UsageError(f"--warmup {warmup}: must be in 0..1000 requests")
    for flag, v in (("--duration", duration), ("--timeout", timeout)):
        if not (0 < v <= 86_400) or math.isnan(v):
            raise UsageError(f"{flag} {v}: must be above 0 and at most 86400 seconds")
    if profile is not None and not os.path.isdir(profile):
        raise UsageError(f"--profile {shown(profile)}: not a directory; give the dir the server writes its traces to "
                         "(vLLM: --profiler-config '{\"profiler\": \"torch\", \"torch_profiler_dir\": DIR}'), on this "
                         "machine")
    return ServeConfig(url=base_url(url), model=model.strip(), concurrency=levels, profile_dir=profile or "",
                       rates_rps=parse_rates(rate) if rate else [], workload=workload,
                       prompt_tokens=prompt_tokens, output_tokens=output_tokens, requests=requests,
                       duration_s=float(duration), timeout_s=float(timeout), api=api, slo=parse_slo(slo),
                       seed=seed, warmup=warmup, label=label, out_dir=out or "", argv=list(argv or []), charts=charts)


# ---------------------------------------------------------------------------------------------
# Workloads


def load_replay(path: str) -> list[dict]:
    """A replay file: one JSON object per line with prompt_tokens (or input_tokens) and
    output_tokens (or max_tokens); blank lines and lines starting with # are skipped."""
    rows = []
    from .fileio import read_user_bytes

    raw = read_user_bytes(path, f"--workload '{path}'", limit=256 << 20)
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise UsageError(f"--workload '{path}': cannot read (not UTF-8 text: byte {e.start})") from None
    for i, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):      # also a number over 4,300 digits, or nested too deep
            raise UsageError(f"--workload '{path}' line {i}: not JSON (or not JSON commprof reads)") from None
        if not isinstance(obj, dict):
            raise UsageError(f"--workload '{path}' line {i}: expected an object with prompt_tokens and output_tokens")
        p = obj.get("prompt_tokens", obj.get("input_tokens"))
        o = obj.get("output_tokens", obj.get("max_tokens"))
        if not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1 << 20 for v in (p, o)):
            raise UsageError(f"--workload '{path}' line {i}: prompt_tokens and output_tokens must be whole "
                             "numbers in 1..1048576")
        rows.append({"prompt_tokens": p, "output_tokens": o})
    if not rows:
        raise UsageError(f"--workload '{path}': no requests in the file")
    return rows


def make_prompt(n_tokens: int, rng: random.Random) -> str:
    """About ``n_tokens`` tokens of text, made here (one common word per token)."""
    return " ".join(rng.choice(WORDS) for _ in range(max(1, n_tokens)))


class Workload:
    """Hands out request specs: ``next(client)`` -> (session, turn, prompt text, prompt words,
    max_tokens). Multi-turn clients keep their conversation; ``record`` appends the answer."""

    def __init__(self, cfg: ServeConfig, level_seed: int):
        self.cfg = cfg
        self.rng = random.Random(level_seed)
        self.replay = load_replay(cfg.workload) if cfg.workload not in WORKLOADS else None
        self.spec = WORKLOADS.get(cfg.workload, {"turns": 1})
        self.sessions: dict[int, dict] = {}
        self.count = 0
        self.session_ids = 0

    def _lengths(self) -> tuple[int, int]:
        if self.replay is not None:
            r = self.replay[self.count % len(self.replay)]
            p, o = r["prompt_tokens"], r["output_tokens"]
        else:
            nominal = self.spec["prompt_tokens"]
            p, o = self.rng.randint(nominal // 2, nominal * 3 // 2), self.spec["output_tokens"]
        return self.cfg.prompt_tokens or p, self.cfg.output_tokens or o

    def next(self, client: int) -> dict:
        p, o = self._lengths()
        self.count += 1
        turns = self.spec.get("turns", 1)
        s = self.sessions.get(client)
        if s is None or s["turn"] >= turns:
            self.session_ids += 1
            s = self.sessions[client] = {"id": self.session_ids, "turn": 0, "history": "", "words": 0}
        question = make_prompt(p, self.rng)
        text = (s["history"] + " " + question).strip() if s["history"] else question
        s["turn"] += 1
        s["pending"] = text
        s["pending_words"] = s["words"] + p
        return {"session": s["id"], "turn": s["turn"], "prompt": text, "prompt_words": s["words"] + p,
                "max_tokens": o, "client": client}

    def record(self, client: int, answer: str, ok: bool) -> None:
        s = self.sessions.get(client)
        if s is None or "pending" not in s:
            return
        if not ok:                                # a failed turn ends the conversation
            s["turn"] = self.spec.get("turns", 1)
            return
        s["history"] = (s["pending"] + " " + answer.strip()).strip()
        s["words"] = s["pending_words"] + len(answer.split())


# ---------------------------------------------------------------------------------------------
# One streamed request


def _httpx():
    try:
        import httpx
    except ImportError:
        raise UsageError("commprof serve needs httpx: pip install httpx (or reinstall commprof)") from None
    return httpx


def request_body(cfg: ServeConfig, prompt: str, max_tokens: int, ignore_eos: bool) -> tuple[str, dict]:
    body: dict = {"model": cfg.model, "max_tokens": max_tokens, "stream": True, "temperature": 0.0,
                  "stream_options": {"include_usage": True}}
    if ignore_eos:
        body["ignore_eos"] = True
    if cfg.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        return "/v1/chat/completions", body
    body["prompt"] = prompt
    return "/v1/completions", body


def _chunk_text(obj: dict, api: str) -> str | None:
    """The text a stream chunk carries ('' for none); None when the chunk is not an OpenAI one."""
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return None
    if not choices:
        return ""                                         # the usage-only chunk
    c = choices[0]
    if not isinstance(c, dict):
        return None
    if api == "chat":
        delta = c.get("delta")
        if delta is None:
            return None
        if not isinstance(delta, dict):
            return None
        text = delta.get("content") or delta.get("reasoning_content") or ""
    else:
        text = c.get("text")
        if text is None:
            return ""
    return text if isinstance(text, str) else None


#: The largest token count a server's ``usage`` may report (no model's context is near it).
MAX_USAGE_TOKENS = 1 << 24


def _token_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_USAGE_TOKENS


async def stream_request(client, cfg: ServeConfig, spec: dict, ignore_eos: bool, t0: float) -> dict:
    """Send one streaming request on ``client`` (a :class:`commprof.httpstream.Pool`) and time it.
    Never raises for a server's failure: the row's ``status`` is ``ok`` or one of
    :data:`ERROR_KINDS`, ``error`` a short reason."""
    from . import httpstream as hs

    path, body = request_body(cfg, spec["prompt"], spec["max_tokens"], ignore_eos)
    row = {"session": spec["session"], "turn": spec["turn"], "max_tokens": spec["max_tokens"],
           "status": "ok", "error": "", "http_status": "", "tokens_in": spec["prompt_words"],
           "tokens_in_source": "words", "tokens_out": 0, "tokens_out_source": "chunks", "chunks": 0,
           "ttft_ms": math.nan, "tpot_ms": math.nan, "e2e_ms": math.nan,
           "itl_ms_p50": math.nan, "itl_ms_p99": math.nan, "itl_ms_max": math.nan}
    stamps: list[float] = []
    text_parts: list[str] = []
    finished = False
    start = time.perf_counter()
    row["start_s"] = start - t0
    resp = None
    try:
        async with asyncio.timeout(cfg.timeout_s):
            resp = await client.post_json(path, body)
            row["http_status"] = resp.status
            if resp.status >= 400:
                raw = (await resp.read(300))[:300].decode("utf-8", "replace")
                row["status"] = "http_5xx" if resp.status >= 500 else "http_4xx"
                row["error"] = f"HTTP {resp.status}: {' '.join(raw.split())[:160]}"
                return row
            async for line in resp.lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    finished = True
                    await resp.finish()           # the stream's end, so that the connection is kept
                    break
                now = time.perf_counter()
                try:
                    obj = json.loads(payload)
                except json.JSONDecodeError:
                    row["status"], row["error"] = "malformed", f"chunk not JSON: {payload[:60]!r}"
                    return row
                if not isinstance(obj, dict):
                    row["status"], row["error"] = "malformed", f"chunk not an object: {payload[:60]!r}"
                    return row
                if "error" in obj:
                    err = obj["error"]
                    msg = err.get("message", err) if isinstance(err, dict) else err
                    row["status"], row["error"] = "server_error", f"error in stream: {str(msg)[:120]}"
                    return row
                text = _chunk_text(obj, cfg.api)
                if text is None:
                    row["status"], row["error"] = "malformed", f"chunk without choices: {payload[:60]!r}"
                    return row
                usage = obj.get("usage")
                if isinstance(usage, dict):
                    # a count the server reports is taken only when it can be one (never negative,
                    # never past any context window); else the chunks counted here stand
                    if _token_count(usage.get("completion_tokens")):
                        row["tokens_out"], row["tokens_out_source"] = usage["completion_tokens"], "usage"
                    if _token_count(usage.get("prompt_tokens")):
                        row["tokens_in"], row["tokens_in_source"] = usage["prompt_tokens"], "usage"
                if text:
                    stamps.append(now)
                    text_parts.append(text)
                ch = obj.get("choices") or [{}]
                if isinstance(ch[0], dict) and ch[0].get("finish_reason"):
                    finished = True
    except TimeoutError:
        row["status"], row["error"] = "timeout", f"no end of stream within --timeout {cfg.timeout_s:g}s"
    except hs.ConnectFailed as e:
        row["status"], row["error"] = "connect", f"cannot connect: {str(e)[:120] or type(e).__name__}"
    except hs.ConnectTimeout as e:
        row["status"], row["error"] = "timeout", f"ConnectTimeout: {str(e)[:100]}"
    except hs.Disconnected as e:
        row["status"], row["error"] = "disconnect", f"{str(e)[:120]}"
    finally:
        if resp is not None:
            resp.release()
    end = time.perf_counter()
    row["chunks"] = len(stamps)
    row["text"] = "".join(text_parts)
    if row["tokens_out_source"] != "usage":
        row["tokens_out"] = len(stamps)
    if stamps:
        row["ttft_ms"] = (stamps[0] - start) * 1e3
        gaps = [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]
        row["gaps_ms"] = gaps
        if gaps:
            import numpy as np

            g = np.asarray(gaps)
            row.update(itl_ms_p50=float(np.percentile(g, 50)), itl_ms_p99=float(np.percentile(g, 99)),
                       itl_ms_max=float(g.max()))
    if row["status"] != "ok":
        return row
    row["e2e_ms"] = ((stamps[-1] if stamps else end) - start) * 1e3
    if not stamps:
        row["status"], row["error"] = "no_tokens", "the stream ended without any text"
    elif not finished:
        row["status"], row["error"] = "disconnect", "the stream ended without finish_reason or [DONE]"
    elif row["tokens_out"] > 1:
        row["tpot_ms"] = (row["e2e_ms"] - row["ttft_ms"]) / (row["tokens_out"] - 1)
    row["burst"] = int(row["tokens_out"] >= BURST_MIN_TOKENS and row["tpot_ms"] == row["tpot_ms"]
                       and row["tpot_ms"] < BURST_TPOT_MS)
    return row


# ---------------------------------------------------------------------------------------------
# Pre-flight: is this an OpenAI-compatible server serving that model?


async def _preflight(cfg: ServeConfig) -> dict:
    httpx = _httpx()
    info: dict = {"served_models": None, "ignore_eos": False, "server_header": ""}
    timeout = httpx.Timeout(min(10.0, cfg.timeout_s))
    async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
        try:
            async with asyncio.timeout(timeout.read):      # the whole answer, not each read: a drip ends too
                r = await client.get(cfg.url + "/v1/models")
        except TimeoutError:
            raise EndpointError(f"--url {cfg.url}: no whole answer to GET /v1/models within {timeout.read:g}s "
                                "(the server is too slow or stalled)") from None
        except httpx.ConnectError:
            raise EndpointError(f"--url {cfg.url}: cannot connect (no server listening there?)") from None
        except httpx.TimeoutException:
            raise EndpointError(f"--url {cfg.url}: no answer to GET /v1/models within {timeout.read:g}s") from None
        except httpx.HTTPError as e:
            raise EndpointError(f"--url {cfg.url}: {type(e).__name__}: {str(e)[:120]}") from None
        info["server_header"] = r.headers.get("server", "")
        if r.status_code == 200:
            try:
                data = r.json().get("data")
                ids = [m.get("id") for m in data if isinstance(m, dict)]
            except (ValueError, AttributeError, TypeError):
                ids = None
            if ids:
                info["served_models"] = ids
                if cfg.model not in ids:
                    listed = ", ".join(str(i) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")
                    raise UsageError(f"--model {shown(cfg.model)}: not served at {cfg.url} (it serves: {listed})")
        # One short request: is it an OpenAI streaming endpoint, and does it take ignore_eos?
        spec = {"session": 0, "turn": 0, "prompt": make_prompt(8, random.Random(0)), "prompt_words": 8,
                "max_tokens": 2}
        probe = dict(cfg.__dict__)
        probe["timeout_s"] = min(cfg.timeout_s, 60.0)
        probe_cfg = ServeConfig(**probe)
        from .httpstream import Pool

        pool = Pool(cfg.url, min(10.0, cfg.timeout_s))
        try:
            row = await stream_request(pool, probe_cfg, spec, True, time.perf_counter())
            if row["status"] == "http_4xx" and "ignore_eos" in row["error"]:
                row = await stream_request(pool, probe_cfg, spec, False, time.perf_counter())
            else:
                info["ignore_eos"] = row["status"] in ("ok", "disconnect", "no_tokens")
        finally:
            pool.close()
        status, err = row["status"], row["error"]
        if status == "http_4xx" and row["http_status"] in (404, 405) and "model" not in err.lower():
            raise EndpointError(f"--url {cfg.url}: POST {request_body(cfg, '', 1, False)[0]} answered "
                                f"{row['http_status']}: not an OpenAI-compatible endpoint (or try --api "
                                f"{'chat' if cfg.api == 'completions' else 'completions'})")
        if status == "http_4xx" and "model" in err.lower():
            raise UsageError(f"--model {shown(cfg.model)}: the server refused it ({err[:140]})")
        if status == "http_4xx":
            raise UsageError(f"{cfg.url}: the server refused a test request ({err[:160]})")
        if status == "connect":
            raise EndpointError(f"--url {cfg.url}: {err}")
        if status in ("malformed", "no_tokens") and row["chunks"] == 0:
            raise EndpointError(f"--url {cfg.url}: the test request's answer is not an OpenAI stream "
                                f"({err[:120]}); not an OpenAI-compatible endpoint?")
        info["probe_status"] = status
        info["probe_error"] = err
    return info


# ---------------------------------------------------------------------------------------------
# The server's own queue-time histogram (GET /metrics), where it publishes one


#: The most of a /metrics answer read (bytes): a real vLLM page is tens of KiB.
MAX_METRICS_BYTES = 16 << 20


@dataclass
class Scrape:
    """One ``GET /metrics``: the queue-time histogram and the server's own latency histograms."""
    queue: servermetrics.Histogram | None = None
    latency: dict = field(default_factory=dict)
    note: str = ""


def bounded_answer(method: str, url: str, timeout_s: float, max_bytes: int,
                   only_status: int | None = None) -> tuple[int, bytes, str]:
    """One HTTP request whose whole answer has a deadline of ``timeout_s`` (httpx bounds each read,
    not the request: a server dripping a byte a second would pass that), of which at most
    ``max_bytes`` are read. Returns the status, the body and why the body is cut short: ``""`` (it
    is whole), ``"deadline"`` or ``"size"``. With ``only_status``, a body under another status is
    not read. Raises ``httpx.HTTPError``."""
    httpx = _httpx()
    deadline = time.monotonic() + timeout_s
    body = bytearray()
    with httpx.Client(timeout=httpx.Timeout(timeout_s), trust_env=False) as client:
        with client.stream(method, url) as r:
            if only_status is not None and r.status_code != only_status:
                return r.status_code, b"", ""
            for chunk in r.iter_bytes():
                body += chunk
                if time.monotonic() > deadline:
                    return r.status_code, bytes(body), "deadline"
                if len(body) > max_bytes:
                    return r.status_code, bytes(body), "size"
            return r.status_code, bytes(body), ""


def scrape(url: str, timeout_s: float = 5.0) -> Scrape:
    """The server's histograms now, and a note on where the queue time came from or why there is
    none. Never raises: a server without ``/metrics`` is measured all the same. The whole answer
    has a deadline of ``timeout_s`` and at most :data:`MAX_METRICS_BYTES` are read
    (:func:`bounded_answer`)."""
    httpx = _httpx()
    try:
        status, body, cut = bounded_answer("GET", url + "/metrics", timeout_s, MAX_METRICS_BYTES, only_status=200)
    except httpx.HTTPError as e:
        return Scrape(note=f"GET {url}/metrics failed ({type(e).__name__})")
    if status != 200:
        return Scrape(note=f"GET {url}/metrics answered {status}")
    if cut == "deadline":
        return Scrape(note=f"GET {url}/metrics: no whole answer within {timeout_s:g}s")
    if cut == "size":
        return Scrape(note=f"GET {url}/metrics: larger than {MAX_METRICS_BYTES >> 20} MiB")
    text = body.decode("utf-8", "replace")
    h, note = _queue_of(url, text)
    return Scrape(h, servermetrics.latency_histograms(text), note)


def scrape_queue(url: str, timeout_s: float = 5.0) -> tuple[servermetrics.Histogram | None, str]:
    """The server's queue-time histogram now, and a note on where it came from or why there is none."""
    got = scrape(url, timeout_s)
    return got.queue, got.note


def _queue_of(url: str, text: str) -> tuple[servermetrics.Histogram | None, str]:
    h = servermetrics.queue_histogram(text)
    if h is None:
        return None, (f"GET {url}/metrics has no queue-time histogram (looked for "
                      f"{', '.join(servermetrics.QUEUE_HISTOGRAMS)})")
    engine = servermetrics.QUEUE_HISTOGRAMS[h.name][0]
    return h, f"{h.name} ({engine}) from GET {url}/metrics"


def queue_figures(before, after) -> dict:
    """A level's queue columns from the scrapes around it (NaN where the server reports none)."""
    out = {"queue_requests": math.nan, "queue_ms_mean": math.nan, **{f"queue_ms_{p}": math.nan for p, _ in _PCTS}}
    if after is None or before is None or after.name != before.name:
        return out
    d = after.minus(before)
    if d.count <= 0:
        return out
    got = {"queue_requests": d.count, "queue_ms_mean": d.mean() * 1e3,
           **{f"queue_ms_{p}": d.quantile(q / 100) * 1e3 for p, q in _PCTS},
           "queue_first_bucket_ms": d.first_bound() * 1e3}
    # a histogram that contradicts itself (a sum that fell while the count rose) reports nothing
    return got if all(math.isfinite(v) and v >= 0 for k, v in got.items() if k != "queue_first_bucket_ms") \
        else out


def server_latency_figures(before: Scrape | None, after: Scrape | None, level: dict) -> dict:
    """The server's own mean TTFT/TPOT/ITL/e2e over a level (sum / count of its histograms between
    the scrapes around it: exact, whatever the buckets) beside the client's means, as % difference."""
    out = {}
    for m in servermetrics.SERVER_LATENCY_HISTOGRAMS:
        out[f"server_{m}_ms_mean"] = out[f"{m}_vs_server_pct"] = math.nan
        a, b = (after.latency.get(m) if after else None), (before.latency.get(m) if before else None)
        if a is None or b is None:
            continue
        d = a.minus(b)
        mean = d.mean() * 1e3
        if d.count > 0 and math.isfinite(mean) and mean >= 0:
            out[f"server_{m}_ms_mean"] = mean
            mine = level.get(f"{m}_ms_mean", math.nan)
            if mean > 0 and mine == mine:
                out[f"{m}_vs_server_pct"] = 100.0 * (mine - mean) / mean
    return out


# ---------------------------------------------------------------------------------------------
# Levels


async def _run_level(cfg: ServeConfig, level: dict, ignore_eos: bool, rows: list, on_done) -> None:
    """Run one level; appends each finished request's row to ``rows`` (so an interrupt keeps them).
    The whole level has a deadline too: --duration, then --timeout for the last requests, plus a
    margin; past it the requests still in flight are cancelled."""
    try:
        async with asyncio.timeout(level_deadline_s(cfg)):
            await _level_body(cfg, level, ignore_eos, rows, on_done)
    except TimeoutError:
        raise LevelTimeout(level_deadline_s(cfg)) from None


def level_deadline_s(cfg: ServeConfig) -> float:
    return cfg.duration_s + cfg.timeout_s + 30.0


class LevelTimeout(Exception):
    """A level ran past :func:`level_deadline_s` (a request ignored its own deadline)."""


async def _level_body(cfg: ServeConfig, level: dict, ignore_eos: bool, rows: list, on_done) -> None:
    from .httpstream import Pool

    conc, rate = level["concurrency"], level["rate_rps"]
    n_requests = level["requests"]
    workload = Workload(cfg, cfg.seed * 1000 + level["level"])
    t0 = time.perf_counter()
    deadline = t0 + cfg.duration_s
    issued = 0

    async def one(client, c: int, idx: int):
        spec = workload.next(c)
        row = await stream_request(client, cfg, spec, ignore_eos, t0)
        workload.record(c, row.get("text", ""), row["status"] == "ok")
        row.update(level=level["level"], mode=level["mode"], concurrency=conc, rate_rps=rate, request=idx)
        rows.append(row)
        on_done()

    client = Pool(cfg.url, min(10.0, cfg.timeout_s))
    try:
        if level["mode"] == "closed":
            async def worker(c: int):
                nonlocal issued
                while issued < n_requests and time.perf_counter() < deadline:
                    issued += 1
                    await one(client, c, issued - 1)

            await asyncio.gather(*(worker(c) for c in range(conc)))
        else:
            rng = random.Random(cfg.seed * 7919 + level["level"])
            tasks = set()
            next_t = t0
            while issued < n_requests:
                next_t += rng.expovariate(rate)
                if next_t >= deadline:
                    break
                await asyncio.sleep(max(0.0, next_t - time.perf_counter()))
                if len(tasks) >= conc:           # the in-flight cap: count the arrival as refused
                    rows.append({"level": level["level"], "mode": "open", "concurrency": conc, "rate_rps": rate,
                                 "request": issued, "status": "client", "start_s": time.perf_counter() - t0,
                                 "error": f"more than {conc} requests in flight (open-loop cap)"})
                    issued += 1
                    on_done()
                    continue
                t = asyncio.ensure_future(one(client, issued, issued))
                issued += 1
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.gather(*tasks)
    finally:
        client.close()


async def _warmup(cfg: ServeConfig, ignore_eos: bool) -> dict:
    """``cfg.warmup`` requests one after another at the workload's lengths, not recorded: a server's
    first requests pay one-off costs (allocations, compilation) that are no level's figures."""
    from .httpstream import Pool

    workload = Workload(cfg, cfg.seed * 1000 - 1)
    ok = 0
    client = Pool(cfg.url, min(10.0, cfg.timeout_s))
    try:
        for _ in range(cfg.warmup):
            row = await stream_request(client, cfg, workload.next(0), ignore_eos, time.perf_counter())
            ok += row["status"] == "ok"
    finally:
        client.close()
    return {"requests": cfg.warmup, "ok": ok}


def _pct(values, q) -> float:
    import numpy as np

    a = np.asarray([v for v in values if v == v], dtype=np.float64)
    return float(np.percentile(a, q)) if a.size else math.nan


def level_summary(level: dict, rows: list[dict], wall_s: float, status: str) -> dict:
    """The per-level row: percentiles over the level's successful requests (ITL over every gap)."""
    ok = [r for r in rows if r["status"] == "ok"]
    kinds: dict[str, int] = {}
    for r in rows:
        if r["status"] != "ok":
            kinds[r["status"]] = kinds.get(r["status"], 0) + 1
    out = {**{k: level[k] for k in ("level", "mode", "concurrency", "rate_rps")}, "status": status,
           "requests": len(rows), "ok": len(ok), "errors": len(rows) - len(ok),
           "error_kinds": ";".join(f"{k}:{v}" for k, v in sorted(kinds.items())), "duration_s": wall_s}
    tokens_out = sum(r["tokens_out"] for r in ok)
    out["output_tokens_per_s"] = tokens_out / wall_s if wall_s > 0 and ok else math.nan
    out["requests_per_s"] = len(ok) / wall_s if wall_s > 0 and ok else math.nan
    out["tokens_in_mean"] = sum(r["tokens_in"] for r in ok) / len(ok) if ok else math.nan
    out["tokens_out_mean"] = tokens_out / len(ok) if ok else math.nan
    out["input_tokens_per_s"] = sum(r["tokens_in"] for r in ok) / wall_s if wall_s > 0 and ok else math.nan
    gaps = [g for r in ok for g in r.get("gaps_ms", [])]
    for name, values in (("ttft", [r["ttft_ms"] for r in ok]), ("tpot", [r["tpot_ms"] for r in ok]),
                         ("itl", gaps), ("e2e", [r["e2e_ms"] for r in ok])):
        for p, q in _PCTS:
            out[f"{name}_ms_{p}"] = _pct(values, q)
        v = [x for x in values if x == x]
        out[f"{name}_ms_mean"] = sum(v) / len(v) if v else math.nan
        out[f"{name}_ms_std"] = (math.sqrt(sum((x - out[f"{name}_ms_mean"]) ** 2 for x in v) / len(v))
                                 if v else math.nan)          # population std, as vllm bench serve's np.std
    p50, p99 = out["tpot_ms_p50"], out["tpot_ms_p99"]
    out["jitter_tpot_p99_p50"] = p99 / p50 if p50 and p50 == p50 and p50 > 0 else math.nan
    bursts = [r for r in ok if r.get("burst")]
    out["burst_requests"] = len(bursts)
    out["burst_note"] = (f"{len(bursts)} of {len(ok)} requests got their output in one burst (TPOT < "
                         f"{BURST_TPOT_MS:g} ms): their TPOT/ITL are delivery, not decode" if bursts else "")
    return out


def goodput(level: dict, rows: list[dict], slo: dict) -> None:
    """``goodput_rps``: requests/s that met every latency limit of the SLO on their own (each
    ``<metric>_<pN>`` limit applied to the request's value, as ``vllm bench serve --goodput``
    does), and their share of the successful requests."""
    ok = [r for r in rows if r["status"] == "ok"]
    limits = {k.split("_ms_")[0]: v for k, v in slo.items() if "_ms_" in k}

    def meets(r):
        for m, lim in limits.items():
            v = (max(r.get("gaps_ms") or [0.0]) if m == "itl" else r.get(f"{m}_ms", math.nan))
            if v == v and v > lim:
                return False
        return True

    good = sum(1 for r in ok if meets(r))
    wall = level["duration_s"]
    level["goodput_rps"] = good / wall if wall > 0 and ok else math.nan
    level["goodput_pct"] = 100.0 * good / len(ok) if ok else math.nan


def judge(levels: list[dict], slo: dict) -> int | None:
    """Mark each level's ``meets_slo``/``slo_missed`` and ``jitter_growth``; return the knee: the
    highest closed-loop concurrency that meets every SLO (None when none does)."""
    first = next((lv["jitter_tpot_p99_p50"] for lv in levels
                  if lv["mode"] == "closed" and lv["jitter_tpot_p99_p50"] == lv["jitter_tpot_p99_p50"]), math.nan)
    knee = None
    for lv in levels:
        j = lv["jitter_tpot_p99_p50"]
        lv["jitter_growth"] = j / first if first == first and j == j and first > 0 else math.nan
        missed = []
        for key, limit in slo.items():
            if key == "error_pct":
                continue
            v = lv.get(key, math.nan)
            if not (v == v) or v > limit:
                missed.append(f"{key}={'n/a' if v != v else f'{v:.4g}'}>{limit:g}")
        err_pct = 100.0 * lv["errors"] / lv["requests"] if lv["requests"] else 100.0
        if err_pct > slo.get("error_pct", 0.0) or not lv["ok"]:
            missed.append(f"error_pct={err_pct:.3g}>{slo.get('error_pct', 0.0):g}")
        lv["meets_slo"] = "yes" if not missed and lv["status"] == "complete" else "no"
        lv["slo_missed"] = " ".join(missed) if missed else ("" if lv["status"] == "complete" else "interrupted")
        if lv["mode"] == "closed" and lv["meets_slo"] == "yes":
            knee = lv["concurrency"] if knee is None else max(knee, lv["concurrency"])
    return knee


# ---------------------------------------------------------------------------------------------
# serve --profile: one more round under the server's profiler, its traces imported

PROFILE_WAIT_S = 120.0        # for the server to write its traces after POST /stop_profile


def _trace_files(d: str) -> dict:
    out = {}
    for root, _, names in os.walk(d):
        for n in names:
            if n.endswith((".json", ".json.gz")):
                p = os.path.join(root, n)
                try:
                    out[p] = os.path.getsize(p)
                except OSError:
                    pass
    return out


def _post(url: str, path: str, timeout_s: float, max_bytes: int = 1 << 20) -> str:
    """POST url+path; '' when the server answered 2xx, else why not. The whole answer has a deadline
    of ``timeout_s`` and at most ``max_bytes`` of it are read (:func:`bounded_answer`)."""
    httpx = _httpx()
    try:
        status, body, cut = bounded_answer("POST", url + path, timeout_s, max_bytes)
    except httpx.HTTPError as e:
        return f"POST {path} failed ({type(e).__name__})"
    if cut == "deadline":
        return f"POST {path}: no whole answer within {timeout_s:g}s"
    text = body.decode("utf-8", "replace")
    return "" if status < 300 else f"POST {path} answered {status} ({' '.join(text.split())[:80]})"


def profile_round(cfg: ServeConfig, level: dict, ignore_eos: bool, rows: list, out: str) -> dict:
    """Run ``level`` between the server's ``/start_profile`` and ``/stop_profile``, wait for the
    traces it writes into ``cfg.profile_dir``, import them into ``OUT/kineto``; an account for meta.json
    (``error`` says what failed; the level's requests are kept either way)."""
    from .kineto import import_kineto

    acc = {"dir": os.path.abspath(cfg.profile_dir), "level": level["level"], "concurrency": level["concurrency"],
           "requests": level["requests"], "files": [], "kineto_out": None, "error": ""}
    before = _trace_files(cfg.profile_dir)
    err = _post(cfg.url, "/start_profile", 60.0)
    if err:
        acc["error"] = f"{err}: is the server's profiler on (vLLM --profiler-config)?"
        return acc
    try:
        asyncio.run(_run_level(cfg, level, ignore_eos, rows, lambda: None))
    finally:
        err = _post(cfg.url, "/stop_profile", PROFILE_WAIT_S)
    if err:
        acc["error"] = err
        return acc
    deadline, last, stable = time.monotonic() + PROFILE_WAIT_S, None, 0
    while time.monotonic() < deadline:      # new trace files, their sizes unchanged over two polls
        now = {p: n for p, n in _trace_files(cfg.profile_dir).items() if before.get(p) != n}
        stable = stable + 1 if now and now == last else 0
        if stable >= 2:
            break
        last = now
        time.sleep(0.5)
    files = sorted(last or {})
    acc["files"] = [os.path.basename(p) for p in files]
    if not files:
        acc["error"] = f"no new trace in {cfg.profile_dir} within {PROFILE_WAIT_S:g}s of POST /stop_profile"
        return acc
    try:
        got = import_kineto(files, os.path.join(out, "kineto"),
                            command=["commprof", "import", "kineto", *files, "--out", os.path.join(out, "kineto")])
    except CommprofError as e:
        acc["error"] = f"import kineto: {e}"
        return acc
    acc["kineto_out"] = "kineto"
    acc["runs"] = [{k: r[k] for k in ("tp", "batch", "steps", "steps_by_phase", "collectives_per_step",
                                      "backend", "comm_share_pct", "ms_per_step")} for r in got["runs"]]
    return acc


def level_plan(cfg: ServeConfig) -> list[dict]:
    plan = []
    for c in cfg.concurrency:
        plan.append({"level": len(plan), "mode": "closed", "concurrency": c, "rate_rps": math.nan,
                     "requests": cfg.requests or max(MIN_REQUESTS_FOR_P99, 4 * c)})
    cap = max(cfg.concurrency) if cfg.concurrency else 64
    for r in cfg.rates_rps:
        plan.append({"level": len(plan), "mode": "open", "concurrency": max(cap, 64), "rate_rps": r,
                     "requests": cfg.requests or max(MIN_REQUESTS_FOR_P99, int(math.ceil(r * cfg.duration_s)))})
    return plan


def _load_avg() -> list | None:
    """This machine's 1/5/15-minute load averages: a client sharing its cores with other work (or
    with the server) says so in meta.json."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def _csv_row(row: dict) -> dict:
    """A row for the CSV: not-available (NaN) is an empty cell."""
    return {k: ("" if isinstance(v, float) and v != v else v) for k, v in row.items()}


def _slo_text(slo: dict) -> str:
    return ",".join(f"{k.replace('_ms_', '_')}={v:g}ms" if k != "error_pct" else f"error_pct={v:g}"
                    for k, v in slo.items())


def run(cfg: ServeConfig) -> int:
    """Measure every level, write ``serve_requests.csv``, ``serve_levels.csv``, ``meta.json`` and
    charts into the results dir, print the level table and the knee; the exit code (0). Known
    failures raise :class:`CommprofError` (one line; exit 2 bad input, 3 endpoint unusable)."""
    from .views import serve as view

    out = cfg.out_dir or results.default_out_dir().rstrip("/") + "-serve"
    results.check_out_dir(out, resume=False)
    info = asyncio.run(_preflight(cfg))
    warm = asyncio.run(_warmup(cfg, info["ignore_eos"])) if cfg.warmup else {"requests": 0, "ok": 0}
    first = scrape(cfg.url, min(5.0, cfg.timeout_s))
    queue_hist, queue_source = first.queue, first.note
    host = urlsplit(cfg.url).hostname or "?"
    hosts = [socket.gethostname()] if host in ("127.0.0.1", "localhost", "::1") else [host]
    plan = level_plan(cfg)
    meta = results.provenance(
        "serve", "measured", "service metrics under load (commprof serve): TTFT, TPOT, tokens/s, jitter",
        command=cfg.argv or None, hosts=hosts, gpus=[], url=cfg.url, model=cfg.model, api=cfg.api,
        workload=cfg.workload, workload_what=WORKLOADS.get(cfg.workload, {}).get("what", "replay file"),
        prompt_tokens=cfg.prompt_tokens, output_tokens=cfg.output_tokens, seed=cfg.seed,
        levels=[{k: (None if isinstance(v, float) and v != v else v) for k, v in lv.items()} for lv in plan],
        duration_s=cfg.duration_s, timeout_s=cfg.timeout_s, slo=cfg.slo, slo_text=_slo_text(cfg.slo),
        ignore_eos=info["ignore_eos"], served_models=info["served_models"], server_header=info["server_header"],
        label=cfg.label, warmup=warm, knee_concurrency=None, load_avg_start=_load_avg(),
        queue_time={"source": queue_source if queue_hist is not None else None, "note": queue_source,
                    "method": "per level, the change of the server's queue-time histogram between a scrape of "
                              "GET /metrics before the level and one after it: server-wide (another client's "
                              "requests in that window count too); percentiles interpolated inside buckets as "
                              "Prometheus' histogram_quantile does, except in the first bucket, where a percentile "
                              "is only known to be <= its bound (queue_first_bucket_ms) and that bound is written; "
                              "for finer figures start vLLM with finer buckets (see the serve docs)"},
        server_latency={"histograms": sorted(first.latency) and
                        [servermetrics.SERVER_LATENCY_HISTOGRAMS[m] for m in sorted(first.latency)],
                        "method": "per level, sum / count of each histogram's change between the scrapes around "
                                  "the level (exact means, whatever the buckets), beside commprof's client means: "
                                  "<metric>_vs_server_pct = 100 (client - server) / server"},
        columns={"ttft_ms": "send to first text chunk", "tpot_ms": "(e2e - ttft) / (tokens_out - 1)",
                 "itl_ms": "gap between text chunks", "e2e_ms": "send to last text chunk",
                 "output_tokens_per_s": "tokens out of successful requests / level wall time",
                 "jitter_tpot_p99_p50": "TPOT p99 / p50", "jitter_growth": "jitter / the first level's",
                 "queue_ms": "server-reported time in its queue (see queue_time), empty where not reported",
                 "queue_requests": "requests the server's queue histogram counted during the level",
                 "tokens_in_source": "usage (server) or words (prompt words, an estimate)",
                 "<metric>_ms_p50": "the median (vllm bench serve's Median); _mean and _std (population) beside it",
                 "input_tokens_per_s": "prompt tokens of successful requests / level wall time",
                 "goodput_rps": "successful requests/s that met every SLO latency limit on their own (each "
                                "limit applied per request, ITL as the request's largest gap, as vllm bench "
                                "serve --goodput)",
                 "burst": f"the request's tokens came in one burst: >= {BURST_MIN_TOKENS} tokens at TPOT < "
                          f"{BURST_TPOT_MS:g} ms (delivery, not decode time)",
                 "server_<metric>_ms_mean": "the server's own mean over the level (server_latency)",
                 "client_cpu_ms_per_request": "commprof's own CPU time (user + system, all its threads) over the "
                                              "level / requests: what the client costs the machine it shares"})
    results.start(out, meta)
    req_table = results.TableAppender(os.path.join(out, SERVE_REQUESTS_CSV), REQUEST_COLUMNS)
    lvl_table = results.TableAppender(os.path.join(out, SERVE_LEVELS_CSV), LEVEL_COLUMNS)
    done_levels: list[dict] = []
    status, error = "complete", None
    metrics_now = first             # the server's histograms as the next level starts
    has_metrics = first.queue is not None or bool(first.latency)
    try:
        for level in plan:
            rows: list[dict] = []
            # the last level's closing scrape opens this one (scraped afresh only if that one failed)
            before = metrics_now if metrics_now is not None or not has_metrics else scrape(cfg.url, min(5.0, cfg.timeout_s))
            bar = view.level_progress(level["requests"], level)
            t_start, cpu_start = time.perf_counter(), time.process_time()
            state = "complete"
            try:
                asyncio.run(_run_level(cfg, level, info["ignore_eos"], rows, bar.advance))
            except KeyboardInterrupt:
                state = "interrupted"
                raise
            except LevelTimeout as e:
                state = "timeout"
                status, error = "failed", (f"{cfg.url}: level {level['level']} ran past its deadline of {e.args[0]:g}s "
                                           "(--duration + --timeout + 30 s); its requests in flight were cancelled")
            finally:
                bar.close()
                wall = time.perf_counter() - t_start
                rows.sort(key=lambda r: r.get("request", 0))
                req_table.write([_csv_row(r) for r in rows])
                if rows:
                    summary = level_summary(level, rows, wall, state)
                    summary["client_cpu_ms_per_request"] = (time.process_time() - cpu_start) * 1e3 / len(rows)
                    goodput(summary, rows, cfg.slo)
                    metrics_now = scrape(cfg.url, min(5.0, cfg.timeout_s)) if has_metrics and state == "complete" else None
                    summary.update(queue_figures(before.queue if before else None,
                                                 metrics_now.queue if metrics_now else None))
                    summary.update(server_latency_figures(before, metrics_now, summary))
                    done_levels.append(summary)
            if rows and all(r["status"] in ("connect", "disconnect") and not r.get("http_status") for r in rows):
                status = "failed"
                error = (f"{cfg.url}: no request of level {level['level']} got an answer (connection refused or "
                         "closed): the server died?")
                break
            if state == "timeout":
                break
        if status == "complete" and done_levels and not any(lv["ok"] for lv in done_levels):
            kinds = sorted({k.split(":")[0] for lv in done_levels for k in lv["error_kinds"].split(";") if k})
            status, error = "failed", (f"{cfg.url}: no request succeeded in any level ({', '.join(kinds) or 'errors'}):"
                                       " nothing was measured")
        if cfg.profile_dir and status == "complete":
            closed = [lv for lv in plan if lv["mode"] == "closed"] or plan
            top = max(closed, key=lambda lv: lv["concurrency"])
            level = {**top, "level": len(plan), "mode": "profiled", "requests": top["concurrency"]}
            rows = []
            t_start = time.perf_counter()
            profile = profile_round(cfg, level, info["ignore_eos"], rows, out)
            rows.sort(key=lambda r: r.get("request", 0))
            req_table.write([_csv_row(r) for r in rows])
            if rows:
                summary = level_summary(level, rows, time.perf_counter() - t_start, "complete")
                goodput(summary, rows, cfg.slo)
                done_levels.append(summary)
            meta = results.read_meta(out)
            meta["profile"] = profile
            results.write_meta(out, meta)
            view.profile_lines(profile, out)
            if profile["error"]:
                error = f"serve --profile: {profile['error']}"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    except BaseException as e:      # a full disk under a table, or any other failure: meta says failed
        status, error = "failed", (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise
    finally:
        knee = judge(done_levels, cfg.slo)
        lvl_table.write([_csv_row(r) for r in done_levels])
        req_table.close()
        lvl_table.close()
        meta = results.read_meta(out)
        meta["knee_concurrency"] = knee
        meta["load_avg_end"] = _load_avg()
        results.write_meta(out, meta)
        results.finish_meta(out, status, error)
        if done_levels:
            import pandas as pd

            with results.failing(out):
                view.render(pd.DataFrame(done_levels, columns=LEVEL_COLUMNS), results.read_meta(out), out,
                            charts=cfg.charts)
    if error:
        raise EndpointError(error + f"; finished levels are kept in {out}")
    return 0
