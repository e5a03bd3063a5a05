"""Leave one out (scripts/leave_one_out.py): every healthy corpus box, judged by thresholds built
without its own log, as a box never seen would be, gets no FAIL; the box judged not healthy
(corpus.toml says why) FAILs with and without itself; the committed result is what the script
makes of the corpus today."""
import json
import os
import sys

import pytest
from helpers import REPO

sys.path.insert(0, REPO)
from scripts.healthy_boxes import table  # noqa: E402
from scripts.leave_one_out import corpus_boxes, judge, rows  # noqa: E402

BOXES = corpus_boxes()
HEALTHY = [b for b in BOXES if b["healthy"] and (b["decode_ref"] or b["busbw_ref"])]


@pytest.mark.parametrize("box", HEALTHY, ids=[b["file"].split(".")[0] for b in HEALTHY])
def test_healthy_box_left_out_gets_no_fail(box):
    without = table(exclude=(box["file"],))
    assert all(box["name"] not in r["name"] for r in without["decode"] + without["busbw"])
    got = judge(box, without)
    refs = [k for k, flag in (("C10", "decode_ref"), ("C9", "busbw_ref")) if box[flag]]
    assert all(got[k]["status"] in ("PASS", "WARN") for k in refs), got
    assert all(got[k]["status"] == "PASS" for k in refs), got      # and near enough to PASS, today


def test_box_judged_not_healthy_fails_with_and_without_itself():
    bad = [b for b in BOXES if not b["healthy"]]
    assert bad and all(b["note"].startswith("not a healthy box") for b in bad)
    for b in bad:
        assert judge(b, table())["C9"]["status"] == "FAIL"
        without = judge(b, table(exclude=(b["file"],)))
        # its busbw FAILs on the PCIe ceiling (a physical bound) too; its decode latency, judged without
        # itself by a modelled profile alone, WARNs (a FAIL needs two healthy boxes or a physical bound)
        assert without["C9"]["status"] == "FAIL" and "physical bound" in without["C9"]["value"]
        assert without["C10"]["status"] == "WARN"


def test_committed_leave_one_out_result_is_current():
    with open(os.path.join(REPO, "results", "bench", "leave_one_out.json")) as f:
        committed = json.load(f)

    def statuses(rs):
        return [(r["file"], k, w, r[w][k]["status"], r[w][k]["basis"]) for r in rs for k in r["refs"]
                for w in ("with_it", "left_out", "left_out_2x_slower")]

    assert statuses(committed["rows"]) == statuses(rows()), "rerun python scripts/leave_one_out.py"
    assert committed["healthy_fail_when_left_out"] == [] and committed["unhealthy_without_fail"] == []
    md = open(os.path.join(REPO, "results", "bench", "leave_one_out.md")).read()
    assert "Healthy boxes that FAIL when left out: none." in md
