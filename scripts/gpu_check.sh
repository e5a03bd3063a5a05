#!/usr/bin/env bash
# The GPU check: run on a machine with an NVIDIA GPU; writes everything into OUTDIR.
#   bash scripts/gpu_check.sh OUTDIR
# Uses the machine's python3 (which must hold torch with CUDA, typer, pandas, matplotlib, rich,
# nvidia-ml-py, pytest) with this checkout on PYTHONPATH: nothing is installed or downloaded.
# Outputs:
#   machine.txt             nvidia-smi, topology, torch/CUDA/NCCL versions
#   gpu_tests.log           pytest -m gpu
#   sweep-nccl-tp1/         commprof sweep --backend nccl --tp 1, eager and graph modes
#   sweep-custom-tp1/       commprof sweep --impl nccl,custom --verify at TP=1 (the kernel's single-rank
#                           path beside NCCL, every timed custom call checked against torch)
#   trace-nccl-tp1/         commprof trace at full Qwen2.5-32B shapes on one GPU, eager and graph
#   trace-predict-tp248/    per-rank Qwen2.5-32B shapes of TP=2/4/8 on one GPU in graph mode
#                           (compute measured on this GPU; collectives from the committed CPU
#                           sweep results/sweep-default-vm: a plumbing check, not a GPU box)
#   topo/                   commprof topo --out (NVML topology, P2P, link state)
#   p2p/                    commprof p2p: same-GPU (and per-pair) copy bandwidth and flag latency
#   check.json, check.md    commprof check over the sweep, trace and topo above
#   report.html, report.md  commprof report over the same dirs
#   *.log                   what each command printed
# The device tool brings back at most 8 files: tar OUTDIR into one file there, e.g.
#   bash scripts/gpu_check.sh /tmp/gc; tar czf $OUT/gpu_check.tgz -C /tmp gc
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
echo "== commprof sweep --impl nccl,custom --verify (one-shot kernel's single-rank path at TP=1, every call checked)"
"$PY" -m commprof sweep --backend nccl --tp 1 --ops all_reduce --sizes pow2:16-8M --modes eager \
  --impl nccl,custom --verify --iters 200 --warmup 20 \
  --out "$OUT/sweep-custom-tp1" 2>&1 | tee "$OUT/sweep-custom-tp1.log" || status=1
echo "== commprof trace --backend nccl --tp 1 (Qwen2.5-32B, all layers, eager + graph)"
"$PY" -m commprof trace --backend nccl --model Qwen2.5-32B --tp 1 --batch 1,8 --context 2048 --tokens 32 \
  --modes eager,graph --out "$OUT/trace-nccl-tp1" 2>&1 | tee "$OUT/trace-nccl-tp1.log" || status=1

echo "== commprof trace --predict: TP=2/4/8 per-rank shapes on one GPU, graph mode"
"$PY" -m commprof trace --predict --comm-from results/sweep-default-vm --backend nccl --model Qwen2.5-32B \
  --tp 2,4,8 --batch 1,8 --context 2048 --tokens 32 --modes graph --out "$OUT/trace-predict-tp248" 2>&1 \
  | tee "$OUT/trace-predict-tp248.log" || status=1
echo "== commprof topo"
"$PY" -m commprof topo --out "$OUT/topo" 2>&1 | tee "$OUT/topo.log" || status=1

echo "== commprof p2p (cuda_ext kernels, built at first use)"
"$PY" -m commprof p2p --size 256M --out "$OUT/p2p" 2>&1 | tee "$OUT/p2p.log" || status=1

echo "== commprof check and report over the GPU results"
"$PY" -m commprof check "$OUT/topo" "$OUT/sweep-nccl-tp1" "$OUT/trace-nccl-tp1" --model Qwen2.5-32B \
  --out "$OUT" 2>&1 | tee "$OUT/check.log"
rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || [ "$rc" = 8 ] || status=1   # 8 = a checklist FAIL: a finding
"$PY" -m commprof report "$OUT/topo" "$OUT/sweep-nccl-tp1" "$OUT/trace-nccl-tp1" --model Qwen2.5-32B \
  --out "$OUT" 2>&1 | tee "$OUT/report.log" || status=1
exit $status
