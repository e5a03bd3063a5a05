"""commprof report: the HTML page as a reader sees it, in a real headless Chromium.

The pages are built from results dirs this session measures itself (``gloo_sweep`` and
``gloo_trace`` in conftest.py), so nothing here depends on the committed examples' host or
row counts (that every committed results dir still loads: test_results_layer.py).
"""
import pytest

from helpers import CHROMIUM, dump_dom, results_meta


@pytest.fixture(scope="module")
def sweep_trace_report(gloo_sweep, gloo_trace, tmp_path_factory):
    """report over the session's sweep and trace, built once for the tests that read it."""
    from helpers import run_inproc

    out = tmp_path_factory.mktemp("report")
    res = run_inproc(["report", gloo_sweep, gloo_trace, "--out", str(out)], cwd=out)
    assert res.returncode == 0, res.stderr
    return out


def _host(results_dir):
    hosts = results_meta(results_dir)["hosts"]
    assert len(hosts) == 1
    return hosts[0]


def test_report_files(sweep_trace_report, gloo_sweep):
    html = (sweep_trace_report / "report.html").read_text()
    md = (sweep_trace_report / "report.md").read_text()
    host = _host(gloo_sweep)
    assert f"<title>commprof report: {host}</title>" in html
    assert html.count("data:image/png;base64,") == 6          # 2 sweep + 3 trace charts + the gap chart, embedded
    assert "src=\"http" not in html and "src='http" not in html  # self-contained
    for text in ("## Checklist", "## Collective latency (sweep)", "## Per-token breakdown (trace)", "## Gap vs nvlink4"):
        assert text in md
    assert f"measured on {host}" in md and "scaled" in md


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium not installed (.ci/run installs it)")
def test_report_in_headless_chromium(sweep_trace_report, gloo_sweep):
    dom = dump_dom(str(sweep_trace_report / "report.html"))
    assert f"<title>commprof report: {_host(gloo_sweep)}</title>" in dom
    assert 'data-charts-loaded="6/6"' in dom                  # every chart decoded
    for verdict in ("SKIP",):
        assert f'class="{verdict}"' in dom
    assert "Checklist:" in dom and "C10" in dom and "all-reduce latency at decode sizes" in dom


def test_report_has_a_moe_section(cli_inproc, gloo_sweep, tmp_path):
    moe_dir = tmp_path / "moe"
    res = cli_inproc("moe", "--ep", "2", "--tokens", "8", "--skew", "uniform,hot:2", "--iters", "2", "--warmup", "1",
                     "--out", str(moe_dir))
    assert res.returncode == 0, res.stderr
    res = cli_inproc("report", gloo_sweep, str(moe_dir), "--out", str(tmp_path / "rep"))
    assert res.returncode == 0, res.stderr
    html = (tmp_path / "rep" / "report.html").read_text()
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "MoE: expert-parallel all-to-all under skewed routing" in html and "| 2 | 8 | hot:2 |" in md
    assert html.count("data:image/png;base64,") == 5          # 2 sweep charts + the gap chart + 2 MoE charts


def test_report_topology_of_an_imported_topo_text_has_no_gen_n_a():
    """The report's GPUs table of an imported ``nvidia-smi topo -m`` text said 'Genn/a xn/a' for
    every GPU and drew n/a in name, memory and bus columns; now they are named once, not drawn."""
    import os

    from commprof.ingest.smitopo import parse_smi_topo
    from commprof.views.report import topology_section

    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "nvidia-smi")
    sec = topology_section(parse_smi_topo([os.path.join(data, "h100x8-nvswitch-topo-m.txt")]))
    gpus = sec.tables[0]
    assert tuple(gpus.headers) == ("GPU", "NUMA", "NVLinks")
    assert [list(map(str, r)) for r in gpus.rows][4] == ["4", "1", "18"]
    cells = " ".join(str(c) for r in gpus.rows for c in r)
    assert "Gen" not in cells and "n/a" not in cells
    assert sec.paragraphs == ["n/a for every GPU (no answer), not shown: name, memory, PCI bus, PCIe max."]
