"""Benchmark: ``commprof import kineto`` of a ~100 MB two-rank Kineto trace, side by side with HTA loading it.

The trace is generated here, deterministically (``--seed``): two files, one per rank, of about
``--target-mb``/2 MB each (10^6 bytes), plain ``.json`` in the layout torch.profiler/Kineto writes
(header with ``deviceProperties`` and ``distributedInfo`` first, then ``traceEvents`` one key group
a line, then ``traceName``/``displayTimeUnit``/``baseTimeNanoseconds``). Its content is a TP=2 eager
decode loop of a 32-layer model, simulated for both ranks together: per step a ``ProfilerStep#N``
annotation (CPU and GPU), an HtoD memcpy of the inputs, per layer ``cpu_op``s (aten::linear over
aten::mm, rms_norm, rotary, attention, silu_and_mul) each launching its kernel with a
``cudaLaunchKernel`` (``cuda_runtime``, correlation ids, ``ac2g`` flow events) and two all-reduces
(``record_param_comms`` + ``nccl:all_reduce`` + an ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` kernel
with ``Collective name``/``In msg nelems``/``dtype`` args, ending together on both ranks), then
lm_head, sampling, a memset and a DtoH memcpy with ``cudaStreamSynchronize``. Timestamps are floats
with ns digits, as recent Kineto writes them.

Each round runs, in alternating order and each in its own fresh process, (a) commprof:
``commprof.ingest.kineto.import_kineto([rank0.json, rank1.json], out)`` (the whole import: read, attribute,
write the results dir) and (b) HTA: ``TraceAnalysis(trace_dir=DIR)`` as HTA's docs show it, with the
interpreter given by ``--hta-python`` (its default parser, and its process pool of one worker per
rank). HTA 0.5.0 needs pandas < 3 for a trace this size (under pandas 3 it raises a TypeError
writing indices into an int16 column). For each: the process's wall time (start to exit, imports
included), the time of the call alone (printed by the child), the peak RSS of the largest process
(``ru_maxrss`` from ``wait4`` on that child: HTA's pool workers are its descendants and count), and
the peak PSS summed over the process tree, sampled every 0.2 s.

    python scripts/bench_kineto_import.py [--hta-python PATH] [--rounds 3] [--target-mb 100] [--seed 0]
                                          [--out results/bench]

Writes kineto_import.json and kineto_import.md. Target: commprof's import at least as fast as HTA
loading the same trace: the median of commprof's process wall time <= HTA's, and the same for the
call alone. Without HTA (no ``--hta-python``, or it cannot import ``hta``, or HTA fails on the trace)
the result says why and ``met`` is null.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchfile import measured, write_result  # noqa: E402

WORLD = 2
LAYERS = 32
HIDDEN = 4096
BATCH = 8                        # decode tokens per step
T0_US = 5_520_004_000_000.0      # a Kineto-like absolute timestamp (us)
BASE_NS = 1_764_000_000_000_000_000

# --- the trace -----------------------------------------------------------------------------------

_GEMM = ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>"
         "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)")
_GEMM2 = "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn"
_NORM = ("void vllm::rms_norm_kernel<c10::BFloat16, 8, 4>(c10::BFloat16*, c10::BFloat16 const*, long, "
         "c10::BFloat16 const*, float, int, int)")
_ROPE = ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, "
         "c10::BFloat16 const*, int, long, long, long, int, int, int)")
_ATTN = ("void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t, "
         "Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, "
         "false, false>(Flash_fwd_params)")
_SILU = ("void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>"
         "(c10::BFloat16 const&)), true>(c10::BFloat16*, c10::BFloat16 const*, int)")
_ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)")
_ARGMAX = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, "
           "at::native::ArgMaxOps<c10::BFloat16>, unsigned int, long, 4> >(at::native::ReduceOp<c10::BFloat16, "
           "at::native::ArgMaxOps<c10::BFloat16>, unsigned int, long, 4>)")
_NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
#: (cpu op, inner cpu op or None, kernel, mean GPU us, mean CPU us of the op)
_LAYER = [("vllm::rms_norm", None, _NORM, 3.1, 9.0),
          ("aten::linear", "aten::mm", _GEMM, 14.8, 16.0),            # qkv_proj
          ("vllm::rotary_embedding", None, _ROPE, 2.4, 8.0),
          ("vllm::unified_attention", "aten::empty", _ATTN, 11.5, 22.0),
          ("aten::linear", "aten::mm", _GEMM2, 8.2, 15.0),            # o_proj
          "ALLREDUCE",
          ("vllm::fused_add_rms_norm", None, _NORM, 3.4, 9.0),
          ("aten::linear", "aten::mm", _GEMM, 24.5, 16.0),            # gate_up_proj
          ("vllm::silu_and_mul", None, _SILU, 2.6, 8.0),
          ("aten::linear", "aten::mm", _GEMM2, 13.9, 15.0),           # down_proj
          "ALLREDUCE"]


def _q(s: str) -> str:
    return json.dumps(s)


class _RankWriter:
    """One rank's file, written in Kineto's layout as the events come."""

    def __init__(self, path: str, rank: int, rng: random.Random):
        self.path, self.rank, self.rng = path, rank, rng
        self.f = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self.events = 0
        self.first = True
        self.cpu_pid = 41_000 + 17 * rank
        self.cpu_tid = self.cpu_pid
        self.gpu_pid = rank               # Kineto: the device id
        self.stream = 7
        self.ext = 0
        self.corr = 0
        self.seq = 0
        self.buf: list[str] = []
        dev = ", ".join(f'{{\n      "id": {d}, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 84929216512,\n'
                        f'      "computeMajor": 9, "computeMinor": 0,\n      "maxThreadsPerBlock": 1024, '
                        f'"maxThreadsPerMultiprocessor": 2048,\n      "regsPerBlock": 65536, "warpSize": 32,\n'
                        f'      "sharedMemPerBlock": 49152, "numSms": 132\n    , "regsPerMultiprocessor": 65536, '
                        f'"sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472\n    }}'
                        for d in range(WORLD))
        dist = {"backend": "nccl", "rank": rank, "world_size": WORLD, "pg_count": 1,
                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                               "pg_size": WORLD, "ranks": list(range(WORLD))}], "nccl_version": "2.21.5"}
        self.f.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    ' + dev + '\n  ],\n'
                     f'  "distributedInfo": {json.dumps(dist)},\n  "record_shapes": 1,\n  "with_stack": 0,\n'
                     '  "traceEvents": [\n')

    # -- event text, as Kineto lays it out --
    def _emit(self, text: str) -> None:
        self.buf.append(text)
        self.events += 1

    def x(self, cat: str, name: str, pid, tid, ts: float, dur: float, args: str) -> None:
        self._emit(f'  {{\n    "ph": "X", "cat": "{cat}", "name": {name}, "pid": {pid}, "tid": {tid},\n'
                   f'    "ts": {ts:.3f}, "dur": {dur:.3f},\n    "args": {{\n      {args}\n    }}\n  }}')

    def flow(self, ph: str, fid: int, pid, tid, ts: float) -> None:
        tail = ', "bp": "e"' if ph == "f" else ""
        self._emit(f'  {{\n    "ph": "{ph}", "id": {fid}, "pid": {pid}, "tid": {tid}, "ts": {ts:.3f},\n'
                   f'    "cat": "ac2g", "name": "ac2g"{tail}\n  }}')

    def meta(self, name: str, pid, tid, ts: float, args: str) -> None:
        self._emit(f'  {{\n    "name": "{name}", "ph": "M", "ts": {ts:.3f},\n    "pid": {pid}, "tid": {tid},\n'
                   f'    "args": {{\n      {args}\n    }}\n  }}')

    def next_ext(self) -> int:
        self.ext += 1
        return self.ext

    def flush(self) -> None:
        if self.buf:
            self.f.write(("" if self.first else ",\n") + ",\n".join(self.buf))
            self.first = False
            self.buf = []

    def size(self) -> int:
        return self.f.tell()

    def close(self, t_begin: float, t_end: float) -> None:
        p, g = self.cpu_pid, self.gpu_pid
        self.meta("process_name", p, 0, t_begin, '"name": "python3"')
        self.meta("process_labels", p, 0, t_begin, '"labels": "CPU"')
        self.meta("process_sort_index", p, 0, t_begin, '"sort_index": 0')
        self.meta("thread_name", p, self.cpu_tid, t_begin, '"name": "thread ' + str(self.cpu_tid) + ' (python3)"')
        self.meta("process_name", g, 0, t_begin, '"name": "python3"')
        self.meta("process_labels", g, 0, t_begin, f'"labels": "GPU {g}"')
        self.meta("process_sort_index", g, 0, t_begin, f'"sort_index": {5000000 + g}')
        self.meta("thread_name", g, self.stream, t_begin, f'"name": "stream {self.stream}"')
        self._emit(f'  {{\n    "ph": "X", "cat": "Trace", "ts": {t_begin:.3f}, "dur": {t_end - t_begin:.3f},\n'
                   f'    "pid": "Spans", "tid": "PyTorch Profiler",\n    "name": "PyTorch Profiler (0)",\n'
                   f'    "args": {{\n      "Op count": 0\n    }}\n  }}')
        self._emit(f'  {{\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n'
                   f'    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": {t_begin:.3f}\n  }}')
        self._emit(f'  {{\n    "name": "Record Window End", "ph": "i", "s": "g",\n'
                   f'    "pid": "", "tid": "", "ts": {t_end:.3f}\n  }}')
        self.flush()
        self.f.write('\n  ],\n  "traceName": ' + _q(self.path) + ',\n  "displayTimeUnit": "ms",\n'
                     f'  "baseTimeNanoseconds": {BASE_NS}\n}}\n')
        self.f.close()


def _kernel_args(w: _RankWriter, ext: int, corr: int, extra: str = "") -> str:
    r = w.rng
    blocks = r.choice((0.25, 0.5, 0.969697, 1.939394, 3.878788))
    return (f'"External id": {ext},      "queued": 0, "device": {w.gpu_pid}, "context": 1,      "stream": {w.stream}, '
            f'"correlation": {corr},      "registers per thread": {r.choice((32, 64, 96, 128, 168))},      '
            f'"shared memory": {r.choice((0, 8192, 16384, 49152, 98304))},      "blocks per SM": {blocks},      '
            f'"warps per SM": {blocks * 4:.6f},      "grid": [{r.randint(1, 264)}, 1, 1],      '
            f'"block": [{r.choice((128, 256, 512))}, 1, 1],      "est. achieved occupancy %": {r.randint(0, 60)}'
            + extra)


def generate(out_dir: str, target_mb: float, seed: int) -> dict:
    """Two rank files of about ``target_mb``/2 MB each; returns their sizes, event counts and steps."""
    os.makedirs(out_dir, exist_ok=True)
    ws = [_RankWriter(os.path.join(out_dir, f"rank{r}.json"), r, random.Random(seed * 1000 + r)) for r in range(WORLD)]
    shared = random.Random(seed)                     # what both ranks share: the collectives' transfer times
    cpu = [T0_US + 1000.0 + 37.0 * r for r in range(WORLD)]
    gpu = list(cpu)
    per_file = target_mb * 1e6 / WORLD
    t_begin = T0_US
    nelems = BATCH * HIDDEN
    step = 10                                        # torch.profiler schedule: wait/warmup first
    gpu_first: list = [None] * WORLD                 # the step's first kernel start, per rank
    while min(w.size() for w in ws) < per_file:
        step_cpu0 = list(cpu)
        gpu_first[:] = [None] * WORLD

        def launch(r, op, inner, kernel, gpu_us, cpu_us, kcat="kernel", api="cudaLaunchKernel", extra_args=""):
            w = ws[r]
            rr = w.rng
            t = cpu[r]
            dur_op = cpu_us * rr.uniform(0.8, 1.35)
            ext = w.next_ext()
            w.x("cpu_op", _q(op), w.cpu_pid, w.cpu_tid, t, dur_op,
                f'"External id": {ext},"Record function id": 0, "Sequence number": {w.seq}, "Fwd thread id": 0, '
                f'"Ev Idx": {w.events}')
            w.seq += 1
            t_api = t + dur_op * 0.55
            if inner:
                iext = w.next_ext()
                w.x("cpu_op", _q(inner), w.cpu_pid, w.cpu_tid, t + dur_op * 0.2, dur_op * 0.7,
                    f'"External id": {iext},"Record function id": 0, "Ev Idx": {w.events}')
                ext = iext
            w.corr += 1
            corr = w.corr
            api_dur = rr.uniform(2.5, 5.5)
            w.x("cuda_runtime", _q(api), w.cpu_pid, w.cpu_tid, t_api, api_dur,
                f'"External id": {ext},      "cbid": 211, "correlation": {corr}')
            ks = max(gpu[r], t_api + rr.uniform(3.0, 6.0))
            kd = gpu_us * rr.uniform(0.9, 1.15)
            if kcat == "kernel":
                w.flow("s", corr, w.cpu_pid, w.cpu_tid, t_api)
                w.x("kernel", _q(kernel), w.gpu_pid, w.stream, ks, kd, _kernel_args(w, ext, corr, extra_args))
                w.flow("f", corr, w.gpu_pid, w.stream, ks)
            else:
                w.x(kcat, _q(kernel), w.gpu_pid, w.stream, ks, kd,
                    f'"External id": {ext},      "device": {w.gpu_pid}, "context": 1,      "stream": {w.stream}, '
                    f'"correlation": {corr},      "bytes": {extra_args}, "memory bandwidth (GB/s)": '
                    f'{int(extra_args) / (kd * 1e3):.6f}')
            gpu[r] = ks + kd
            gpu_first[r] = ks if gpu_first[r] is None else gpu_first[r]
            cpu[r] = t + dur_op + rr.uniform(0.5, 2.0)

        def allreduce():
            starts, apis, exts, corrs, ops = [], [], [], [], []
            for r in range(WORLD):
                w = ws[r]
                rr = w.rng
                t = cpu[r]
                dur_op = rr.uniform(28.0, 40.0)
                ext = w.next_ext()
                w.x("cpu_op", '"record_param_comms"', w.cpu_pid, w.cpu_tid, t, dur_op,
                    f'"External id": {ext},"Record function id": 0, "Process Group Name": "0", '
                    f'"Global rank stride": 1, "Out msg nelems": {nelems}, "Process Group Ranks": "[0, 1]", '
                    f'"Group size": {WORLD}, "Global rank start": 0, "Ev Idx": {w.events}, "In msg nelems": {nelems}, '
                    f'"In split size": "[]", "Out split size": "[]", "dtype": "BFloat16", '
                    f'"Process Group Description": "default_pg", "Collective name": "allreduce"')
                aext = w.next_ext()
                w.x("user_annotation", '"nccl:all_reduce"', w.cpu_pid, w.cpu_tid, t + 2.0, dur_op - 4.0,
                    f'"External id": {aext},"Record function id": 0, "Ev Idx": {w.events}')
                w.corr += 1
                t_api = t + dur_op * 0.6
                w.x("cuda_runtime", '"cudaLaunchKernel"', w.cpu_pid, w.cpu_tid, t_api, rr.uniform(3.0, 6.0),
                    f'"External id": {aext},      "cbid": 211, "correlation": {w.corr}')
                starts.append(max(gpu[r], t_api + rr.uniform(3.0, 6.0)))
                apis.append(t_api)
                exts.append(aext)
                corrs.append(w.corr)
                ops.append(dur_op)
            end = max(starts) + shared.uniform(7.5, 11.0)          # 64 KB bf16 over NVLink, ring LL
            for r in range(WORLD):
                w = ws[r]
                ke = end + w.rng.uniform(0.0, 0.4)
                w.flow("s", corrs[r], w.cpu_pid, w.cpu_tid, apis[r])
                w.x("kernel", _q(_NCCL), w.gpu_pid, w.stream, starts[r], ke - starts[r], _kernel_args(
                    w, exts[r], corrs[r],
                    f', "Collective name": "allreduce", "In msg nelems": {nelems}, "Out msg nelems": {nelems}, '
                    f'"Group size": {WORLD}, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]", '
                    f'"Process Group Name": "0", "Process Group Description": "default_pg", '
                    f'"Process Group Ranks": "[0, 1]"'))
                w.flow("f", corrs[r], w.gpu_pid, w.stream, starts[r])
                gpu[r] = ke
                cpu[r] += ops[r] + w.rng.uniform(0.5, 2.0)

        for r in range(WORLD):
            launch(r, "aten::copy_", None, "Memcpy HtoD (Pinned -> Device)", 1.6, 12.0, kcat="gpu_memcpy",
                   api="cudaMemcpyAsync", extra_args=str(BATCH * 8))
            launch(r, "aten::embedding", "aten::index_select", "void at::native::(anonymous namespace)::"
                   "indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(...)", 3.0, 14.0)
        for _layer in range(LAYERS):
            for item in _LAYER:
                if item == "ALLREDUCE":
                    allreduce()
                else:
                    for r in range(WORLD):
                        launch(r, *item)
        for r in range(WORLD):
            launch(r, "vllm::rms_norm", None, _NORM, 3.0, 9.0)
            launch(r, "aten::linear", "aten::mm", _GEMM, 45.0, 16.0)        # lm_head (vocab-parallel)
            launch(r, "aten::add", None, _ADD, 2.0, 8.0)
            launch(r, "aten::argmax", None, _ARGMAX, 6.0, 11.0)
            launch(r, "aten::zero_", None, "Memset (Device)", 1.2, 6.0, kcat="gpu_memset", api="cudaMemsetAsync",
                   extra_args=str(BATCH * 4))
            launch(r, "aten::copy_", None, "Memcpy DtoH (Device -> Pinned)", 1.8, 12.0, kcat="gpu_memcpy",
                   api="cudaMemcpyAsync", extra_args=str(BATCH * 8))
            w = ws[r]
            w.x("cuda_runtime", '"cudaStreamSynchronize"', w.cpu_pid, w.cpu_tid, cpu[r],
                max(gpu[r] - cpu[r], 0.0) + 2.0, f'"External id": {w.ext},      "cbid": 131, "correlation": '
                f'{w.corr + 1}')
            w.corr += 1
            cpu[r] = max(cpu[r], gpu[r]) + 2.0 + w.rng.uniform(20.0, 60.0)      # scheduler, detokenize
            ext = w.next_ext()
            w.x("user_annotation", _q(f"ProfilerStep#{step}"), w.cpu_pid, w.cpu_tid, step_cpu0[r],
                cpu[r] - step_cpu0[r] - 1.0, f'"External id": {ext},"Record function id": 0, "Ev Idx": {w.events}')
            w.x("gpu_user_annotation", _q(f"ProfilerStep#{step}"), w.gpu_pid, w.stream, gpu_first[r],
                gpu[r] - gpu_first[r], f'"External id": {ext}')
            w.flush()
        step += 1
    t_end = max(cpu) + 100.0
    for w in ws:
        w.close(t_begin, t_end)
    files = [{"file": os.path.basename(w.path), "rank": w.rank, "bytes": os.path.getsize(w.path),
              "events": w.events} for w in ws]
    return {"files": files, "steps": step - 10, "layers": LAYERS, "world": WORLD,
            "bytes": sum(f["bytes"] for f in files), "events": sum(f["events"] for f in files),
            "collectives_per_step": 2 * LAYERS}


# --- measuring one run ----------------------------------------------------------------------------

def _tree_pss_kb(root: int) -> int:
    """PSS (kB) summed over ``root`` and its descendants (scanned from /proc: no children file here)."""
    kids: dict = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    total, todo = 0, [root]
    while todo:
        p = todo.pop()
        todo.extend(kids.get(p, []))
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total


_COMMPROF_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from commprof.ingest.kineto import import_kineto
t1 = time.perf_counter()
acc = import_kineto(sys.argv[2:], sys.argv[1], command=["commprof", "import", "kineto", *sys.argv[2:]])
t2 = time.perf_counter()
run = acc["runs"][0]
print(json.dumps({"import_s": t1 - t0, "call_s": t2 - t1, "steps": run["steps"], "ranks": run["ranks"],
                  "collectives_per_step": run["collectives_per_step"]}))
"""

