"""A full disk, a hostile path, a run that did not finish, a hostile server or input file.

A full disk is met two ways: injected (``os.fsync`` fails with ENOSPC inside a real ``commprof``
process: every atomic write fsyncs its temporary before the rename) and, where this process may
mount one, a real 64 KiB tmpfs filled to the brim.
"""
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from commprof.model import fileio
from commprof import results
from commprof.model.errors import UsageError
from commprof.results import meta as meta_mod

from helpers import (REPO, TOY_MODEL, cli_env, hta_subsampled, hta_subsampled_files, one_line_error, results_meta,
                     write_sweep_dir)
from test_serve import _FakeHandler

A100_LOG = os.path.join(REPO, "tests", "data", "nccl-tests", "all_reduce_perf_8xA100.log")

#: ``python -c`` body: commprof's CLI with every fsync failing as on a full disk (``FULL_AFTER`` good
#: fsyncs first), or with matplotlib's savefig failing (``FULL_PNG``: the rows fit, a chart does not).
_INJECT = r"""
import errno, os, sys
left = int(os.environ.get("FULL_AFTER", "0"))
if os.environ.get("FULL_PNG"):
    import matplotlib.figure
    def savefig(self, *a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    matplotlib.figure.Figure.savefig = savefig
else:
    real = os.fsync
    def fsync(fd, _n=[left]):
        if _n[0] > 0:
            _n[0] -= 1
            return real(fd)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    os.fsync = fsync
sys.argv = ["commprof"] + sys.argv[1:]
from commprof.cli import main
main()
"""


def full_disk_cli(args, cwd, env=None, timeout=300):
    e = cli_env(env)
    return subprocess.run([sys.executable, "-c", _INJECT, *args], cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=timeout)


def leftovers(path) -> list:
    return sorted(f for f in os.listdir(path) if f.endswith(".tmp")) if os.path.isdir(path) else []


def a_sweep_dir(d, status="complete", **meta):
    m = results.provenance("sweep", "measured", "test sweep", status=status, backend="gloo", **meta)
    return write_sweep_dir(d, m, [{"op": "all_reduce", "tp": 2, "group": 0, "size_bytes": s, "mode": "eager",
                                   "impl": "gloo", "timing": "per-call", "latency_us_p50": 10 + s / 1e3,
                                   "latency_us_p99": 12 + s / 1e3, "count": s // 2, "iters": 3, "warmup": 1,
                                   "wrong": 0, "concurrent": 0, "status": "ok"} for s in (4096, 65536)])


# --- a full disk: exit 2 naming the file, nothing half-written ------------------------------------

def test_import_nccl_tests_on_a_full_disk_leaves_no_table_and_no_meta(tmp_path):
    out = str(tmp_path / "imp")
    res = full_disk_cli(["import", "nccl-tests", A100_LOG, "--out", out], tmp_path)
    assert res.returncode == 2, res.stderr
    line = one_line_error(res)
    assert "sweep.csv" in line and "No space left on device" in line
    assert not os.path.exists(os.path.join(out, "sweep.csv")) and not os.path.exists(os.path.join(out, "meta.json"))
    assert leftovers(out) == []
    # the meta.json write fails (the table's fit): the table is taken back, not left without its meta
    out2 = str(tmp_path / "imp2")
    res = full_disk_cli(["import", "nccl-tests", A100_LOG, "--out", out2], tmp_path, env={"FULL_AFTER": "1"})
    assert res.returncode == 2 and "meta.json" in one_line_error(res)
    assert os.listdir(out2) == []
    show = full_disk_cli(["show", out2, "--no-charts"], tmp_path, env={"FULL_AFTER": "99"})
    assert show.returncode == 2 and "no commprof results" in one_line_error(show)


