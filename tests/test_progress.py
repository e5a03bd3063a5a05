"""Progress that tells the truth: the start-up phase at once, an ETA from the cells'
measured times, and lines on stderr when it is not a terminal."""
import os
import re
import subprocess
import sys
import time

import pytest


from commprof.views.console import Eta, clock, progress_bar

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_eta_from_measured_step_times():
    e = Eta(8)
    t0 = e.t0
    assert e.text(t0 + 1) == "ETA after the first step"          # no default guess
    e.update(2, t0 + 10)                                          # 5 s per step measured
    assert e.text(t0 + 10) == "ETA 0:30"                          # 6 steps left x 5 s
    assert e.text(t0 + 12) == "ETA 0:28"                          # the current step has run 2 s
    e.update(7, t0 + 35)
    # the last step outlives the estimate: it says so, never '-:--:--'
    assert e.text(t0 + 50).startswith("ETA any moment (this step has run 0:15, 0:05 per step")
    e.update(8, t0 + 52)
    assert e.text(t0 + 52) == "done"


def test_eta_within_2x_after_a_quarter_of_cells_that_grow():
    # a sweep's 24 cells in its order (2 ops x TP 2,4,8 x 4 sizes): larger TP and sizes take longer;
    # after a quarter of the cells the ETA is within 2x of the time actually left
    times = [tp * size for _ in range(2) for tp in (1, 1.5, 2.5) for size in (1, 1.3, 1.8, 2.5)]
    e = Eta(24)
    t = e.t0
    for i, d in enumerate(times[:6]):
        t += d
        e.update(i + 1, t)
    left = sum(times[6:])
    m = re.match(r"ETA (\d+):(\d+)", e.text(t))
    est = int(m.group(1)) * 60 + int(m.group(2))
    assert left / 2 <= est <= left * 2


def test_clock():
    assert clock(65) == "1:05" and clock(3725) == "1:02:05"


def test_piped_progress_lines(capsys):
    p = progress_bar(None, "sweep", starting="starting 2 rank(s)")
    p.set_total(3)
    for i in (1, 2, 3):
        p.update(i)
    p.close()
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("sweep: starting 2 rank(s) (0:00 elapsed)")
    assert [ln.split(",")[0] for ln in err if "/3" in ln] == ["sweep: 1/3 cells", "sweep: 2/3 cells", "sweep: 3/3 cells"]


def test_piped_progress_every_tenth_of_many(capsys):
    p = progress_bar(100, "trace")
    for i in range(1, 101):
        p.update(i)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "/100" in ln]
    assert len(lines) == 10 and lines[-1].startswith("trace: 100/100 cells, done")


def test_piped_gloo_sweep_reports_start_up_and_each_cell(tmp_path):
    out = tmp_path / "sw"
    env = dict(os.environ, PYTHONPATH=ROOT)
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "commprof", "sweep", "--backend", "gloo", "--tp", "2", "--ops",
                          "all_reduce", "--sizes", "4K,16K,64K", "--iters", "3", "--warmup", "1", "--no-charts",
                          "--out", str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    first = None
    lines = []
    for line in p.stderr:
        lines.append(line.rstrip("\n"))
        if first is None and line.startswith("sweep: starting"):
            first = time.monotonic() - t0
    p.wait(timeout=300)
    assert p.returncode == 0, "\n".join(lines)
    assert first is not None, lines
    starting = next(i for i, ln in enumerate(lines) if ln.startswith("sweep: starting 2 rank(s)"))
    cells = [ln for ln in lines if re.match(r"sweep: \d/3 cells", ln)]
    assert cells and cells[-1].startswith("sweep: 3/3 cells, done"), lines
    assert starting < lines.index(cells[0])
    assert not any("-:--:--" in ln for ln in lines)


