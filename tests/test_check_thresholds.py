"""Check thresholds: the versioned defaults, overrides, and one-line errors for bad files."""
import pytest

from commprof.analysis.thresholds import load_thresholds
from commprof.analysis.verdict import Item, verdict
from commprof.views.check import counts
from commprof.model.errors import UsageError


def test_defaults_are_versioned_and_sourced():
    th = load_thresholds()
    assert th["version"] == 3
    for key, table in th.items():
        if isinstance(table, dict):
            assert table.get("source"), key


def test_override_merges_key_by_key(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text("[allreduce_latency]\npcie_pass_us = 50\n[inventory]\nexpected_gpus = 8\n")
    th = load_thresholds(str(f))
    assert th["allreduce_latency"]["pcie_pass_us"] == 50
    assert th["allreduce_latency"]["pcie_warn_us"] == 80.0      # untouched default
    assert th["inventory"]["expected_gpus"] == 8


@pytest.mark.parametrize("text,needle", [
    ("[allreduce_latency]\npcie_pass = 50\n", "unknown key 'allreduce_latency.pcie_pass'"),
    ("[bogus]\nx = 1\n", "unknown key 'bogus'"),
    ("[inventory]\nexpected_gpus = 'eight'\n", "'inventory.expected_gpus' must be int"),
    ("[allreduce_latency]\npcie_pass_us = true\n", "must be float"),
    ("[inventory\n", "not valid TOML"),
])
def test_bad_threshold_files(tmp_path, text, needle):
    f = tmp_path / "t.toml"
    f.write_text(text)
    with pytest.raises(UsageError, match=needle) as e:
        load_thresholds(str(f))
    assert str(f) in str(e.value) and "\n" not in str(e.value)


def test_verdict_order():
    mk = lambda s: Item("x", "x", s, "", "", "")  # noqa: E731
    assert verdict([mk("PASS"), mk("SKIP")]) == "PASS"
    assert verdict([mk("PASS"), mk("WARN")]) == "WARN"
    assert verdict([mk("WARN"), mk("FAIL")]) == "FAIL"
    assert verdict([mk("SKIP")]) == "SKIP"
    assert counts([mk("PASS"), mk("SKIP"), mk("SKIP")]) == "PASS 1, WARN 0, FAIL 0, SKIP 2"
    # E1 (the evidence, not the box) is not counted: the counts add up to the headline's 'of N items'
    e1 = Item("E1", "evidence for a verdict", "PASS", "", "", "")
    assert counts([mk("PASS"), mk("SKIP"), e1]) == "PASS 1, WARN 0, FAIL 0, SKIP 1"