_HTA_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
tr = analyzer.t.traces
print(json.dumps({"import_s": t1 - t0, "call_s": t2 - t1, "ranks": sorted(int(r) for r in tr),
                  "rows": {str(r): int(len(df)) for r, df in tr.items()}}))
"""


def run_child(cmd: list[str], env: dict, timeout: float) -> dict:
    """Run ``cmd``; its wall time, peak RSS of its largest process (wait4), sampled peak tree PSS, and
    the JSON it printed last."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=REPO)
        peak = [0]
        stop = threading.Event()

        def sample():
            while not stop.wait(0.2):
                peak[0] = max(peak[0], _tree_pss_kb(p.pid))

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        killer = threading.Timer(timeout, p.kill)
        killer.start()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        timed_out = not killer.is_alive() and wall >= timeout
        killer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        stop.set()
        th.join()
        out.seek(0)
        err.seek(0)
        lines = [ln for ln in out.read().splitlines() if ln.startswith("{")]
        res = {"rc": p.returncode, "wall_s": wall, "peak_rss_mb": ru.ru_maxrss / 1024.0,
               "peak_tree_pss_mb_sampled": peak[0] / 1024.0}
        if p.returncode == 0 and lines:
            res.update(json.loads(lines[-1]))
        else:
            res["error"] = (err.read().strip().splitlines() or ["(no stderr)"])[-1][:400]
            if timed_out:
                res["error"] = f"timed out after {timeout:.0f} s; " + res["error"]
        return res