@pytest.mark.parametrize("verb", ["check", "gap", "report", "plan", "import-topo"])
def test_every_writer_on_a_full_disk_is_exit_2_naming_the_file(tmp_path, verb):
    box = a_sweep_dir(str(tmp_path / "box"))
    before = sorted(os.listdir(box))
    out = str(tmp_path / "out")
    args = {"check": ["check", box, "--out", out], "gap": ["gap", box, "--out", out],
            "report": ["report", box, "--out", out],
            "plan": ["plan", "--model", TOY_MODEL, "--tp", "2", "--out", out],
            "import-topo": ["import", "nvidia-smi-topo", os.path.join(REPO, "tests", "data", "nvidia-smi",
                                                                      "h100x8-nvswitch-topo-m.txt"), "--out", out]}[verb]
    res = full_disk_cli(args, tmp_path)
    assert res.returncode == 2, res.stderr
    line = one_line_error(res)
    assert "No space left on device" in line and f"'{out}" in line and "unexpected" not in line
    assert sorted(os.listdir(box)) == before
    # nothing half-written and no file of the set without the others: none of them at all
    assert [f for f in os.listdir(out) if not f.endswith(".png")] == [] if os.path.isdir(out) else True
    assert leftovers(out) == []


def test_check_on_a_full_disk_keeps_the_old_check_json(tmp_path):
    box = a_sweep_dir(str(tmp_path / "box"))
    from helpers import run_cli

    assert run_cli(["check", box, "--out", box], tmp_path).returncode in (0, 8, 9)
    old = open(os.path.join(box, "check.json")).read()
    res = full_disk_cli(["check", box, "--out", box], tmp_path)
    assert res.returncode == 2 and "check.json" in one_line_error(res)
    assert open(os.path.join(box, "check.json")).read() == old
    json.loads(old)
    assert leftovers(box) == []


def test_a_chart_that_cannot_be_written_marks_the_sweep_failed(tmp_path):
    out = str(tmp_path / "s")
    res = full_disk_cli(["sweep", "--tp", "2", "--ops", "all_reduce", "--sizes", "4K", "--iters", "2", "--warmup",
                         "1", "--timeout", "60", "--out", out], tmp_path, env={"FULL_PNG": "1"})
    assert res.returncode == 2, res.stderr
    assert ".png" in one_line_error(res) and "No space left on device" in one_line_error(res)
    m = results_meta(out)
    assert m["status"] == "failed" and "charts" in m["error"]
    assert len(open(os.path.join(out, "sweep.csv")).read().splitlines()) == 2       # the row is kept
    assert leftovers(out) == []


def test_an_oserror_without_a_file_name_is_exit_2_not_70(cli_inproc, monkeypatch, tmp_path):
    import commprof.views.show as show_mod

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(show_mod, "run", full)
    res = cli_inproc("show", str(tmp_path))
    assert res.returncode == 2
    assert "No space left on device" in one_line_error(res) and "unexpected" not in res.stderr


def test_atomic_writer_leaves_the_old_file_on_failure(tmp_path, monkeypatch):
    p = str(tmp_path / "x.json")
    fileio.write_json(p, {"a": 1})

    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fileio.os, "fsync", fsync)
    with pytest.raises(UsageError, match=r"x\.json': cannot write \(No space left on device\); free space"):
        fileio.write_json(p, {"a": 2})
    monkeypatch.undo()
    assert json.load(open(p)) == {"a": 1} and os.listdir(tmp_path) == ["x.json"]


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs (needs root and mount): a real full disk. Skipped where it cannot be had."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.decode(errors='replace').strip()})")
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(mnt, leave: int) -> None:
    """Fill the file system at ``mnt`` until at most ``leave`` bytes are free."""
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    with open(os.path.join(mnt, "filler"), "wb") as f:
        f.write(b"\0" * max(0, free - leave))


