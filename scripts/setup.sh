#!/usr/bin/env bash
# Set up .venv with commprof and its test tools. Idempotent; safe to rerun.
# torch is pinned first so that pip never resolves an unpinned torch: on a CPU machine of this
# project torch==2.13.0 is the CPU build from the local wheel cache; on a GPU box the same pin
# takes PyPI's CUDA build. Override with COMMPROF_TORCH="torch==X.Y.Z" (or "" to keep the one present).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
TORCH_SPEC="${COMMPROF_TORCH-torch==2.13.0}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip_q() { .venv/bin/python -m pip install -q --disable-pip-version-check "$@" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true; }
if [ -n "$TORCH_SPEC" ]; then
  .venv/bin/python -c "import torch, sys; sys.exit(0 if 'torch==' + torch.__version__.split('+')[0] == '$TORCH_SPEC' else 1)" 2>/dev/null \
    || pip_q "$TORCH_SPEC"
fi
pip_q -e ".[test]"
.venv/bin/python -c "import torch, commprof; print(f'commprof {commprof.__version__} ready (torch {torch.__version__})')"
