"""``commprof serve``'s views: a progress bar per level, the level table, the knee line and the
charts (TTFT and TPOT vs concurrency with their p50-p99 bands, tokens/s vs concurrency, the knee
marked). Everything is drawn from ``serve_levels.csv`` and ``meta.json`` alone."""
from __future__ import annotations

import os
import sys

from commprof.analysis.servestats import profile_comm
from commprof.views.charts import save_chart, plain_log_ticks
from commprof.views.console import frame_table, progress_bar

#: The console table: column in serve_levels.csv -> header (the CSV holds every column).
TABLE_COLUMNS = {"mode": "mode", "concurrency": "conc", "rate_rps": "req/s in", "ok": "ok", "errors": "err",
                 "error_kinds": "errors by kind", "ttft_ms_p50": "TTFT p50 ms", "ttft_ms_p99": "TTFT p99 ms",
                 "tpot_ms_p50": "TPOT p50 ms", "tpot_ms_p99": "TPOT p99 ms", "e2e_ms_p99": "e2e p99 ms",
                 "output_tokens_per_s": "tok/s out", "requests_per_s": "req/s", "jitter_tpot_p99_p50": "jitter",
                 "jitter_growth": "jitter growth", "queue_ms_mean": "queue mean ms", "queue_ms_p99": "queue p99 ms",
                 "meets_slo": "SLO", "status": "status", "burst_requests": "burst",
                 "comm_ms_per_step": "comm ms/step", "comm_ms_per_token": "comm ms/token"}
#: Shown only when some level has a value (rate: open-loop levels; queue: the server reports it).
_OPTIONAL = ("rate_rps", "error_kinds", "queue_ms_mean", "queue_ms_p99", "burst_requests", "comm_ms_per_step", "comm_ms_per_token")


#: How long a column of the level table stays when the terminal is narrow (None: always shown).
_KEEP = {"mode": None, "conc": None, "ok": None, "err": 6, "TTFT p50": None, "TPOT p50": None, "tok/s out": 8,
         "SLO": 7, "status": None, "TTFT p99": 5, "TPOT p99": 4, "e2e p99": 2, "req/s in": 3, "req/s": 2,
         "jitter": 1, "jitter growth": 0, "queue mean": 0, "queue p99": 1, "errors by kind": 3, "burst": 9,
         "comm ms/step": 2, "comm ms/token": 3}


def _unitless(header: str) -> str:
    return header.rsplit(" ", 1)[0] if header.endswith((" ms", " s")) else header


def level_progress(total: int, level: dict):
    """The progress bar of one level (:func:`commprof.views.console.progress_bar`)."""
    what = (f"concurrency {level['concurrency']}" if level["mode"] == "closed"
            else f"{level['rate_rps']:g} req/s")
    return progress_bar(total, f"serve {what}", unit="requests")


def knee_line(meta: dict) -> str:
    knee = meta.get("knee_concurrency")
    slo = meta.get("slo_text", "?")
    if knee is None:
        return f"knee: no concurrency level meets the SLOs ({slo})"
    return f"knee: concurrency {knee} is the highest level that meets the SLOs ({slo})"


def _has(levels, col: str) -> bool:
    return col in getattr(levels, "columns", ()) and levels[col].notna().any()


def _num(v) -> bool:
    import numbers

    return isinstance(v, numbers.Real) and not isinstance(v, bool) and v == v


def queue_ms_text(row, col: str) -> str:
    """A queue percentile as read: "<= B" when it lies in the histogram's first bucket (nothing
    finer is known there; ``<col>_le`` holds B and the value is empty), ">= B" in its +Inf bucket
    (``<col>_ge``), else the interpolated value. A dir written before the bound columns (the bound
    in the value column, ``queue_first_bucket_ms`` beside it) reads the same."""
    v, first = row.get(col), row.get("queue_first_bucket_ms")
    if not _num(v):
        le, ge = row.get(f"{col}_le"), row.get(f"{col}_ge")
        return f"<= {le:.4g}" if _num(le) else f">= {ge:.4g}" if _num(ge) else ""
    if _num(first) and v <= first:
        return f"<= {first:.4g}"
    return f"{v:.3g}"


