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
import random
import socket
import time
from urllib.parse import urlsplit

from commprof import results
from commprof.ingest import servermetrics
from commprof.model.errors import CommprofError, UsageError, shown
from commprof.model.fileio import shown_path
from commprof.model.units import parse_int_list
from commprof.capture.serveclient import httpx_module, preflight, stream_request
from commprof.model.serveconfig import (BURST_MIN_TOKENS, BURST_TPOT_MS, EndpointError, LEVEL_COLUMNS, MAX_CONCURRENCY,
                          MAX_REQUESTS, MIN_REQUESTS_FOR_P99, REQUEST_COLUMNS, SERVE_LEVELS_CSV, SERVE_REQUESTS_CSV,
                          RequestRow, ServeConfig, WORKLOADS, base_url, parse_rates, parse_slo)
from commprof.capture.servescrape import bounded_answer, queue_figures, scrape, server_latency_figures
from commprof.analysis.servestats import goodput, judge, level_summary
from commprof.capture.serveworkload import Workload, load_replay
from commprof.capture.httpstream import Pool
from commprof.capture import cpuwait
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


# ---------------------------------------------------------------------------------------------
# Levels


async def _run_level(cfg: ServeConfig, level: dict, ignore_eos: bool, rows: list[RequestRow], on_done) -> None:
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


async def _level_body(cfg: ServeConfig, level: dict, ignore_eos: bool, rows: list[RequestRow], on_done) -> None:
    conc, rate = level["concurrency"], level["rate_rps"]
    n_requests = level["requests"]
    workload = Workload(cfg, cfg.seed * 1000 + level["level"])
    t0 = time.perf_counter()
    deadline = t0 + cfg.duration_s
    issued = 0

    async def one(client, c: int, idx: int):
        spec = workload.next(c)
        row = await stream_request(client, cfg, spec, ignore_eos, t0)
        workload.record(c, row.text, row.status == "ok")
        row.level, row.mode, row.concurrency, row.rate_rps, row.request = level["level"], level["mode"], conc, rate, idx
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
                    rows.append(RequestRow(level=level["level"], mode="open", concurrency=conc, rate_rps=rate,
                                           request=issued, status="client", start_s=time.perf_counter() - t0,
                                           error=f"more than {conc} requests in flight (open-loop cap)"))
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
    workload = Workload(cfg, cfg.seed * 1000 - 1)
    ok = 0
    client = Pool(cfg.url, min(10.0, cfg.timeout_s))
    try:
        for _ in range(cfg.warmup):
            row = await stream_request(client, cfg, workload.next(0), ignore_eos, time.perf_counter())
            ok += row.status == "ok"
    finally:
        client.close()
    return {"requests": cfg.warmup, "ok": ok}


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
    httpx = httpx_module()
    try:
        status, body, cut = bounded_answer("POST", url + path, timeout_s, max_bytes)
    except httpx.HTTPError as e:
        return f"POST {path} failed ({type(e).__name__})"
    if cut == "deadline":
        return f"POST {path}: no whole answer within {timeout_s:g}s"
    text = body.decode("utf-8", "replace")
    return "" if status < 300 else f"POST {path} answered {status} ({' '.join(text.split())[:80]})"