def test_real_full_tmpfs_import_check_gap_exit_2_with_nothing_broken(tiny_tmpfs, tmp_path):
    from helpers import run_cli

    fill(tiny_tmpfs, 4096)
    out = os.path.join(tiny_tmpfs, "imp")
    res = run_cli(["import", "nccl-tests", A100_LOG, "--out", out], tmp_path)
    assert res.returncode == 2, res.stderr
    line = one_line_error(res)
    assert "No space left on device" in line and ("sweep.csv" in line or "meta.json" in line)
    assert os.listdir(out) == []            # the table that fitted is taken back: no table without its meta
    box = a_sweep_dir(str(tmp_path / "box"))
    for args, name in ((["check", box, "--out", os.path.join(tiny_tmpfs, "c")], "check"),
                       (["gap", box, "--out", os.path.join(tiny_tmpfs, "g")], "gap"),
                       (["report", box, "--out", os.path.join(tiny_tmpfs, "r")], "report")):
        res = run_cli(args, tmp_path)
        assert res.returncode == 2, (name, res.stderr)
        line = one_line_error(res)
        assert "No space left on device" in line and tiny_tmpfs in line, (name, line)
        d = args[-1]
        assert leftovers(d) == [] and not [f for f in os.listdir(d) if f.endswith((".json", ".md", ".html"))]


# --- reading: only regular files, bounded --------------------------------------------------------

@pytest.mark.parametrize("verb", ["show", "check", "gap", "report"])
def test_a_results_file_symlinked_to_dev_zero_is_refused(cli_inproc, tmp_path, verb):
    box = a_sweep_dir(str(tmp_path / "box"))
    os.remove(os.path.join(box, "sweep.csv"))
    os.symlink("/dev/zero", os.path.join(box, "sweep.csv"))
    res = cli_inproc(verb, box, *(["--no-charts"] if verb == "show" else []))
    assert res.returncode == 2
    assert "sweep.csv" in one_line_error(res) and "not a regular file" in one_line_error(res)


def test_meta_json_symlinked_to_dev_zero_and_resume_are_refused(cli_inproc, tmp_path):
    box = a_sweep_dir(str(tmp_path / "box"))
    os.remove(os.path.join(box, "meta.json"))
    os.symlink("/dev/zero", os.path.join(box, "meta.json"))
    res = cli_inproc("show", box)
    assert res.returncode == 2 and "character device" in one_line_error(res)
    box2 = a_sweep_dir(str(tmp_path / "box2"), config={"backend": "gloo", "dtype": "bf16", "timing": "per-call"})
    os.remove(os.path.join(box2, "sweep.csv"))
    os.symlink("/dev/zero", os.path.join(box2, "sweep.csv"))
    res = cli_inproc("sweep", "--tp", "2", "--ops", "all_reduce", "--sizes", "4K", "--out", box2, "--resume")
    assert res.returncode == 2 and "not a regular file" in one_line_error(res)


def test_reader_bounds_the_size_and_refuses_a_fifo(tmp_path):
    p = tmp_path / "big"
    p.write_bytes(b"x" * 2000)
    with pytest.raises(UsageError, match="larger than 1,000 bytes"):
        fileio.read_user_bytes(str(p), "'big'", limit=1000)
    assert fileio.read_user_bytes(str(p), "'big'", limit=2000) == b"x" * 2000
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="is a FIFO, not a regular file"):
        fileio.read_user_bytes(str(fifo), "'fifo'")        # refused before open: no hang


# --- runs that did not finish say so -------------------------------------------------------------

def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_running_meta_whose_writer_is_gone_reads_as_dead(tmp_path):
    cfg = {"tps": [2]}
    d = a_sweep_dir(str(tmp_path / "killed"), status="running", cells_planned=22, config=cfg)
    m = results_meta(d)
    m["writer"] = {"host": socket.gethostname(), "pid": _dead_pid(), "pid_start": 1, "heartbeat": m["start_time"]}
    json.dump(m, open(os.path.join(d, "meta.json"), "w"))
    r = results.load(d)
    assert r.state == "dead"
    assert r.unfinished.startswith("unfinished sweep (2 of 22 cells)") and "gone" in r.unfinished
    # this process is alive: the same meta naming it reads as running
    m["writer"] = meta_mod.writer_info()
    json.dump(m, open(os.path.join(d, "meta.json"), "w"))
    assert results.load(d).state == "running"
    # another host: judged by the heartbeat (the dir's files' age)
    m["writer"] = {"host": "elsewhere", "pid": 1}
    json.dump(m, open(os.path.join(d, "meta.json"), "w"))
    assert results.load(d).state == "running"
    old = time.time() - meta_mod.STALE_S - 60
    for f in os.listdir(d):
        os.utime(os.path.join(d, f), (old, old))
    r = results.load(d)
    assert r.state == "dead" and "changed for" in r.unfinished


