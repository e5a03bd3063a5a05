#!/usr/bin/env bash
# The GPU check: everything that needs an NVIDIA GPU, in one command that fits one 600 s run.
#   bash scripts/gpu_check.sh [--dry-run] [--budget S] [--tar FILE] OUTDIR
# On the device machine (its tool runs at most 600 s a command and brings back at most 8 files):
#   bash scripts/gpu_check.sh /tmp/gc --tar $OUT/gpu_check.tgz
# Uses ${PYTHON:-python3} (which must hold torch with CUDA, typer, pandas, matplotlib, rich,
# nvidia-ml-py, pytest; cupy and nvcc for the CUDA kernels) with this checkout on PYTHONPATH:
# nothing is installed or downloaded.
#
# Steps, ordered by what they prove (what later steps stand on first); each runs under its own
# `timeout -k 10 BOX`, its output teed into OUTDIR/<step>.log, and a step that fails or times out
# never stops the later ones:
#   machine.txt       nvidia-smi, nvidia-smi topo -m, nvcc, python/torch/CUDA/NCCL/cupy versions
#   topo/             commprof topo (NVML on a real driver: GPUs, links, P2P)
#   assumptions/      scripts/gpu_assumptions.py, groups events + nccl: the spin clock's ramp (first,
#                     on an idle GPU), the event and capture rules tests/fake_cuda.py models,
#                     graph-recorded and mixed events, NCCL's one-rank AVG kernel vs in-place SUM,
#                     the sweep's own timing path over that kernel (eager and graph, short spins)
#   sweep-tp1/        commprof sweep --backend nccl --tp 1, decode sizes of Qwen2.5-32B, eager and
#                     graph, with commprof's one-shot all-reduce (--impl custom, its single-rank path)
#                     beside NCCL, every custom call checked (--verify): the verb end to end
#   assume-oneshot    (into assumptions/) 8/4/2 emulated ranks of the one-shot all-reduce on one GPU,
#                     verified and timed beside NCCL's one-rank AVG
#   assume-trace      (into assumptions/) the whole Qwen2.5-32B engine at TP=1: build time, traced vs
#                     untraced token latency, eager and graph (the cost of 522 event nodes a step)
#   p2p/              commprof p2p on one GPU: HBM copy bandwidth (spin-first), flag ping-pong
#   trace-tp1/        commprof trace, all of Qwen2.5-32B on one GPU, eager and graph
#   predict-nvlink4/  commprof trace --predict: per-rank shapes of TP=2/4/8 run here, collectives
#                     from the reference:nvlink4 profile (graph mode)
#   check/, report/   commprof check and report over topo, sweep-tp1, trace-tp1, p2p (check's exit 8
#                     = a checklist FAIL: a finding, counted ok)
#   gpu-tests.log     pytest -m gpu; last, so it mostly runs on the time the earlier steps left
#   summary.txt       step, status (ok / failed (rc N) / timeout / skipped), seconds, time box; then
#                     one line per assumption: confirmed / refuted / not reached, with what was seen
# then OUTDIR is packed into one tarball (default OUTDIR.tgz, or --tar FILE), and summary.txt is
# copied beside it as <tarball without .tgz>.summary.txt: two files back from the device machine.
# Exit status: 0 every step ok, 1 a step failed or timed out, 2 bad usage or a plan over budget.
#
# Budget: the time boxes plus PACK_S (tar, and the last step's kill grace) must fit BUDGET - SPARE_S
# (600 - 120 s by default). Step i runs until the sum of the boxes up to i (counted from the
# start): time a step leaves unused passes on to the next, a step's overrun (the kill grace)
# comes out of the next, and the last step ends by the total. --dry-run prints the plan and that
# arithmetic, runs nothing, and exits 2 when the plan does not fit (--budget S shows it failing).
# An OUTDIR holding an earlier run is moved aside to OUTDIR.prev-<time>, so the command can rerun.
# Test hooks: GPU_CHECK_ONLY=step,step runs only those steps; PYTHON=... picks the interpreter.
# --machine-info is internal: the body of the machine step.
set -uo pipefail

SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
REPO="$(cd "$(dirname "$SELF")/.." && pwd)"
PY="${PYTHON:-python3}"
MODEL=Qwen2.5-32B
BUDGET=600          # seconds one device command may run
SPARE_S=120         # kept unused, so a rerun or a slow start still fits the session
PACK_S=20           # tar (10 s) and the kill grace of the last step (KILL_S)
KILL_S=10           # timeout -k: SIGKILL this long after SIGTERM
MIN_BOX=5           # a step left less time than this is skipped, not started

