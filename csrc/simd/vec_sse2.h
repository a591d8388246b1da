// Vec types, SSE2 level: four float32 lanes (see vec_scalar.h for the contract of each op).
#pragma once
#include <emmintrin.h>

#include <cstdint>

#include "simd/vec_x86.h"

namespace specops {
namespace simd {
namespace {
namespace sse2 {

SPECOPS_X86_VEC_OPS(_mm, 128, __m128i)

inline M ge(F a, F b) { return {_mm_cmpge_ps(a.v, b.v)}; }
inline M gt(F a, F b) { return {_mm_cmpgt_ps(a.v, b.v)}; }
inline M lt(F a, F b) { return {_mm_cmplt_ps(a.v, b.v)}; }
inline M le(F a, F b) { return {_mm_cmple_ps(a.v, b.v)}; }
inline M eq_f(F a, F b) { return {_mm_cmpeq_ps(a.v, b.v)}; }
inline M ne_u(F a, F b) { return {_mm_cmpneq_ps(a.v, b.v)}; }
inline M unord(F a, F b) { return {_mm_cmpunord_ps(a.v, b.v)}; }

inline F div_flush(F e, const DivScale& s) {
  const __m128d vd = _mm_set1_pd(s.sd_sc);  // e * sc / sd == e / (sd / sc), see DivScale
  const __m128d lo = _mm_div_pd(_mm_cvtps_pd(e.v), vd);
  const __m128d hi = _mm_div_pd(_mm_cvtps_pd(_mm_movehl_ps(e.v, e.v)), vd);
  const __m128 p = _mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi));
  return {_mm_and_ps(_mm_cmpge_ps(p, _mm_set1_ps(FLT_MIN_F32)), p)};
}
inline int compress(float* dst, F x, M m) {
  alignas(16) float lane[4];
  _mm_store_ps(lane, x.v);
  int bits = movemask(m), n = 0;
  while (bits) {
    dst[n++] = lane[__builtin_ctz(unsigned(bits))];
    bits &= bits - 1;
  }
  return n;
}

}  // namespace sse2

SPECOPS_X86_VEC_TAG(Sse2, sse2, _mm, 4)

}  // namespace
}  // namespace simd
}  // namespace specops