def has_queue_p99(levels) -> bool:
    """Whether some level has a queue p99: a value or a bound."""
    return any(_has(levels, c) for c in ("queue_ms_p99", "queue_ms_p99_le", "queue_ms_p99_ge"))


def burst_lines(levels) -> list[str]:
    """One line per level whose requests got their output in one burst."""
    if not _has(levels, "burst_requests"):
        return []
    return [f"BURST DELIVERY at {_level_name(r)}: {r['burst_note']}"
            for r in levels.to_dict("records") if (r.get("burst_requests") or 0) > 0]


def burst_cells(levels) -> list[str]:
    """The level table's burst column: "n/ok" where n of the level's ok requests got their output
    in one burst (their TPOT and ITL are delivery, not decode; BURST DELIVERY lines below), else
    empty."""
    out = []
    for r in levels.to_dict("records"):
        n = r.get("burst_requests")
        out.append(f"{int(n)}/{int(r.get('ok') or 0)}" if _num(n) and n > 0 else "")
    return out


def _level_name(r) -> str:
    if r["mode"] == "open":
        return f"{r['rate_rps']:g} req/s"
    return f"{'profiled ' if r['mode'] == 'profiled' else ''}concurrency {int(r['concurrency'])}"


def server_check_lines(levels) -> list[str]:
    """Per level: the client's mean TTFT/TPOT/ITL beside the server's own histograms' means."""
    lines = []
    for r in levels.to_dict("records") if _has(levels, "server_ttft_ms_mean") else []:
        parts = []
        for m, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "e2e")):
            srv, d = r.get(f"server_{m}_ms_mean"), r.get(f"{m}_vs_server_pct")
            if srv is None or srv != srv:
                continue
            parts.append(f"{name} {r.get(f'{m}_ms_mean', float('nan')):.3g} vs {srv:.3g} ms"
                         + (f" ({d:+.0f}%)" if d == d else ""))
        if parts:
            lines.append(f"vs the server's own histograms at {_level_name(r)} (means, client vs server): "
                         + ", ".join(parts))
    return lines


def bench_rows(levels):
    """The figures ``vllm bench serve`` prints, one row per level and metric (a DataFrame)."""
    import pandas as pd

    rows = []
    for r in levels.to_dict("records"):
        for m, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E")):
            if f"{m}_ms_mean" not in r:
                continue
            rows.append({"level": _level_name(r), "metric": f"{name} ms", "mean": r[f"{m}_ms_mean"],
                         "median": r[f"{m}_ms_p50"], "std": r.get(f"{m}_ms_std"), "p99": r[f"{m}_ms_p99"],
                         "in tok/s": r.get("input_tokens_per_s"), "out tok/s": r.get("output_tokens_per_s"),
                         "goodput req/s": r.get("goodput_rps")})
    return pd.DataFrame(rows)


def profile_lines(profile: dict, out: str, echo=print) -> None:
    """What ``serve --profile`` captured and imported (or why not)."""
    if profile.get("error"):
        echo(f"profile: {profile['error']}")
        return
    for r in profile.get("runs", []):
        phases = ", ".join(f"{n} {ph}" for ph, n in r["steps_by_phase"].items())
        c = {**profile_comm(r), **{k: r[k] for k in ("comm_ms_per_step", "comm_ms_per_token") if k in r}}
        per_token = (f", {c['comm_ms_per_token']:.3f} ms/token over the {c['decode_tokens_per_step']} tokens each "
                     "decode step decoded" if c.get("comm_ms_per_token") is not None else ", per token: no decode tokens")
        echo(f"profile: concurrency {profile['concurrency']} under the server's profiler: TP={r['tp']}, batch {r['batch']}, "
             f"{r['steps']} steps ({phases}), {r['collectives_per_step']} collectives/step "
             f"({r['backend'] or 'backend unknown'}), {r['ms_per_step']:.3f} ms/decode step, communication "
             f"{r['comm_share_pct']:.1f}% exposed ({c['comm_ms_per_step']:.3f} ms/step{per_token}); "
             f"imported into {os.path.join(out, profile['kineto_out'])}")


