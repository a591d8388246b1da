// The Vec operations SSE2 and AVX2 spell alike (P = _mm / _mm256, SI = 128 / 256,
// IV = __m128i / __m256i); vec_sse2.h and vec_avx2.h add the ones that differ (compares,
// float64 division, compress).  SI is the integer width (128 / 256).
#pragma once

#define SPECOPS_X86_VEC_OPS(P, SI, IV)                                                        \
  struct F {                                                                                 \
    decltype(P##_setzero_ps()) v;                                                            \
  };                                                                                         \
  struct I {                                                                                 \
    IV v;                                                                                    \
  };                                                                                         \
  struct M {                                                                                 \
    decltype(P##_setzero_ps()) v;                                                            \
  };                                                                                         \
  inline F operator+(F a, F b) { return {P##_add_ps(a.v, b.v)}; }                            \
  inline F operator-(F a, F b) { return {P##_sub_ps(a.v, b.v)}; }                            \
  inline F operator*(F a, F b) { return {P##_mul_ps(a.v, b.v)}; }                            \
  inline F max(F a, F b) { return {P##_max_ps(a.v, b.v)}; }                                  \
  inline M operator&(M a, M b) { return {P##_and_ps(a.v, b.v)}; }                            \
  inline M operator|(M a, M b) { return {P##_or_ps(a.v, b.v)}; }                             \
  inline M mnot(M a) { return {P##_xor_ps(a.v, P##_castsi##SI##_ps(P##_set1_epi32(-1)))}; } \
  inline int movemask(M a) { return P##_movemask_ps(a.v); }                                  \
  inline bool any(M a) { return movemask(a) != 0; }                                          \
  inline F keep(M m, F x) { return {P##_and_ps(m.v, x.v)}; }                                 \
  inline I to_int(F x) { return {P##_cvttps_epi32(x.v)}; }                                   \
  inline F to_float(I x) { return {P##_cvtepi32_ps(x.v)}; }                                  \
  inline I operator+(I a, I b) { return {P##_add_epi32(a.v, b.v)}; }                         \
  inline I operator&(I a, I b) { return {P##_and_si##SI(a.v, b.v)}; }                          \
  inline I operator|(I a, I b) { return {P##_or_si##SI(a.v, b.v)}; }                           \
  inline I operator^(I a, I b) { return {P##_xor_si##SI(a.v, b.v)}; }                          \
  inline I shl23(I a) { return {P##_slli_epi32(a.v, 23)}; }                                  \
  inline I srl(I a, int n) { return {P##_srl_epi32(a.v, _mm_cvtsi32_si128(n))}; }            \
  inline I sra31(I a) { return {P##_srai_epi32(a.v, 31)}; }                                  \
  inline M eq(I a, I b) { return {P##_castsi##SI##_ps(P##_cmpeq_epi32(a.v, b.v))}; }         \
  inline I as_int(F x) { return {P##_castps_si##SI(x.v)}; }                                    \
  inline F as_float(I x) { return {P##_castsi##SI##_ps(x.v)}; }                              \
  /* round to nearest even through the integer conversion (|y| < 2^31; the default MXCSR   \
     rounding, as the 1.5 * 2^23 trick of vec_scalar.h assumes too), n and ni from it */     \
  inline F round_even(F y, I& ni) {                                                          \
    ni.v = P##_cvtps_epi32(y.v);                                                             \
    return {P##_cvtepi32_ps(ni.v)};                                                          \
  }                                                                                          \
  inline F mul_pow2(F s, F, I ni) {                                                          \
    return s * as_float({P##_slli_epi32(P##_add_epi32(ni.v, P##_set1_epi32(127)), 23)});     \
  }                                                                                          \
  inline void store(float* p, F x) { P##_storeu_ps(p, x.v); }                                \
  inline void store(int32_t* p, I x) { P##_storeu_si##SI(reinterpret_cast<IV*>(p), x.v); }

// The float compares of the levels whose compare takes a predicate: AVX2 (_mm256_cmp_ps, a
// float mask) and AVX-512 (_mm512_cmp_ps_mask, a k mask); ordered except ne_u and unord.
#define SPECOPS_X86_CMP_OPS(CMP)                                            \
  inline M ge(F a, F b) { return {CMP(a.v, b.v, _CMP_GE_OQ)}; }             \
  inline M gt(F a, F b) { return {CMP(a.v, b.v, _CMP_GT_OQ)}; }             \
  inline M lt(F a, F b) { return {CMP(a.v, b.v, _CMP_LT_OQ)}; }             \
  inline M le(F a, F b) { return {CMP(a.v, b.v, _CMP_LE_OQ)}; }             \
  inline M eq_f(F a, F b) { return {CMP(a.v, b.v, _CMP_EQ_OQ)}; }           \
  inline M ne_u(F a, F b) { return {CMP(a.v, b.v, _CMP_NEQ_UQ)}; }          \
  inline M unord(F a, F b) { return {CMP(a.v, b.v, _CMP_UNORD_Q)}; }

// The tag type the passes are templated on (see struct Scalar in vec_scalar.h).
#define SPECOPS_X86_VEC_TAG(NAME, NS, P, LANES)                          \
  struct NAME {                                                          \
    static constexpr int W = LANES;                                      \
    using F = NS::F;                                                     \
    using I = NS::I;                                                     \
    using M = NS::M;                                                     \
    static F load(const float* p) { return {P##_loadu_ps(p)}; }          \
    static F splat(float x) { return {P##_set1_ps(x)}; }                 \
    static I splat_i(int32_t x) { return {P##_set1_epi32(x)}; }          \
  };
