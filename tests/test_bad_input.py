"""Bad input to the parsers gets one line naming the flag, field or file and the rule, and exit 2.

One test per class of bad input to each parser (sizes, config.json, nccl-tests text and -J JSON):
none may end in another exception type (OverflowError, ValueError, TypeError, IndexError,
AttributeError: exit 70 from the CLI), be accepted (exit 0), or give a message that names no field. All run in this process: the parsing functions themselves, or typer's
CliRunner on ``commprof.cli.app``.
"""
import copy
import json
import os

import pytest

from commprof.ingest import nccltests
from commprof.model.errors import EXIT_USAGE, CommprofError
from commprof.model.models import get_model
from commprof.model.sizes import parse_sizes
from commprof.model.units import parse_bytes, parse_int_list
from helpers import sweep_rows

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
AR8 = os.path.join(DATA, "nccl-tests", "all_reduce_perf_8xA100.log")
JSON8 = os.path.join(DATA, "nccl-tests", "all_reduce_perf_8xA100_v3.json")
FIRST_ROW = "        2048           512     float     sum      -1    55.42    0.04    0.06       0    55.64    0.04    0.06       0"
HUNDREDS = "9" * 400                       # over 1e308: float() of it is inf


def refused(call, *parts) -> str:
    """``call()`` raises commprof's own error: exit 2, one line, holding every one of ``parts``."""
    with pytest.raises(CommprofError) as info:
        call()
    msg = str(info.value)
    assert info.value.exit_code == EXIT_USAGE, msg
    assert msg.strip() and "\n" not in msg and "\r" not in msg, msg
    for p in parts:
        assert p in msg, (p, msg)
    return msg


def cli_refused(*args, parts=()) -> str:
    """``commprof ARGS`` in this process: exit 2 and a single 'commprof: error:' line on stderr."""
    from typer.testing import CliRunner

    from commprof.cli import app

    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == EXIT_USAGE, (res.exit_code, res.exception, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("commprof: error: "), res.stderr
    for p in parts:
        assert p in lines[0], (p, lines[0])
    return lines[0]


# --- sizes ------------------------------------------------------------------------------------------

def test_sweep_sizes_with_hundreds_of_digits(tmp_path):
    cli_refused("sweep", "--sizes", HUNDREDS, "--tp", "2", "--backend", "gloo", "--out", tmp_path / "o",
                parts=["--sizes", "larger than 64GiB"])
    assert not (tmp_path / "o").exists()


def test_plan_gpu_mem_with_hundreds_of_digits():
    cli_refused("plan", "--gpu-mem", HUNDREDS + "G", parts=["--gpu-mem", "larger than 1TiB"])


def test_p2p_size_with_hundreds_of_digits():
    # a probe's buffers are a sweep message's: the same 64 GiB bound
    cli_refused("p2p", "--size", HUNDREDS, parts=["--size", "larger than 64GiB"])


def test_sizes_with_an_empty_element_are_refused():
    refused(lambda: parse_sizes("4K,,8K", ["all_reduce"], None, [1], 2), "--sizes '4K,,8K'", "element 2 is empty")
    refused(lambda: parse_sizes("4K,8K,", ["all_reduce"], None, [1], 2), "element 3 is empty")


def test_int_list_with_an_empty_element_is_refused():
    refused(lambda: parse_int_list("2,,8", "--tp"), "--tp '2,,8'", "element 2 is empty")


@pytest.mark.parametrize("spec", ["9999999G", "65G", "pow2:4K-128G"])
def test_sizes_over_64GiB_are_refused(spec):
    refused(lambda: parse_sizes(spec, ["all_reduce"], None, [1], 2), "--sizes", "larger than 64GiB")


def test_decode_sizes_over_64GiB_are_refused():
    refused(lambda: parse_sizes("decode", ["all_gather"], get_model("Qwen2.5-32B"), [99999999999], 2),
            "--sizes decode", "batch 99999999999", "over the 64GiB limit", "--batch")


def test_every_size_parser_is_bounded():
    for text in ("1025G", HUNDREDS, "0", "0.3", "1.5"):
        refused(lambda t=text: parse_bytes(t))                # a UsageError, and a ValueError for callers
    assert parse_bytes("1024G") == 1 << 40 and parse_bytes("1.5K") == 1536
    refused(lambda: parse_int_list("2147483648", "--batch"), "--batch", "larger than 2147483647")


def test_size_messages_stay_one_line():
    refused(lambda: parse_sizes("4K\n8K", ["all_reduce"], None, [1], 2), "--sizes '4K\\n8K'")
    refused(lambda: parse_int_list("2\n4", "--tp"), "--tp '2\\n4'")


# --- config.json ------------------------------------------------------------------------------------

BASE = {"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
        "intermediate_size": 4096, "vocab_size": 32000}


def _config(tmp_path, text=None, **fields):
    p = tmp_path / "config.json"
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text if text is not None else json.dumps({**BASE, **fields}))
    return str(p)


