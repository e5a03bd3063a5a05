#!/usr/bin/env bash
# Set up .venv with commprof and its test tools. Idempotent; safe to rerun.
# torch is pinned first so that pip never resolves an unpinned torch: on a CPU machine of this
# project torch==2.13.0 is the CPU build from the local wheel cache; on a GPU box the same pin
# takes PyPI's CUDA build. Override with COMMPROF_TORCH="torch==X.Y.Z" (or "" to keep the one present).
# Each step is announced on stderr with the seconds it took; when pip fails, its own output is
# shown and the script exits with pip's exit status.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
TORCH_SPEC="${COMMPROF_TORCH-torch==2.13.0}"
T0=$SECONDS
say() { echo "setup.sh: $*" >&2; }
done_in() { say "  done ($((SECONDS - T0)) s so far)"; }
pip_q() {
  local log rc=0
  log="$(mktemp)"
  .venv/bin/python -m pip install -q --disable-pip-version-check "$@" >"$log" 2>&1 || rc=$?
  grep -v "is ignored: it is neither a file nor a directory" "$log" >&2 || true
  rm -f "$log"
  if [ "$rc" -ne 0 ]; then
    say "pip install $* failed (exit $rc); pip's messages are above"
    exit "$rc"
  fi
}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $PY"
  "$PY" -m venv .venv
  done_in
fi
if [ -n "$TORCH_SPEC" ]; then
  if .venv/bin/python -c "import torch, sys; sys.exit(0 if 'torch==' + torch.__version__.split('+')[0] == '$TORCH_SPEC' else 1)" 2>/dev/null; then
    say "$TORCH_SPEC already installed"
  else
    say "installing $TORCH_SPEC (the largest step: a wheel of several hundred MB, often 1-2 min)"
    pip_q "$TORCH_SPEC"
    done_in
  fi
fi
say "installing commprof in editable mode with its test tools (pip install -e .[test])"
pip_q -e ".[test]"
done_in
.venv/bin/python -c "import torch, commprof; print(f'commprof {commprof.__version__} ready (torch {torch.__version__})')"
