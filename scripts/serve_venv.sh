#!/usr/bin/env bash
# Make the venv of the real OpenAI-compatible server tests/test_serve.py starts on the CPU
# (`transformers serve` with the tiny Llama of scripts/tiny_llama.py): .venv-serve/, never the
# project's venv (transformers[serving] pulls in a web stack the main tests do not need).
# Idempotent: a second run with the same spec does no pip work. Prints its python.
#   bash scripts/serve_venv.sh          # -> .venv-serve/bin/python
# COMMPROF_SERVE_VENV picks the dir, COMMPROF_SERVE_SPEC the transformers spec, COMMPROF_TORCH the
# torch pin (the same default as scripts/setup.sh: the CPU build from the local wheel cache here).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${COMMPROF_SERVE_VENV:-.venv-serve}
SPEC=${COMMPROF_SERVE_SPEC:-transformers[serving]>=5.20,<6}
TORCH_SPEC="${COMMPROF_TORCH-torch==2.13.0}"
WANT="$TORCH_SPEC $SPEC"
if ! { [ -f "$VENV/.commprof-ready" ] && [ "$(cat "$VENV/.commprof-ready")" = "$WANT" ]; }; then
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    # torch pinned first, so that transformers' torch range never pulls another build
    # (the grep drops pip's notes about this machine's local index paths)
    # shellcheck disable=SC2086
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check $TORCH_SPEC "$SPEC" 2>&1 \
        | { grep -v "is ignored: it is neither a file nor a directory" >&2 || true; }
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "serve_venv.sh: pip install $WANT failed" >&2; exit 1; }
    "$VENV/bin/python" -c "import transformers, fastapi, uvicorn" >&2
    echo "$WANT" > "$VENV/.commprof-ready"
fi
case "$VENV" in /*) echo "$VENV/bin/python" ;; *) echo "$(pwd)/$VENV/bin/python" ;; esac
