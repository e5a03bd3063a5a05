"""commprof accept on CPU, end to end within its budget: the dir tree, the report and the
"could not" lines."""
from __future__ import annotations

import json
import os
import time

from helpers import TOY_MODEL

from commprof.verbs.accept import AcceptConfig, run


def test_accept_on_cpu_within_budget(tmp_path):
    out = str(tmp_path / "acc")
    lines = []
    t0 = time.monotonic()
    rc = run(AcceptConfig(out=out, budget_s=90, model=TOY_MODEL), echo=lines.append)
    took = time.monotonic() - t0
    s = json.load(open(os.path.join(out, "accept.json")))
    assert took < 90 + 30, took                       # the budget, plus the report's floor
    assert s["gpus"] == 0
    assert "sweep" in s["ran"], (s, lines)
    assert os.path.isfile(os.path.join(out, "sweep", "sweep.csv"))
    assert any(line.startswith("[1/") and "sweep" in line for line in lines)
    text = "\n".join(lines)
    assert "could not: topo and health: no NVIDIA GPU/driver" in text and "health not judged" in \
        json.load(open(os.path.join(out, "sweep", "health.json")))["not_judged"]
    assert "could not: p2p: no NVIDIA GPU/driver: not measured" in text
    assert "could not: serve: no --url given" in text
    assert s["report"] and os.path.isfile(s["report"]), (s, lines)
    assert rc == 0, (s, lines)


def test_default_tp_from_gpu_count():
    from commprof.verbs.accept import default_tp

    assert default_tp(8) == "2,4,8" and default_tp(4) == "2,4" and default_tp(6) == "2,4" and default_tp(2) == "2"


def test_gpu_plan_has_every_step(tmp_path):
    from commprof.verbs.accept import plan_steps

    steps, could_not = plan_steps(str(tmp_path), 8, AcceptConfig(url="http://127.0.0.1:8000"))
    names = [s[0] for s in steps]
    assert names == ["topo", "p2p", "sweep", "trace", "serve"]
    sweep = dict((s[0], s[1]) for s in steps)["sweep"]
    assert "graph,eager" in sweep and "decode" in sweep and "2,4,8" in sweep
    assert could_not == []