@pytest.mark.parametrize("field, value, rule", [
    ("num_key_value_heads", "four", "must be a positive integer (at most 65,536), got 'four'"),
    ("num_key_value_heads", 0, "must be a positive integer (at most 65,536), got 0"),
    ("num_key_value_heads", 1.5, "must be a positive integer (at most 65,536), got 1.5"),
    ("num_key_value_heads", float("nan"), "got nan"),
    ("num_key_value_heads", float("inf"), "got inf"),
    ("num_key_value_heads", [8], "got [8]"),
    ("num_key_value_heads", True, "got True"),
    ("head_dim", "sixtyfour", "must be a positive integer (at most 65,536), got 'sixtyfour'"),
    ("intermediate_size", -5, "must be a whole number from 0 to 16,777,216, got -5"),
    ("intermediate_size", [1], "got [1]"),
    ("vocab_size", 1e30, "must be a positive integer (at most 16,777,216), got 1e+30"),
    ("vocab_size", 10 ** 30, "at most 16,777,216"),
    ("num_hidden_layers", 2147483648, "must be a positive integer (at most 4,096), got 2147483648"),
    ("num_experts", float("inf"), "got inf"),
])
def test_config_field_breaks_its_rule(tmp_path, field, value, rule):
    path = _config(tmp_path, **{field: value})
    refused(lambda: get_model(path), "model config", "config.json", f"field '{field}' must be ", rule)


def test_config_integer_over_4300_digits(tmp_path):
    path = _config(tmp_path, json.dumps(BASE).replace("4096", "9" * 4400))
    refused(lambda: get_model(path), "config.json", "more than 4,300 digits")


def test_config_head_dim_that_rounds_to_zero(tmp_path):
    path = _config(tmp_path, hidden_size=4, num_key_value_heads=8)
    refused(lambda: get_model(path), "no field 'head_dim'", "hidden_size 4 / num_attention_heads 8 rounds to 0")


def test_config_top_k_zero(tmp_path):
    path = _config(tmp_path, num_experts=8, num_experts_per_tok=0, moe_intermediate_size=256)
    refused(lambda: get_model(path), "field 'num_experts_per_tok' must be a whole number from 1 to the 8 routed experts")


def test_config_experts_without_top_k(tmp_path):
    path = _config(tmp_path, num_experts=8, moe_intermediate_size=256)
    refused(lambda: get_model(path), "missing field 'num_experts_per_tok'")


def test_config_q_heads_not_divisible_by_kv_heads(tmp_path):
    path = _config(tmp_path, num_attention_heads=40, num_key_value_heads=6, hidden_size=5120)
    refused(lambda: get_model(path), "'num_key_value_heads' (6) must divide 'num_attention_heads' (40)")


def test_config_not_utf8(tmp_path):
    path = _config(tmp_path, b'{"hidden_size": 1024, "name": "\xff"}')
    refused(lambda: get_model(path), "config.json", "not UTF-8 text: byte 31 is 0xff")


def test_config_of_the_wrong_shape(tmp_path):
    path = _config(tmp_path, json.dumps([BASE]))
    refused(lambda: get_model(path), "config.json", "expected a JSON object {...} at the top, got an array")


def test_config_hidden_not_a_multiple_of_heads_warns(tmp_path, capsys):
    m = get_model(_config(tmp_path, hidden_size=1000, num_attention_heads=16, num_key_value_heads=4))
    assert m.head_dim == 62
    err = capsys.readouterr().err.strip()
    assert err.startswith("commprof: warning: model config") and "not a multiple of num_attention_heads 16" in err
    assert "\n" not in err


def test_config_experts_without_moe_intermediate_size_use_intermediate_size(tmp_path):
    m = get_model(_config(tmp_path, num_local_experts=8, num_experts_per_tok=2, intermediate_size=14336))
    assert (m.experts, m.top_k, m.expert_ffn) == (8, 2, 14336)          # Mixtral's layout


def test_plan_with_a_bad_config_is_exit_2(tmp_path):
    path = _config(tmp_path, num_key_value_heads="four")
    cli_refused("plan", "--model", path, parts=["field 'num_key_value_heads'", "got 'four'"])


