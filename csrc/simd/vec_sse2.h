// Vec types, SSE2 level: four float32 lanes (see vec_scalar.h for the contract of each op).
#pragma once
#include <emmintrin.h>

#include <cstdint>

#include "simd/vec_x86.h"

namespace specops {
namespace simd {
namespace {
namespace sse2 {

SPECOPS_X86_VEC_OPS(_mm, 128, __m128i, __m128d)

inline M ge(F a, F b) { return {_mm_cmpge_ps(a.v, b.v)}; }
inline M gt(F a, F b) { return {_mm_cmpgt_ps(a.v, b.v)}; }
inline M lt(F a, F b) { return {_mm_cmplt_ps(a.v, b.v)}; }
inline M le(F a, F b) { return {_mm_cmple_ps(a.v, b.v)}; }
inline M eq_f(F a, F b) { return {_mm_cmpeq_ps(a.v, b.v)}; }
inline M ne_u(F a, F b) { return {_mm_cmpneq_ps(a.v, b.v)}; }
inline M unord(F a, F b) { return {_mm_cmpunord_ps(a.v, b.v)}; }
inline MD gt(D a, D b) { return {_mm_cmpgt_pd(a.v, b.v)}; }
inline I max_u(I a, I b) {  // unsigned (SSE2 has no pmaxud: a signed compare of a, b - 2^31)
  const __m128i s = _mm_set1_epi32(INT32_MIN);
  const __m128i m = _mm_cmpgt_epi32(_mm_xor_si128(a.v, s), _mm_xor_si128(b.v, s));
  return {_mm_or_si128(_mm_and_si128(m, a.v), _mm_andnot_si128(m, b.v))};
}

// (SPECOPS_X86_F64_CONVERT's lane moves: SSE2 has neither a dword permute nor a sign extension)
inline __m128i low_dwords(L x) { return _mm_shuffle_epi32(x.v, _MM_SHUFFLE(3, 1, 2, 0)); }
inline L widen(__m128i x) { return {_mm_unpacklo_epi32(x, _mm_setzero_si128())}; }  // x >= 0
SPECOPS_X86_F64_CONVERT(_mm, 128)
inline D load_wide(const float* p) {
  return {_mm_cvtps_pd(_mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))))};
}

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

SPECOPS_X86_VEC_TAG(Sse2, sse2, _mm, 4, 128, false)

}  // namespace
}  // namespace simd
}  // namespace specops