STEPS=(machine topo assumptions sweep assume-oneshot assume-trace p2p trace predict-nvlink4 check report gpu-tests)
# Time boxes (s). A step may also use what the steps before it left unused: step i runs until
# the sum of the boxes up to i, counted from the start, so the last step ends by their total.
declare -A BOX=(
  [machine]=15            # nvidia-smi twice, one torch + cupy import
  [topo]=10               # NVML only
  [assumptions]=85        # torch import, 6 event checks (~1 s each), NCCL init, profiler, 8 timed cells
  [sweep]=75              # nvcc build of cuda_ext at first use (~1 s here), NCCL init, 20 cells, charts
  [assume-oneshot]=40     # kernels cached; 9 emulations x 50 calls, NCCL's AVG at 3 sizes
  [assume-trace]=60       # one 66 GB build, 4 x 19 tokens of 64 layers
  [p2p]=25                # 256 MiB copies, 10000 ping-pong rounds
  [trace]=55              # rank start, NCCL init, 2 builds of 66 GB, 4 x 20 tokens of 64 layers, charts
  [predict-nvlink4]=30    # 6 runs of one rank's shard (TP=2/4/8 x batch 1,8), one process
  [check]=15
  [report]=15
  [gpu-tests]=35          # pytest -m gpu; last, so it also runs on what is left
)

usage() {
  echo "usage: bash scripts/gpu_check.sh [--dry-run] [--budget S] [--tar FILE] OUTDIR" >&2
  exit 2
}

die() {
  echo "gpu_check: error: $*" >&2
  exit 2
}

# The body of the machine step (run as its own process, so it has a time box like the others).
machine_info() {
  local rc=0
  echo "# gpu_check on $(hostname) at $(date -Is)"
  echo "## nvidia-smi"
  nvidia-smi || { echo "(nvidia-smi failed)"; rc=1; }
  echo "## nvidia-smi topo -m"
  nvidia-smi topo -m || { echo "(nvidia-smi topo -m failed)"; rc=1; }
  echo "## nvcc --version"
  local nvcc
  nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  "$nvcc" --version || echo "(no nvcc: cuda_ext falls back to NVRTC through cupy)"
  echo "## python"
  "$PY" - <<'EOF' || rc=1
import platform
import sys

print("python", sys.version.split()[0], platform.platform())
import torch

n = torch.cuda.device_count()
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", n,
      [torch.cuda.get_device_name(i) for i in range(n)])
print("nccl", torch.cuda.nccl.version() if n else "n/a (no GPU)")
for i in range(n):
    p = torch.cuda.get_device_properties(i)
    print(f"gpu {i}: {p.name}, sm_{p.major}{p.minor}, {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} SMs")
try:
    import cupy
    print("cupy", cupy.__version__, "cuda runtime", cupy.cuda.runtime.runtimeGetVersion())
except Exception as e:  # noqa: BLE001 - a missing cupy is a finding, not a crash
    print("cupy: unavailable:", type(e).__name__, e)
try:
    import pynvml
    pynvml.nvmlInit()
    drv = pynvml.nvmlSystemGetDriverVersion()
    print("driver", drv.decode() if isinstance(drv, bytes) else drv)
except Exception as e:  # noqa: BLE001
    print("nvml: unavailable:", type(e).__name__, e)
if n == 0:
    sys.exit("torch sees no CUDA GPU")
EOF
  return "$rc"
}

# Results dirs that check and report read: those a step wrote results into (run), or all (plan).
results_dirs() {
  local d f
  for d in topo sweep-tp1 trace-tp1 p2p; do
    if [ "$1" = plan ]; then
      printf '%s\n' "$OUTDIR/$d"
      continue
    fi
    for f in topo.json sweep.csv trace_summary.csv p2p.csv; do
      if [ -f "$OUTDIR/$d/$f" ]; then
        printf '%s\n' "$OUTDIR/$d"
        break
      fi
    done
  done
}

