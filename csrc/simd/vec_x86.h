// The Vec operations SSE2 and AVX2 spell alike (P = _mm / _mm256, SI = 128 / 256,
// IV = __m128i / __m256i, DV = __m128d / __m256d); vec_sse2.h and vec_avx2.h add the ones that
// differ (compares, float64 division, compress, the int32 <-> int64 lane moves).  SI is the
// integer width (128 / 256).
#pragma once

#define SPECOPS_X86_VEC_OPS(P, SI, IV, DV)                                                    \
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
  inline void store(int32_t* p, I x) { P##_storeu_si##SI(reinterpret_cast<IV*>(p), x.v); }   \
  /* float64 lanes (vec_scalar.h) */                                                         \
  struct D {                                                                                 \
    DV v;                                                                                    \
  };                                                                                         \
  struct L {                                                                                 \
    IV v;                                                                                    \
  };                                                                                         \
  struct MD {                                                                                \
    DV v;                                                                                    \
  };                                                                                         \
  inline D operator*(D a, D b) { return {P##_mul_pd(a.v, b.v)}; }                            \
  inline D operator-(D a, D b) { return {P##_sub_pd(a.v, b.v)}; }                            \
  inline D max(D a, D b) { return {P##_max_pd(a.v, b.v)}; }                                  \
  inline D keep(MD m, D x) { return {P##_and_pd(m.v, x.v)}; }                                \
  inline L operator+(L a, L b) { return {P##_add_epi64(a.v, b.v)}; }                         \
  inline void store(int64_t* p, L x) { P##_storeu_si##SI(reinterpret_cast<IV*>(p), x.v); }   \
  inline uint64_t hsum(L x) {                                                                \
    alignas(SI / 8) int64_t lane[SI / 64];                                                   \
    store(lane, x);                                                                          \
    uint64_t s = 0;                                                                          \
    for (int64_t v : lane) s += uint64_t(v);                                                 \
    return s;                                                                                \
  }

// The float64 <-> int64 conversions of the levels without AVX512DQ, through int32 digits that
// convert exactly (each level defines low_dwords: the low 32 bits of each int64 lane as int32,
// packed into a __m128i; widen: int32 lanes >= 0 of a __m128i to int64 lanes).
//   to_f64 (0 <= x < 2^62): x = hi 2^31 + lo with 31-bit digits; one addition rounds, as a
//     scalar int64 -> float64 conversion does.
//   trunc_l (0 <= x < 2^61): y = x 2^-30 (exact), h = trunc(y) < 2^31, l = trunc((y - h) 2^30)
//     (both steps exact), trunc(x) = h 2^30 + l.
#define SPECOPS_X86_F64_CONVERT(P, SI)                                                        \
  inline D to_f64(L x) {                                                                     \
    const L lo{P##_and_si##SI(x.v, P##_set1_epi64x(0x7fffffff))};                            \
    const L hi{P##_srli_epi64(x.v, 31)};                                                     \
    return {P##_add_pd(P##_mul_pd(P##_cvtepi32_pd(low_dwords(hi)), P##_set1_pd(0x1p31)),     \
                       P##_cvtepi32_pd(low_dwords(lo)))};                                    \
  }                                                                                          \
  inline L trunc_l(D x) {                                                                    \
    const auto y = P##_mul_pd(x.v, P##_set1_pd(0x1p-30));                                    \
    const __m128i h = P##_cvttpd_epi32(y);                                                   \
    const __m128i l =                                                                        \
        P##_cvttpd_epi32(P##_mul_pd(P##_sub_pd(y, P##_cvtepi32_pd(h)), P##_set1_pd(0x1p30))); \
    return {P##_add_epi64(P##_slli_epi64(widen(h).v, 30), widen(l).v)};                      \
  }

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

// The tag type the passes are templated on (see struct Scalar in vec_scalar.h).  SI: the
// integer width (128 / 256 / 512); I64CVT: float64 <-> int64 in one instruction.
#define SPECOPS_X86_VEC_TAG(NAME, NS, P, LANES, SI, I64CVT)                          \
  struct NAME {                                                                      \
    static constexpr int W = LANES;                                                  \
    static constexpr int WD = LANES / 2;                                             \
    static constexpr bool kI64Convert = I64CVT;                                      \
    using F = NS::F;                                                                 \
    using I = NS::I;                                                                 \
    using M = NS::M;                                                                 \
    using D = NS::D;                                                                 \
    using L = NS::L;                                                                 \
    using MD = NS::MD;                                                               \
    static F load(const float* p) { return {P##_loadu_ps(p)}; }                      \
    static F splat(float x) { return {P##_set1_ps(x)}; }                             \
    static I splat_i(int32_t x) { return {P##_set1_epi32(x)}; }                      \
    static D splat_d(double x) { return {P##_set1_pd(x)}; }                          \
    static L load_l(const int64_t* p) {                                              \
      return {P##_loadu_si##SI(reinterpret_cast<const decltype(L::v)*>(p))};         \
    }                                                                                \
    static L zero_l() { return {P##_setzero_si##SI()}; }                             \
    static D load_wide(const float* p) { return NS::load_wide(p); }                  \
  };
