"""Issue 34's loose ends, second pass: hostile Kineto headers and sizes, a training trace named as
such, wording of file and HTTP errors, a full disk during a run, a huge nccl-tests log, and what a
person reads after a run against a real vLLM. Each test fails on the behaviour the issue reports."""
from __future__ import annotations

import glob
import json
import os

import pytest

from helpers import REPO, hta_subsampled_files, one_line_error
from test_full_disk_and_hostile_input import _first, _is_nccl, _kineto_docs, _write_kineto

VLLM_CPU = os.path.join(REPO, "tests", "data", "vllm-cpu", "tp2-batch4")


# --- 1. hostile Kineto input: one line, exit 2 ----------------------------------------------------------

@pytest.mark.parametrize("case,words", [
    ("nelems 10^400", "In msg nelems"), ("nelems 2^80", "In msg nelems"), ("nelems -1", "Out msg nelems"),
    ("nelems text", "In msg nelems"), ("deviceProperties 5", "deviceProperties"),
    ("deviceProperties dict", "deviceProperties"), ("backend list", "distributedInfo.backend"),
    ("backend int", "distributedInfo.backend"), ("world_size text", "distributedInfo.world_size"),
    ("distributedInfo list", "distributedInfo")])
def test_hostile_kineto_header_and_sizes_are_refused(cli_inproc, tmp_path, case, words):
    docs = _kineto_docs()
    k = _first(docs[0], _is_nccl)
    k.setdefault("args", {})
    if case.startswith("nelems"):
        k["args"].update({"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 4, "Out msg nelems": 4})
        key = "Out msg nelems" if case == "nelems -1" else "In msg nelems"
        k["args"][key] = {"nelems 10^400": 10 ** 400, "nelems 2^80": 2 ** 80, "nelems -1": -1,
                          "nelems text": "many"}[case]
    elif case == "deviceProperties 5":
        docs[0]["deviceProperties"] = 5
    elif case == "deviceProperties dict":
        docs[0]["deviceProperties"] = {"name": "H100"}
    elif case == "backend list":
        docs[0]["distributedInfo"]["backend"] = ["nccl"]
    elif case == "backend int":
        docs[0]["distributedInfo"]["backend"] = 7
    elif case == "world_size text":
        docs[0]["distributedInfo"]["world_size"] = "two"
    elif case == "distributedInfo list":
        docs[0]["distributedInfo"] = [0, 2]
    res = cli_inproc("import", "kineto", *_write_kineto(tmp_path, docs), "--out", str(tmp_path / "o"))
    assert res.returncode == 2, (case, res.returncode, res.stdout, res.stderr)
    line = one_line_error(res)
    assert words in line and "rank0.json" in line and len(line) < 400, (case, line)
    assert not os.path.exists(tmp_path / "o" / "meta.json")


def test_hta_training_trace_is_not_reported_per_token(cli_inproc, tmp_path):
    """HTA's traces are training steps (backward and optimizer ops): no 'ms/token', no batch."""
    import pandas as pd

    out = str(tmp_path / "k")
    res = cli_inproc("import", "kineto", *hta_subsampled_files(tmp_path), "--out", out)
    assert res.returncode == 0, res.stderr
    assert "training" in res.stdout and "training steps, not decode" in res.stderr
    summ = pd.read_csv(os.path.join(out, "trace_summary.csv"))
    assert list(summ["phase"]) == ["training"] and summ["tokens_per_s"].isna().all() and (summ["batch"] == 0).all()
    shown = cli_inproc("show", out, "--no-charts")
    assert shown.returncode == 0, shown.stderr
    assert "training steps, not decode" in shown.stdout and "ms/step" in shown.stdout
    assert "ms/token" not in shown.stdout and "batch=1" not in shown.stdout
    meta = json.load(open(os.path.join(out, "meta.json")))
    assert meta["runs"][0]["step_kind"] == "training"


def test_vllm_decode_trace_is_still_decode(cli_inproc, tmp_path):
    import pandas as pd

    out = str(tmp_path / "v")
    res = cli_inproc("import", "kineto", *sorted(glob.glob(os.path.join(VLLM_CPU, "*.json.gz"))), "--out", out)
    assert res.returncode == 0, res.stderr
    summ = pd.read_csv(os.path.join(out, "trace_summary.csv"))
    assert "training" not in set(summ["phase"]) and "decode" in set(summ["phase"])
    assert json.load(open(os.path.join(out, "meta.json")))["runs"][0]["step_kind"] == "inference"


# --- 2. wording: what the server sent, what the file is ------------------------------------------------

class _NotHttp:
    """A TCP server that answers every connection with ``answer`` (not HTTP) and closes it."""

    def __init__(self, answer: bytes):
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

        def serve():
            while True:
                try:
                    c, _ = self.sock.accept()
                except OSError:
                    return
                try:
                    c.settimeout(5)
                    c.recv(65536)
                    c.sendall(answer)
                    import time
                    time.sleep(0.3)
                except OSError:
                    pass
                finally:
                    c.close()

        threading.Thread(target=serve, daemon=True).start()

    def close(self):
        self.sock.close()


@pytest.mark.parametrize("answer", [b"\x01\x02garbage", b"SSH-2.0-OpenSSH_9.6\r\n\r\n", b"HTTP/1.1 abc OK\r\n\r\n"])
def test_serve_names_a_servers_malformed_status_line(cli_inproc, tmp_path, answer):
    srv = _NotHttp(answer)
    try:
        res = cli_inproc("serve", "--url", srv.url, "--model", "m", "--requests", "1", "--concurrency", "1",
                         "--warmup", "0", "--no-charts", "--timeout", "5", "--out", str(tmp_path / "o"))
    finally:
        srv.close()
    assert res.returncode != 0
    line = one_line_error(res)
    assert "the server sent a malformed HTTP status line" in line, line
    assert "illegal request line" not in line and "RemoteProtocolError" not in line, line


def test_stream_pool_names_a_malformed_status_line():
    import asyncio

    from commprof.capture import httpstream as hs

    srv = _NotHttp(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")

    async def go():
        pool = hs.Pool(srv.url, 5.0)
        try:
            await pool.post_json("/v1/completions", {"prompt": "x"})
        finally:
            pool.close()
    try:
        with pytest.raises(hs.Disconnected, match="the server sent a malformed HTTP status line"):
            asyncio.run(go())
    finally:
        srv.close()


def test_moe_skew_file_that_is_a_device_is_not_said_missing(cli_inproc, tmp_path):
    res = cli_inproc("moe", "--skew", "file:/dev/zero", "--no-charts", "--out", str(tmp_path / "o"))
    assert res.returncode == 2
    line = one_line_error(res)
    assert "does not exist" not in line and "character device, not a regular file" in line, line
    big = tmp_path / "loads.csv"
    with open(big, "wb") as f:
        f.truncate((64 << 20) + 1)                       # sparse: no disk used
    res = cli_inproc("moe", "--skew", f"file:{big}", "--no-charts", "--out", str(tmp_path / "o2"))
    assert res.returncode == 2 and "larger than 64 MiB" in one_line_error(res), res.stderr
    res = cli_inproc("moe", "--skew", f"file:{tmp_path / 'none.csv'}", "--no-charts", "--out", str(tmp_path / "o3"))
    assert res.returncode == 2 and "does not exist" in one_line_error(res)


def test_serve_workload_fifo_is_said_not_a_regular_file(cli_inproc, tmp_path):
    fifo = tmp_path / "work.jsonl"
    os.mkfifo(fifo)
    res = cli_inproc("serve", "--url", "http://127.0.0.1:1", "--model", "m", "--workload", str(fifo),
                     "--out", str(tmp_path / "o"))
    assert res.returncode == 2
    line = one_line_error(res)
    assert "no such file" not in line and "is a FIFO, not a regular file" in line, line
    res = cli_inproc("serve", "--url", "http://127.0.0.1:1", "--model", "m", "--workload", str(tmp_path / "nope"),
                     "--out", str(tmp_path / "o2"))
    assert res.returncode == 2 and "no such file" in one_line_error(res)


# --- 3. a full disk during a sweep: meta.json says failed, disk full ------------------------------------

class _FullDiskFile:
    """What a file open for appending does on a full disk: every write fails with ENOSPC."""

    closed = False

    def write(self, text):
        import errno
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    flush = write

    def close(self):
        self.closed = True


def test_a_sweep_that_fills_the_disk_is_finished_failed_not_killed(tmp_path, monkeypatch, cli_inproc):
    import errno
    import socket
    import types

    from commprof import results
    from commprof.capture import launch
    from commprof.model import fileio
    from commprof.results.sweep import SweepWriter
    from helpers import results_meta
    from test_full_disk_and_hostile_input import _dead_pid, a_sweep_dir

    d = a_sweep_dir(str(tmp_path / "full"), status="running", cells_planned=22, config={"tps": [2]})
    m = results_meta(d)
    m["writer"] = {"host": socket.gethostname(), "pid": _dead_pid(), "pid_start": 1, "heartbeat": m["start_time"]}
    json.dump(m, open(os.path.join(d, "meta.json"), "w"), indent=2)
    before = os.path.getsize(os.path.join(d, "meta.json"))
    real_open = open

    def full_open(path, mode="r", *a, **k):             # no new file fits: the temporary meta.json.tmp
        if "w" in mode or "a" in mode:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return real_open(path, mode, *a, **k)

    writer = SweepWriter(d, None, m, set())
    writer._table._f = _FullDiskFile()
    monkeypatch.setattr(fileio, "open", full_open, raising=False)
    with pytest.raises(Exception) as e:
        writer.write_rows([{"op": "all_reduce", "size_bytes": 8}])
    assert "No space left on device" in str(e.value)
    launch._finish(types.SimpleNamespace(out_dir=d), None, "failed", str(e.value))    # rank 0's own path
    monkeypatch.undo()
    meta = results_meta(d)
    assert meta["status"] == "failed" and meta["disk_full"] is True, meta.get("status")
    assert "disk is full" in meta["error"] and "No space left on device" in meta["error"]
    assert os.path.getsize(os.path.join(d, "meta.json")) <= before + 4096
    assert not [f for f in os.listdir(d) if f.endswith(".tmp")]
    r = results.load(d)
    assert r.state == "failed" and "killed" not in r.unfinished and "disk is full" in r.unfinished, r.unfinished
    shown = cli_inproc("show", d, "--no-charts")
    assert "killed" not in shown.stdout + shown.stderr and "disk is full" in shown.stdout + shown.stderr


def test_finish_meta_other_write_errors_still_raise(tmp_path, monkeypatch):
    import errno

    from commprof import results
    from commprof.model import fileio
    from commprof.model.errors import UsageError
    from test_full_disk_and_hostile_input import a_sweep_dir

    d = a_sweep_dir(str(tmp_path / "ro"), status="running", cells_planned=2, config={"tps": [2]})

    real_open = open

    def ro_open(path, mode="r", *a, **k):
        if "w" in mode or "a" in mode:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr(fileio, "open", ro_open, raising=False)
    with pytest.raises(UsageError, match="Read-only file system"):
        results.finish_meta(d, "failed", "x")
    monkeypatch.undo()
    assert json.load(open(os.path.join(d, "meta.json")))["status"] == "running"
