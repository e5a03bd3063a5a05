"""What every verb's spec gives its command line: ``-h`` is ``--help``, a
switch shows no ``<bool>`` placeholder, and every verb that prints a table takes
``--format table|csv|json`` (csv/json alone on stdout)."""
import csv
import io
import json
import os

import pytest
from typer.testing import CliRunner

from helpers import REPO, run_cli

from commprof import cli
from commprof.model import registry

LOG = os.path.join(REPO, "tests", "data", "nccl-tests", "all_reduce_perf_8xA100.log")
VERBS = [v.name for v in registry.VERBS]
TABLE_VERBS = [v.name for v in registry.VERBS if v.table]


def _help(args):
    r = CliRunner().invoke(cli.make_app(), args)
    assert r.exit_code == 0, r.output
    return r.output


def test_dash_h_is_help_everywhere():
    assert _help(["-h"]) == _help(["--help"])
    for verb in VERBS:
        assert _help([verb, "-h"]) == _help([verb, "--help"]), verb
        assert "Usage:" in _help([verb, "-h"])


@pytest.mark.parametrize("verb", [None, *VERBS])
def test_switches_show_no_value_placeholder(verb):
    text = _help([verb, "--help"] if verb else ["--help"])
    assert "<bool>" not in text
    assert "Show this message and exit." in text


def test_no_charts_takes_no_value():
    line = next(ln for ln in _help(["sweep", "--help"]).splitlines() if "--no-charts" in ln)
    assert "Skip chart rendering." in line and "<" not in line


def test_every_table_verb_takes_format():
    assert {"sweep", "trace", "plan", "predict", "check", "gap", "show", "serve", "moe", "p2p", "topo"} <= set(TABLE_VERBS)
    for verb in TABLE_VERBS:
        assert "--format" in _help([verb, "--help"]) and "table|csv|json" in _help([verb, "--help"]), verb


def test_format_csv_is_alone_on_stdout(tmp_path):
    r = run_cli(["plan", "--tp", "4", "--format", "csv"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    # Qwen2.5-32B at TP=4: the embedding's all-reduce, 64 attention-out, 64 MLP-out, the logits' all-gather
    assert [row["site"] for row in rows] == ["embedding", "layers 0-63 attention-out", "layers 0-63 MLP-out", "logits"]
    assert [row["count"] for row in rows] == ["x1", "x64", "x64", "x1"]
    assert "commprof plan" in r.stderr         # the lines around the table went to stderr


def test_format_json_of_an_imported_sweep(tmp_path):
    imp = str(tmp_path / "imp")
    assert run_cli(["import", "nccl-tests", LOG, "--out", imp], cwd=tmp_path).returncode == 0
    r = run_cli(["show", imp, "--no-charts", "--format", "json"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    first = doc["rows"][0]
    # the log's first line: 2048 bytes, out-of-place time 55.42 us, 8 ranks
    assert (first["op"], first["tp"], first["size_bytes"], first["latency_us_p50"]) == ("all_reduce", 8, 2048, 55.42)
    assert len(doc["rows"]) == 12
    table = run_cli(["show", imp, "--no-charts"], cwd=tmp_path)
    assert table.returncode == 0 and "┃" in table.stdout    # the default is still the table


def test_format_refuses_an_unknown_value(tmp_path):
    r = run_cli(["plan", "--format", "xml"], cwd=tmp_path)
    assert r.returncode == 2 and "--format 'xml'" in r.stderr and r.stdout == ""


RES = os.path.join(REPO, "results")
TOY = os.path.join(REPO, "tests", "data", "toy-dense-config.json")
GLOO = ["--backend", "gloo", "--no-charts"]

#: Each verb that prints a table and runs here (no GPU, no server), with --format: the args, and
#: a column its one (first) table must have. topo and p2p need a GPU (their tables under --format:
#: test_table_widths), serve a server (show of its dirs: test_table_widths).
FORMAT_RUNS = {
    "predict": (["predict", "--tp", "8", "--batch", "1", "--no-charts"], "ms/token"),
    "check": (["check", os.path.join(RES, "import-rtx5090x8-pcie5-p2p"), "--out", "{tmp}/c"], "status"),
    "gap": (["gap", os.path.join(RES, "import-rtx5090x8-pcie5-p2p"), "--out", "{tmp}/g"], "ratio"),
    "plan": (["plan", "--tp", "4"], "site"),
    "show": (["show", os.path.join(RES, "trace-qwen2.5-32b-vm"), "--no-charts"], "ms_per_token"),
    "sweep": (["sweep", "--tp", "2", "--ops", "all_reduce", "--sizes", "4K,16K", "--iters", "2", "--warmup", "1",
               *GLOO, "--out", "{tmp}/s"], "latency_us_p50"),
    "trace": (["trace", "--model", TOY, "--context", "64", "--tokens", "2", "--warmup", "1", "--tp", "2", "--batch",
               "1", *GLOO, "--out", "{tmp}/t"], "ms_per_token"),
    "moe": (["moe", "--ep", "2", "--tokens", "16", "--skew", "uniform", "--iters", "2", "--warmup", "1", *GLOO,
             "--out", "{tmp}/m"], "latency_us_p50"),
}


def test_every_table_verb_that_runs_here_has_a_format_run():
    assert set(FORMAT_RUNS) == set(TABLE_VERBS) - {"topo", "p2p", "serve"}


@pytest.mark.parametrize("verb", sorted(FORMAT_RUNS))
def test_format_csv_and_json_of_each_verb(verb, cli_inproc, tmp_path):
    """``--format csv`` and ``--format json`` of each verb: stdout is its table and nothing else
    (moe printed its table as text lines: nothing came out under --format)."""
    args, column = FORMAT_RUNS[verb]
    for fmt in ("csv", "json"):
        argv = [a.replace("{tmp}", str(tmp_path / fmt)) for a in args]
        r = cli_inproc(*argv, "--format", fmt)
        assert r.returncode == 0, (fmt, r.stderr[-2000:])
        if fmt == "csv":
            first = r.stdout.split("\n\n")[0]
            rows = list(csv.DictReader(io.StringIO(first)))
            assert rows and column in rows[0], (verb, first[:300])
        else:
            doc = json.loads(r.stdout)
            table = doc[0] if isinstance(doc, list) else doc
            assert table["rows"] and column in table["rows"][0], (verb, r.stdout[:300])
        assert "┃" not in r.stdout and "│" not in r.stdout
