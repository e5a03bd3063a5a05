"""Property-based tests (hypothesis) of every parser commprof owns: byte sizes and integer lists
(``units``), ``sweep --sizes`` (``sizes``), Hugging Face config.json (``models``), nccl-tests text
and ``-J`` JSON output (``nccltests``), a load's ``--prefill-steps`` (``predictload``) and predict's
``--mode``.

The property, for every input: the parser raises commprof's own error (a ``CommprofError`` whose
message is one line) or returns a result with no NaN, infinite or negative figure. Any other
exception is a crash and fails the test. Inputs are mutated real ones (the logs under tests/data
(public, with their SOURCE.md), the built-in models as config.json) and hypothesis' own text, bytes and JSON.

Bounded for CI: 200 examples per test, derandomized (the same inputs on every run), no deadline.
``scripts/fuzz.py`` runs the same generators with 10,000 inputs per parser. Every input comes from
tests/data (real logs, traces and configs with their SOURCE notes): nothing outside the checkout.
"""
import json
import os
import shutil
import tempfile

import pytest

pytest.importorskip("hypothesis")
import fuzz_inputs as F  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from commprof.ingest.nccltests import read_nccl_tests  # noqa: E402
from commprof.model.sizes import MAX_MESSAGE_BYTES, parse_sizes  # noqa: E402
from commprof.model.units import MAX_LIST_INT, parse_int_list  # noqa: E402

