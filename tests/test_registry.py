"""One registry of verbs (commprof/model/registry.py): the CLI, show, load and the import-linter
contract all read it. A toy verb added to it alone appears in --help, runs, loads and shows; a
verb module the contract does not name is caught."""
import configparser
import importlib.util
import json
import os
import sys

import pytest
from typer.testing import CliRunner

from helpers import REPO

from commprof import cli, results
from commprof.model import registry
from commprof.model.spec import ResultKind, VerbSpec

CONTRACT = "importlinter:contract:verbs-are-leaves"


def leaves_contract_missing(importlinter_text: str, modules) -> list:
    """The verb modules the verbs-are-leaves contract does not name."""
    cp = configparser.ConfigParser()
    cp.read_string(importlinter_text)
    listed = {m.strip() for m in cp[CONTRACT]["modules"].split("\n") if m.strip()}
    return sorted(set(modules) - listed)


def verb_files_missing(verbs_dir: str, modules) -> list:
    """Modules under ``verbs_dir`` that no verb of the registry runs."""
    names = {m.rsplit(".", 1)[-1] for m in modules}
    return sorted(f[:-3] for f in os.listdir(verbs_dir)
                  if f.endswith(".py") and f != "__init__.py" and f[:-3] not in names)


def _contract_text() -> str:
    with open(os.path.join(REPO, ".importlinter")) as f:
        return f.read()


def test_every_verb_module_is_in_the_registry_and_in_the_leaves_contract():
    mods = registry.verb_modules()
    assert verb_files_missing(os.path.join(REPO, "commprof", "verbs"), mods) == []
    assert leaves_contract_missing(_contract_text(), mods) == []
    # and the contract names no module that is not a verb
    cp = configparser.ConfigParser()
    cp.read_string(_contract_text())
    listed = {m.strip() for m in cp[CONTRACT]["modules"].split("\n") if m.strip()}
    assert listed == set(mods)


def test_the_checks_catch_a_verb_left_out(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "sweep.py").write_text("")
    (tmp_path / "newverb.py").write_text("")
    assert verb_files_missing(str(tmp_path), ["commprof.verbs.sweep"]) == ["newverb"]
    assert leaves_contract_missing(_contract_text(), [*registry.verb_modules(), "commprof.verbs.newverb"]) == \
        ["commprof.verbs.newverb"]


TOY_VERB = '''
from __future__ import annotations

import os
from dataclasses import dataclass, field

from commprof import results
from commprof.model.spec import flag


@dataclass
class ToyConfig:
    """commprof toy's flags."""
    out: str = flag(None, "--out", required=True, help="Where toy.csv goes.")
    count: int = flag(3, "--count", help="Rows of the toy table.")
    charts: bool = flag(True, "--no-charts", invert=True, help="Skip the toy chart.")
    argv: list = field(default_factory=list)


def run(cfg: ToyConfig) -> int:
    os.makedirs(cfg.out, exist_ok=True)
    results.write_table(os.path.join(cfg.out, "toy.csv"), ["n", "latency_us"],
                        [{"n": i, "latency_us": 1.5 * i} for i in range(cfg.count)])
    meta = results.provenance("toy", "measured", "a toy verb", command=cfg.argv, gpus=[], status="complete",
                              charts=cfg.charts)
    results.write_meta(cfg.out, meta)
    return 0
'''

TOY_VIEW = '''
from commprof.views.console import frame_table


def show_toy(res, charts, echo, note, shown):
    if "toy" not in res.tables:
        return False
    echo(f"toy: {len(res.tables['toy'])} rows")
    frame_table(res.tables["toy"], "commprof toy")
    return True
'''


def _module(monkeypatch, tmp_path, name: str, text: str):
    path = tmp_path / (name.rsplit(".", 1)[-1] + ".py")
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def toy(monkeypatch, tmp_path):
    """A verb ``toy`` (commprof.verbs.toy, its view commprof.views.toy) added through the registry only."""
    verb = _module(monkeypatch, tmp_path, "commprof.verbs.toy", TOY_VERB)
    _module(monkeypatch, tmp_path, "commprof.views.toy", TOY_VIEW)
    monkeypatch.setattr(registry, "VERBS", [*registry.VERBS, VerbSpec(
        "toy", verb.ToyConfig, "commprof.verbs.toy:run", kinds=("toy",), table=True,
        help="A toy verb that writes toy.csv.")])
    monkeypatch.setattr(registry, "RESULT_KINDS", (*registry.RESULT_KINDS, ResultKind(
        "toy", tables={"toy.csv": ("toy", ("n", "latency_us"))}, view="commprof.views.toy:show_toy")))
    return cli.make_app()


def test_a_toy_verb_added_to_the_registry_is_in_help_runs_loads_and_shows(toy, tmp_path):
    runner = CliRunner()
    top = runner.invoke(toy, ["--help"])
    assert top.exit_code == 0 and "toy" in top.output and "A toy verb that writes toy.csv." in top.output
    own = runner.invoke(toy, ["toy", "-h"])
    assert own.exit_code == 0
    for text in ("--count", "Rows of the toy table.", "--no-charts", "--format", "[default: 3]"):
        assert text in own.output, text

    out = str(tmp_path / "toydir")
    ran = runner.invoke(toy, ["toy", "--out", out, "--count", "4", "--no-charts"])
    assert ran.exit_code == 0, ran.output
    res = results.load(out)
    assert res.verb == "toy" and res.meta["charts"] is False
    assert list(res.tables["toy"]["latency_us"]) == [0.0, 1.5, 3.0, 4.5]

    from commprof.views.show import show

    lines = []
    show(res, charts=False, echo=lines.append, note=lines.append)
    assert lines == ["toy: 4 rows"]

    shown = runner.invoke(toy, ["show", out, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert doc["title"] == "commprof toy" and [r["latency_us"] for r in doc["rows"]] == [0, 1.5, 3, 4.5]

    # the import-linter check names it: the toy module is not in the verbs-are-leaves contract
    assert leaves_contract_missing(_contract_text(), registry.verb_modules()) == ["commprof.verbs.toy"]


def test_a_flag_declared_once_reaches_the_config():
    """The config's defaults are the CLI's: one declaration for both (predict's lists parsed from text)."""
    from commprof.model.spec import cli_fields

    seen = {}

    def fake_run(cfg):
        seen["cfg"] = cfg
        return 0

    import commprof.verbs.predict as predict

    mp = pytest.MonkeyPatch()
    mp.setattr(predict, "run", fake_run)
    try:
        r = CliRunner().invoke(cli.make_app(), ["predict", "--tp", "2,4", "--gpu", "h100-sxm, rtx5090", "--no-charts"])
    finally:
        mp.undo()
    assert r.exit_code == 0, r.output
    cfg = seen["cfg"]
    assert cfg.tps == [2, 4] and cfg.gpus == ["h100-sxm", "rtx5090"] and cfg.charts is False
    assert cfg.batches == [1, 8, 32] and cfg.comms == []
    for spec in registry.VERBS:
        assert cli_fields(spec.config), spec.name
