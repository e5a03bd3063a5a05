#!/usr/bin/env bash
# Regenerate the committed results of the real-box corpus (tests/data/nccl-tests, SOURCE.md):
# one import per log, the checklist over all of them, the A100 vs 4090 pair (check and gap).
# Run from the repository root: bash scripts/corpus_results.sh
set -euo pipefail
cd "$(dirname "$0")/.."
C=.venv/bin/commprof
D=tests/data/nccl-tests
# the logs out of fetched repository snapshots are never committed: they lie beside the checkout
log() { .venv/bin/python -c 'import sys; sys.path.insert(0, "tests"); from helpers import corpus_log; print(corpus_log(sys.argv[1], skip=False))' "$1"; }
declare -A LOGS=(
  [import-a100x8-nvswitch]=$(log a100x8_dgx_allreduce_superbench_legacy.txt)
  [import-a100x8-nvswitch-cs244c]=$D/all_reduce_perf_8xA100.log
  [import-h100x8-nvls]=$D/h100x8_sxm_nvls_allreduce_nccltests290.txt
  [import-rtx4090x8-pcie]=$D/rtx4090x8_pcie_allreduce_chlc_blog.txt
  [import-rtx4090x2-pcie]=$(log rtx4090x2_pcie_allreduce_kalavai.txt)
  [import-rtx5090x8-pcie5-p2p]=$D/rtx5090x8_pcie5_p2p_allreduce_aikitoria.txt
  [import-rtx5090x4-pcie5-nop2p]=$D/rtx5090x4_pcie5_nop2p_allreduce_nccltests287.txt
  [import-rtx4090x6-pcie4-p2p]=$D/rtx4090x6_pcie4_p2p_allreduce_tinygrad.txt
)
ORDER=(import-a100x8-nvswitch import-a100x8-nvswitch-cs244c import-h100x8-nvls import-rtx4090x8-pcie
       import-rtx4090x2-pcie import-rtx5090x8-pcie5-p2p import-rtx5090x4-pcie5-nop2p import-rtx4090x6-pcie4-p2p)
for name in "${ORDER[@]}"; do
  rm -rf "results/$name"
  $C import nccl-tests "${LOGS[$name]}" --out "results/$name"
done
rm -rf results/check-corpus results/check-a100x8-rtx4090x8 results/gap-a100x8-vs-rtx4090x8
dirs=(); for name in "${ORDER[@]}"; do dirs+=("results/$name"); done
$C check "${dirs[@]}" --out results/check-corpus || echo "check-corpus: exit $?"
$C check results/import-a100x8-nvswitch results/import-rtx4090x8-pcie --out results/check-a100x8-rtx4090x8 \
  || echo "check-a100x8-rtx4090x8: exit $?"
$C gap results/import-a100x8-nvswitch results/import-rtx4090x8-pcie --out results/gap-a100x8-vs-rtx4090x8
