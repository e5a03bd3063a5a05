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

from dataclasses import asdict

from commprof.model.registry import ServeFlags

import asyncio
import math
import os
import socket
from urllib.parse import urlsplit

from commprof import results
from commprof.ingest import servermetrics
from commprof.model.errors import UsageError, shown
from commprof.model.fileio import shown_path
from commprof.model.units import parse_int_list
from commprof.capture.serveclient import preflight
from commprof.model.serveconfig import (BURST_MIN_TOKENS, BURST_TPOT_MS, EndpointError, LEVEL_COLUMNS, MAX_CONCURRENCY,
                          MAX_REQUESTS, REQUEST_COLUMNS, SERVE_LEVELS_CSV, SERVE_REQUESTS_CSV,
                          ServeConfig, WORKLOADS, base_url, parse_rates, parse_slo)
from commprof.capture.servescrape import scrape
from commprof.analysis.servestats import judge
from commprof.capture.serveworkload import load_replay
from commprof.capture import cpuwait, serveload
from commprof.views import serve as view


def build_config(*, url: str, model: str, concurrency: str = "1,4,16", rate: str | None = None,
                 workload: str = "qa", prompt_tokens: int | None = None, output_tokens: int | None = None,
                 requests: int | None = None, duration: float = 60.0, timeout: float = 60.0,
                 api: str = "completions", slo: str = "ttft_p99=2s,tpot_p99=100ms", seed: int = 0,
                 warmup: int = 2, label: str = "", out: str | None = None, argv=None, charts: bool = True,
                 profile: str | None = None, client_cpus: str = "any") -> ServeConfig:
    """A checked :class:`ServeConfig` from the CLI's flag values; a bad value is one UsageError."""
    if not (model or "").strip():
        raise UsageError("--model: empty; give the model name the server serves (GET /v1/models lists them)")
    levels = parse_int_list(concurrency, "--concurrency", maximum=MAX_CONCURRENCY)
    if len(set(levels)) != len(levels):
        raise UsageError(f"--concurrency {shown(concurrency)}: a level is repeated")
    if workload not in WORKLOADS:
        if not os.path.lexists(workload):          # there but not a regular file: load_replay says what it is
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
    client_cpus = (client_cpus or "any").strip()
    if client_cpus != "any":
        try:
            if not cpuwait.parse_cpu_list(client_cpus):
                raise ValueError("empty")
        except ValueError:
            raise UsageError(f"--client-cpus {shown(client_cpus)}: use any or a CPU list such as 1,3 or 2-3") \
                from None
    return ServeConfig(url=base_url(url), model=model.strip(), concurrency=levels, profile_dir=profile or "",
                       client_cpus=client_cpus,
                       rates_rps=parse_rates(rate) if rate else [], workload=workload,
                       prompt_tokens=prompt_tokens, output_tokens=output_tokens, requests=requests,
                       duration_s=float(duration), timeout_s=float(timeout), api=api, slo=parse_slo(slo),
                       seed=seed, warmup=warmup, label=label, out_dir=out or "", argv=list(argv or []), charts=charts)


def _place_client(cfg: ServeConfig) -> dict:
    """Where the client runs (:func:`commprof.capture.cpuwait.place_client`), for meta.json."""
    try:
        return cpuwait.place_client(cfg.url, cfg.client_cpus)
    except ValueError as e:
        raise UsageError(f"--client-cpus {shown(cfg.client_cpus)}: {e}") from None


def _csv_row(row: dict) -> dict:
    """A level row for the CSV: not-available (NaN) is an empty cell (a request row:
    :meth:`RequestRow.to_csv_row`)."""
    return {k: ("" if isinstance(v, float) and v != v else v) for k, v in row.items()}


def _slo_text(slo: dict) -> str:
    return ",".join(f"{k.replace('_ms_', '_')}={v:g}ms" if k != "error_pct" else f"error_pct={v:g}"
                    for k, v in slo.items())


def run_flags(flags: ServeFlags) -> int:
    """``commprof serve``: check the flags (:func:`build_config`), then :func:`run`."""
    return run(build_config(**asdict(flags)))


