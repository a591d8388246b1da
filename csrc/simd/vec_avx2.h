// Vec types, AVX2 level: eight float32 lanes (see vec_scalar.h for the contract of each op).
// Only separately rounded mul/add/sub are used: never FMA (the unit is built without -mfma).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace specops {
namespace simd {
namespace {
namespace avx2 {

struct F {
  __m256 v;
};
struct I {
  __m256i v;
};
struct M {
  __m256 v;
};

inline F operator+(F a, F b) { return {_mm256_add_ps(a.v, b.v)}; }
inline F operator-(F a, F b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline F operator*(F a, F b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline F max(F a, F b) { return {_mm256_max_ps(a.v, b.v)}; }
inline M ge(F a, F b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_GE_OQ)}; }
inline M gt(F a, F b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ)}; }
inline M lt(F a, F b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ)}; }
inline M le(F a, F b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_LE_OQ)}; }
inline M ne_u(F a, F b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_NEQ_UQ)}; }
inline M unord(F a, F b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_UNORD_Q)}; }
inline M operator&(M a, M b) { return {_mm256_and_ps(a.v, b.v)}; }
inline M operator|(M a, M b) { return {_mm256_or_ps(a.v, b.v)}; }
inline M mnot(M a) { return {_mm256_xor_ps(a.v, _mm256_castsi256_ps(_mm256_set1_epi32(-1)))}; }
inline int movemask(M a) { return _mm256_movemask_ps(a.v); }
inline bool any(M a) { return movemask(a) != 0; }
inline F keep(M m, F x) { return {_mm256_and_ps(m.v, x.v)}; }

inline I to_int(F x) { return {_mm256_cvttps_epi32(x.v)}; }
inline F to_float(I x) { return {_mm256_cvtepi32_ps(x.v)}; }
inline I operator+(I a, I b) { return {_mm256_add_epi32(a.v, b.v)}; }
inline I operator&(I a, I b) { return {_mm256_and_si256(a.v, b.v)}; }
inline I operator|(I a, I b) { return {_mm256_or_si256(a.v, b.v)}; }
inline I operator^(I a, I b) { return {_mm256_xor_si256(a.v, b.v)}; }
inline I shl23(I a) { return {_mm256_slli_epi32(a.v, 23)}; }
inline I srl(I a, int n) { return {_mm256_srl_epi32(a.v, _mm_cvtsi32_si128(n))}; }
inline I sra31(I a) { return {_mm256_srai_epi32(a.v, 31)}; }
inline M eq(I a, I b) { return {_mm256_castsi256_ps(_mm256_cmpeq_epi32(a.v, b.v))}; }
inline I as_int(F x) { return {_mm256_castps_si256(x.v)}; }
inline F as_float(I x) { return {_mm256_castsi256_ps(x.v)}; }

inline void store(float* p, F x) { _mm256_storeu_ps(p, x.v); }
inline void store(int32_t* p, I x) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), x.v); }
inline F mul_div_f64(F e, double sc, double sd) {
  const __m256d vsc = _mm256_set1_pd(sc), vsd = _mm256_set1_pd(sd);
  const __m256d lo =
      _mm256_div_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(e.v)), vsc), vsd);
  const __m256d hi =
      _mm256_div_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(e.v, 1)), vsc), vsd);
  return {_mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo))};
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

struct Avx2 {
  static constexpr int W = 8;
  using F = avx2::F;
  using I = avx2::I;
  using M = avx2::M;
  static F load(const float* p) { return {_mm256_loadu_ps(p)}; }
  static F splat(float x) { return {_mm256_set1_ps(x)}; }
  static I splat_i(int32_t x) { return {_mm256_set1_epi32(x)}; }
};

}  // namespace
}  // namespace simd
}  // namespace specops
