#!/usr/bin/env bash
# Instruction counts (or single-thread wall time) of specops::verify on the real-logits
# suite's inputs:
#   bash bench/harness/callgrind.sh [setting ...]          callgrind, 2 calls per setting
#   SPECOPS_HARNESS_TIME=20 bash bench/harness/callgrind.sh  no valgrind: best of 20 calls
#   (+ SPECOPS_HARNESS_FLUSH=512: 512 MB written before each call, so the inputs are cold;
#    + SPECOPS_HARNESS_THREADS=2: requests on two threads of specops' pool)
# (default settings: every one of the real suite, bench/real.py).  Builds the torch-free C++
# (csrc/, the extension's flags + -g; one thread unless SPECOPS_HARNESS_THREADS says more) with
# bench/harness/verify_harness.cpp, dumps each setting's inputs with
# `python -m bench.studies.cpu_profile --dump`, and prints the exclusive instruction counts of
# the passes (bench/harness/fold.py).  Needs valgrind for the counts.  PYTHON: the venv's
# python (default .venv/bin/python); the driver and inputs go to SPECOPS_HARNESS_DIR
# (default /tmp/specops_harness).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-.venv/bin/python}"
OUT="${SPECOPS_HARNESS_DIR:-/tmp/specops_harness}"
mkdir -p "$OUT"
FLAGS="-O3 -g -std=c++17 -ffp-contract=off -fno-fast-math -Icsrc"
objs=()
for lvl in 0 1 2 3; do  # the per-level sources (CMakeLists.txt: SPECOPS_ISA_SOURCES)
  extra=""; [ $lvl = 1 ] && extra="-msse2"; [ $lvl = 2 ] && extra="-mavx2 -mpopcnt"
  [ $lvl = 3 ] && extra="-mavx512f -mavx512dq -mavx2 -mpopcnt"
  for src in passes draw_passes; do
    g++ $FLAGS $extra -DSPECOPS_ISA=$lvl -c "csrc/simd/$src.cpp" -o "$OUT/$src$lvl.o" &
    objs+=("$OUT/$src$lvl.o")
  done
done
wait
g++ $FLAGS -pthread -DSPECOPS_WITH_SSE2 -DSPECOPS_WITH_AVX2 -DSPECOPS_WITH_AVX512 \
  -o "$OUT/verify_harness" bench/harness/verify_harness.cpp csrc/core/parallel.cpp \
  csrc/simd/isa.cpp csrc/transform/*.cpp csrc/draw/draw.cpp csrc/verify/verify.cpp \
  csrc/verify/block_rows.cpp "${objs[@]}"
settings=("$@")
[ ${#settings[@]} -gt 0 ] || settings=(greedy t0.8 t0.8+top_p0.95 t0.8+top_k50 t0.8+min_p0.05)
for s in "${settings[@]}"; do
  [ -f "$OUT/$s.bin" ] || "$PY" -m bench.studies.cpu_profile --setting "$s" --dump "$OUT/$s.bin" >/dev/null
  if [ -n "${SPECOPS_HARNESS_TIME:-}" ]; then
    "$OUT/verify_harness" "$OUT/$s.bin" "$SPECOPS_HARNESS_TIME" | sed "s/^/$s: /"
    continue
  fi
  valgrind --tool=callgrind --callgrind-out-file="$OUT/$s.cg" "$OUT/verify_harness" \
    "$OUT/$s.bin" 2 2>/dev/null | sed "s/^/$s: /"
  callgrind_annotate --auto=no --threshold=100 "$OUT/$s.cg" 2>/dev/null | "$PY" bench/harness/fold.py \
    | grep -v -e memset -e _dl_ -e do_lookup -e 'std::' | head -8
done
