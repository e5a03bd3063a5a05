"""commprof report: the HTML page as a reader sees it, in a real headless Chromium."""
import os
import shutil
import subprocess

import pytest

from conftest import REPO

SWEEP = os.path.join(REPO, "results", "sweep-default-vm")
TRACE = os.path.join(REPO, "results", "trace-qwen2.5-32b-vm")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def dump_dom(path: str) -> str:
    """What Chromium holds after loading the page (scripts run, images decoded)."""
    res = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                          "--no-first-run", "--disable-background-networking", "--disable-component-update",
                          "--disable-sync", f"--user-data-dir={os.path.dirname(path)}/chrome-profile",
                          "--virtual-time-budget=5000", "--dump-dom", f"file://{path}"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def test_report_files(cli, tmp_path):
    res = cli("report", SWEEP, TRACE, "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr
    html = (tmp_path / "report.html").read_text()
    md = (tmp_path / "report.md").read_text()
    assert "<title>commprof report: vm</title>" in html
    assert html.count("data:image/png;base64,") == 5          # 2 sweep + 3 trace charts, embedded
    assert "src=\"http" not in html and "src='http" not in html  # self-contained
    for text in ("## Checklist", "## Collective latency (sweep)", "## Per-token breakdown (trace)"):
        assert text in md
    assert "measured on vm" in md and "scaled" in md


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium not installed (.ci/run installs it)")
def test_report_in_headless_chromium(cli, tmp_path):
    res = cli("report", SWEEP, TRACE, "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr
    dom = dump_dom(str(tmp_path / "report.html"))
    assert "<title>commprof report: vm</title>" in dom
    assert 'data-charts-loaded="5/5"' in dom                  # every chart decoded
    for verdict in ("SKIP",):
        assert f'class="{verdict}"' in dom
    assert "Checklist:" in dom and "C10" in dom and "all-reduce latency at decode sizes" in dom


def test_report_has_a_moe_section(cli, tmp_path):
    moe_dir = tmp_path / "moe"
    res = cli("moe", "--ep", "2", "--tokens", "8", "--skew", "uniform,hot:2", "--iters", "2", "--warmup", "1",
              "--out", str(moe_dir))
    assert res.returncode == 0, res.stderr
    res = cli("report", SWEEP, str(moe_dir), "--out", str(tmp_path / "rep"))
    assert res.returncode == 0, res.stderr
    html = (tmp_path / "rep" / "report.html").read_text()
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "MoE: expert-parallel all-to-all under skewed routing" in html and "ep 2 tokens 8 hot:2" in md
    assert html.count("data:image/png;base64,") == 4          # 2 sweep charts + 2 MoE charts
