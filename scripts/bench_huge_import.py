"""Huge inputs to ``commprof import``: wall time and peak memory of each, in a fresh process.

Generates in a temporary dir (deleted after; nothing committed): a nccl-tests text log of 10
million data rows (the real 8-GPU all_reduce block of tests/data/nccl-tests/all_reduce_perf_8xA100.log
repeated, ~1.2 GB), the largest log accepted (99,998 rows: all of it is parsed, checked and
written), a -J JSON file of 2 million results (~790 MB), a ~700 MB ``nvidia-smi topo -m`` text
and, with ``--nccl-debug``, a ~700 MB NCCL_DEBUG log (the fixture repeated; read line by line,
bounded memory, linear time: ~2 minutes here) and, with ``--kineto``, a ~700 MB two-rank Kineto
trace (streamed, ~50 s). Target: each refused or read in under 1 GB of
peak memory and under 60 s.

    python scripts/bench_huge_import.py [--kineto] [--nccl-debug] [--out results/bench]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "scripts"))

from benchfile import measured, write_result  # noqa: E402

DATA = os.path.join(REPO, "tests", "data")
_CHILD = """
import json, resource, sys, time
from commprof.cli import main
t0 = time.perf_counter()
sys.argv = ["commprof", *sys.argv[1:]]
try:
    rc = main()
except SystemExit as e:
    rc = e.code
