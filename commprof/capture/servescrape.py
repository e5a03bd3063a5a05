"""The server's own figures, where it publishes them on ``GET /metrics`` (vLLM, SGLang, TGI): the
queue-time histogram and its latency means, scraped before and after each level."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from commprof.ingest import servermetrics
from commprof.capture.serveclient import httpx_module
from commprof.model.serveconfig import PCTS


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
    httpx = httpx_module()
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
    httpx = httpx_module()
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


def _queue_of(url: str, text: str) -> tuple[servermetrics.Histogram | None, str]:
    h = servermetrics.queue_histogram(text)
    if h is None:
        return None, (f"GET {url}/metrics has no queue-time histogram (looked for "
                      f"{', '.join(servermetrics.QUEUE_HISTOGRAMS)})")
    engine = servermetrics.QUEUE_HISTOGRAMS[h.name][0]
    return h, f"{h.name} ({engine}) from GET {url}/metrics"


def queue_figures(before, after) -> dict:
    """A level's queue columns from the scrapes around it (NaN where the server reports none)."""
    out = {"queue_requests": math.nan, "queue_ms_mean": math.nan, **{f"queue_ms_{p}": math.nan for p, _ in PCTS}}
    if after is None or before is None or after.name != before.name:
        return out
    d = after.minus(before)
    if d.count <= 0:
        return out
    got = {"queue_requests": d.count, "queue_ms_mean": d.mean() * 1e3,
           **{f"queue_ms_{p}": d.quantile(q / 100) * 1e3 for p, q in PCTS},
           "queue_first_bucket_ms": d.first_bound() * 1e3}
    # a histogram that contradicts itself (a sum that fell while the count rose) reports nothing
    if not all(math.isfinite(v) and v >= 0 for k, v in got.items() if k != "queue_first_bucket_ms"):
        return out
    # a percentile in the first bucket is only known to be <= its bound, one in the +Inf bucket only
    # >= the last bound: a bound, not a value, so the value stays empty and the bound has its column
    for p, q in PCTS:
        kind = d.quantile_bound(q / 100)
        if kind:
            got[f"queue_ms_{p}_{kind}"], got[f"queue_ms_{p}"] = got[f"queue_ms_{p}"], math.nan
    return got


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