def summary_lines(levels, meta: dict) -> list[str]:
    lines = []
    label = f" [{meta['label']}]" if meta.get("label") else ""
    lines.append(f"commprof serve: {meta.get('model', '?')} at {meta.get('url', '?')}, workload "
                 f"{meta.get('workload', '?')}{label}")
    lines.append(knee_line(meta))
    queue = meta.get("queue_time") or {}
    if queue.get("note"):
        lines.append(f"queue time: {queue['note'] if queue.get('source') else 'not reported: ' + queue['note']}")
    if "queue_ms_mean" in getattr(levels, "columns", ()):
        closed = levels[(levels["mode"] == "closed") & levels["queue_ms_mean"].notna()]
        if not closed.empty:
            top = closed.sort_values("concurrency").iloc[-1]
            share = (f", {100 * top['queue_ms_mean'] / top['ttft_ms_p50']:.0f}% of its TTFT p50"
                     if top["ttft_ms_p50"] == top["ttft_ms_p50"] and top["ttft_ms_p50"] > 0 else "")
            p99 = queue_ms_text(top, "queue_ms_p99")
            lines.append(f"queue: at concurrency {int(top['concurrency'])} requests waited {top['queue_ms_mean']:.1f} ms "
                         f"on average in the server's queue (p99 {p99} ms"
                         f"{': in the first histogram bucket, nothing finer known' if p99.startswith('<=') else ''})"
                         f"{share}: scheduling, not transfer")
    lines += burst_lines(levels)
    lines += server_check_lines(levels)
    if meta.get("status") not in (None, "complete"):
        lines.append(f"status: {meta.get('status')}" + (f" ({meta['error']})" if meta.get("error") else ""))
    return lines


#: A latency column whose largest value reaches this many ms is shown in seconds.
SECONDS_FROM_MS = 10_000


def in_seconds(table):
    """The table with each ``... ms`` column that runs into ten thousands of ms shown in seconds
    (``TTFT p99 s``): 19.3 s reads where 19,300 ms does not."""
    table = table.copy()
    for c in list(table.columns):
        if str(c).endswith(" ms") and table[c].dtype.kind in "iuf" and table[c].max() >= SECONDS_FROM_MS:
            table[c] = table[c] / 1000.0
            table = table.rename(columns={c: str(c)[:-3] + " s"})
    return table


def render(levels, meta: dict, out: str, charts: bool = True, echo=print,
           note=lambda line: print(line, file=sys.stderr)) -> list[str]:
    """Print the level table and the knee; draw the charts into ``out``; the chart paths."""
    levels_text = levels.copy()
    if has_queue_p99(levels):          # read as text: a value, or the bound it is known to lie under
        levels_text["queue_ms_p99"] = [queue_ms_text(r, "queue_ms_p99") for r in levels.to_dict("records")]
    if "burst_requests" in levels.columns:    # a level whose tokens came in one burst, marked in its row
        levels_text["burst_requests"] = burst_cells(levels)
    cols = [c for c in TABLE_COLUMNS if c in levels_text.columns
            and not (c in _OPTIONAL and levels_text[c].isna().all() | (levels_text[c].astype(str) == "").all())]
    shown = levels_text[cols].copy()
    table = in_seconds(shown.rename(columns=TABLE_COLUMNS))
    frame_table(table, f"commprof serve ({meta.get('kind', 'measured')}; {out})",
                keep={h: _KEEP.get(_unitless(h), 1) for h in table.columns})
    stats = bench_rows(levels)
    if not stats.empty:
        frame_table(stats, "latency and throughput per level (mean, median, std, p99 as vllm bench serve prints them)")
    for line in summary_lines(levels, meta):
        echo(line)
    paths = serve_charts(levels, meta, out) if charts else []
    for p in paths:
        note(f"chart: {p}")
    return paths