print(json.dumps({"rc": rc, "wall_s": time.perf_counter() - t0,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _repeat(src_text: str, dst: str, target_bytes: int) -> None:
    block = src_text.encode()
    chunk = block * max(1, (4 << 20) // len(block))
    with open(dst, "wb") as f:
        n = 0
        while n < target_bytes:
            f.write(chunk)
            n += len(chunk)


def log_parts() -> tuple[str, str, str, int]:
    """(header, data rows, footer, how many data rows) of the real 8-GPU all_reduce log in tests/data."""
    lines = open(os.path.join(DATA, "nccl-tests", "all_reduce_perf_8xA100.log")).read().splitlines(True)
    data = [i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#") and ln.split()[0].isdigit()]
    return "".join(lines[:data[0]]), "".join(lines[data[0]:data[-1] + 1]), "".join(lines[data[-1] + 1:]), len(data)


def make_log(dst: str, rows: int) -> int:
    """A log of the real data block repeated to at most ``rows`` data rows (written in big chunks);
    the rows written."""
    head, block, foot, n = log_parts()
    reps = rows // n
    with open(dst, "w") as f:
        f.write(head)
        for _ in range(reps // 1000):
            f.write(block * 1000)
        f.write(block * (reps % 1000))
        f.write(foot)
    return reps * n


def make_json(dst: str, results: int) -> int:
    doc = json.load(open(os.path.join(DATA, "nccl-tests", "all_reduce_perf_8xA100_v3.json")))
    one = [json.dumps(r) for r in doc["results"]]
    doc["results"] = []
    head, tail = json.dumps(doc).split('"results": []')
    with open(dst, "w") as f:
        f.write(head + '"results": [')
        batch = ", ".join(one[i % len(one)] for i in range(1000))
        for k in range(results // 1000):
            f.write(("" if k == 0 else ", ") + batch)
        f.write("]" + tail)
    return results // 1000 * 1000


def peak_run(args: list[str], timeout: float = 900) -> tuple[dict, str, str]:
    """``commprof ARGS`` in a fresh interpreter: (its rc, wall_s and peak_mb, its stdout, its stderr)."""
    env = dict(os.environ, PYTHONPATH=REPO)
    res = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True, timeout=timeout,
                         env=env, cwd=REPO)
    return json.loads(res.stdout.strip().splitlines()[-1]), res.stdout, res.stderr


def run_import(kind: str, path, out: str) -> dict:
    paths = path if isinstance(path, list) else [path]
    fig, stdout, stderr = peak_run(["import", kind, *paths, "--out", out])
    err = [ln for ln in stderr.splitlines() if ln.startswith("commprof: error:")]
    fig["answer"] = err[0] if err else [ln for ln in stdout.splitlines() if ln.startswith("imported")][-1]
    return fig


def main():
    from commprof.model.machine import now_iso

    ap = argparse.ArgumentParser()
    ap.add_argument("--nccl-debug", action="store_true", help="also a ~700 MB NCCL_DEBUG log (about 2 minutes)")
    ap.add_argument("--kineto", action="store_true", help="also a ~700 MB two-rank Kineto trace (about 1 minute)")
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    args = ap.parse_args()
    start = now_iso()
    tmp = tempfile.mkdtemp(prefix="commprof-huge-")
    cases = []
    try:
        p = os.path.join(tmp, "all_reduce_10M.log")
        n = make_log(p, 10_000_000)
        cases.append(("nccl-tests", p, f"nccl-tests text, {n:,} data rows"))
        p = os.path.join(tmp, "all_reduce_100k.log")
        n = make_log(p, 99_999)
        cases.append(("nccl-tests", p, f"nccl-tests text, {n:,} data rows (the largest accepted)"))
        p = os.path.join(tmp, "all_reduce_2M.json")
        n = make_json(p, 2_000_000)
        cases.append(("nccl-tests", p, f"nccl-tests -J JSON, {n:,} results"))
        p = os.path.join(tmp, "topo_700MB.txt")
        _repeat(open(os.path.join(DATA, "nvidia-smi", "h100x8-nvswitch-topo-m.txt")).read(), p, 700_000_000)
        cases.append(("nvidia-smi-topo", p, "nvidia-smi topo -m text repeated, ~700 MB"))
        if args.kineto:
            from bench_kineto_import import generate

            kdir = os.path.join(tmp, "kineto")
            gen = generate(kdir, 700.0, 0)
            cases.append(("kineto", [os.path.join(kdir, f["file"]) for f in gen["files"]],
                          f"Kineto trace, 2 ranks, {gen['events']:,} events (scripts/bench_kineto_import.py's "
                          "generator), ~700 MB"))
        if args.nccl_debug:
            src = "fragment_8gpu_nvlink_written.log"
            p = os.path.join(tmp, "nccl_debug_700MB.log")
            _repeat(open(os.path.join(DATA, "nccl-debug", src)).read(), p, 700_000_000)
            cases.append(("nccl-debug", p, f"NCCL_DEBUG log ({src}) repeated, ~700 MB"))
        rows = []
        for i, (kind, path, what) in enumerate(cases):
            fig = run_import(kind, path, os.path.join(tmp, f"out{i}"))
            fig["answer"] = fig["answer"].replace(tmp, "$TMP")          # no machine's temporary paths
            size = sum(os.path.getsize(q) for q in (path if isinstance(path, list) else [path]))
            fig.update(kind=kind, what=what, file_mb=round(size / 1e6, 1))
            rows.append(fig)
            print(f"{what}: rc {fig['rc']}, {fig['wall_s']:.1f} s, {fig['peak_mb']:.0f} MB: {fig['answer']}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    met = all(r["wall_s"] < 60 and r["peak_mb"] < 1024 for r in rows if r["kind"] in ("nccl-tests", "nvidia-smi-topo"))
    result = measured(__file__, start, "commprof import of huge generated inputs, each in a fresh process: "
                      "wall time of the command and peak RSS (getrusage)")
    result.update(cases=rows, target="every nccl-tests and nvidia-smi-topo case refused or read in under 60 s "
                  "and under 1 GB of peak memory", met=met)
    table = ["| import | input | MB | exit | wall s | peak MB | answer |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        table.append(f"| {r['kind']} | {r['what']} | {r['file_mb']:,.0f} | {r['rc']} | {r['wall_s']:.1f} | "
                     f"{r['peak_mb']:.0f} | {r['answer'].replace('|', '/')} |")
    write_result(args.out, "huge_import", "Huge inputs to commprof import", result, table)


if __name__ == "__main__":
    main()