# --- nccl-tests text ------------------------------------------------------------------------------

def _log(tmp_path, old, new, name="all_reduce_perf.log"):
    with open(AR8, encoding="utf-8") as f:
        text = f.read()
    assert old in text
    p = tmp_path / name
    p.write_text(text.replace(old, new, 1))
    return str(p)


def _import(tmp_path, path):
    return lambda: nccltests.import_nccl_tests([path], str(tmp_path / "out"))


def test_text_wrong_of_inf(tmp_path):
    path = _log(tmp_path, FIRST_ROW, FIRST_ROW[:-1] + "inf")
    refused(_import(tmp_path, path), "'all_reduce_perf.log' line 19", "in-place #wrong = 'inf'",
            "a whole number >= 0")
    assert not (tmp_path / "out").exists()


def test_text_wrong_of_inf_through_the_cli(tmp_path):
    path = _log(tmp_path, FIRST_ROW, FIRST_ROW[:-1] + "inf")
    cli_refused("import", "nccl-tests", path, "--out", tmp_path / "o", parts=["line 19", "#wrong"])


def test_text_negative_time(tmp_path):
    path = _log(tmp_path, "55.42", "-55.42")
    refused(_import(tmp_path, path), "line 19", "out-of-place time = -55.4", "finite number >= 0")


def test_text_infinite_bandwidth(tmp_path):
    path = _log(tmp_path, FIRST_ROW, FIRST_ROW.replace("0.06", "inf", 1))
    refused(_import(tmp_path, path), "line 19", "out-of-place busbw = inf")


def test_text_size_with_5000_digits(tmp_path):
    path = _log(tmp_path, "        2048     ", "9" * 5000 + "     ")
    refused(_import(tmp_path, path), "line 19", "size = ", "must be at most 9,007,199,254,740,992")


def test_text_header_integer_with_5000_digits(tmp_path):
    path = _log(tmp_path, "nGpus 8", "nGpus " + "9" * 5000)
    refused(_import(tmp_path, path), "line 4", "nGpus", "must be at most 2,147,483,647")


def test_text_summary_line_without_a_colon(tmp_path):
    path = _log(tmp_path, FIRST_ROW, FIRST_ROW + "\n# Out of bounds values")
    nccltests.import_nccl_tests([path], str(tmp_path / "out"))          # read as an empty summary


def test_text_binary_file(tmp_path):
    p = tmp_path / "all_reduce_perf.log"
    p.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe" * 8)
    refused(_import(tmp_path, str(p)), "'all_reduce_perf.log': not a text file", "byte 10 (0xff)")


def test_text_utf16_log_is_read(tmp_path):
    with open(AR8, encoding="utf-8") as f:
        text = f.read()
    p = tmp_path / "all_reduce_perf.log"
    p.write_bytes(text.encode("utf-16"))                                 # PowerShell's '>'
    out = nccltests.import_nccl_tests([str(p)], str(tmp_path / "out"))
    same = nccltests.import_nccl_tests([AR8], str(tmp_path / "utf8"))    # the same log as UTF-8
    keys = ("op", "tp", "size_bytes", "latency_us_p50", "algbw_gbps", "busbw_gbps", "wrong")
    rows16 = [{k: r[k] for k in keys} for r in sweep_rows(out)]
    assert rows16 and rows16 == [{k: r[k] for k in keys} for r in sweep_rows(same)]


def test_text_stray_latin1_byte_warns_and_imports(tmp_path, capsys):
    with open(AR8, encoding="utf-8") as f:
        text = f.read()
    p = tmp_path / "all_reduce_perf.log"
    p.write_bytes(text.replace("modal device  7", "m\xf6dal device  7").encode("latin-1"))
    nccltests.import_nccl_tests([str(p)], str(tmp_path / "out"))
    err = capsys.readouterr().err.strip()
    assert err.startswith("commprof: warning: 'all_reduce_perf.log': byte ") and "not UTF-8" in err


# --- nccl-tests -J JSON -----------------------------------------------------------------------------

def _jdoc():
    with open(JSON8, encoding="utf-8") as f:
        return json.load(f)


def _jfile(tmp_path, doc=None, text=None):
    p = tmp_path / "all_reduce_perf.json"
    p.write_text(text if text is not None else json.dumps(doc))
    return str(p)


def _jcase(change):
    def apply(doc):
        doc = copy.deepcopy(doc)
        change(doc)
        return doc
    return apply


