"""The report page as a person reads it, in a real headless Chromium: two imported boxes plus a
measured box with sweep, trace, moe and serve sections. The page's own script counts text that
does not fit its box (``data-overflow``) and charts decoded (``data-charts-loaded``); the test
reads both from the DOM Chromium dumps, follows every table-of-contents link to its heading, and
finds one headline per box. Skipped where Chromium is missing (.ci/run installs it)."""
import os
import re
import shutil

import pytest

from helpers import CHROMIUM, REPO, dump_dom, run_inproc

DATA = os.path.join(REPO, "tests", "data")


@pytest.fixture(scope="module")
def five_section_report(gloo_sweep, gloo_trace, tmp_path_factory):
    """report over two imported nccl-tests boxes (named with import --label) and this session's
    gloo box: its sweep, trace, a committed moe dir and a committed serve dir."""
    work = tmp_path_factory.mktemp("page")
    for name, log, label in (("a100", "all_reduce_perf_8xA100.log", "A100 DGX"),
                             ("gpu2", "all_gather_perf_2gpu_bf16.log", None)):
        args = ["import", "nccl-tests", os.path.join(DATA, "nccl-tests", log), "--out", str(work / name)]
        res = run_inproc(args + (["--label", label] if label else []), cwd=work)
        assert res.returncode == 0, res.stderr
    for name in ("moe-gloo-cpu", "serve-cpu"):
        shutil.copytree(os.path.join(DATA, name), work / name)
    dirs = [str(work / "a100"), str(work / "gpu2"), gloo_sweep, gloo_trace, str(work / "moe-gloo-cpu"),
            str(work / "serve-cpu")]
    res = run_inproc(["report", *dirs, "--out", str(work / "rep"), "--label", "A100 DGX,2-GPU,this vm"], cwd=work)
    assert res.returncode == 0, res.stderr
    return work / "rep"


def test_report_sections_labels_and_the_moe_table(five_section_report):
    html = (five_section_report / "report.html").read_text()
    md = (five_section_report / "report.md").read_text()
    for title in ("this vm: Collective latency (sweep)", "this vm: Per-token breakdown (trace)",
                  "this vm: MoE: expert-parallel all-to-all under skewed routing", "this vm: Service under load",
                  "A100 DGX: Collective latency (sweep)", "2-GPU: Checklist"):
        assert title in html, title
    assert "<th>rebal. slowdown</th>" in html and "(noise)" in html      # MoE as a table, noise marked
    assert "Contents:" in md and "](#headlines)" in md


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium not installed (.ci/run installs it)")
@pytest.mark.parametrize("width", [1280, 900])
def test_report_in_chromium_has_a_toc_a_headline_per_box_and_no_overflowing_text(five_section_report, width):
    dom = dump_dom(str(five_section_report / "report.html"), width)
    body = re.search(r"<body([^>]*)>", dom).group(1)
    loaded = re.search(r'data-charts-loaded="(\d+)/(\d+)"', body)
    assert loaded and loaded.group(1) == loaded.group(2) and int(loaded.group(2)) >= 10
    over = re.search(r'data-overflow="(\d+)"', body)
    assert over and over.group(1) == "0", re.search(r'data-overflow-what="([^"]*)"', body).group(1)
    toc = re.search(r'<nav class="toc">(.*?)</nav>', dom, re.S).group(1)
    links = re.findall(r'href="#([^"]+)"', toc)
    ids = re.findall(r'<h[1-3] id="([^"]+)"', dom)
    assert links == ids and len(set(ids)) == len(ids) and len(ids) >= 15
    heads = re.findall(r'<p class="headline (\w+)" data-box="([^"]+)">([^<]+)</p>', dom)
    boxes = {b for _, b, _ in heads}
    assert boxes == {"A100 DGX", "2-GPU", "this vm"}
    for status, box, text in heads:      # the box's own verdict, first in its line
        assert status in ("PASS", "WARN", "FAIL", "SKIP", "INSUFFICIENT") and text.startswith(f"{box}: {status}")
        assert "(PASS " in text
    assert not re.search(r"<h2[^>]*>Boxes side by side[^<]*<span", dom)     # no one verdict over all boxes
