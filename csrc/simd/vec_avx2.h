// Vec types, AVX2 level: eight float32 lanes (see vec_scalar.h for the contract of each op).
// Only separately rounded mul/add/sub are used: never FMA (the unit is built without -mfma).
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "simd/vec_x86.h"

namespace specops {
namespace simd {
namespace {
namespace avx2 {

SPECOPS_X86_VEC_OPS(_mm256, 256, __m256i, __m256d)

SPECOPS_X86_CMP_OPS(_mm256_cmp_ps)
inline MD gt(D a, D b) { return {_mm256_cmp_pd(a.v, b.v, _CMP_GT_OQ)}; }
inline I max_u(I a, I b) { return {_mm256_max_epu32(a.v, b.v)}; }  // unsigned

inline __m128i low_dwords(L x) {
  return _mm256_castsi256_si128(
      _mm256_permutevar8x32_epi32(x.v, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
}
inline L widen(__m128i x) { return {_mm256_cvtepi32_epi64(x)}; }
SPECOPS_X86_F64_CONVERT(_mm256, 256)
inline D load_wide(const float* p) { return {_mm256_cvtps_pd(_mm_loadu_ps(p))}; }

// flush(float32(float64(e) * sc / sd)): the float64 division (AVX2 runs it beside the row's
// other float work; the reciprocal of vec_avx512.h costs more uops than it saves here)
inline F div_flush(F e, const DivScale& s) {
  const __m256d vd = _mm256_set1_pd(s.sd_sc);  // e * sc / sd == e / (sd / sc), see DivScale
  const __m256d lo = _mm256_div_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(e.v)), vd);
  const __m256d hi = _mm256_div_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(e.v, 1)), vd);
  const __m256 p = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
  return {_mm256_and_ps(_mm256_cmp_ps(p, _mm256_set1_ps(FLT_MIN_F32), _CMP_GE_OQ), p)};
}

// Lane indices of each 8-bit selection mask, packed to the front (for permutevar8x32).
struct CompressLut {
  int32_t idx[256][8];
  constexpr CompressLut() : idx() {
    for (int m = 0; m < 256; ++m) {
      int n = 0;
      for (int b = 0; b < 8; ++b)
        if (m >> b & 1) idx[m][n++] = b;
      while (n < 8) idx[m][n++] = 0;
    }
  }
};
alignas(32) constexpr CompressLut kCompressLut{};

inline int compress(float* dst, F x, M m) {
  const int bits = movemask(m);
  const __m256i idx =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kCompressLut.idx[bits]));
  _mm256_storeu_ps(dst, _mm256_permutevar8x32_ps(x.v, idx));
  return __builtin_popcount(unsigned(bits));
}

}  // namespace avx2

SPECOPS_X86_VEC_TAG(Avx2, avx2, _mm256, 8, 256, false)

}  // namespace
}  // namespace simd
}  // namespace specops