def test_start_up_shows_before_the_parent_loads_torch(tmp_path):
    """The first progress line must not wait for torch (3-8 s to import on a loaded machine, where
    the old parent imported it only to count GPUs for ``--backend gloo``): with ``-X importtime``
    the parent's own import of torch is a line on the same stderr, so its order against the
    'starting' line is the order things happened, on any machine and at any load."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "commprof", "sweep", "--backend", "gloo", "--tp",
                          "2", "--ops", "all_reduce", "--sizes", "4K", "--iters", "2", "--warmup", "1", "--no-charts",
                          "--out", str(tmp_path / "sw")], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stderr.splitlines()
    starting = next(i for i, ln in enumerate(lines) if ln.startswith("sweep: starting 2 rank(s)"))
    torch_at = [i for i, ln in enumerate(lines) if re.match(r"import time:.*\| +torch$", ln)]
    assert torch_at and starting < torch_at[0], (starting, torch_at[:3])


def test_gloo_and_a_host_without_a_driver_count_no_gpus_through_torch():
    code = ("import sys, commprof.capture.launch as l\n"
            "print(l.resolve_backend('gloo', 2, None)[0], 'torch' in sys.modules)\n"
            "print(l._no_nvidia_driver(), l.resolve_backend('auto', 2, None)[0], 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                         capture_output=True, text=True, timeout=120).stdout.split()
    assert out[:2] == ["gloo", "False"], out
    if out[2] == "True":                      # this host has no NVIDIA driver: auto is gloo, torch never loaded
        assert out[3:] == ["gloo", "False"], out


def test_size_time_fit_by_hand():
    from commprof.views.console import blend_eta, eta_from_sizes, fit_size_time

    assert fit_size_time([1, 3, 5], [3, 7]) == (1.0, 2.0)                  # 3 = a + b, 7 = a + 3b
    assert fit_size_time([1, 3], [5, 4]) == (4.5, 0.0)                     # time falls with size: flat
    a, b = fit_size_time([1, 2], [0.5, 3])                                 # a line through 0 or below
    assert a == 0.0 and b == pytest.approx((0.5 + 6) / 5)
    assert fit_size_time([4, 4, 8], [1, 1]) is None                        # one size: no slope to fit
    # steps 3 and 4 of sizes 5 and 7 cost 11 and 15; step 3 has run 4 s of its 11
    assert eta_from_sizes([1, 3, 5, 7], [3, 7], 4.0) == 22.0
    assert eta_from_sizes([1, 3, 5, 7], [3, 7], 30.0) == 15.0               # an overrun step counts 0
    assert blend_eta(4.0, 16.0) == 8.0 and blend_eta(4.0, None) == 4.0 and blend_eta(-1.0, 9.0) == 9.0


# A gloo sweep on this 2-core machine (commprof sweep --backend gloo --tp 2,4, Qwen2.5-32B decode
# sizes, 40 iterations + warm-up a cell): each cell's p50 latency in us as its sweep.csv recorded,
# in the order the cells ran; (op, tp, size_bytes, p50_us).
_GLOO_CELLS = [("all_reduce", 2, 10240, 1699), ("all_reduce", 2, 81920, 2737), ("all_reduce", 2, 327680, 4739),
               ("all_reduce", 2, 1310720, 10486), ("all_gather", 2, 304128, 3158), ("all_gather", 2, 2433024, 3871),
               ("all_gather", 2, 9732096, 9158), ("all_gather", 2, 38928384, 57736),
               ("all_reduce", 4, 10240, 3914), ("all_reduce", 4, 81920, 3789), ("all_reduce", 4, 327680, 3716),
               ("all_reduce", 4, 1310720, 6284), ("all_gather", 4, 304128, 2886), ("all_gather", 4, 2433024, 4961),
               ("all_gather", 4, 9732096, 15927), ("all_gather", 4, 38928384, 97046)]


@pytest.mark.parametrize("fixed_s", [0.05, 0.15, 0.5])
def test_eta_within_2x_after_a_quarter_of_a_gloo_sweep(fixed_s):
    """Cell time = a fixed part (barriers, rows; 0.05-0.5 s) + 45 calls at the measured p50. The
    last cell of each block holds the logits all-gather (39 MB, 58-97 ms a call): the old mean over
    the first small cells said 0:02 at 4 of 16 against 15 s left."""
    from commprof.model.collectives import COLLECTIVES

    secs = [fixed_s + 45 * us * 1e-6 for _, _, _, us in _GLOO_CELLS]
    sizes = [b * COLLECTIVES[op].busbw_factor(tp) for op, tp, b, _ in _GLOO_CELLS]
    for done in (4, 6, 8, 12):                                        # a quarter, and on
        e = Eta(16)
        t = e.t0
        for i in range(done):
            t += secs[i]
            e.update(i + 1, t)
        e.timed(sizes, secs[:done])
        m = re.match(r"ETA (\d+):(\d+)", e.text(t))
        est, left = int(m.group(1)) * 60 + int(m.group(2)), sum(secs[done:])
        assert left / 2 <= max(est, 0.5) <= left * 2, (done, est, left)


def test_eta_prices_a_one_off_setup_apart():
    """``trace --repeat 3`` of one run builds its engine in the first cell only: 33 s of which 27 s
    the build, then 6 s cells. The ETA after it is 2 x 6 s, not 2 x 33 s (it said 1:06 against
    the 0:11 left on a real CPU trace)."""
    e = Eta(3)
    t0 = e.t0
    e.update(1, t0 + 33)
    e.timed_setups([True, False, False], [33.0], [27.0])
    assert e.text(t0 + 33) == "ETA 0:12"
    assert e.text(t0 + 35) == "ETA 0:10"                 # the running cell has had 2 s of its 6
    # cells that build again (2 runs x 2 repeats, interleaved): each one left is priced with a build
    e = Eta(4)
    e.update(1, e.t0 + 30)
    e.timed_setups([True, True, True, True], [30.0], [20.0])
    assert e.text(e.t0 + 30) == "ETA 1:30"
    # without the figures (a sweep), or figures of another length: as before
    e = Eta(3)
    e.update(1, e.t0 + 33)
    e.timed_setups([True, False], [33.0], [27.0])
    assert e.text(e.t0 + 33) == "ETA 1:06"


def test_shared_slots_carry_each_cells_setup_to_the_progress():
    import multiprocessing

    from microbench.heartbeat import Heartbeat, SharedSlots
    from microbench.trace_rank import build_flags

    # the walk: every run's repeat 1, then every run's repeat 2; one engine per TP x batch
    assert build_flags([(2, 1, "eager")], 3) == [True, False, False]
    assert build_flags([(2, 1, "eager"), (2, 1, "graph")], 2) == [True, False, False, False]
    assert build_flags([(2, 1, "eager"), (2, 8, "eager")], 2) == [True, True, True, True]
    slots = SharedSlots(multiprocessing.get_context("spawn"), 2)
    assert slots.setup_figures(0) == ([], [], [])        # a sweep gives none
    slots.set_setups(build_flags([(2, 1, "eager")], 3))
    assert slots.cells_total.value == 3
    hb = Heartbeat(0, slots)
    hb.row_written(1, seconds=33.0, setup_s=27.0)
    assert slots.setup_figures(1) == ([True, False, False], [33.0], [27.0])
    p = progress_bar(None, "trace")
    p.set_total(3)
    p.update(1, setups=slots.setup_figures(1))
    assert p.eta.by_setups(p.eta.t_last) == pytest.approx(12.0)
