"""Write results/README.md from the dirs under results/: one row per results dir (its verb, kind,
what, where its figures come from and the command, all read from its meta.json) and one per
benchmark of results/bench/ (its .json beside the .md). tests/test_results_readme.py fails when
the committed page differs from what this writes.

    python scripts/results_readme.py            # rewrite results/README.md
    python scripts/results_readme.py --check    # exit 1 when it is out of date
"""
from __future__ import annotations

import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "results")
README = "README.md"
BENCH = "bench"
MAX_WHAT = 140

HEAD = """# results/

Committed runs and benchmarks; every figure says how it was obtained: a results dir's `meta.json`
(`commprof load DIR` reads it back, `commprof show DIR` shows it again), a benchmark's `.json` beside
its `.md`. This page is generated from them by `python scripts/results_readme.py` (a test fails
when it is out of date); where a dir has its own README.md, it is linked.
"""


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _short(what: str) -> str:
    """A long description cut: at its first ': ', '; ' or '. ' where that leaves a clause of 40
    characters or more, else at a word."""
    what = " ".join(str(what or "").split())
    if len(what) <= MAX_WHAT:
        return what
    cuts = [i for i in (what.find(": "), what.find("; "), what.find(". ")) if 40 <= i <= MAX_WHAT]
    if cuts:
        return what[:min(cuts)]
    return what[:MAX_WHAT].rsplit(" ", 1)[0] + " ..."


def _command(cmd) -> str:
    if not cmd:
        return ""
    text = " ".join(cmd) if isinstance(cmd, list) else str(cmd)
    if text.startswith(".venv/bin/"):
        text = text[len(".venv/bin/"):]
    return f"`{_cell(text)}`"


def _machine(m: dict | None) -> str:
    if not isinstance(m, dict) or not m.get("host"):
        return ""
    cpu = ", ".join(x for x in (m.get("cpu") or "", f"{m['cpu_cores']} cores" if m.get("cpu_cores") else "") if x)
    return f"`{m['host']}`" + (f" ({cpu})" if cpu else "")


def _date(meta: dict) -> str:
    return str(meta.get("start_time") or meta.get("created") or meta.get("end_time") or "")[:10]


def _file(path: str, checkout: str) -> str:
    """An imported file's path; one that is not in the checkout (a real file out of a fetched
    repository snapshot: tests/data/*/SOURCE.md names its public source) says so."""
    here = os.path.isabs(path) or os.path.exists(os.path.join(checkout, path))
    return f"`{_cell(path)}`" + ("" if here else " (not committed: see its folder's SOURCE.md)")


def _provenance(meta: dict, checkout: str = REPO) -> str:
    """Where a dir's figures come from: the box (hosts, GPUs), the files imported, the machine that ran it."""
    parts = []
    hosts = [h for h in meta.get("hosts") or [] if h]
    gpus = [g for g in meta.get("gpus") or [] if g]
    if hosts:
        parts.append("hosts " + ", ".join(f"`{_cell(h)}`" for h in hosts))
    if gpus:
        parts.append("GPUs " + ", ".join(_cell(g) for g in gpus))
    files = [f.get("path") for f in meta.get("source_files") or [] if isinstance(f, dict) and f.get("path")]
    if files:
        parts.append("imported from " + ", ".join(_file(p, checkout) for p in files) + " (sha256 in meta.json)")
    ran = _machine(meta.get("machine"))
    if ran:
        parts.append(f"run on {ran}")
    return "; ".join(parts)


def result_dirs(root: str = RESULTS) -> list[dict]:
    """One entry per dir under ``root`` holding a meta.json, by name."""
    out = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        meta_path = os.path.join(path, "meta.json")
        if not os.path.isdir(path) or not os.path.isfile(meta_path):
            continue
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        out.append({"name": name, "meta": meta, "readme": os.path.isfile(os.path.join(path, README))})
    return out


def bench_entries(root: str = RESULTS) -> list[dict]:
    """One entry per ``results/bench/<name>.json`` (beside its ``.md``), by name."""
    d = os.path.join(root, BENCH)
    if not os.path.isdir(d):
        return []
    out = []
    for name in sorted(os.listdir(d)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(d, name), encoding="utf-8") as f:
            data = json.load(f)
        stem = name[:-len(".json")]
        out.append({"name": stem, "data": data, "md": os.path.isfile(os.path.join(d, stem + ".md"))})
    return out


def others(root: str = RESULTS) -> list[str]:
    """Dirs under ``root`` that are neither a results dir (no meta.json) nor bench/: listed so none is missed."""
    return sorted(n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)) and n != BENCH
                  and not os.path.isfile(os.path.join(root, n, "meta.json")))


def render(root: str = RESULTS) -> str:
    dirs, bench = result_dirs(root), bench_entries(root)
    lines = [HEAD, f"## Results dirs ({len(dirs)})", "",
             "| dir | verb | kind | status | date | what | where the figures come from | command |",
             "|---|---|---|---|---|---|---|---|"]
    for e in dirs:
        m = e["meta"]
        name = f"[`{e['name']}/`]({e['name']}/{README})" if e["readme"] else f"`{e['name']}/`"
        lines.append(f"| {name} | {_cell(m.get('verb', ''))} | {_cell(m.get('kind', ''))} | "
                     f"{_cell(m.get('status', ''))} | {_date(m)} | {_cell(_short(m.get('what', '')))} | "
                     f"{_provenance(m, os.path.dirname(os.path.abspath(root)))} | {_command(m.get('command'))} |")
    counts: dict[str, int] = {}
    for e in dirs:
        counts[e["meta"].get("verb", "?")] = counts.get(e["meta"].get("verb", "?"), 0) + 1
    lines += ["", "By verb: " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())) + "."]
    on_gpu = [e["name"] for e in dirs if e["meta"].get("kind") == "measured"
              and any(g and not str(g).startswith("none") for g in e["meta"].get("gpus") or [])]
    lines += ["", "Measured on a GPU here: " + (", ".join(f"`{n}/`" for n in on_gpu) if on_gpu else
                                                 "none yet (`scripts/gpu_check.sh` writes such dirs)") + "."]
    lines += ["", f"## Benchmarks ({len(bench)}, `{BENCH}/`)", "",
              f"What each measures and its figures: [{BENCH}/README.md]({BENCH}/{README}).", "",
              "| benchmark | kind | date | what | machine | command |", "|---|---|---|---|---|---|"]
    for e in bench:
        d = e["data"]
        name = f"[`{e['name']}`]({BENCH}/{e['name']}.md)" if e["md"] else f"`{e['name']}`"
        lines.append(f"| {name} | {_cell(d.get('kind', ''))} | {_date(d)} | {_cell(_short(d.get('what', '')))} | "
                     f"{_machine(d.get('machine'))} | {_command(d.get('command'))} |")
    rest = others(root)
    if rest:
        lines += ["", "Other dirs (no meta.json): " + ", ".join(f"`{n}/`" for n in rest) + "."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when results/README.md is out of date")
    ap.add_argument("--root", default=RESULTS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    text = render(args.root)
    path = os.path.join(args.root, README)
    if args.check:
        with open(path, encoding="utf-8") as f:
            same = f.read() == text
        if not same:
            print(f"{path} is out of date: run python scripts/results_readme.py", file=sys.stderr)
        return 0 if same else 1
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