def profile_round(cfg: ServeConfig, level: dict, ignore_eos: bool, rows: list[RequestRow], out: str) -> dict:
    """Run ``level`` between the server's ``/start_profile`` and ``/stop_profile``, wait for the
    traces it writes into ``cfg.profile_dir``, import them into ``OUT/kineto``; an account for meta.json
    (``error`` says what failed; the level's requests are kept either way)."""
    from commprof.ingest.kineto import import_kineto

    acc = {"dir": shown_path(cfg.profile_dir), "level": level["level"], "concurrency": level["concurrency"],
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
                            command=["commprof", "import", "kineto", *map(shown_path, files), "--out", os.path.join(out, "kineto")])
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
    warm = asyncio.run(_warmup(cfg, info["ignore_eos"])) if cfg.warmup else {"requests": 0, "ok": 0}
    first = scrape(cfg.url, min(5.0, cfg.timeout_s))
    queue_hist, queue_source = first.queue, first.note
    host = urlsplit(cfg.url).hostname or "?"
    hosts = [socket.gethostname()] if host in ("127.0.0.1", "localhost", "::1") else [host]
    plan = level_plan(cfg)
    meta = results.provenance(
        "serve", "measured", "service metrics under load (commprof serve): TTFT, TPOT, tokens/s, jitter",
        command=cfg.argv or None, hosts=hosts, gpus=[], url=cfg.url, model=cfg.model, api=cfg.api,
        workload=cfg.workload if cfg.workload in WORKLOADS else shown_path(cfg.workload), workload_what=WORKLOADS.get(cfg.workload, {}).get("what", "replay file"),
        prompt_tokens=cfg.prompt_tokens, output_tokens=cfg.output_tokens, seed=cfg.seed,
        levels=[{k: (None if isinstance(v, float) and v != v else v) for k, v in lv.items()} for lv in plan],
        duration_s=cfg.duration_s, timeout_s=cfg.timeout_s, slo=cfg.slo, slo_text=_slo_text(cfg.slo),
        ignore_eos=info["ignore_eos"], served_models=info["served_models"], server_header=info["server_header"],
        label=cfg.label, warmup=warm, knee_concurrency=None, load_avg_start=_load_avg(), client_placement=placement,
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
                                              "level / requests: what the client costs the machine it shares",
                 "client_cpu_wait_ms_per_request": "time commprof's event loop was runnable but waiting for a CPU "
                                                   "(the kernel's run-queue wait, /proc/self/schedstat) over the "
                                                   "level / requests: how late the client could read its tokens"})
    results.start(out, meta)
    req_table = results.TableAppender(os.path.join(out, SERVE_REQUESTS_CSV), REQUEST_COLUMNS)
    lvl_table = results.TableAppender(os.path.join(out, SERVE_LEVELS_CSV), LEVEL_COLUMNS)
    done_levels: list[dict] = []
    status, error = "complete", None
    metrics_now = first             # the server's histograms as the next level starts
    has_metrics = first.queue is not None or bool(first.latency)
    try:
        for level in plan:
            rows: list[RequestRow] = []
            # the last level's closing scrape opens this one (scraped afresh only if that one failed)
            before = metrics_now if metrics_now is not None or not has_metrics else scrape(cfg.url, min(5.0, cfg.timeout_s))
            bar = view.level_progress(level["requests"], level)
            t_start, cpu_start = time.perf_counter(), time.process_time()
            waits = cpuwait.WaitMeter()
            waits.start()
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
                rows.sort(key=lambda r: r.request or 0)
                req_table.write([r.to_csv_row() for r in rows])
                if rows:
                    summary = level_summary(level, rows, wall, state)
                    summary["client_cpu_ms_per_request"] = (time.process_time() - cpu_start) * 1e3 / len(rows)
                    waited_ms = waits.stop()["wait_ms"]
                    summary["client_cpu_wait_ms_per_request"] = waited_ms / len(rows)
                    if summary["burst_requests"] and cpuwait.wait_note(waited_ms, wall):
                        summary["burst_note"] += "; " + cpuwait.wait_note(waited_ms, wall)
                    goodput(summary, rows, cfg.slo)
                    metrics_now = scrape(cfg.url, min(5.0, cfg.timeout_s)) if has_metrics and state == "complete" else None
                    summary.update(queue_figures(before.queue if before else None,
                                                 metrics_now.queue if metrics_now else None))
                    summary.update(server_latency_figures(before, metrics_now, summary))
                    done_levels.append(summary)
            if rows and all(r.status in ("connect", "disconnect") and not r.http_status for r in rows):
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
            rows.sort(key=lambda r: r.request or 0)
            req_table.write([r.to_csv_row() for r in rows])
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
