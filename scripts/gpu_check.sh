#!/usr/bin/env bash
# The GPU check: run on a machine with an NVIDIA GPU; writes everything into OUTDIR.
#   bash scripts/gpu_check.sh OUTDIR
# Uses the machine's python3 (which must hold torch with CUDA, typer, pandas, matplotlib, rich,
# nvidia-ml-py, pytest) with this checkout on PYTHONPATH: nothing is installed or downloaded.
# Outputs (8 files at most, so the device tool can bring them all back):
#   machine.txt             nvidia-smi, topology, torch/CUDA/NCCL versions
#   gpu_tests.log           pytest -m gpu
#   sweep-nccl-tp1/         commprof sweep --backend nccl --tp 1, eager and graph modes
set -uo pipefail
OUT="${1:?usage: scripts/gpu_check.sh OUTDIR}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
cd "$REPO"
status=0
{
  echo "# gpu_check on $(hostname) at $(date -Is)"
  nvidia-smi || true
  nvidia-smi topo -m || true
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])"
} > "$OUT/machine.txt" 2>&1

echo "== pytest -m gpu"
"$PY" -m pytest -m gpu -v -p no:cacheprovider tests/ 2>&1 | tee "$OUT/gpu_tests.log" || status=1

echo "== commprof sweep --backend nccl --tp 1 (eager + graph)"
"$PY" -m commprof sweep --backend nccl --tp 1 --ops all_reduce,all_gather --sizes decode \
  --model Qwen2.5-32B --batch 1,8,32,128 --modes eager,graph --iters 500 --warmup 50 \
  --out "$OUT/sweep-nccl-tp1" 2>&1 | tee "$OUT/sweep-nccl-tp1.log" || status=1
exit $status
