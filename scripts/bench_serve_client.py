"""Benchmark: what ``commprof serve``'s own client costs per streamed token.

A stand-in server (a separate process, asyncio on 127.0.0.1) streams OpenAI completion chunks as
fast as it can, one token per chunk (and, for a second set of rows, with ``--pace-us`` between
tokens, so that each token arrives in its own read as from a real server); commprof's load loop (``commprof.capture.serveload.run_level``, the code
``commprof serve`` runs) drives it at several concurrencies. The client's CPU time (this process's
user + system time over the level) divided by the tokens streamed is the client's cost per token.
It must stay far below a real server's inter-token latency (10-50 ms per token on a GPU serving
engine at decode), or the client would be part of what it measures: the target is under 100 us
per token (1% of a 10 ms inter-token latency).

    python scripts/bench_serve_client.py [--tokens 256] [--requests 64] [--concurrency 1,8,32]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "scripts"))

TARGET_US_PER_TOKEN = 100.0


async def _serve_fast(port_file: str) -> None:
    """The stand-in server: GET /v1/models, POST /v1/completions streaming max_tokens chunks."""
    async def handle(reader, writer):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            length = next((int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:")), 0)
            body = json.loads(await reader.readexactly(length)) if length else {}
            if lines[0].startswith("GET"):
                payload = json.dumps({"data": [{"id": "fast", "object": "model"}]}).encode()
                writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(payload)).encode() + b"\r\n\r\n" + payload)
            else:
                n = int(body.get("max_tokens", 16))
                pace_s = int(str(body.get("model", "")).rpartition("-")[2] or 0) / 1e6 if "paced" in str(body.get("model")) else 0
                writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
                chunk = b'data: {"choices":[{"index":0,"text":" the","finish_reason":null}]}\n\n'
                for _ in range(n - 1):
                    writer.write(chunk)
                    await writer.drain()
                    if pace_s:
                        await asyncio.sleep(pace_s)
                usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": n + 8}
                writer.write(b"data: " + json.dumps({"choices": [{"index": 0, "text": " end", "finish_reason": "length"}],
                                                     "usage": usage}).encode() + b"\n\ndata: [DONE]\n\n")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=512)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.sockets[0].getsockname()[1]))
    os.replace(port_file + ".tmp", port_file)
    async with server:
        await asyncio.sleep(600)                    # bounded: the benchmark kills it long before


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--pace-us", type=int, default=1000,
                    help="second set of rows: the server waits this long between tokens (one read per token)")
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    ap.add_argument("--serve-fast", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_fast:
        asyncio.run(_serve_fast(args.serve_fast))
        return

    from benchfile import measured, write_result

    from commprof.capture import serveload
    from commprof.verbs import serve
    from commprof.model.machine import now_iso

    start_time = now_iso()
    port_file = os.path.join("/tmp", f"commprof-bench-serve-{os.getpid()}.port")
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve-fast", port_file])
    rows = []
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("the stand-in server did not start")
            time.sleep(0.05)
        with open(port_file) as f:
            url = f"http://127.0.0.1:{f.read().strip()}"
        cases = [(int(c), 0) for c in args.concurrency.split(",")] + [(int(c), args.pace_us) for c in args.concurrency.split(",")]
        for conc, pace in cases:
            model = f"paced-{pace}" if pace else "fast"
            cfg = serve.build_config(url=url, model=model, concurrency=str(conc), requests=args.requests,
                                     prompt_tokens=8, output_tokens=args.tokens, duration=120, timeout=60)
            level = serveload.level_plan(cfg)[0]
            asyncio.run(serveload.run_level(cfg, level, False, [], lambda: None))      # warm-up
            got: list = []                      # the RequestRows run_level makes
            cpu0, wall0 = time.process_time(), time.perf_counter()
            asyncio.run(serveload.run_level(cfg, level, False, got, lambda: None))
            cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
            ok = [r for r in got if r.status == "ok"]
            tokens = sum(r.tokens_out for r in ok)
            rows.append({"concurrency": conc, "server_pace_us": pace, "requests": len(got), "ok": len(ok), "tokens": tokens,
                         "client_cpu_s": cpu_s, "wall_s": wall_s,
                         "client_cpu_us_per_token": 1e6 * cpu_s / tokens if tokens else None,
                         "tokens_per_s": tokens / wall_s if wall_s else None})
    finally:
        proc.kill()
        proc.wait(timeout=10)
        try:
            os.remove(port_file)
        except OSError:
            pass
    worst = max(r["client_cpu_us_per_token"] or float("inf") for r in rows)
    result = measured(__file__, start_time,
                      "commprof serve's client CPU time per streamed token, against a stand-in server on "
                      "127.0.0.1 (a separate process) that streams one token per chunk as fast as it can, "
                      f"then paced at {args.pace_us} us per token (one read per token)")
    result.update(target=f"client CPU < {TARGET_US_PER_TOKEN:g} us per streamed token (1% of a 10 ms "
                         "inter-token latency) at every concurrency",
                  met=worst < TARGET_US_PER_TOKEN, worst_us_per_token=worst, tokens_per_request=args.tokens,
                  rows=rows)
    table = ["| concurrency | server pace | requests ok | tokens | client CPU s | wall s | client CPU us/token | tokens/s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pace = f"{r['server_pace_us']} us/token" if r["server_pace_us"] else "as fast as it can"
        table.append(f"| {r['concurrency']} | {pace} | {r['ok']}/{r['requests']} | {r['tokens']} | {r['client_cpu_s']:.3f} | "
                     f"{r['wall_s']:.3f} | {r['client_cpu_us_per_token']:.1f} | {r['tokens_per_s']:,.0f} |")
    write_result(args.out, "serve_client_overhead", "commprof serve: client cost per streamed token", result, table)


if __name__ == "__main__":
    main()
