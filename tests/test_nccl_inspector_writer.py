"""commprof import nccl-inspector against what the plugin's writer does (NVIDIA/nccl
plugins/profiler/inspector/inspector_json.cc, json.cc and inspector_prom.cc at tag v2.30.7-1;
ext-profiler/inspector/inspector.cc at v2.28.3-1). The records are our own, values made up, keys
in the writer's order and shape (compact, one object a line): consistency with the source, not
truth; a real dump taken on a lent GPU judges it."""
import json

import pytest

from commprof.ingest.ncclinspector import read_inspector, rows, summary
from commprof.model.errors import UsageError


def _rec(time_us, busbw, sn, size=1 << 20, src="kernel_gpu", algbw=None):
    """One collective record as inspector_json.cc lays it out (v2.30: comm_name in the header)."""
    return {"header": {"id": "0x1f2e3d4c5b6a79", "comm_name": "TP0", "rank": 0, "n_ranks": 4, "nnodes": 1},
            "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "test", "rec_mechanism":
                         "nccl_profiler_interface", "dump_timestamp_us": 1700000000000000 + sn, "hostname": "boxa",
                         "pid": 4242},
            "coll_perf": {"coll": "AllReduce", "coll_sn": sn, "coll_msg_size_bytes": size, "coll_exec_time_us": time_us,
                          "coll_timing_source": src, "coll_algobw_gbs": busbw / 1.5 if algbw is None else algbw,
                          "coll_busbw_gbs": busbw}}


def _write(tmp_path, recs, name="boxa-pid4242.log"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in recs))
    return p


def test_a_record_under_one_microsecond_has_no_bandwidth(tmp_path):
    """inspectorComputeOpBw sets the bandwidth to 0 when the whole-microsecond time is 0 (it does not
    divide by zero): the old reader took that 0 as a measured figure and halved the median."""
    p = _write(tmp_path, [_rec(10, 150.0, 1), _rec(0, 0.0, 2), _rec(10, 150.0, 3)])
    acc = read_inspector([str(p)])
    (row,) = rows(acc)
    assert row["calls"] == 3 and row["busbw_gbps_p50"] == pytest.approx(150.0)
    assert row["time_us_min"] == 0
    assert summary(acc)["records_under_1us"] == 1


def test_nan_doubles_are_written_as_strings_and_read_as_no_figure(tmp_path):
    """json.cc writes a NaN double as the string "nan" (valid JSON, not a number)."""
    p = _write(tmp_path, [_rec(12, float("nan"), 1, algbw=float("nan")), _rec(12, 120.0, 2)])
    text = p.read_text().replace("NaN", '"nan"')
    p.write_text(text)
    (row,) = rows(read_inspector([str(p)]))
    assert row["calls"] == 2 and row["busbw_gbps_p50"] == pytest.approx(120.0)


def test_p2p_records_of_2_30(tmp_path):
    rec = _rec(20, 40.0, 5)
    del rec["coll_perf"]
    rec["p2p_perf"] = {"p2p": "Send", "p2p_sn": 5, "p2p_peer": 1, "p2p_msg_size_bytes": 1 << 20,
                       "p2p_exec_time_us": 20, "p2p_timing_source": "kernel_gpu", "p2p_algobw_gbs": 52.4,
                       "p2p_busbw_gbs": 52.4}
    (row,) = rows(read_inspector([str(_write(tmp_path, [rec]))]))
    assert (row["kind"], row["op"], row["peer"], row["gpu_timed"], row["comm_name"]) == ("p2p", "send", 1, "yes", "TP0")


PROM = ('nccl_bus_bandwidth_gbs{version="v5.1",slurm_job_id="unknown",node="boxa",gpu="GPU0",comm_name="TP0",'
        'n_nodes="1",nranks="4",collective="AllReduce",message_size="1-2MB",algo_proto="Ring_simple"} 123.4\n')


def test_prometheus_output_is_named_in_one_line(tmp_path, cli_inproc):
    """inspector_prom.cc writes nccl_inspector_metrics_<gpu>.prom: size ranges and interval means, not
    records; the old reader called it 'not JSON' (a file) or 'no NCCL Inspector file' (a dir)."""
    d = tmp_path / "dump"
    d.mkdir()
    f = d / "nccl_inspector_metrics_GPU-0000.prom"
    f.write_text(PROM)
    with pytest.raises(UsageError, match="Prometheus output"):
        read_inspector([str(f)])
    with pytest.raises(UsageError, match="Prometheus output"):
        read_inspector([str(d)])
    res = cli_inproc("import", "nccl-inspector", str(d), "--out", str(tmp_path / "o"))
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("commprof: error:")]
    assert res.returncode == 2 and len(errors) == 1 and "NCCL_INSPECTOR_PROM_DUMP=0" in errors[0]