def _provenance(meta: dict) -> str:
    cmd = " ".join(meta.get("command", [])) or "?"
    label = f"{meta['label']}; " if meta.get("label") else ""
    return (f"{label}{meta.get('kind', 'measured')} from {', '.join(meta.get('hosts', ['?']))}: "
            f"{meta.get('model', '?')} at {meta.get('url', '?')}, workload {meta.get('workload', '?')}, "
            f"{meta.get('start_time', '?')}; command: {cmd}")


def serve_charts(levels, meta: dict, out: str) -> list[str]:
    """serve_latency.png (TTFT and TPOT vs concurrency, p50 line, p50-p99 band, SLO and knee) and
    serve_throughput.png (output tokens/s and requests/s vs concurrency, knee marked). Closed-loop
    levels only: open-loop levels have no concurrency of their own."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = levels[(levels["mode"] == "closed") & (levels["ok"] > 0)].sort_values("concurrency")
    if df.empty:
        return []
    x = df["concurrency"].astype(float)
    knee = meta.get("knee_concurrency")
    slo = meta.get("slo") or {}
    paths = []

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, name, title in ((axes[0], "ttft", "Time to first token"), (axes[1], "tpot", "Time per output token")):
        ax.fill_between(x, df[f"{name}_ms_p50"], df[f"{name}_ms_p99"], alpha=0.25, color="C0", label="p50-p99")
        ax.plot(x, df[f"{name}_ms_p50"], "o-", color="C0", label="p50")
        ax.plot(x, df[f"{name}_ms_p90"], "--", color="C0", alpha=0.7, label="p90")
        ax.plot(x, df[f"{name}_ms_p99"], "s:", color="C3", label="p99")
        limit = slo.get(f"{name}_ms_p99")
        if limit:
            ax.axhline(limit, color="C3", lw=1, alpha=0.6, label=f"SLO p99 {limit:g} ms")
        if knee is not None:
            ax.axvline(knee, color="C2", lw=1.5, label=f"knee: {knee}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(x))
        ax.set_xticklabels([f"{int(v)}" for v in x])
        ax.set_xlabel("concurrency (requests in flight, closed loop)")
        if name == "ttft":
            # TTFT grows by orders of magnitude with queueing: a log axis keeps concurrency 1 visible
            ax.set_yscale("log")
            plain_log_ticks(ax.yaxis)
            ax.set_ylabel("ms (log)")
        else:
            ax.set_ylabel("ms")
            ax.set_ylim(bottom=0)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    paths.append(save_chart(fig, os.path.join(out, "serve_latency.png"), _provenance(meta)))

    # two panels, each on its own scale: on one twin-axis plot the two rates (requests/s times the
    # tokens per request) drew as one line
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, col, what, style, color in ((axes[0], "output_tokens_per_s", "output tokens/s", "o-", "C0"),
                                        (axes[1], "requests_per_s", "requests/s", "s--", "C1")):
        ax.plot(x, df[col], style, color=color, label=what)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(x))
        ax.set_xticklabels([f"{int(v)}" for v in x])
        ax.set_xlabel("concurrency (requests in flight, closed loop)")
        ax.set_ylabel(what)
        ax.set_ylim(bottom=0, top=float(df[col].max()) * 1.15)
        if knee is not None:
            ax.axvline(knee, color="C2", lw=1.5, label=f"knee: {knee} (highest level meeting the SLOs)")
        ax.set_title(f"Sustained {what} vs concurrency", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    paths.append(save_chart(fig, os.path.join(out, "serve_throughput.png"), _provenance(meta)))
    return paths
