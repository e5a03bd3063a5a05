#!/usr/bin/env bash
# The CPU tests that need no torch, under Python 3.12 (the Python of the GPU box commprof is checked
# on; the main suite runs on 3.11). torch is left out on purpose: the local torch 2.13.0 CPU wheel is
# for Python 3.11 only, and torch 2.13.0 for 3.12 on PyPI is the CUDA 13 build (a 527 MB wheel plus
# 28 dependencies, nvidia-cublas, cudnn and nccl among them), which a CPU setup must not pull. So this
# runs, without torch: every import, the parsers (nccl-tests, nvidia-smi, Kineto-free), the cost model,
# plan, results layer, topo on recorded NVML answers, the cuda_ext host code on the cupy simulator,
# the docs and the CLI's refusals of bad input.
#   bash scripts/test_py312.sh           (makes .venv312 on first use; PYTHON312=... picks the interpreter)
# Without a Python 3.12, or when its packages cannot be installed, it says so and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."
is312() { [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }
PY312=""
for c in ${PYTHON312:-} python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do
  if is312 "$c"; then PY312="$c"; break; fi
done
if [ -z "$PY312" ]; then
  echo "py312: skipped: no Python 3.12 here (set PYTHON312)"
  exit 0
fi
FILES=(tests/test_api.py tests/test_architecture.py tests/test_bad_input.py tests/test_check_thresholds.py
       tests/test_costmodel.py tests/test_cuda_ext.py tests/test_docs.py tests/test_fuzz_parsers.py
       tests/test_cupy_host_code.py tests/test_package_loads_without_gpu.py tests/test_import_nccl_tests.py tests/test_plan.py
       tests/test_prefill_plan.py tests/test_results.py tests/test_results_layer.py tests/test_sizes_models.py
       tests/test_smitopo.py tests/test_topo.py)
[ -x .venv312/bin/python ] || "$PY312" -m venv .venv312 || { echo "py312: skipped: cannot make .venv312"; exit 0; }
# pyproject's dependencies and test extra, less torch and transformers (its server test needs torch)
mapfile -t DEPS < <(.venv312/bin/python - <<'PY'
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
for d in p["dependencies"] + p["optional-dependencies"]["test"]:
    if not d.startswith(("torch", "transformers")):
        print(d)
PY
)
pip_q() { .venv312/bin/python -m pip install -q --disable-pip-version-check "$@" 2>&1 | grep -v "is ignored: it is neither" ; return "${PIPESTATUS[0]}"; }
if ! pip_q "${DEPS[@]}" || ! pip_q --no-deps -e .; then
  echo "py312: skipped: could not install commprof's dependencies for Python 3.12 (no package index?)"
  exit 0
fi
.venv312/bin/python -c "import sys, commprof, commprof.cli; assert 'torch' not in sys.modules; print('py312:', sys.version.split()[0], 'commprof', commprof.__version__, 'without torch')" || exit 1
exec .venv312/bin/python -m pytest -p no:cacheprovider -q "${FILES[@]}"