CI = settings(max_examples=200, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
RANDOMS = st.randoms(use_true_random=False)
# Any JSON value, nested a little: what a config.json or -J field could hold instead of its number.
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.sampled_from([v for v in F.JSON_VALUES if v not in (F.HUGE, F.DEEP)]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)


@pytest.fixture(scope="module")
def tmp():
    d = tempfile.mkdtemp(prefix="commprof-fuzz-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


# --- sizes and integer lists ----------------------------------------------------------------------

@CI
@given(RANDOMS)
def test_parse_bytes_generated(rnd):
    F.check_size_token(F.gen_size_token(rnd))


@CI
@given(st.text(max_size=40))
def test_parse_bytes_any_text(text):
    F.check_size_token(text)


@CI
@given(st.integers(min_value=-10, max_value=10 ** 40), st.sampled_from(["", "K", "M", "G", "KiB", "GB"]))
def test_parse_bytes_is_exact_or_refused(n, suffix):
    from commprof.model.units import parse_bytes

    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "KiB": 1 << 10, "GB": 1 << 30}[suffix]
    if F.check_size_token(f"{n}{suffix}") == "accepted":
        assert parse_bytes(f"{n}{suffix}") == n * mult


@CI
@given(RANDOMS)
def test_int_list_generated(rnd):
    F.check_int_list(F.gen_int_list(rnd))


@CI
@given(st.text(alphabet=st.sampled_from("0123456789,- +._e\n\u0663"), max_size=30))
def test_int_list_any_text(text):
    F.check_int_list(text)


@CI
@given(st.lists(st.integers(min_value=1, max_value=MAX_LIST_INT), min_size=1, max_size=6))
def test_int_list_round_trip(values):
    assert parse_int_list(",".join(map(str, values)), "--tp") == values


@CI
@given(RANDOMS)
def test_sizes_generated(rnd):
    F.check_size_spec(F.gen_size_spec(rnd))


@CI
@given(st.lists(st.integers(min_value=1, max_value=MAX_MESSAGE_BYTES), min_size=1, max_size=5))
def test_size_lists_round_trip(sizes):
    points = parse_sizes(",".join(map(str, sizes)), ["all_reduce"], None, [1], 2)
    assert [p.size_bytes for p in points] == list(dict.fromkeys(sizes))      # a repeat is measured once


# --- config.json ------------------------------------------------------------------------------------

@CI
@given(rnd=RANDOMS)
def test_config_mutated(rnd, tmp):
    F.check_config(F.gen_config(rnd), tmp)


@CI
@given(base=st.sampled_from(range(len(F.real_configs()))),
       fields=st.dictionaries(st.sampled_from(F.CONFIG_FIELDS), JSON_VALUE, min_size=1, max_size=3))
def test_config_any_field_values(base, fields, tmp):
    cfg = dict(F.real_configs()[base])
    target = dict(cfg["text_config"]) if "text_config" in cfg else cfg
    target.update(fields)
    if "text_config" in cfg and "text_config" not in fields:
        cfg["text_config"] = target
    F.check_config(json.dumps(target if target is cfg else cfg).encode(), tmp)


@CI
@given(data=st.binary(max_size=200))
def test_config_any_bytes(data, tmp):
    F.check_config(data, tmp)


# --- nccl-tests text and -J JSON --------------------------------------------------------------------

@CI
@given(rnd=RANDOMS)
def test_log_text_mutated(rnd, tmp):
    F.check_log(F.gen_log_text(rnd), tmp)


@CI
@given(lines=st.lists(st.sampled_from(F.LOG_LINES) | st.text(max_size=60), min_size=1, max_size=8),
       name=st.sampled_from(F.LOG_NAMES))
def test_log_text_any_lines(lines, name, tmp):
    F.check_log((name, "\n".join(lines).encode("utf-8", "surrogatepass")), tmp)


@CI
@given(data=st.binary(max_size=300))
def test_log_any_bytes(data, tmp):
    F.check_log(("all_reduce_perf.log", data), tmp)


@CI
@given(rnd=RANDOMS)
def test_log_json_mutated(rnd, tmp):
    F.check_log(F.gen_log_json(rnd), tmp)


@CI
@given(data=st.data())
def test_log_json_any_value_anywhere(data, tmp):
    doc = F.real_json()
    paths = [p for p, _ in F._paths(doc) if p]
    path = data.draw(st.sampled_from(paths))
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = data.draw(JSON_VALUE)
    F.check_log(("all_reduce_perf.json", json.dumps(doc).encode()), tmp)


# --- the real inputs themselves are accepted ------------------------------------------------------

def test_real_inputs_are_accepted(tmp):
    """The unmutated inputs every generator starts from parse cleanly (the checks are not so strict
    that they refuse real output): tests/data's logs, the real boxes' logs, the -J fixture, the
    configs, the real Kineto traces and the real sweep dir."""
    for name, text in F.real_logs():
        if "malformed" not in name:
            assert F.check_log((name, text.encode()), tmp) == "accepted", name
    assert F.check_log(("all_reduce_perf.json", json.dumps(F.real_json()).encode()), tmp) == "accepted"
    for cfg in F.real_configs():
        assert F.check_config(json.dumps(cfg).encode(), tmp) == "accepted", cfg
    if F._real_kineto():                 # beside the checkout only (out of a repository snapshot)
        assert F.check_kineto(tuple(t.encode() for t in F._real_kineto()), tmp) == "accepted"
    assert F.check_results_dir(tuple(t.encode() for t in F._real_sweep()), tmp) == "accepted"
    assert F.check_url("http://127.0.0.1:8000/v1") == "accepted"


def test_public_real_logs_are_imported():
    logs = os.path.join(F.DATA, "nccl-tests")
    names = sorted(n for n in os.listdir(logs) if n.endswith(".txt"))
    assert len(names) >= 5         # the public pages and issue threads (the snapshot logs are not committed)
    for n in names:
        assert read_nccl_tests(os.path.join(logs, n))[0].rows, n


# --- thresholds, MoE replay files, nvidia-smi topo text ---------------------------------------------

@CI
@given(rnd=RANDOMS)
def test_thresholds_mutated(rnd, tmp):
    F.check_thresholds(F.gen_thresholds(rnd), tmp)


@CI
@given(data=st.binary(max_size=300))
def test_thresholds_any_bytes(data, tmp):
    F.check_thresholds(data, tmp)


@CI
@given(rnd=RANDOMS)
def test_moe_replay_file_mutated(rnd, tmp):
    F.check_replay(F.gen_replay(rnd), tmp)


@CI
@given(rnd=RANDOMS)
def test_smi_topo_mutated(rnd, tmp):
    F.check_smi_topo(F.gen_smi_topo(rnd), tmp)


@CI
@given(data=st.binary(max_size=400))
def test_smi_topo_any_bytes(data, tmp):
    F.check_smi_topo(("topo.txt", data), tmp)


def test_real_smi_topos_are_accepted(tmp):
    reals = F.real_smi_topos()
    assert reals
    for name, text in reals:
        want = "accepted" if "topo-m" in name else "rejected"      # a -p2p matrix alone has no topology
        assert F.check_smi_topo((name, text.encode()), tmp) == want, name


def test_found_by_fuzzing(tmp):
    """Inputs the fuzzer found crashing (now each one line): a -p2p block whose off-diagonal cell is
    'X', and a thresholds integer too large to compare as a float."""
    p2p_x = ("x.txt", b"$ nvidia-smi topo -m\n\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
                      b"GPU0\t X \tPIX\t0-31\t0\nGPU1\tPIX\t X \t0-31\t0\n\n"
                      b"$ nvidia-smi topo -p2p r\n\tGPU0\tGPU1\nGPU0\tX\tX\nGPU1\tOK\tX\n")
    assert F.check_smi_topo(p2p_x, tmp) == "rejected"
    assert F.check_thresholds(b"[busbw]\npass_fraction = 1" + b"0" * 400 + b"\n", tmp) == "rejected"


@CI
@given(rnd=RANDOMS)
def test_kineto_traces_mutated(rnd, tmp):
    F.check_kineto(F.gen_kineto(rnd), tmp)


@settings(max_examples=30, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(rnd=RANDOMS)
def test_kineto_import_end_to_end_mutated(rnd, tmp):
    F.check_kineto_import(F.gen_kineto(rnd), tmp)


def test_kineto_unmutated_is_accepted(tmp):
    import json

    case = tuple(json.dumps(F._kineto_doc(r)).encode() for r in (0, 1))
    assert F.check_kineto(case, tmp) == "accepted" and F.check_kineto_import(case, tmp) == "accepted"


# --- a serving engine's /metrics ------------------------------------------------------------------

@CI
@given(RANDOMS)
def test_server_metrics_mutated(rnd):
    F.check_metrics(F.gen_metrics(rnd))


@CI
@given(st.text(max_size=300), st.text(max_size=300))
def test_server_metrics_any_text(before, after):
    F.check_metrics((before, after))


# --- serve --url, --workload FILE, a results dir -----------------------------------------

@CI
@given(RANDOMS)
def test_serve_url_generated(rnd):
    F.check_url(F.gen_url(rnd))


@CI
@given(st.text(max_size=40))
def test_serve_url_any_text(text):
    F.check_url(text)


@CI
@given(rnd=RANDOMS)
def test_serve_workload_mutated(rnd, tmp):
    F.check_workload(F.gen_workload(rnd), tmp)


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(rnd=RANDOMS)
def test_results_dir_mutated(rnd, tmp):
    F.check_results_dir(F.gen_results_dir(rnd), tmp)


@CI
@given(st.one_of(st.text(max_size=12), st.sampled_from(["mixed", "separate", "MIXED", " separate", "nan", "-1",
                                                         "mixed\n", "\udcff"]),
                 st.floats(allow_nan=True), st.integers(), st.none()))
def test_prefill_steps_any_value(value):
    """``--prefill-steps``: mixed or separate is taken as is; anything else is one line of commprof's own error."""
    from commprof.analysis.predictload import PREFILL_POLICIES, load_spec
    from commprof.model.errors import CommprofError

    try:
        spec = load_spec([4], [], 128, 16, 2048, value)
    except CommprofError as e:
        assert F._rejected(e) == "rejected" and "--prefill-steps" in str(e)
        return
    assert value in PREFILL_POLICIES and spec.prefill == value


#: predict's word-valued flags: (its keyword, its flag, the words it takes, strings worth trying besides text).
PREDICT_WORDS = {"mode": ("--mode", ("graph", "piecewise", "eager"), ["PIECEWISE", " graph", "full", "graph\n"]),
                 "sampling": ("--sampling", ("greedy", "full"), ["FULL", " full", "top-p", "full\n"]),
                 "ep_comm": ("--ep-comm", ("all-to-all", "all-reduce"), ["ALL-REDUCE", "all_reduce", " all-to-all"])}


@CI
@pytest.mark.parametrize("key", sorted(PREDICT_WORDS))
@given(value=st.one_of(st.text(max_size=12), st.sampled_from(["graph", "piecewise", "eager", "greedy", "full", "all-to-all", "all-reduce", "nan",
                                                               "-1", "\udcff"] + sum((w[2] for w in PREDICT_WORDS.values()), [])),
                       st.floats(allow_nan=True), st.integers(), st.none()))
def test_predict_word_flags_any_value(key, value):
    """predict's ``--mode`` (graph, piecewise, eager), ``--sampling`` (greedy, full) and ``--ep-comm`` (all-to-all,
    all-reduce, with ``--ep 2``): a word it takes is taken
    as is, into the rows and meta.json; anything else is one line of commprof's own error naming the flag."""
    from commprof.analysis.computemodel import MODES, SAMPLINGS
    from commprof.analysis.predictmodel import predict_table
    from commprof.model.errors import CommprofError

    flag, words, _ = PREDICT_WORDS[key]
    from commprof.analysis.predictmoe import EP_COMMS

    assert words == {"mode": MODES, "sampling": SAMPLINGS, "ep_comm": EP_COMMS}[key]
    ep = {"ep": 2} if key == "ep_comm" else {}          # --ep-comm says how --ep runs: an MoE model at --ep 2
    try:
        rows, _, meta = predict_table("Qwen3-30B-A3B" if ep else "Qwen3-8B", ["h100-sxm"], [], [2 if ep else 1], [1],
                                      **ep, **{key: value})
    except CommprofError as e:
        assert F._rejected(e) == "rejected" and flag in str(e) and "\n" not in str(e)
        return
    assert value in words and meta[key] == value and (key != "mode" or rows[0]["mode"] == value)
