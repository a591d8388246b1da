// The ISA level a per-level unit (simd/passes.cpp, simd/draw_passes.cpp) is compiled for:
// CMake builds each of them once per level with -DSPECOPS_ISA=0 scalar, 1 SSE2, 2 AVX2,
// 3 AVX-512 and that level's flags (see passes.h).  Gives `Native`, the level's Vec tag (its
// routines run whole vectors of it and hand the remaining elements to `Scalar`), and
// SPECOPS_LEVEL, the namespace of the level's functions with external linkage: each level's
// copy has its own symbols, so the linker can never hand one level another level's code
// (SPECOPS_LEVEL_NAME and SPECOPS_PASSES_TABLE: its name and its table in passes.h).
#pragma once
#include <cstdint>

#include "simd/vec_scalar.h"

#if !defined(SPECOPS_ISA)
#error "the per-level units are compiled with -DSPECOPS_ISA=0|1|2|3 (see CMakeLists.txt)"
#elif SPECOPS_ISA == 0
#define SPECOPS_LEVEL level_scalar
#define SPECOPS_LEVEL_NAME "scalar"
#define SPECOPS_PASSES_TABLE kPassesScalar
#elif SPECOPS_ISA == 1
#include "simd/vec_sse2.h"
#define SPECOPS_LEVEL level_sse2
#define SPECOPS_LEVEL_NAME "sse2"
#define SPECOPS_PASSES_TABLE kPassesSse2
#elif SPECOPS_ISA == 2
#include "simd/vec_avx2.h"
#define SPECOPS_LEVEL level_avx2
#define SPECOPS_LEVEL_NAME "avx2"
#define SPECOPS_PASSES_TABLE kPassesAvx2
#elif SPECOPS_ISA == 3
#include "simd/vec_avx512.h"
#define SPECOPS_LEVEL level_avx512
#define SPECOPS_LEVEL_NAME "avx512"
#define SPECOPS_PASSES_TABLE kPassesAvx512
#else
#error "SPECOPS_ISA must be 0 (scalar), 1 (sse2), 2 (avx2) or 3 (avx512)"
#endif

namespace specops {
namespace {

using simd::Scalar;
#if SPECOPS_ISA == 0
using Native = simd::Scalar;
#elif SPECOPS_ISA == 1
using Native = simd::Sse2;
#elif SPECOPS_ISA == 2
using Native = simd::Avx2;
#else
using Native = simd::Avx512;
#endif

}  // namespace
}  // namespace specops
