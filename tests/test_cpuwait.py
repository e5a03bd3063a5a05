"""The client's run-queue wait and the local server's pinned CPUs (commprof.capture.cpuwait), with real
processes: a listening child with a thread pinned to one CPU, a busy competitor."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from commprof.capture import cpuwait

linux = pytest.mark.skipif(not sys.platform.startswith("linux") or not os.path.exists("/proc/self/schedstat"),
                           reason="needs Linux /proc (schedstat, net/tcp, task status)")


def _cpus():
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def test_cpu_lists_and_the_wait_note(tmp_path):
    assert cpuwait.parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert cpuwait.parse_cpu_list("5") == {5}
    for bad in ("a", "3-1", "-2"):
        with pytest.raises(ValueError):
            cpuwait.parse_cpu_list(bad)
    f = tmp_path / "schedstat"
    f.write_text("2500000 7000000 42\n")
    assert cpuwait.read_schedstat(str(f)) == (2.5, 7.0)
    assert cpuwait.read_schedstat(str(tmp_path / "none")) is None
    m = cpuwait.WaitMeter(str(tmp_path / "none"))
    m.start()
    assert all(v != v for v in m.stop().values())           # NaN where the kernel says nothing
    assert cpuwait.wait_note(50.0, 1.0) == ""                # 5% of the level: not named
    assert "waited for a CPU 300 ms (30% of the level)" in cpuwait.wait_note(300.0, 1.0)
    assert cpuwait.wait_note(float("nan"), 1.0) == ""


@linux
def test_wait_meter_sees_a_competitor_on_the_same_cpu():
    """Pinned to one CPU beside a busy process, a main thread that always wants the CPU waits on
    the run queue for a good part of the wall time (the kernel shares the CPU between the two).
    The kernel's own counter, read as serve reads it."""
    code = textwrap.dedent("""
        import os, subprocess, sys, time
        from commprof.capture.cpuwait import WaitMeter
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        def level():
            m = WaitMeter(); m.start()
            end = time.perf_counter() + 0.4
            while time.perf_counter() < end:          # always runnable for 0.4 s of wall time
                sum(range(2000))
            return m.stop()
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            time.sleep(0.1)
            got = level()
        finally:
            busy.kill()
        print(got["run_ms"], got["wait_ms"])
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, r.stderr
    run_ms, wait_ms = map(float, r.stdout.split())
    assert wait_ms >= 100.0 and run_ms > 0, (run_ms, wait_ms)      # about half of the 400 ms


@linux
@pytest.mark.skipif(len(_cpus()) < 2, reason="needs 2 CPUs to move off one")
def test_place_client_finds_the_cpu_a_local_server_pins_and_holds_the_client_where_told(tmp_path):
    """A 'server' that listens on a port and binds a thread to one CPU (as vLLM binds its model
    threads): found by its port, the pinned CPU named; the client stays where it was with any,
    and is held to the other CPU when told."""
    pinned, other = _cpus()[0], _cpus()[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, socket, sys, threading, time
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", {port})); s.listen()
        def model_thread():
            os.sched_setaffinity(0, {{{pinned}}})
            time.sleep(120)
        threading.Thread(target=model_thread, daemon=True).start()
        print("ready", flush=True); time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        code = textwrap.dedent(f"""
            import json, os
            from commprof.capture.cpuwait import place_client, server_pids
            print(json.dumps({{"pids": sorted(server_pids({port})),
                               "any": place_client("http://127.0.0.1:{port}", "any"),
                               "any_now": sorted(os.sched_getaffinity(0)),
                               "held": place_client("http://127.0.0.1:{port}", "{other}"),
                               "now": sorted(os.sched_getaffinity(0))}}))
        """)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        assert r.returncode == 0, r.stderr
        import json

        got = json.loads(r.stdout)
        assert got["pids"] == [server.pid]
        assert got["any"]["server_pinned_cpus"] == [pinned] and got["any_now"] == _cpus()
        assert f"pins threads to CPU {pinned}" in got["any"]["note"] and f"{pinned} shared" in got["any"]["note"]
        assert got["now"] == got["held"]["client_cpus"] == [other]
        assert "restricted as given" in got["held"]["note"] and "shared" not in got["held"]["note"]
    finally:
        server.kill()
        server.wait()


@linux
def test_place_client_remote_absent_and_a_bad_list():
    code = textwrap.dedent("""
        import json, os
        from commprof.capture.cpuwait import place_client
        before = sorted(os.sched_getaffinity(0))
        out = [place_client("http://10.1.2.3:8000", "any")["note"], place_client("http://127.0.0.1:9", "any")["note"],
               sorted(os.sched_getaffinity(0)) == before]
        try:
            place_client("http://127.0.0.1:9", "4095")
        except ValueError as e:
            out.append(str(e))
        one = str(before[-1])
        out.append(place_client("http://127.0.0.1:9", one)["client_cpus"] == [before[-1]])
        out.append(sorted(os.sched_getaffinity(0)) == [before[-1]])
        print(json.dumps(out))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, r.stderr
    import json

    remote, nobody, left, bad, given, now = json.loads(r.stdout)
    assert "not on this machine" in remote and "no process" in nobody and left
    assert "names no CPU" in bad and given and now
