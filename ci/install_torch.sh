#!/usr/bin/env bash
# Install the development environment's torch (torch==2.13.0) into the Python given:
#
#   bash ci/install_torch.sh PYTHON
#
# On a machine without an NVIDIA GPU (`nvidia-smi -L` lists none) this is torch's CPU build,
# torch==2.13.0+cpu: a plain `pip install torch` there pulls the multi-GB CUDA build.
#   1. first without any index, from what pip already has on this machine (a find-links
#      directory or a local wheelhouse in pip's configuration): fast and offline; its pure-Python
#      dependencies then come from the configured index;
#   2. else from PyTorch's CPU index (pip install torch==2.13.0+cpu --index-url
#      https://download.pytorch.org/whl/cpu), which also serves those dependencies.
# With a GPU: torch==2.13.0 from the default index (the CUDA build).
# SPECOPS_TORCH=cpu or SPECOPS_TORCH=cuda forces one.  Used by scripts/dev.sh and
# ci/setup_vllm_env.sh; nothing else in the set-up installs torch.
set -euo pipefail
PY="${1:?usage: bash ci/install_torch.sh PYTHON}"
VERSION=2.13.0
CPU_INDEX=https://download.pytorch.org/whl/cpu
pip_q() { "$PY" -m pip install -q --disable-pip-version-check "$@" 2>&1 \
            | { grep -v "^WARNING: Location" || true; }; }

build="${SPECOPS_TORCH:-auto}"
case "$build" in
  auto) if nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then build=cuda; else build=cpu; fi ;;
  cpu|cuda) ;;
  *) echo "SPECOPS_TORCH must be cpu, cuda or unset (auto), got '$build'" >&2; exit 2 ;;
esac

if [ "$build" = cuda ]; then
  echo "installing torch $VERSION (the CUDA build: an NVIDIA GPU is present)" >&2
  pip_q "torch==$VERSION"
elif "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps \
       "torch==$VERSION+cpu" >/dev/null 2>&1; then
  echo "installed torch $VERSION+cpu (the CPU build) from this machine's wheels" >&2
  pip_q "torch==$VERSION+cpu"                 # its dependencies
else
  echo "installing torch $VERSION+cpu (the CPU build) from $CPU_INDEX" >&2
  pip_q "torch==$VERSION+cpu" --index-url "$CPU_INDEX"
fi
"$PY" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)" >&2