# Set CMD to step $1's command line; $2 = plan (dry run) or run.
step_cmd() {
  local dirs=()
  case "$1" in
    machine) CMD=(bash "$SELF" --machine-info) ;;
    topo) CMD=("$PY" -m commprof topo --out "$OUTDIR/topo") ;;
    sweep) CMD=("$PY" -m commprof sweep --backend nccl --tp 1 --ops all_reduce,all_gather --sizes decode
                --model "$MODEL" --batch 1,8,32,128 --modes eager,graph --impl nccl,custom --verify
                --iters 200 --warmup 20 --out "$OUTDIR/sweep-tp1") ;;
    p2p) CMD=("$PY" -m commprof p2p --size 256M --rounds 10000 --out "$OUTDIR/p2p") ;;
    assumptions) CMD=("$PY" scripts/gpu_assumptions.py "$OUTDIR/assumptions" --group events,nccl) ;;
    assume-oneshot) CMD=("$PY" scripts/gpu_assumptions.py "$OUTDIR/assumptions" --group oneshot) ;;
    assume-trace) CMD=("$PY" scripts/gpu_assumptions.py "$OUTDIR/assumptions" --group trace) ;;
    trace) CMD=("$PY" -m commprof trace --backend nccl --model "$MODEL" --tp 1 --batch 1,8 --context 2048
                --tokens 16 --modes eager,graph --out "$OUTDIR/trace-tp1") ;;
    predict-nvlink4)
      CMD=("$PY" -m commprof trace --predict --comm-from "reference:nvlink4" --backend nccl --model "$MODEL"
           --tp 2,4,8 --batch 1,8 --context 2048 --tokens 16 --modes graph --out "$OUTDIR/$1") ;;
    check|report)
      mapfile -t dirs < <(results_dirs "$2")
      CMD=()
      if [ "${#dirs[@]}" -gt 0 ]; then   # none: check would measure now, report would refuse
        CMD=("$PY" -m commprof "$1" "${dirs[@]}" --model "$MODEL" --out "$OUTDIR/$1")
      fi ;;
    gpu-tests) CMD=("$PY" -m pytest -m gpu -q -p no:cacheprovider tests/) ;;
    *) die "unknown step '$1'" ;;
  esac
}

# A command line as one string a shell reads back the same (plain words left as they are).
quoted() {
  local a out=()
  for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./:,=+@%-]+$ ]]; then out+=("$a"); else out+=("$(printf '%q' "$a")"); fi
  done
  echo "${out[*]}"
}

# --- arguments ------------------------------------------------------------------------------------
DRY=0
TAR=""
OUTDIR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --budget) [ $# -ge 2 ] || usage; BUDGET="$2"; shift ;;
    --budget=*) BUDGET="${1#*=}" ;;
    --tar) [ $# -ge 2 ] || usage; TAR="$2"; shift ;;
    --tar=*) TAR="${1#*=}" ;;
    --machine-info) machine_info; exit $? ;;
    -h|--help) sed -n '2,/^set -uo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_check: unknown option '$1'" >&2; usage ;;
    *) [ -z "$OUTDIR" ] || usage; OUTDIR="$1" ;;
  esac
  shift