def test_check_report_show_gap_name_a_failed_partial_sweep(cli_inproc, tmp_path):
    d = a_sweep_dir(str(tmp_path / "failed"), status="failed", cells_planned=22, error="rank 1 died")
    for args in (["check", d, "--out", d], ["report", d], ["show", d, "--no-charts"], ["gap", d]):
        res = cli_inproc(*args)
        assert "unfinished sweep (2 of 22 cells): failed: rank 1 died" in res.stderr, (args, res.stderr)
        if args[0] in ("check", "report"):     # no pass: 8 (FAIL / unfinished) or 9 (insufficient evidence)
            assert res.returncode in (8, 9), (args, res.stderr)
    assert json.load(open(os.path.join(d, "check.json")))["unfinished_dirs"]
    assert "Unfinished runs" in open(os.path.join(d, "report.md")).read()


def test_killed_sweep_reads_as_unfinished(tmp_path):
    out = str(tmp_path / "k")
    p = subprocess.Popen([sys.executable, "-m", "commprof", "sweep", "--tp", "2", "--ops", "all_reduce", "--sizes",
                          "4K,8K,16K,32K,64K,128K", "--iters", "40", "--warmup", "1", "--no-charts", "--out", out],
                         cwd=tmp_path, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        if os.path.exists(os.path.join(out, "sweep.csv")) and \
                len(open(os.path.join(out, "sweep.csv")).read().splitlines()) >= 2:
            break
        time.sleep(0.2)
    os.kill(p.pid, signal.SIGKILL)            # the parent: its ranks die with it (PDEATHSIG)
    p.wait()
    for _ in range(50):
        r = results.load(out)
        if r.state != "running":
            break
        time.sleep(0.2)
    if r.meta["status"] == "complete":
        pytest.skip("the sweep finished before it could be killed")
    assert r.state == "dead", r.unfinished
    assert "of 6 cells" in r.unfinished


def test_two_resumes_of_one_dir_the_second_is_refused(tmp_path):
    from helpers import run_cli, sweep_rows

    out = str(tmp_path / "r")
    args = ["sweep", "--tp", "2", "--ops", "all_reduce", "--sizes", "4K,8K,16K", "--iters", "3", "--warmup", "1",
            "--no-charts", "--timeout", "60", "--out", out]
    assert run_cli(args, tmp_path).returncode == 0
    lines = open(os.path.join(out, "sweep.csv")).read().splitlines()
    open(os.path.join(out, "sweep.csv"), "w").write("\n".join(lines[:2]) + "\n")     # killed after 1 row
    m = results_meta(out)
    m["status"] = "failed"
    json.dump(m, open(os.path.join(out, "meta.json"), "w"))
    meta_mod.lock_dir(out)                      # a resume in flight (this process holds the lock)
    try:
        res = run_cli(args + ["--resume"], tmp_path)
    finally:
        meta_mod.unlock_dir(out)
    assert res.returncode == 2
    assert "is being written by another commprof run" in one_line_error(res)
    # two real resumes at once: never a duplicate row, and the loser (if they overlapped) says why
    procs = [subprocess.Popen([sys.executable, "-m", "commprof", *args, "--resume"], cwd=tmp_path, env=cli_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(rc for rc, _ in outs)[0] == 0, outs
    for rc, err in outs:
        assert rc == 0 or "being written" in err or "still being written" in err, err
    keys = [(r["op"], r["tp"], r["size_bytes"], r["mode"]) for r in sweep_rows(out)]
    assert len(keys) == len(set(keys)) == 3
    assert results_meta(out)["status"] == "complete"


# --- serve: no hang on a slow server, nothing measured is a failure ------------------------------

class _Hostile:
    """A tiny HTTP server: ``mode`` drip-models (GET /v1/models answered one byte a second),
    drip-metrics (/metrics so), drip-profile (POST /start_profile so), all500 (every path HTTP 500) or negusage (a good stream whose
    ``usage`` reports -403 tokens)."""

    def __init__(self, mode):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *a):
                pass

            def _drip(self, body: bytes):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                for i in range(len(body)):
                    if outer.stopped:
                        return
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    time.sleep(1.0)

            _json = _FakeHandler._json

            def do_GET(self):
                models = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
                if mode == "all500":
                    return self._json(500, {"error": "boom"})
                if self.path == "/v1/models":
                    return self._drip(models * 40) if mode == "drip-models" else self._json(200, json.loads(models))
                if self.path == "/metrics" and mode == "drip-metrics":
                    return self._drip(b"# TYPE x counter\n" * 100)
                self._json(404, {})

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/start_profile" and mode == "drip-profile":
                    return self._drip(b"{}" * 100)
                if mode == "all500":
                    return self._json(500, {"error": "boom"})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for i in range(3):
                    obj = {"choices": [{"index": 0, "text": " the", "finish_reason": "length" if i == 2 else None}]}
                    self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
                if mode == "negusage":
                    obj = {"choices": [], "usage": {"prompt_tokens": -7, "completion_tokens": -403}}
                    self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")

        self.stopped = False
        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self):
        self.stopped = True
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def hostile():
    made = []

    def make(mode):
        made.append(_Hostile(mode))
        return made[-1]

    yield make
    for s in made:
        s.stop()


SERVE_SMALL = ["--model", "m", "--concurrency", "1", "--requests", "2", "--prompt-tokens", "4", "--output-tokens", "3",
               "--warmup", "0", "--no-charts"]


def test_a_dripping_profiler_endpoint_ends_at_its_deadline(hostile):
    """serve --profile's POST /start_profile and /stop_profile have a deadline on the whole answer."""
    from commprof.capture import serveload

    srv = hostile("drip-profile")
    t0 = time.monotonic()
    err = serveload.post(srv.url, "/start_profile", 2.0)
    took = time.monotonic() - t0
    assert took < 10, took          # 2 s and a byte, not the 200 s the drip would take
    assert err.startswith("POST /start_profile: no whole answer within 2s"), err
    assert serveload.post(hostile("ok").url, "/start_profile", 5.0) == ""      # a 2xx answer is no error


def test_serve_against_a_dripping_models_endpoint_ends_at_its_timeout(hostile, cli, tmp_path):
    srv = hostile("drip-models")
    t = time.monotonic()
    res = cli("serve", "--url", srv.url, *SERVE_SMALL, "--timeout", "3", "--out", str(tmp_path / "o"), timeout=60)
    took = time.monotonic() - t
    assert res.returncode == 3, res.stderr
    assert "GET /v1/models within 3s" in one_line_error(res)
    assert took < 20, took          # python start-up + 3 s, not the 400 s the drip would take


def test_serve_against_a_dripping_metrics_endpoint_is_measured_all_the_same(hostile, cli, tmp_path):
    srv = hostile("drip-metrics")
    t = time.monotonic()
    out = str(tmp_path / "o")
    res = cli("serve", "--url", srv.url, *SERVE_SMALL, "--timeout", "3", "--out", out, timeout=90)
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t < 40
    m = results_meta(out)
    assert m["status"] == "complete" and "within 3s" in m["queue_time"]["note"]


def test_serve_against_a_server_answering_500_to_everything_fails(hostile, cli_inproc, tmp_path):
    srv = hostile("all500")
    out = str(tmp_path / "o")
    res = cli_inproc("serve", "--url", srv.url, *SERVE_SMALL, "--timeout", "3", "--out", out)
    assert res.returncode != 0
    line = one_line_error(res)
    assert "500" in line or "http_5xx" in line or "nothing was measured" in line, line
    if os.path.exists(os.path.join(out, "meta.json")):
        assert results_meta(out)["status"] == "failed"


def test_serve_takes_no_negative_usage(hostile, cli_inproc, tmp_path):
    from helpers import csv_rows

    srv = hostile("negusage")
    out = str(tmp_path / "o")
    res = cli_inproc("serve", "--url", srv.url, *SERVE_SMALL, "--timeout", "3", "--out", out)
    assert res.returncode == 0, res.stderr
    for r in csv_rows(out, "serve_requests.csv"):
        assert int(r["tokens_out"]) == 3 and r["tokens_out_source"] != "usage"
    for lv in csv_rows(out, "serve_levels.csv"):
        assert float(lv["output_tokens_per_s"]) > 0


@pytest.mark.parametrize("url", ["http://[::1", "http://[::1]:99999", "http://a b:80", "http://h\x01:80", "ftp://x",
                                 "http://", "http://h:-1"])
def test_serve_malformed_url_is_one_line_exit_2(cli_inproc, url):
    res = cli_inproc("serve", "--url", url, "--model", "m")
    assert res.returncode == 2, res.stderr
    assert "--url" in one_line_error(res)


# --- parsers refuse what is not physical ---------------------------------------------------------

def _kineto_docs():
    """HTA's trace_filter pair, subsampled (read beside the checkout: the test skips without it)."""
    return [json.loads(hta_subsampled(r)) for r in (0, 1)]


def _write_kineto(tmp_path, docs, raw=None):
    paths = []
    for r, d in enumerate(docs):
        p = tmp_path / f"rank{r}.json"
        p.write_text(raw[r] if raw else json.dumps(d))
        paths.append(str(p))
    return paths


def _first(doc, pred):
    return next(e for e in doc["traceEvents"] if pred(e))


def _is_nccl(e):
    return e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()


def test_real_kineto_traces_import(cli_inproc, tmp_path):
    res = cli_inproc("import", "kineto", *hta_subsampled_files(tmp_path), "--out", str(tmp_path / "k"))
    assert res.returncode == 0, res.stderr
    assert results.load(str(tmp_path / "k")).state == "complete"


@pytest.mark.parametrize("case, words", [
    ("huge int ts", "not a time"),
    ("ts 1e308", "not a time"),
    ("ts 0 in an epoch trace", "span"),
    ("dur 1e300", "not a time"),
    ("negative ts", "not a time"),
    ("base time huge", "baseTimeNanoseconds"),
    ("label tp=x", "tp='x'"),
    ("label batch=-3", "batch='-3'"),
])
def test_kineto_refuses_nonsense(cli_inproc, tmp_path, case, words):
    docs = _kineto_docs()
    k = _first(docs[0], _is_nccl)
    raw = None
    if case == "huge int ts":
        raw = [json.dumps(docs[0]).replace(json.dumps(k["ts"]), "9" * 400, 1), json.dumps(docs[1])]
    elif case == "ts 1e308":
        k["ts"] = 1e308
    elif case == "ts 0 in an epoch trace":
        k["ts"] = 0
    elif case == "dur 1e300":
        k["dur"] = 1e300
    elif case == "negative ts":
        k["ts"] = -5
    elif case == "base time huge":
        docs[0]["baseTimeNanoseconds"] = 1e300
    else:                       # a commprof trace.json whose process label is nonsense
        label = "tp=x batch=1 mode=eager" if "tp=x" in case else "tp=2 batch=-3 mode=eager"
        ev = [{"ph": "M", "name": "process_name", "pid": r, "args": {"name": f"rank {r}"}} for r in (0, 1)]
        ev += [{"ph": "M", "name": "process_labels", "pid": r, "args": {"labels": label}} for r in (0, 1)]
        ev += [{"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "pid": r, "tid": 1, "ts": 10.0 + r,
                "dur": 5.0} for r in (0, 1)]
        docs = [{"commprof": {"format": "commprof trace timeline", "world_size": 2}, "traceEvents": ev}]
    paths = _write_kineto(tmp_path, docs, raw)
    res = cli_inproc("import", "kineto", *paths, "--out", str(tmp_path / "o"))
    assert res.returncode == 2, (case, res.stderr)
    assert words in one_line_error(res), (case, res.stderr)
    assert not os.path.exists(tmp_path / "o" / "meta.json")


@pytest.mark.parametrize("case", ["list correlation", "dict correlation", "backend list", "backend int",
                                  "deviceProperties 5", "deviceProperties dict", "huge nelems"])
def test_kineto_wrong_types_are_not_a_crash(cli_inproc, tmp_path, case):
    docs = _kineto_docs()
    k = _first(docs[0], _is_nccl)
    k.setdefault("args", {})
    if case == "list correlation":
        k["args"]["correlation"] = [1, 2]
        _first(docs[0], lambda e: e.get("cat") == "cuda_runtime").setdefault("args", {})["correlation"] = {"a": 1}
    elif case == "dict correlation":
        for e in docs[0]["traceEvents"]:
            if isinstance(e.get("args"), dict) and "correlation" in e["args"]:
                e["args"]["correlation"] = {"id": e["args"]["correlation"]}
    elif case == "backend list":
        docs[0]["distributedInfo"]["backend"] = ["nccl"]
        docs[1]["distributedInfo"]["backend"] = 7
    elif case == "backend int":
        docs[0]["distributedInfo"]["backend"] = 7
    elif case == "deviceProperties 5":
        docs[0]["deviceProperties"] = 5
    elif case == "deviceProperties dict":
        docs[0]["deviceProperties"] = {"name": "H100"}
    elif case == "huge nelems":
        k["args"].update({"In msg nelems": 10 ** 400 if False else 2 ** 80, "Out msg nelems": -1,
                          "dtype": "Float", "Collective name": "allreduce"})
    res = cli_inproc("import", "kineto", *_write_kineto(tmp_path, docs), "--out", str(tmp_path / "o"))
    assert res.returncode in (0, 2), (case, res.stderr)
    assert "unexpected" not in res.stderr and "Traceback" not in res.stderr
    if res.returncode == 2:
        one_line_error(res)


def test_kineto_corrupt_gzip_and_tp_bounds(cli_inproc, tmp_path):
    import gzip

    real = hta_subsampled_files(tmp_path)
    data = bytearray(open(real[0], "rb").read())
    for i in range(200, 260):
        data[i] ^= 0x5A                      # the deflate stream corrupt, the gzip header intact
    p = tmp_path / "rank0.json.gz"
    p.write_bytes(bytes(data))
    res = cli_inproc("import", "kineto", str(p), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "rank0.json.gz" in one_line_error(res), res.stderr
    for tp in ("99999999999", "3000000", "0", "-2"):
        res = cli_inproc("import", "kineto", real[0], "--tp", tp, "--out", str(tmp_path / f"t{tp}"))
        assert res.returncode == 2 and "--tp" in one_line_error(res), (tp, res.stderr)
        assert len(res.stderr) < 400
    gzip.open(tmp_path / "z.json.gz", "wb").write(b"{" + b" " * 10)
    res = cli_inproc("import", "kineto", str(tmp_path / "z.json.gz"), "--out", str(tmp_path / "z"))
    assert res.returncode == 2


NCCL_HEAD = ("# nThread 1 nGpus 2 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
             "validation: 1 graph: 0\n#\n# Using devices\n#\n"
             "#                                                              out-of-place                       "
             "in-place          \n"
             "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
             "algbw   busbw #wrong\n"
             "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  "
             "(GB/s)  (GB/s)       \n")


def _log(rows):
    return NCCL_HEAD + "".join(r + "\n" for r in rows) + "# Out of bounds values : 0 OK\n"


GOOD_ROW = "           8             2     float     sum      -1    10.00    0.00    0.00      0    10.00    0.00    0.00      0"


@pytest.mark.parametrize("row, words", [
    (GOOD_ROW.replace("10.00    0.00    0.00      0    10", "1e308    0.00    0.00      0    10", 1), "time"),
    (GOOD_ROW.replace("0.00    0.00      0    10", "1e308    0.00      0    10", 1), "algbw"),
    (GOOD_ROW.replace("0.00      0    10", "2e5      0    10", 1), "busbw"),
    (GOOD_ROW.replace("           8 ", "         \u0661\u0662\u0663 ", 1), "line 9"),
    (GOOD_ROW.replace("   2     float", "  2x     float", 1), "line 9"),
    (GOOD_ROW.replace("           8 ", "          8q ", 1), "line 9"),
])
def test_nccl_tests_refuses_nonsense(cli_inproc, tmp_path, row, words):
    p = tmp_path / "all_reduce_perf.log"
    p.write_text(_log([GOOD_ROW.replace("   8 ", "  16 ").replace("     2 ", "     4 "), row]), encoding="utf-8")
    res = cli_inproc("import", "nccl-tests", str(p), "--out", str(tmp_path / "o"))
    assert res.returncode == 2, res.stderr
    assert words in one_line_error(res) and "all_reduce_perf.log" in one_line_error(res)


def test_nccl_tests_good_row_still_imports(cli_inproc, tmp_path):
    p = tmp_path / "all_reduce_perf.log"
    p.write_text(_log([GOOD_ROW]), encoding="utf-8")
    assert cli_inproc("import", "nccl-tests", str(p), "--out", str(tmp_path / "o")).returncode == 0


SMI = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
       "GPU0\t X \t{c}\t0-31\t{n}\nGPU1\t{c}\t X \t0-31\t{n}\n")


@pytest.mark.parametrize("cell, numa, words", [("NV0", "0", "NV0"), ("NV99", "0", "NV99"),
                                               ("NV4", "100000000000000000000", "NUMA"), ("NV4", "\u00b2", "NUMA"),
                                               ("NV\u0664", "0", "NV")])
def test_smi_topo_refuses_nonsense(cli_inproc, tmp_path, cell, numa, words):
    p = tmp_path / "topo.txt"
    p.write_text(SMI.format(c=cell, n=numa), encoding="utf-8")
    res = cli_inproc("import", "nvidia-smi-topo", str(p), "--out", str(tmp_path / "o"))
    assert res.returncode == 2, res.stderr
    assert words in one_line_error(res)
    p.write_text(SMI.format(c="NV4", n="0"), encoding="utf-8")
    assert cli_inproc("import", "nvidia-smi-topo", str(p), "--out", str(tmp_path / "ok")).returncode == 0


def test_moe_replay_of_huge_loads_is_refused(tmp_path):
    from commprof.analysis.moeroute import _load_file

    p = tmp_path / "loads.json"
    p.write_text(json.dumps([1e308] * 8))
    with pytest.raises(UsageError, match="load 1e\\+308 must be a number from 0 to 1e\\+15"):
        _load_file(str(p), 8, f"file:{p}")
    p2 = tmp_path / "loads.csv"
    p2.write_text("expert,load\n\u0661,5\n")
    with pytest.raises(UsageError, match="expected an expert id"):
        _load_file(str(p2), 8, f"file:{p2}")


@pytest.mark.parametrize("kind, path", [("nvidia-smi-topo", os.path.join(REPO, "tests", "data", "nvidia-smi",
                                                                          "h100x8-nvswitch-topo-m.txt")),
                                        ("nccl-tests", A100_LOG)])
@pytest.mark.parametrize("flag", [["--tp", "2"], ["--model", "Qwen2.5-32B"], ["--step-marker", "x"]])
def test_a_kineto_only_flag_on_another_importer_is_refused(cli_inproc, tmp_path, kind, path, flag):
    res = cli_inproc("import", kind, path, *flag, "--out", str(tmp_path / "o"))
    assert res.returncode == 2
    assert flag[0] in one_line_error(res) and "import kineto" in one_line_error(res)


def test_failure_lines_name_their_verb(cli, tmp_path):
    from commprof.capture import launch

    class Cfg:
        pass

    for name, verb in (("SweepRunConfig", "sweep"), ("TraceRunConfig", "trace"), ("MoeRunConfig", "moe")):
        assert launch.verb_of(type(name, (), {})()) == verb
    res = cli("moe", "--ep", "2", "--tokens", "8", "--skew", "uniform", "--iters", "2", "--warmup", "0",
              "--out", str(tmp_path / "m"), env={"COMMPROF_TEST_FAULT": "die:rank=1,mode=rebalanced"})
    assert res.returncode == 4 and "the moe stopped" in res.stderr and "sweep" not in res.stderr, res.stderr
