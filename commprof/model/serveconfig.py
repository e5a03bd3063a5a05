"""What ``commprof serve`` measures (:class:`ServeConfig`), its tables' columns, the built-in
workloads' sizes, the error kinds, and the parsing of its ``--url``, ``--slo`` and ``--rate`` flags."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from commprof.model.errors import EXIT_DEVICE, CommprofError, UsageError, shown


SERVE_REQUESTS_CSV = "serve_requests.csv"
SERVE_LEVELS_CSV = "serve_levels.csv"

REQUEST_COLUMNS = ["level", "mode", "concurrency", "rate_rps", "request", "session", "turn", "start_s", "status",
                   "error", "http_status", "tokens_in", "tokens_in_source", "tokens_out", "tokens_out_source",
                   "max_tokens", "chunks", "ttft_ms", "tpot_ms", "e2e_ms", "itl_ms_p50", "itl_ms_p99", "itl_ms_max", "burst"]


@dataclass(kw_only=True)
class RequestRow:
    """One request of ``serve_requests.csv``; its fields are :data:`REQUEST_COLUMNS`, in that order.
    Not available is NaN (a time) or None (a count or a label): an empty cell either way. Times in
    ms unless the name says s (``start_s``: since the level started).

    A streamed request also carries two values that are no column (plain attributes, not fields):
    ``gaps_ms``, the gaps between its text chunks (the level's ITL percentiles and goodput read
    them), and ``text``, its output (the multi-turn workload's next turn builds on it)."""
    level: int | None = None
    mode: str | None = None                 # closed, open or profiled
    concurrency: int | None = None
    rate_rps: float = math.nan              # open-loop levels only
    request: int | None = None              # index within the level
    session: int | None = None
    turn: int | None = None
    start_s: float = math.nan
    status: str                             # ok or one of ERROR_KINDS
    error: str = ""                         # a short reason where status is not ok
    http_status: int | None = None          # None: no answer
    tokens_in: int | None = None
    tokens_in_source: str | None = None     # usage (the server's count) or words (prompt words)
    tokens_out: int | None = None
    tokens_out_source: str | None = None    # usage or chunks (text chunks counted)
    max_tokens: int | None = None
    chunks: int | None = None
    ttft_ms: float = math.nan
    tpot_ms: float = math.nan
    e2e_ms: float = math.nan
    itl_ms_p50: float = math.nan
    itl_ms_p99: float = math.nan
    itl_ms_max: float = math.nan
    burst: int | None = None                # 1: the output came in one burst (BURST_TPOT_MS)

    gaps_ms = ()                            # no annotation: attributes, not fields (see above)
    text = ""

    def to_csv_row(self) -> dict:
        """The row for ``serve_requests.csv``: column -> value, not-available an empty cell."""
        row = {k: getattr(self, k) for k in REQUEST_COLUMNS}
        return {k: ("" if v is None or (isinstance(v, float) and v != v) else v) for k, v in row.items()}
PCTS = (("p50", 50), ("p90", 90), ("p99", 99))
LEVEL_COLUMNS = (["level", "mode", "concurrency", "rate_rps", "status", "requests", "ok", "errors", "error_kinds",
                  "duration_s", "output_tokens_per_s", "requests_per_s", "tokens_in_mean", "tokens_out_mean"]
                 + [f"{m}_ms_{p}" for m in ("ttft", "tpot", "itl", "e2e") for p, _ in PCTS]
                 + ["jitter_tpot_p99_p50", "jitter_growth", "meets_slo", "slo_missed"]
                 + ["queue_requests", "queue_ms_mean"] + [f"queue_ms_{p}" for p, _ in PCTS]
                 + ["queue_first_bucket_ms", "input_tokens_per_s", "goodput_rps", "goodput_pct"]
                 + [f"{m}_ms_{s}" for m in ("ttft", "tpot", "itl", "e2e") for s in ("mean", "std")]
                 + ["burst_requests", "burst_note", "client_cpu_ms_per_request", "client_cpu_wait_ms_per_request"]
                 + [f"server_{m}_ms_mean" for m in ("ttft", "tpot", "itl", "e2e")]
                 + [f"{m}_vs_server_pct" for m in ("ttft", "tpot", "itl", "e2e")]
                 + [f"queue_ms_{p}_{b}" for b in ("le", "ge") for p, _ in PCTS]
                 + ["comm_ms_per_step", "comm_ms_per_token", "decode_tokens_per_step"])

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
    client_cpus: str = "any"              # any (where the kernel puts it) or a CPU list the client is held to




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