done
[ -n "$OUTDIR" ] || usage
[[ "$BUDGET" =~ ^[0-9]+$ ]] || die "--budget '$BUDGET': a whole number of seconds"
case "$OUTDIR" in /*) ;; *) OUTDIR="$PWD/$OUTDIR" ;; esac
OUTDIR="${OUTDIR%/}"
[ -n "$TAR" ] || TAR="$OUTDIR.tgz"
case "$TAR" in /*) ;; *) TAR="$PWD/$TAR" ;; esac
case "$TAR" in "$OUTDIR"/*) die "--tar $TAR: put the tarball outside OUTDIR (it packs OUTDIR)" ;; esac

SELECTED=("${STEPS[@]}")
if [ -n "${GPU_CHECK_ONLY:-}" ]; then
  IFS=, read -r -a SELECTED <<< "$GPU_CHECK_ONLY"
  for s in "${SELECTED[@]}"; do
    [ -n "${BOX[$s]:-}" ] || die "GPU_CHECK_ONLY: unknown step '$s' (steps: ${STEPS[*]})"
  done
fi

# --- the plan and its arithmetic ------------------------------------------------------------------
SUM=0
for s in "${SELECTED[@]}"; do SUM=$((SUM + BOX[$s])); done
LIMIT=$((BUDGET - SPARE_S))
NEED=$((SUM + PACK_S))
declare -A ENDS=()               # seconds after the start by which each step has ended
t=0
for s in "${SELECTED[@]}"; do t=$((t + BOX[$s])); ENDS[$s]=$t; done

if [ "$DRY" = 1 ]; then
  echo "gpu_check plan (dry run): OUTDIR=$OUTDIR, tarball $TAR, python ${PY}"
  i=0
  for s in "${SELECTED[@]}"; do
    i=$((i + 1))
    step_cmd "$s" plan
    printf 'step %d/%d %-16s box %3d s, ends by %3d s\n' "$i" "${#SELECTED[@]}" "$s" "${BOX[$s]}" "${ENDS[$s]}"
    printf '    timeout -k %d %d %s\n' "$KILL_S" "${BOX[$s]}" "$(quoted "${CMD[@]}")"
  done
  echo "a step also gets the time the steps before it left unused (it runs until its 'ends by')"
  echo "check and report read only those of $OUTDIR/{topo,sweep-tp1,trace-tp1,p2p} that hold results"
fi
echo "budget: time boxes ${SUM} s + packing ${PACK_S} s = ${NEED} s;" \
  "limit ${BUDGET} s budget - ${SPARE_S} s spare = ${LIMIT} s"
if [ "$NEED" -gt "$LIMIT" ]; then
  echo "gpu_check: error: the plan does not fit the budget: it needs ${NEED} s but --budget ${BUDGET}" \
    "minus ${SPARE_S} s spare leaves ${LIMIT} s; shorten the time boxes" >&2
  exit 2
fi
echo "budget: fits (${NEED} s <= ${LIMIT} s, and ${SPARE_S} s of the ${BUDGET} s kept spare);" \
  "the last step ends by ${SUM} s after the start"
[ "$DRY" = 1 ] && exit 0

# --- the run --------------------------------------------------------------------------------------
if [ -d "$OUTDIR" ] && [ -n "$(ls -A "$OUTDIR" 2>/dev/null)" ]; then
  prev="$OUTDIR.prev-$(date +%Y%m%d-%H%M%S)"
  mv "$OUTDIR" "$prev" || die "cannot move the earlier $OUTDIR aside"
  echo "gpu_check: $OUTDIR held an earlier run; moved it to $prev"
fi
mkdir -p "$OUTDIR" "$(dirname "$TAR")" || die "cannot create $OUTDIR or the directory of $TAR"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHON="$PY"
cd "$REPO" || die "cannot cd to $REPO"

START=$SECONDS
declare -A STATUS=() TOOK=() GAVE=()
FAILED=0

run_step() {
  local s="$1" log="$OUTDIR/$1.log" box rc t0
  step_cmd "$s" run
  box=$((ENDS[$s] - (SECONDS - START)))   # its own box, plus what earlier steps left unused
  GAVE[$s]="$box"
  TOOK[$s]=0
  if [ "$box" -lt "$MIN_BOX" ]; then
    STATUS[$s]="skipped (no time left)"
    FAILED=1
    echo "== [$s] skipped: ${box} s left of its time box" | tee "$log"
    return
  fi
  if [ "${#CMD[@]}" -eq 0 ]; then
    STATUS[$s]="skipped (no results to read)"
    FAILED=1
    echo "== [$s] skipped: no step wrote results for it to read" | tee "$log"
    return
  fi
  echo "== [$s] box ${box} s: $(quoted "${CMD[@]}")" | tee "$log"
  t0=$SECONDS
  timeout -k "$KILL_S" "$box" "${CMD[@]}" < /dev/null 2>&1 | tee -a "$log"
  rc="${PIPESTATUS[0]}"
  TOOK[$s]=$((SECONDS - t0))
  if [ "$rc" = 0 ]; then
    STATUS[$s]=ok
  elif [ "$s" = check ] && [ "$rc" = 8 ]; then
    STATUS[$s]="ok (rc 8: a checklist FAIL)"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    STATUS[$s]="timeout"
    FAILED=1
  else
    STATUS[$s]="failed (rc $rc)"
    FAILED=1
  fi
  echo "== [$s] ${STATUS[$s]} in ${TOOK[$s]} s" | tee -a "$log"
}

for s in "${SELECTED[@]}"; do
  run_step "$s"
  [ "$s" = machine ] && cp "$OUTDIR/machine.log" "$OUTDIR/machine.txt"
done

{
  echo "# gpu_check on $(hostname) at $(date -Is): steps took $((SECONDS - START)) s of ${SUM} s"
  printf '%-16s %-30s %7s %7s\n' step status seconds box_s
  for s in "${SELECTED[@]}"; do
    printf '%-16s %-30s %7s %7s\n' "$s" "${STATUS[$s]}" "${TOOK[$s]}" "${GAVE[$s]}"
  done
  echo "# assumptions (scripts/gpu_assumptions.py; details in assumptions/<key>.json)"
  # the summary needs only the standard library: any python3 will do when $PY cannot
  timeout -k 2 10 "$PY" "$REPO/scripts/gpu_assumptions.py" --summarize "$OUTDIR/assumptions" 2>/dev/null \
    || timeout -k 2 10 python3 "$REPO/scripts/gpu_assumptions.py" --summarize "$OUTDIR/assumptions" 2>&1 \
    || echo "(the assumptions could not be summarised with $PY or python3)"
} > "$OUTDIR/summary.txt"
cat "$OUTDIR/summary.txt"

cp "$OUTDIR/summary.txt" "${TAR%.tgz}.summary.txt" 2>/dev/null || true
if timeout -k 2 $((PACK_S - KILL_S - 2)) tar -czf "$TAR" -C "$(dirname "$OUTDIR")" "$(basename "$OUTDIR")"; then
  echo "packed $OUTDIR -> $TAR ($(du -h "$TAR" | cut -f1)); summary beside it: ${TAR%.tgz}.summary.txt"
else
  echo "gpu_check: packing $OUTDIR into $TAR failed" >&2
  FAILED=1
fi
exit "$FAILED"
