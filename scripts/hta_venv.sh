#!/usr/bin/env bash
# Make the Holistic Trace Analysis (HTA) venv the HTA tests and scripts/bench_hta_agreement.py use:
# .venv-hta/ (never the project's venv: HTA pulls in jupyterlab). Idempotent; prints its python.
#   bash scripts/hta_venv.sh            # -> .venv-hta/bin/python
# HTA_VERSION picks the release (default 0.5.0, the one the committed benchmark ran).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${HTA_VENV:-.venv-hta}
VER=${HTA_VERSION:-0.5.0}
if ! "$VENV/bin/python" -c "import hta.trace_analysis" >/dev/null 2>&1; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "HolisticTraceAnalysis==$VER" >&2
fi
case "$VENV" in /*) echo "$VENV/bin/python" ;; *) echo "$(pwd)/$VENV/bin/python" ;; esac