def run(cfg: ServeConfig) -> int:
    """Measure every level, write ``serve_requests.csv``, ``serve_levels.csv``, ``meta.json`` and
    charts into the results dir, print the level table and the knee; the exit code (0). Known
    failures raise :class:`CommprofError` (one line; exit 2 bad input, 3 endpoint unusable)."""
    out = cfg.out_dir or results.default_out_dir().rstrip("/") + "-serve"
    results.check_out_dir(out, resume=False)
    placement = _place_client(cfg)
    info = asyncio.run(preflight(cfg))
    warm = asyncio.run(serveload.warmup(cfg, info["ignore_eos"])) if cfg.warmup else {"requests": 0, "ok": 0}
    first = scrape(cfg.url, min(5.0, cfg.timeout_s))
    queue_hist, queue_source = first.queue, first.note
    host = urlsplit(cfg.url).hostname or "?"
    hosts = [socket.gethostname()] if host in ("127.0.0.1", "localhost", "::1") else [host]
    plan = serveload.level_plan(cfg)
    meta = results.provenance(
        "serve", "measured", "service metrics under load (commprof serve): TTFT, TPOT, tokens/s, jitter",
        command=cfg.argv or None, hosts=hosts, gpus=[], url=cfg.url, model=cfg.model, api=cfg.api,
        workload=cfg.workload if cfg.workload in WORKLOADS else shown_path(cfg.workload), workload_what=WORKLOADS.get(cfg.workload, {}).get("what", "replay file"),
        prompt_tokens=cfg.prompt_tokens, output_tokens=cfg.output_tokens, seed=cfg.seed,
        levels=[{k: (None if isinstance(v, float) and v != v else v) for k, v in lv.items()} for lv in plan],
        duration_s=cfg.duration_s, timeout_s=cfg.timeout_s, slo=cfg.slo, slo_text=_slo_text(cfg.slo),
        ignore_eos=info["ignore_eos"], served_models=info["served_models"], server_header=info["server_header"],
        label=cfg.label, warmup=warm, knee_concurrency=None, load_avg_start=serveload.load_avg(), client_placement=placement,
        queue_time={"source": queue_source if queue_hist is not None else None, "note": queue_source,
                    "method": "per level, the change of the server's queue-time histogram between a scrape of "
                              "GET /metrics before the level and one after it: server-wide (another client's "
                              "requests in that window count too); percentiles interpolated inside buckets as "
                              "Prometheus' histogram_quantile does, except in the first bucket, where a percentile "
                              "is only known to be <= its bound (queue_first_bucket_ms): its value is left empty and the bound "
                              "written in queue_ms_<p>_le (in the +Inf bucket, >= the last bound: queue_ms_<p>_ge); "
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
                 "comm_ms_per_step": "serve --profile, the profiled level: exposed communication per decode step "
                                     "(the imported trace's median decode step x its communication share)",
                 "comm_ms_per_token": "comm_ms_per_step / decode_tokens_per_step, the tokens each decode step "
                                      "decoded (the median decode requests of vLLM's iteration marks)",
                 "queue_ms_<p>_le": "the percentile lies in the queue histogram's first bucket: only known to be "
                                    "<= this bound (queue_ms_<p> is then empty); _ge: in its +Inf bucket, >= it",
                 "client_cpu_ms_per_request": "commprof's own CPU time (user + system, all its threads) over the "
                                              "level / requests: what the client costs the machine it shares",
                 "client_cpu_wait_ms_per_request": "time commprof's event loop was runnable but waiting for a CPU "
                                                   "(the kernel's run-queue wait, /proc/self/schedstat) over the "
                                                   "level / requests: how late the client could read its tokens"})
    results.start(out, meta)
    req_table = results.TableAppender(os.path.join(out, SERVE_REQUESTS_CSV), REQUEST_COLUMNS)
    lvl_table = results.TableAppender(os.path.join(out, SERVE_LEVELS_CSV), LEVEL_COLUMNS)
    acc = serveload.LoadRun()
    try:
        serveload.run_levels(cfg, plan, info["ignore_eos"], first, req_table, acc,
                             lambda level: view.level_progress(level["requests"], level))
        if cfg.profile_dir and acc.status == "complete":
            profile = serveload.run_profiled_level(cfg, plan, info["ignore_eos"], req_table, acc, out)
            meta = results.read_meta(out)
            meta["profile"] = profile
            results.write_meta(out, meta)
            view.profile_lines(profile, out)
            if profile["error"]:
                acc.error = f"serve --profile: {profile['error']}"
    except KeyboardInterrupt:
        acc.status = "interrupted"
        raise
    except BaseException as e:      # a full disk under a table, or any other failure: meta says failed
        acc.status, acc.error = "failed", (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise
    finally:
        done_levels = acc.done_levels
        knee = judge(done_levels, cfg.slo)
        lvl_table.write([_csv_row(r) for r in done_levels])
        req_table.close()
        lvl_table.close()
        meta = results.read_meta(out)
        meta["knee_concurrency"] = knee
        meta["load_avg_end"] = serveload.load_avg()
        results.write_meta(out, meta)
        results.finish_meta(out, acc.status, acc.error)
        if done_levels:
            import pandas as pd

            with results.failing(out):
                view.render(pd.DataFrame(done_levels, columns=LEVEL_COLUMNS), results.read_meta(out), out,
                            charts=cfg.charts)
    if acc.error:
        raise EndpointError(acc.error + f"; finished levels are kept in {out}")
    return 0