def hta_check(hta_python: str | None) -> tuple[str | None, str | None]:
    """(HTA's version and the pandas it runs with, None) or (None, why it is not available). HTA 0.5.0
    fails under pandas 3 on traces of more than 32,767 events (an int16 column it writes larger indices
    into), so the pandas version is part of what is reported."""
    if not hta_python:
        return None, "no --hta-python given"
    if not os.path.exists(hta_python):
        return None, f"--hta-python {hta_python}: not found"
    try:
        code = ("import hta, pandas, importlib.metadata as m; "
                "print(m.version('HolisticTraceAnalysis'), '(pandas ' + pandas.__version__ + ')')")
        r = subprocess.run([hta_python, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{hta_python}: cannot run it ({e})"
    if r.returncode != 0:
        return None, f"{hta_python} cannot import hta: {(r.stderr.strip().splitlines() or ['?'])[-1][:200]}"
    return r.stdout.strip(), None


def _med(xs):
    return float(statistics.median(xs)) if xs else None


def main():
    from commprof.model.machine import now_iso

    ap = argparse.ArgumentParser()
    ap.add_argument("--hta-python", default=None, help="an interpreter with HolisticTraceAnalysis installed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--target-mb", type=float, default=100.0, help="total size of the two rank files (10^6 bytes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    ap.add_argument("--out", default=os.path.join(REPO, "results", "bench"))
    args = ap.parse_args()
    start = now_iso()
    hta_version, hta_reason = hta_check(args.hta_python)
    work = tempfile.mkdtemp(prefix="bench_kineto_")
    try:
        tdir = os.path.join(work, "traces")
        t0 = time.perf_counter()
        trace = generate(tdir, args.target_mb, args.seed)
        trace["generate_s"] = time.perf_counter() - t0
        print(f"trace: {trace['bytes'] / 1e6:.1f} MB, {trace['events']:,} events, {trace['steps']} steps x "
              f"{trace['collectives_per_step']} all-reduces, 2 files, generated in {trace['generate_s']:.1f} s",
              flush=True)
        paths = [os.path.join(tdir, f["file"]) for f in trace["files"]]
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        hta_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        rounds = []
        for r in range(args.rounds):
            order = ("commprof", "hta") if r % 2 == 0 else ("hta", "commprof")
            got = {}
            for which in order:
                if which == "hta":
                    if hta_reason:
                        continue
                    got["hta"] = run_child([args.hta_python, "-c", _HTA_CHILD, tdir], hta_env, args.timeout)
                else:
                    out = os.path.join(work, f"imp{r}")
                    got["commprof"] = run_child([sys.executable, "-c", _COMMPROF_CHILD, out, *paths], env,
                                                args.timeout)
                    shutil.rmtree(out, ignore_errors=True)
                g = got[which]
                print(f"round {r} {which}: rc {g['rc']}, {g['wall_s']:.2f} s wall, "
                      f"{g.get('call_s', float('nan')):.2f} s call, peak RSS {g['peak_rss_mb']:.0f} MB, "
                      f"tree PSS {g['peak_tree_pss_mb_sampled']:.0f} MB" + (f"; {g['error']}" if "error" in g else ""),
                      flush=True)
            rounds.append({"round": r, "first": order[0], **got})
            if "hta" in got and got["hta"]["rc"] != 0 and not hta_reason:
                hta_reason = f"HTA failed on the trace (rc {got['hta']['rc']}): {got['hta'].get('error', '')}"
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def col(which, key):
        return [x[which][key] for x in rounds if which in x and x[which]["rc"] == 0 and key in x[which]]

    med = {w: {k: _med(col(w, k)) for k in ("wall_s", "call_s", "import_s", "peak_rss_mb",
                                            "peak_tree_pss_mb_sampled")} for w in ("commprof", "hta")}
    cp_ok = len(col("commprof", "wall_s")) == args.rounds
    cp_check = [x["commprof"] for x in rounds if x["commprof"]["rc"] == 0]
    sane = all(c.get("collectives_per_step") == trace["collectives_per_step"] and c.get("ranks") == [0, 1]
               and c.get("steps") == trace["steps"] for c in cp_check)
    ratios, why_not = {}, None
    if not cp_ok:
        met, why_not = False, "commprof's import failed in some round"
    elif hta_reason or not med["hta"]["wall_s"]:
        met, why_not = None, f"HTA not measured side by side: {hta_reason or 'no HTA run succeeded'}"
    else:
        ratios = {"wall": med["commprof"]["wall_s"] / med["hta"]["wall_s"],
                  "call": med["commprof"]["call_s"] / med["hta"]["call_s"]}
        met = bool(ratios["wall"] <= 1.0 and ratios["call"] <= 1.0 and sane)
    # --- the table ---
    fmt = lambda v, d=2: "n/a" if v is None else f"{v:.{d}f}"  # noqa: E731
    sizes = ", ".join(f"{f['file']} {f['bytes'] / 1e6:.1f} MB" for f in trace["files"])
    head = (f"Trace: 2 files (one per rank, plain .json), {trace['bytes'] / 1e6:.1f} MB in all ({sizes}), "
            f"{trace['events']:,} events; {trace['steps']} decode steps of a {LAYERS}-layer TP=2 model, "
            f"{trace['collectives_per_step']} NCCL all-reduces a step; seed {args.seed}.")
    cols = ("| run | round | order | wall s (process) | call s | peak RSS MB (largest process) | "
            "peak PSS MB (process tree, sampled) |")
    table = [head, "", cols, "|---|---|---|---|---|---|---|"]
    for x in rounds:
        for w in ("commprof", "hta"):
            if w not in x:
                continue
            g = x[w]
            name = "commprof import_kineto" if w == "commprof" else f"HTA {hta_version} TraceAnalysis"
            bad = "" if g["rc"] == 0 else f" (failed: rc {g['rc']})"
            table.append(f"| {name}{bad} | {x['round']} | {'1st' if x['first'] == w else '2nd'} | {fmt(g['wall_s'])} | "
                         f"{fmt(g.get('call_s'))} | {fmt(g['peak_rss_mb'], 0)} | "
                         f"{fmt(g['peak_tree_pss_mb_sampled'], 0)} |")
    for w, name in (("commprof", "commprof import_kineto"), ("hta", f"HTA {hta_version} TraceAnalysis")):
        if w == "hta" and hta_reason and med["hta"]["wall_s"] is None:
            continue
        m = med[w]
        table.append(f"| **{name}, median** | | | **{fmt(m['wall_s'])}** | **{fmt(m['call_s'])}** | "
                     f"**{fmt(m['peak_rss_mb'], 0)}** | **{fmt(m['peak_tree_pss_mb_sampled'], 0)}** |")
    table.append("")
    if ratios:
        table.append(f"commprof / HTA, medians: wall {ratios['wall']:.2f}x, call alone {ratios['call']:.2f}x "
                     f"(below 1: commprof faster). commprof's import covers reading, attribution and writing the "
                     f"results dir; HTA's covers parsing into per-rank DataFrames (its default json parser, a pool of "
                     f"{WORLD} worker processes, one per rank, on this {os.cpu_count()}-core machine).")
    if why_not:
        table.append(f"Not met or not decided: {why_not}.")
    table.append(f"commprof's import found {trace['steps']} steps x {trace['collectives_per_step']} collectives on "
                 f"ranks 0 and 1 in every round: {'yes' if sane and cp_ok else 'NO'}.")
    what = (f"commprof import kineto (import_kineto in a fresh process) against HTA's TraceAnalysis(trace_dir=...) "
            f"(its own process) on the same generated ~{args.target_mb:.0f} MB two-rank Kineto trace, "
            f"{args.rounds} alternating rounds: process wall time, the call alone, peak memory")
    res = measured(__file__, start, what)
    res["versions"]["hta"] = hta_version or "n/a"
    res.update(trace=trace, hta_python=args.hta_python, hta_available=med["hta"]["wall_s"] is not None, hta_reason=hta_reason, met_reason=why_not, rounds=rounds, medians=med, ratios=ratios, sanity_ok=bool(sane and cp_ok),
               rss_note="peak_rss_mb: ru_maxrss of the child from wait4, the largest single process of its tree "
                        "(HTA's pool workers included); peak_tree_pss_mb_sampled: PSS summed over the process "
                        "tree, sampled every 0.2 s",
               target="commprof import at least as fast as HTA loading the same trace (median process wall time "
                      "and median call time both <= HTA's)",
               met=met)
    write_result(args.out, "kineto_import", "Kineto import speed: commprof vs HTA", res, table)
    print(json.dumps({"met": met}))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