JSON_CASES = {
    "config_a_string": (_jcase(lambda d: d.update(config="8 GPUs")), "field config = '8 GPUs': must be an object"),
    "devices_a_number": (_jcase(lambda d: d["config"].update(devices=8)), "field config.devices = 8: must be a list"),
    "args_missing_keys": (_jcase(lambda d: d.update(args={})), "field args = {}: must be a list of strings"),
    "size_infinity": (_jcase(lambda d: d["results"][0].update(size=float("inf"))),
                      "field results[0].size = inf: must be a whole number"),
    "hostname_a_float": (_jcase(lambda d: d["config"]["devices"][0].update(hostname=1.5)),
                         "field config.devices[0].hostname = 1.5: must be a string"),
    "negative_count": (_jcase(lambda d: d["results"][1].update(count=-1024)),
                       "field results[1].count = -1024: must be a whole number from 0"),
    "negative_time": (_jcase(lambda d: d["results"][2]["out_of_place"].update(time=-57.13)),
                      "field results[2].out_of_place.time = -57.13: must be a finite number >= 0"),
    "infinite_time": (_jcase(lambda d: d["results"][2]["in_place"].update(time=float("inf"))),
                      "field results[2].in_place.time = inf: must be a finite number >= 0"),
    "negative_bandwidth": (_jcase(lambda d: d["results"][0]["out_of_place"].update(bus_bw=-0.06)),
                           "field results[0].out_of_place.bus_bw = -0.06"),
    "nwrong_infinity": (_jcase(lambda d: d["results"][0]["in_place"].update(nwrong=float("inf"))),
                        "field results[0].in_place.nwrong = inf: must be a count of wrong elements"),
    "placement_a_list": (_jcase(lambda d: d["results"][3].update(out_of_place=[])),
                         "field results[3].out_of_place = []: must be an object"),
    "device_a_string": (_jcase(lambda d: d["config"].update(devices=["gpu0"])),
                        "field config.devices[0] = 'gpu0': must be an object"),
    "nthreads_a_string": (_jcase(lambda d: d["config"].update(nthreads="1")),
                          "field config.nthreads = '1': must be a whole number from 1"),
    "graph_a_word": (_jcase(lambda d: d["config"].update(graph="no")), "field config.graph = 'no'"),
}


@pytest.mark.parametrize("case", sorted(JSON_CASES))
def test_json_field_of_the_wrong_type_or_range(tmp_path, case):
    change, part = JSON_CASES[case]
    path = _jfile(tmp_path, change(_jdoc()))
    refused(_import(tmp_path, path), "'all_reduce_perf.json'", part)
    assert not (tmp_path / "out").exists()


def test_json_number_over_4300_digits(tmp_path):
    text = json.dumps(_jdoc()).replace('"size": 2048', '"size": ' + "9" * 4400)
    refused(_import(tmp_path, _jfile(tmp_path, text=text)), "'all_reduce_perf.json'", "more than 4,300 digits")


def test_json_nested_too_deep(tmp_path):
    text = json.dumps(_jdoc()).replace('"env": [', '"env": [' + "[" * 100000 + "]" * 100000 + ", ")
    refused(_import(tmp_path, _jfile(tmp_path, text=text)), "'all_reduce_perf.json'", "nested too deep")


def test_json_size_infinity_through_the_cli(tmp_path):
    path = _jfile(tmp_path, JSON_CASES["size_infinity"][0](_jdoc()))
    cli_refused("import", "nccl-tests", path, "--out", tmp_path / "o", parts=["results[0].size = inf"])


def test_numbers_read_from_files_are_a_finite_float_or_none():
    """model/units: the one reader of a number from a CSV cell or JSON value (finite_float), and of
    a JSON number kept as given (json_number); bools, text, NaN and infinities are None."""
    from commprof.model.units import finite_float, json_number

    assert finite_float("2.5") == 2.5 and finite_float(3) == 3.0 and finite_float(" 1e3 ") == 1000.0
    for bad in (None, "", "n/a", "nan", "inf", "-inf", float("nan"), float("inf"), True, [1], "1" * 400 + ".0e999"):
        assert finite_float(bad) is None, bad
    assert finite_float(10 ** 400) is None                  # too large for a float: None, not OverflowError
    assert finite_float("0", above=0.0) is None and finite_float("0.1", above=0.0) == 0.1
    assert finite_float(0.99, at_least=1.0) is None and finite_float(1, at_least=1.0) == 1.0
    import math

    assert json_number(3) == 3 and json_number(2.5) == 2.5
    assert math.isnan(json_number(float("nan")))            # kept as given: the caller judges it
    for bad in (True, False, "3", None, [3]):
        assert json_number(bad) is None
