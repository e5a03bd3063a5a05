"""``commprof serve``'s load loop: the levels run against an endpoint (closed loop: N clients, each
sending its next request when the last one finished; open loop: Poisson arrivals), the warm-up, the
``/metrics`` scrapes around each level, and ``serve --profile``'s round under the server's profiler.
The verb (:mod:`commprof.verbs.serve`) checks the flags, writes meta.json and shows the levels; what
a person sees while a level runs comes in as a callback (``progress``), so this module imports no view.
"""
from __future__ import annotations

import asyncio
import math
import os
import random
import time
from dataclasses import dataclass, field

from commprof.analysis.servestats import goodput, level_summary, profile_comm
from commprof.capture import cpuwait
from commprof.capture.httpstream import Pool
from commprof.capture.serveclient import httpx_module, stream_request
from commprof.capture.servescrape import bounded_answer, queue_figures, scrape, server_latency_figures
from commprof.capture.serveworkload import Workload
from commprof.ingest.kineto import import_kineto
from commprof.model.errors import CommprofError
from commprof.model.fileio import shown_path
from commprof.model.serveconfig import MIN_REQUESTS_FOR_P99, RequestRow, ServeConfig


async def run_level(cfg: ServeConfig, level: dict, ignore_eos: bool, rows: list[RequestRow], on_done) -> None:
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


async def warmup(cfg: ServeConfig, ignore_eos: bool) -> dict:
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


def post(url: str, path: str, timeout_s: float, max_bytes: int = 1 << 20) -> str:
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
    acc = {"dir": shown_path(cfg.profile_dir), "level": level["level"], "concurrency": level["concurrency"],
           "requests": level["requests"], "files": [], "kineto_out": None, "error": ""}
    before = _trace_files(cfg.profile_dir)
    err = post(cfg.url, "/start_profile", 60.0)
    if err:
        acc["error"] = f"{err}: is the server's profiler on (vLLM --profiler-config)?"
        return acc
    try:
        asyncio.run(run_level(cfg, level, ignore_eos, rows, lambda: None))
    finally:
        err = post(cfg.url, "/stop_profile", PROFILE_WAIT_S)
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
    acc["runs"] = [{**{k: r[k] for k in ("tp", "batch", "steps", "steps_by_phase", "collectives_per_step",
                                         "backend", "comm_share_pct", "ms_per_step")}, **profile_comm(r)}
                   for r in got["runs"]]
    return acc


def level_plan(cfg: ServeConfig) -> list[dict]:
    """The levels in order: one closed loop per ``--concurrency`` (at least
    ``MIN_REQUESTS_FOR_P99`` or 4 per client), then one open loop per ``--rate`` (in flight at most
    the highest concurrency, 64 or more)."""
    plan = []
    for c in cfg.concurrency:
        plan.append({"level": len(plan), "mode": "closed", "concurrency": c, "rate_rps": math.nan,
                     "requests": cfg.requests or max(MIN_REQUESTS_FOR_P99, 4 * c)})
    cap = max(cfg.concurrency) if cfg.concurrency else 64
    for r in cfg.rates_rps:
        plan.append({"level": len(plan), "mode": "open", "concurrency": max(cap, 64), "rate_rps": r,
                     "requests": cfg.requests or max(MIN_REQUESTS_FOR_P99, int(math.ceil(r * cfg.duration_s)))})
    return plan


def load_avg() -> list | None:
    """This machine's 1/5/15-minute load averages: a client sharing its cores with other work (or
    with the server) says so in meta.json."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


@dataclass
class LoadRun:
    """What :func:`run_levels` has measured so far (kept when a level is interrupted): one summary
    per finished level, and the run's status and error for meta.json."""

    done_levels: list[dict] = field(default_factory=list)
    status: str = "complete"
    error: str | None = None


def run_levels(cfg: ServeConfig, plan: list[dict], ignore_eos: bool, first, req_table, acc: LoadRun,
               progress) -> None:
    """Run every level of ``plan`` in turn: each finished request's row goes to ``req_table``, each
    level's summary (with the client's CPU cost, goodput and the server's figures from the scrapes
    around it) to ``acc.done_levels``. ``first`` is the scrape before the first level;
    ``progress(level)`` returns the level's bar (``advance()``, ``close()``). A dead server, a level
    past its deadline, or no successful request at all set ``acc.status`` to failed with a reason."""
    metrics_now = first             # the server's histograms as the next level starts
    has_metrics = first.queue is not None or bool(first.latency)
    for level in plan:
        rows: list[RequestRow] = []
        # the last level's closing scrape opens this one (scraped afresh only if that one failed)
        before = metrics_now if metrics_now is not None or not has_metrics else scrape(cfg.url, min(5.0, cfg.timeout_s))
        bar = progress(level)
        t_start, cpu_start = time.perf_counter(), time.process_time()
        waits = cpuwait.WaitMeter()
        waits.start()
        state = "complete"
        try:
            asyncio.run(run_level(cfg, level, ignore_eos, rows, bar.advance))
        except KeyboardInterrupt:
            state = "interrupted"
            raise
        except LevelTimeout as e:
            state = "timeout"
            acc.status, acc.error = "failed", (f"{cfg.url}: level {level['level']} ran past its deadline of "
                                               f"{e.args[0]:g}s (--duration + --timeout + 30 s); its requests in "
                                               "flight were cancelled")
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
                acc.done_levels.append(summary)
        if rows and all(r.status in ("connect", "disconnect") and not r.http_status for r in rows):
            acc.status = "failed"
            acc.error = (f"{cfg.url}: no request of level {level['level']} got an answer (connection refused or "
                         "closed): the server died?")
            break
        if state == "timeout":
            break
    if acc.status == "complete" and acc.done_levels and not any(lv["ok"] for lv in acc.done_levels):
        kinds = sorted({k.split(":")[0] for lv in acc.done_levels for k in lv["error_kinds"].split(";") if k})
        acc.status, acc.error = "failed", (f"{cfg.url}: no request succeeded in any level "
                                           f"({', '.join(kinds) or 'errors'}): nothing was measured")


def run_profiled_level(cfg: ServeConfig, plan: list[dict], ignore_eos: bool, req_table, acc: LoadRun,
                       out: str) -> dict:
    """``serve --profile``: one more level at the plan's highest closed-loop concurrency (one request
    per client) under the server's profiler (:func:`profile_round`); its rows go to ``req_table`` and
    its summary to ``acc.done_levels``. The profile account for meta.json."""
    closed = [lv for lv in plan if lv["mode"] == "closed"] or plan
    top = max(closed, key=lambda lv: lv["concurrency"])
    level = {**top, "level": len(plan), "mode": "profiled", "requests": top["concurrency"]}
    rows: list[RequestRow] = []
    t_start = time.perf_counter()
    profile = profile_round(cfg, level, ignore_eos, rows, out)
    rows.sort(key=lambda r: r.request or 0)
    req_table.write([r.to_csv_row() for r in rows])
    if rows:
        summary = level_summary(level, rows, time.perf_counter() - t_start, "complete")
        goodput(summary, rows, cfg.slo)
        run = (profile.get("runs") or [{}])[0]      # the communication the server's profiler saw
        for k in ("comm_ms_per_step", "comm_ms_per_token", "decode_tokens_per_step"):
            v = run.get(k)
            summary[k] = math.nan if v is None else v
        acc.done_levels.append(summary)
    return profile
