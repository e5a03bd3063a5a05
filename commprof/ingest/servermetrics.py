"""What a serving engine says about itself on ``GET /metrics`` (Prometheus text format): the
queue-time histogram, read before and after each ``commprof serve`` level.

No OpenAI-compatible stream reports per request how long it waited in the server's queue, but
the common engines publish a histogram of it:

* vLLM: ``vllm:request_queue_time_seconds`` (time in the WAITING phase; vLLM docs, "Metrics",
  docs.vllm.ai, design/metrics);
* SGLang: ``sglang:queue_time_seconds`` (with ``--enable-metrics``; SGLang docs, "Production
  Metrics");
* TGI: ``tgi_request_queue_duration`` (seconds; text-generation-inference docs, reference/metrics).

A histogram here is the sum over every series of the family (label sets such as model_name or
dp_rank): cumulative bucket counts by upper bound ``le``, the sum and the count. A level's figures
are the change between two scrapes; percentiles are interpolated linearly inside the bucket that
holds them, as Prometheus' ``histogram_quantile`` does, so they are only as fine as the buckets.
Parsing never raises: a line that is not a sample of a wanted family, or whose value is not a
finite count >= 0, is skipped.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

#: Queue-time histograms, in the order they are looked for: family name -> (engine, unit in seconds).
QUEUE_HISTOGRAMS = {
    "vllm:request_queue_time_seconds": ("vLLM", 1.0),
    "sglang:queue_time_seconds": ("SGLang", 1.0),
    "tgi_request_queue_duration": ("TGI", 1.0),
}
#: The server's own latency histograms a level's client figures are checked against (vLLM docs,
#: "Metrics": observed per request in the engine's output processor), by commprof's metric.
SERVER_LATENCY_HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "tpot": "vllm:request_time_per_output_token_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
}

# name{labels} value [timestamp]; label values may hold escaped quotes and commas
_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(\S+)(?:\s+\S+)?\s*$')
_LE = re.compile(r'(?:^|[{,])\s*le\s*=\s*"([^"]*)"')


@dataclass
class Histogram:
    """One family's histogram, summed over its series."""
    name: str
    buckets: dict = field(default_factory=dict)       # upper bound (seconds; inf last) -> cumulative count
    sum: float = 0.0
    count: float = 0.0

    def minus(self, before: Histogram | None) -> Histogram:
        """What was observed between ``before`` and this scrape (a counter that went down, as after
        a server restart, counts from zero)."""
        if before is None or self.count < before.count:
            return Histogram(self.name, dict(self.buckets), self.sum, self.count)
        return Histogram(self.name, {le: c - before.buckets.get(le, 0.0) for le, c in self.buckets.items()},
                         self.sum - before.sum, self.count - before.count)

    def mean(self) -> float:
        return self.sum / self.count if self.count > 0 else math.nan

    def first_bound(self) -> float:
        """The first bucket's upper bound (seconds; NaN without a finite bucket)."""
        return min((le for le in self.buckets if math.isfinite(le)), default=math.nan)

    def quantile(self, q: float) -> float:
        """The q-quantile (0-1): linear inside its bucket; in the first bucket its upper bound (a
        quantile there is only known to be <= it: nothing places it between 0 and the bound, and
        interpolating from 0 would invent a value); in the +Inf bucket, the highest finite bound
        (nothing finer is known)."""
        if self.count <= 0 or not self.buckets:
            return math.nan
        rank = q * self.count
        lower, below = 0.0, 0.0
        for k, le in enumerate(sorted(self.buckets)):
            cum = max(self.buckets[le], below)         # cumulative: never below the bucket before
            if cum >= rank:
                if math.isinf(le):
                    return lower
                if k == 0:
                    return le
                inside = cum - below
                return lower + (le - lower) * ((rank - below) / inside if inside > 0 else 1.0)
            lower, below = (lower if math.isinf(le) else le), cum
        return lower

    def quantile_bound(self, q: float) -> str:
        """What :meth:`quantile` returns for q: ``"le"`` where it is the first bucket's upper bound
        (the quantile is only known to be <= it), ``"ge"`` where it is the highest finite bound (in
        the +Inf bucket: only known to be >= it), ``""`` where it is a value (interpolated)."""
        if self.count <= 0 or not self.buckets:
            return ""
        rank, below = q * self.count, 0.0
        for k, le in enumerate(sorted(self.buckets)):
            cum = max(self.buckets[le], below)
            if cum >= rank:
                return "ge" if math.isinf(le) else "le" if k == 0 else ""
            below = cum
        return "ge"


def _float(text: str, inf_ok: bool = False) -> float | None:
    """A sample value or bucket bound: finite and not negative (a bound may be +Inf), else None."""
    try:
        v = float(text)
    except ValueError:
        return None
    if math.isnan(v) or v < 0 or (math.isinf(v) and not inf_ok):
        return None
    return v


def parse_histograms(text: str, names=tuple(QUEUE_HISTOGRAMS)) -> dict[str, Histogram]:
    """The wanted histogram families found in a ``/metrics`` answer, by name."""
    found: dict[str, Histogram] = {}
    wanted = set(names)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        sample, labels, value = m.group(1), m.group(2) or "", _float(m.group(3))
        if value is None:
            continue
        for suffix in ("_bucket", "_sum", "_count"):
            if sample.endswith(suffix) and sample[:-len(suffix)] in wanted:
                family = sample[:-len(suffix)]
                h = found.setdefault(family, Histogram(family))
                if suffix == "_bucket":
                    le = _LE.search(labels)
                    bound = _float(le.group(1), inf_ok=True) if le else None
                    if bound is not None:
                        h.buckets[bound] = h.buckets.get(bound, 0.0) + value
                elif suffix == "_sum":
                    h.sum += value
                else:
                    h.count += value
                break
    return found


def latency_histograms(text: str) -> dict[str, Histogram]:
    """The server's own TTFT/ITL/TPOT/e2e histograms in a ``/metrics`` answer, by commprof's metric."""
    found = parse_histograms(text, tuple(SERVER_LATENCY_HISTOGRAMS.values()))
    return {m: found[n] for m, n in SERVER_LATENCY_HISTOGRAMS.items() if n in found}


def queue_histogram(text: str) -> Histogram | None:
    """The first known queue-time histogram in a ``/metrics`` answer, or None."""
    found = parse_histograms(text)
    return next((found[n] for n in QUEUE_HISTOGRAMS if n in found), None)
