"""Writes this folder's NCCL Inspector fixtures from the plugin's documented record format
(NVIDIA/nccl plugins/profiler/inspector: README.md "Output Example", inspector_json.cc; the
bandwidths by its inspectorComputeOpBw). The times are written, not measured: the tests that read
these files check that commprof reads the format consistently, not what any box does.
Run: python tests/data/nccl-inspector/write_fixtures.py"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))


def bw(coll, msg, t_us, n):
    traffic, factor = msg, 1.0
    if coll == "AllReduce":
        factor = 2 * (n - 1) / n
    elif coll in ("AllGather", "ReduceScatter"):
        traffic, factor = msg * n, (n - 1) / n
    algbw = traffic / 1e9 / (t_us / 1e6) if t_us else 0.0
    return round(algbw, 6), round(algbw * factor, 6)


def record(comm, rank, n, coll, sn, msg, t_us, src, ts, pid, p2p_peer=None):
    head = {"id": comm, "comm_name": "TP group 0", "rank": rank, "n_ranks": n, "nnodes": 1}
    meta = {"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism": "nccl_profiler_interface",
            "dump_timestamp_us": ts, "hostname": "nodeA", "pid": pid}
    a, b = bw(coll, msg, t_us, n) if p2p_peer is None else bw("Send", msg, t_us, n)
    if p2p_peer is not None:
        perf = {"p2p": coll, "p2p_sn": sn, "p2p_peer": p2p_peer, "p2p_msg_size_bytes": msg, "p2p_exec_time_us": t_us,
                "p2p_timing_source": src, "p2p_algobw_gbs": a, "p2p_busbw_gbs": b}
        return {"header": head, "metadata": meta, "p2p_perf": perf}
    perf = {"coll": coll, "coll_sn": sn, "coll_msg_size_bytes": msg, "coll_exec_time_us": t_us,
            "coll_timing_source": src, "coll_algobw_gbs": a, "coll_busbw_gbs": b}
    return {"header": head, "metadata": meta, "coll_perf": perf}


def tp8():
    rng = random.Random(32)
    d = os.path.join(HERE, "a100x8_tp8_written")
    os.makedirs(d, exist_ok=True)
    comm = "0x5a1e0c0ffee8"
    # (coll, msg bytes, calls, time range us): decode-step all-reduces at 16 and 64 KiB, a logits
    # all-gather of 4 KiB per rank (32 KiB gathered)
    plan = [("AllReduce", 16384, 20, (80, 92)), ("AllReduce", 65536, 10, (84, 97)), ("AllGather", 4096, 5, (70, 79))]
    for rank in range(8):
        pid = 41000 + rank
        lines, sn, ts = [], 0, 1764800000000000
        for coll, msg, calls, (lo, hi) in plan:
            for _ in range(calls):
                sn += 1
                ts += 500
                lines.append(record(comm, rank, 8, coll, sn, msg, rng.randint(lo, hi), "kernel_gpu", ts, pid))
        if rank == 0:       # one call timed on the host clock (the plugin's fallback) and one send
            lines.append(record(comm, 0, 8, "AllReduce", sn + 1, 16384, 140, "kernel_cpu", ts + 500, pid))
            lines.append(record(comm, 0, 8, "Send", 1, 1 << 20, 30, "kernel_gpu", ts + 1000, pid, p2p_peer=1))
        text = "".join(json.dumps(o, separators=(",", ":")) + "\n" for o in lines)
        if rank == 7:       # the process stopped mid-write: the last record cut short
            text += json.dumps(lines[-1], separators=(",", ":"))[:90]
        with open(os.path.join(d, f"nodeA-pid{pid}.log"), "w") as f:
            f.write(text)


def pretty():
    # the README's first example layout: pretty-printed, no coll_timing_source, rec_mechanism
    # profiler_plugin, no comm_name
    out = []
    for sn, t in ((11, 61974), (12, 62010)):
        a, b = bw("AllReduce", 1 << 34, t, 8)
        out.append({"header": {"id": "0x7f0000aa11", "rank": 2, "n_ranks": 8, "nnodes": 1},
                    "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "",
                                 "rec_mechanism": "profiler_plugin", "dump_timestamp_us": 1748030377748202 + sn,
                                 "hostname": "example-host", "pid": 1639453},
                    "coll_perf": {"coll": "AllReduce", "coll_sn": sn, "coll_msg_size_bytes": 1 << 34,
                                  "coll_exec_time_us": t, "coll_algobw_gbs": a, "coll_busbw_gbs": b}})
    with open(os.path.join(HERE, "pretty_no_timing_source.json"), "w") as f:
        for o in out:
            f.write(json.dumps(o, indent=2) + "\n")


def other_tool():
    with open(os.path.join(HERE, "other_tool_kineto_like.json"), "w") as f:
        json.dump({"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "ncclKernel_AllReduce", "dur": 12}]}, f)


if __name__ == "__main__":
    tp8()
    pretty()
    other_tool()
