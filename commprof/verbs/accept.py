"""``commprof accept``: one acceptance run on a box, within a time budget: topo and the GPUs' health,
p2p, a sweep at decode sizes (graph and eager), a decode trace, NCCL's own account of the run
(``NCCL_DEBUG=INFO`` into ``nccl/`` of the results dir), serve against the buyer's engine when
``--url`` is given, then the report a buyer hands the vendor. Each step is ``commprof <verb>`` in a
child process (verbs are leaves), with a progress line and the time the budget has left. On a
machine without an NVIDIA GPU/driver it runs what it can (a gloo sweep at small sizes, a 1-layer
trace) and says what it could not."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from commprof.capture.nvmlhealth import HealthSampler
from commprof.model.errors import UsageError
from commprof.model.fileio import write_json
from commprof.results.meta import RUNS_DIR

MIN_STEP_S = 5.0                       # a step with less budget left than this is not started


from commprof.model.registry import AcceptConfig  # noqa: E402,F401 - the flags, declared once


def _gpu_present() -> tuple[int, str]:
    """-> (the number of NVIDIA GPUs NVML sees, why none)."""
    s = HealthSampler()
    if not s.available:
        return 0, s.why
    try:
        n = int(s.nvml.nvmlDeviceGetCount())
    except s.nvml.NVMLError:
        n = 0
    try:
        s.nvml.nvmlShutdown()
    except s.nvml.NVMLError:
        pass
    return n, "" if n else "no NVIDIA GPU (NVML sees none): health not judged"


def default_tp(n_gpus: int) -> str:
    """The TP degrees a box of ``n_gpus`` GPUs runs: powers of two from 2 up to the count (8 -> "2,4,8")."""
    tps, t = [], 2
    while t <= n_gpus:
        tps.append(str(t))
        t *= 2
    return ",".join(tps)


def plan_steps(out: str, gpu: bool, cfg: AcceptConfig) -> tuple[list, list]:
    """-> ([(name, argv, dir)], [could-not lines])."""
    d = lambda name: os.path.join(out, name)            # noqa: E731
    model = ["--model", cfg.model] if cfg.model else []
    steps, could_not = [], []
    if gpu >= 2 or (gpu and cfg.tp):
        tp = cfg.tp or default_tp(gpu)
        steps += [("topo", ["topo", "--out", d("topo")], d("topo")),
                  ("p2p", ["p2p", "--out", d("p2p")], d("p2p")),
                  ("sweep", ["sweep", "--tp", tp, "--sizes", "decode", "--modes", "graph,eager", *model,
                             "--no-charts", "--out", d("sweep")], d("sweep")),
                  ("trace", ["trace", "--tp", tp, *model, "--no-charts", "--out", d("trace")], d("trace"))]
    elif gpu == 1:
        could_not += ["p2p, sweep and trace: one GPU: no communication to measure (TP=1)"]
        steps.append(("topo", ["topo", "--out", d("topo")], d("topo")))
    else:
        no = "no NVIDIA GPU/driver"
        could_not += [f"topo and health: {no}: not judged", f"p2p: {no}: not measured",
                      f"sweep graph mode and NCCL: {no}: gloo on CPU only, eager, small sizes",
                      f"trace at full depth: {no}: 1 layer on gloo"]
        tp = cfg.tp or "2"
        steps += [("sweep", ["sweep", "--tp", tp, "--backend", "gloo", "--sizes", "4K,64K", "--iters", "8",
                             "--warmup", "1", "--no-charts", "--out", d("sweep")], d("sweep")),
                  ("trace", ["trace", "--tp", tp, "--backend", "gloo", "--batch", "1", "--layers", "1",
                             "--context", "64", "--tokens", "4", "--warmup", "1", *model, "--no-charts",
                             "--out", d("trace")], d("trace"))]
    if cfg.url:
        steps.append(("serve", ["serve", "--url", cfg.url, "--out", d("serve")], d("serve")))
    else:
        could_not.append("serve: no --url given: the buyer's engine not measured")
    if cfg.steps:
        steps = [s for s in steps if s[0] in cfg.steps]
    return steps, could_not


def run(cfg: AcceptConfig, *, echo=print) -> int:
    """The whole acceptance run; the exit code (0 when every step ran; the report's verdict is in it)."""
    if not cfg.budget_s or cfg.budget_s <= 0:
        raise UsageError(f"--budget {cfg.budget_s}: give the run's time budget in seconds (> 0)")
    out = cfg.out or os.path.join(RUNS_DIR, time.strftime("%Y%m%d-%H%M%S") + "-accept")
    if os.path.exists(out) and os.listdir(out):
        raise UsageError(f"--out '{out}': not empty; give a new dir")
    os.makedirs(os.path.join(out, "nccl"), exist_ok=True)
    gpu, why = _gpu_present()
    steps, could_not = plan_steps(out, gpu, cfg)
    env = dict(os.environ, NCCL_DEBUG="INFO",
               NCCL_DEBUG_FILE=os.path.join(os.path.abspath(out), "nccl", "nccl_debug.%h.%p.log"))
    t0 = time.monotonic()
    ran, dirs, failed = [], [], []
    total = len(steps) + 1
    for n, (name, argv, sdir) in enumerate(steps, 1):
        left = cfg.budget_s - (time.monotonic() - t0)
        if left < MIN_STEP_S:
            could_not.append(f"{name}: not started: the budget ({cfg.budget_s:g} s) was spent")
            continue
        echo(f"[{n}/{total}] {name} ({left:.0f} s of the budget left) ...")
        start = time.monotonic()
        try:
            p = subprocess.run([sys.executable, "-m", "commprof", *argv], env=env, timeout=left,
                               capture_output=True, text=True)
            rc = p.returncode
            tail = (p.stderr or p.stdout or "").strip().splitlines()[-1:] or [""]
        except subprocess.TimeoutExpired:
            rc, tail = None, ["stopped: the budget ran out"]
        took = time.monotonic() - start
        with open(os.path.join(out, f"{name}.log"), "w", encoding="utf-8") as f:
            f.write(" ".join(["commprof", *argv]) + "\n")
        if rc == 0 or (rc is not None and os.path.isdir(sdir) and os.listdir(sdir)):
            dirs.append(sdir)
            ran.append(name)
            echo(f"[{n}/{total}] {name}: done in {took:.0f} s" + (f" (exit {rc})" if rc else ""))
        else:
            failed.append(f"{name}: {'exit ' + str(rc) if rc is not None else 'timed out'}: {tail[0]}")
            echo(f"[{n}/{total}] {name}: failed in {took:.0f} s: {tail[0]}")
    if gpu == 0 and os.path.join(out, "sweep") in dirs:
        write_json(os.path.join(out, "sweep", "health.json"),
                   {"kind": "health", "source": "nvml", "samples": [], "not_judged": why})
    report = None
    if dirs:
        echo(f"[{total}/{total}] report ...")
        left = max(cfg.budget_s - (time.monotonic() - t0), 30.0)
        try:
            p = subprocess.run([sys.executable, "-m", "commprof", "report", *dirs, "--out", os.path.join(out, "report")],
                               env=env, timeout=left, capture_output=True, text=True)
            if os.path.exists(os.path.join(out, "report", "report.md")):
                report = os.path.join(out, "report", "report.md")
            else:
                failed.append(f"report: exit {p.returncode}: {(p.stderr or '').strip().splitlines()[-1:]}")
        except subprocess.TimeoutExpired:
            failed.append("report: timed out")
    nccl_logs = sorted(os.listdir(os.path.join(out, "nccl")))
    nccl_account = None
    if not nccl_logs:
        could_not.append("NCCL's own account (NCCL_DEBUG=INFO): no NCCL ran, no log")
    else:                                  # NCCL's own account of the run, with its check items
        acct = os.path.join(out, "nccl-account")
        try:
            p = subprocess.run([sys.executable, "-m", "commprof", "import", "nccl-debug",
                                *[os.path.join(out, "nccl", f) for f in nccl_logs], "--out", acct],
                               timeout=120, capture_output=True, text=True)
            if os.path.exists(os.path.join(acct, "meta.json")):
                nccl_account = acct
                echo(f"NCCL's own account: {acct} (exit {p.returncode})")
            else:
                failed.append(f"import nccl-debug: exit {p.returncode}: {(p.stderr or '').strip().splitlines()[-1:]}")
        except subprocess.TimeoutExpired:
            failed.append("import nccl-debug: timed out")
    summary = {"kind": "accept", "gpus": gpu, "budget_s": cfg.budget_s,
               "elapsed_s": round(time.monotonic() - t0, 1), "ran": ran, "failed": failed,
               "could_not": could_not, "dirs": dirs, "report": report, "nccl_logs": nccl_logs,
               "nccl_account": nccl_account}
    write_json(os.path.join(out, "accept.json"), summary)
    with open(os.path.join(out, "accept.md"), "w", encoding="utf-8") as f:
        f.write("# Acceptance run\n\n" + f"ran: {', '.join(ran) or 'nothing'}\n\n"
                + "".join(f"- could not: {c}\n" for c in could_not) + "".join(f"- failed: {x}\n" for x in failed)
                + (f"\nreport: {report}\n" if report else ""))
    for c in could_not:
        echo(f"could not: {c}")
    for x in failed:
        echo(f"failed: {x}")
    echo(f"acceptance run in {summary['elapsed_s']:g} s of {cfg.budget_s:g}: {out}"
         + (f"; report {report}" if report else ""))
    return 0 if not failed and report else 1
