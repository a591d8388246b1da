// Vec types, SSE2 level: four float32 lanes (see vec_scalar.h for the contract of each op).
#pragma once
#include <emmintrin.h>

#include <cstdint>

namespace specops {
namespace simd {
namespace {
namespace sse2 {

struct F {
  __m128 v;
};
struct I {
  __m128i v;
};
struct M {
  __m128 v;
};

inline F operator+(F a, F b) { return {_mm_add_ps(a.v, b.v)}; }
inline F operator-(F a, F b) { return {_mm_sub_ps(a.v, b.v)}; }
inline F operator*(F a, F b) { return {_mm_mul_ps(a.v, b.v)}; }
inline F max(F a, F b) { return {_mm_max_ps(a.v, b.v)}; }
inline M ge(F a, F b) { return {_mm_cmpge_ps(a.v, b.v)}; }
inline M gt(F a, F b) { return {_mm_cmpgt_ps(a.v, b.v)}; }
inline M lt(F a, F b) { return {_mm_cmplt_ps(a.v, b.v)}; }
inline M le(F a, F b) { return {_mm_cmple_ps(a.v, b.v)}; }
inline M ne_u(F a, F b) { return {_mm_cmpneq_ps(a.v, b.v)}; }
inline M unord(F a, F b) { return {_mm_cmpunord_ps(a.v, b.v)}; }
inline M operator&(M a, M b) { return {_mm_and_ps(a.v, b.v)}; }
inline M operator|(M a, M b) { return {_mm_or_ps(a.v, b.v)}; }
inline M mnot(M a) { return {_mm_xor_ps(a.v, _mm_castsi128_ps(_mm_set1_epi32(-1)))}; }
inline int movemask(M a) { return _mm_movemask_ps(a.v); }
inline bool any(M a) { return movemask(a) != 0; }
inline F keep(M m, F x) { return {_mm_and_ps(m.v, x.v)}; }

inline I to_int(F x) { return {_mm_cvttps_epi32(x.v)}; }
inline F to_float(I x) { return {_mm_cvtepi32_ps(x.v)}; }
inline I operator+(I a, I b) { return {_mm_add_epi32(a.v, b.v)}; }
inline I operator&(I a, I b) { return {_mm_and_si128(a.v, b.v)}; }
inline I operator|(I a, I b) { return {_mm_or_si128(a.v, b.v)}; }
inline I operator^(I a, I b) { return {_mm_xor_si128(a.v, b.v)}; }
inline I shl23(I a) { return {_mm_slli_epi32(a.v, 23)}; }
inline I srl(I a, int n) { return {_mm_srl_epi32(a.v, _mm_cvtsi32_si128(n))}; }
inline I sra31(I a) { return {_mm_srai_epi32(a.v, 31)}; }
inline M eq(I a, I b) { return {_mm_castsi128_ps(_mm_cmpeq_epi32(a.v, b.v))}; }
inline I as_int(F x) { return {_mm_castps_si128(x.v)}; }
inline F as_float(I x) { return {_mm_castsi128_ps(x.v)}; }

inline void store(float* p, F x) { _mm_storeu_ps(p, x.v); }
inline void store(int32_t* p, I x) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), x.v); }
inline F mul_div_f64(F e, double sc, double sd) {
  const __m128d vsc = _mm_set1_pd(sc), vsd = _mm_set1_pd(sd);
  const __m128d lo = _mm_div_pd(_mm_mul_pd(_mm_cvtps_pd(e.v), vsc), vsd);
  const __m128d hi = _mm_div_pd(_mm_mul_pd(_mm_cvtps_pd(_mm_movehl_ps(e.v, e.v)), vsc), vsd);
  return {_mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi))};
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

struct Sse2 {
  static constexpr int W = 4;
  using F = sse2::F;
  using I = sse2::I;
  using M = sse2::M;
  static F load(const float* p) { return {_mm_loadu_ps(p)}; }
  static F splat(float x) { return {_mm_set1_ps(x)}; }
  static I splat_i(int32_t x) { return {_mm_set1_epi32(x)}; }
};

}  // namespace
}  // namespace simd
}  // namespace specops
