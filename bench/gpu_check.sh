#!/usr/bin/env bash
# GPU check of the specops Triton backend, for a machine with a CUDA GPU and no internet
# (torch and triton preinstalled; nothing is built or downloaded).  Finishes in < 8 minutes:
#   1. environment check (torch sees CUDA, triton imports)
#   2. the CUDA test subset: tests/test_triton.py with compiled kernels (TRITON_INTERPRET=0)
#   3. bench/gpu_capture.py: verify_block(validate=False, max_num_draft_tokens=K) captured in
#      a CUDA graph and replayed on new inputs (malformed requests included) == eager, for the
#      fused and the vocabulary-split Triton paths
#   4. bench/gpu_bench.py: bitwise agreement with the numpy reference at V up to 151936 (both
#      Triton paths; block verification and the acceptance rates too); tree verification
#      (specops.verify_tree, backend="triton" against "reference" on CPU copies: V = 128256
#      and 151936, the 16-node tree, fp32 / bf16, rsd / mss / point-mass, greedy and t0.8 +
#      top-p 0.95; then its time at B=32 V=128256 beside a K=15 chain and the HBM floor);
#      and timings of each op and of verify (auto, split, fused, block) at the
#      DESIGN.md section 6 shapes against the HBM floor (device-to-device copy of the same
#      bytes) and a torch-eager verifier.  All within BENCH_BUDGET_S, in shares: what a share
#      leaves undone is listed as skipped (the tree takes 0.35-0.58 of it, its kernels
#      compiled in parallel first).
# Results: $OUT/gpu_results.md if OUT is set, else bench/results/gpu.md.  A short table last.
# Usage: bash bench/gpu_check.sh            (from anywhere; uses this checkout via PYTHONPATH)
#        PYTHON=/path/to/python TEST_TIMEOUT_S=160 BENCH_BUDGET_S=190 bash bench/gpu_check.sh
set -euo pipefail

T0=$(date +%s)
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
cd "$REPO"
PY="${PYTHON:-python3}"
TEST_TIMEOUT_S="${TEST_TIMEOUT_S:-160}"
BENCH_BUDGET_S="${BENCH_BUDGET_S:-190}"
if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT"
  RESULTS="$OUT/gpu_results.md"
  LOGDIR="$OUT"
else
  mkdir -p "$REPO/bench/results"
  RESULTS="$REPO/bench/results/gpu.md"
  LOGDIR="$(mktemp -d)"
fi
TESTLOG="$LOGDIR/gpu_tests.log"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export TRITON_INTERPRET=0            # compiled kernels
export SPECOPS_BUILD_CPP=0
export PYTHONUNBUFFERED=1

step() { echo; echo "[gpu_check +$(( $(date +%s) - T0 ))s] $*"; }

step "1/4 environment"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total,driver_version \
  --format=csv,noheader || echo "(nvidia-smi not found)"
if ! "$PY" - <<'PYEOF'
import sys
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if not torch.cuda.is_available():
    sys.exit("no CUDA device visible to torch")
import triton
print("triton", triton.__version__)
import specops.backends.triton as tb
print("specops Triton backend from", tb._K.__file__)
PYEOF
then
  echo "[gpu_check] environment not usable (see above); nothing run." >&2
  exit 2
fi

step "2/4 CUDA test subset: tests/test_triton.py (compiled kernels, timeout ${TEST_TIMEOUT_S}s)"
TEST_RC=0
timeout --signal=INT --kill-after=15 "$TEST_TIMEOUT_S" \
  "$PY" -m pytest -q -x -p no:cacheprovider tests/test_triton.py 2>&1 | tee "$TESTLOG" || TEST_RC=$?
[[ $TEST_RC -eq 0 ]] && echo "[gpu_check] tests passed" || echo "[gpu_check] tests: exit status $TEST_RC (124/130 = timed out)"

step "3/4 CUDA-graph capture and replay"
CAPTURE_RC=0
timeout --kill-after=10 120 "$PY" "$REPO/bench/gpu_capture.py" 2>&1 | tee "$LOGDIR/gpu_capture.log" \
  || CAPTURE_RC=$?

step "4/4 bitwise agreement at large V + timings (budget ${BENCH_BUDGET_S}s)"
BENCH_RC=0
timeout --kill-after=10 $(( BENCH_BUDGET_S + 60 )) \
  "$PY" "$REPO/bench/gpu_bench.py" --out "$RESULTS" --budget-s "$BENCH_BUDGET_S" \
  --tests-log "$TESTLOG" || BENCH_RC=$?

step "done"
echo "tests: exit status $TEST_RC; capture: exit status $CAPTURE_RC; bench: exit status" \
  "$BENCH_RC (1 = bitwise mismatch)"
if [[ -f "$LOGDIR/gpu_capture.log" ]]; then
  { echo; echo "## CUDA-graph capture (bench/gpu_capture.py)"; echo; echo '```'
    cat "$LOGDIR/gpu_capture.log"; echo '```'; } >> "$RESULTS"
fi
echo "results: $RESULTS"
[[ $TEST_RC -eq 0 && $CAPTURE_RC -eq 0 && $BENCH_RC -eq 0 ]]
