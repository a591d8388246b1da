// Vec types, AVX-512 level: sixteen float32 lanes, masks in k registers (see vec_scalar.h for
// the contract of each op).  Needs AVX512F and AVX512DQ.  Only separately rounded mul/add/sub
// are used (the unit is built with -ffp-contract=off, so no intrinsic pair is fused into an FMA).
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "core/float_bits.h"
#include "simd/vec_x86.h"

namespace specops {
namespace simd {
namespace {
namespace avx512 {

struct F {
  __m512 v;
};
struct I {
  __m512i v;
};
struct M {
  __mmask16 v;
};

inline F operator+(F a, F b) { return {_mm512_add_ps(a.v, b.v)}; }
inline F operator-(F a, F b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline F operator*(F a, F b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline F max(F a, F b) { return {_mm512_max_ps(a.v, b.v)}; }
SPECOPS_X86_CMP_OPS(_mm512_cmp_ps_mask)
inline M operator&(M a, M b) { return {__mmask16(a.v & b.v)}; }
inline M operator|(M a, M b) { return {__mmask16(a.v | b.v)}; }
inline M mnot(M a) { return {__mmask16(~a.v)}; }
inline int movemask(M a) { return int(a.v); }
inline bool any(M a) { return a.v != 0; }
inline F keep(M m, F x) { return {_mm512_maskz_mov_ps(m.v, x.v)}; }

inline I to_int(F x) { return {_mm512_cvttps_epi32(x.v)}; }  // out of range: INT32_MIN
inline F to_float(I x) { return {_mm512_cvtepi32_ps(x.v)}; }
inline I operator+(I a, I b) { return {_mm512_add_epi32(a.v, b.v)}; }
inline I operator&(I a, I b) { return {_mm512_and_si512(a.v, b.v)}; }
inline I operator|(I a, I b) { return {_mm512_or_si512(a.v, b.v)}; }
inline I operator^(I a, I b) { return {_mm512_xor_si512(a.v, b.v)}; }
inline I shl23(I a) { return {_mm512_slli_epi32(a.v, 23)}; }
inline I srl(I a, int n) { return {_mm512_srl_epi32(a.v, _mm_cvtsi32_si128(n))}; }
inline I sra31(I a) { return {_mm512_srai_epi32(a.v, 31)}; }
inline M eq(I a, I b) { return {_mm512_cmpeq_epi32_mask(a.v, b.v)}; }
inline I max_u(I a, I b) { return {_mm512_max_epu32(a.v, b.v)}; }  // unsigned
inline I as_int(F x) { return {_mm512_castps_si512(x.v)}; }
inline F as_float(I x) { return {_mm512_castsi512_ps(x.v)}; }
// pexp's exact steps (vec_scalar.h) in one instruction each: round to nearest even, and
// s * 2^floor(n) (exact: n is an integer and the result normal where pexp keeps it).
// (ni is not set: mul_pow2 does not use it)
inline F round_even(F y, I&) {
  return {_mm512_roundscale_ps(y.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
inline F mul_pow2(F s, F n, I) { return {_mm512_scalef_ps(s.v, n.v)}; }
inline void store(float* p, F x) { _mm512_storeu_ps(p, x.v); }
inline void store(int32_t* p, I x) { _mm512_storeu_si512(p, x.v); }

// float64 lanes (vec_scalar.h); AVX512DQ converts float64 <-> int64 directly (exact where
// to_f64 and trunc_l are used: the conversions round and truncate as the scalar ones do)
struct D {
  __m512d v;
};
struct L {
  __m512i v;
};
struct MD {
  __mmask8 v;
};
inline D operator*(D a, D b) { return {_mm512_mul_pd(a.v, b.v)}; }
inline D operator-(D a, D b) { return {_mm512_sub_pd(a.v, b.v)}; }
inline D max(D a, D b) { return {_mm512_max_pd(a.v, b.v)}; }
inline MD gt(D a, D b) { return {_mm512_cmp_pd_mask(a.v, b.v, _CMP_GT_OQ)}; }
inline D keep(MD m, D x) { return {_mm512_maskz_mov_pd(m.v, x.v)}; }
inline L operator+(L a, L b) { return {_mm512_add_epi64(a.v, b.v)}; }
inline D to_f64(L x) { return {_mm512_cvtepi64_pd(x.v)}; }
inline L trunc_l(D x) { return {_mm512_cvttpd_epi64(x.v)}; }
inline void store(int64_t* p, L x) { _mm512_storeu_si512(p, x.v); }
inline uint64_t hsum(L x) { return uint64_t(_mm512_reduce_add_epi64(x.v)); }
inline D load_wide(const float* p) { return {_mm512_cvtps_pd(_mm256_loadu_ps(p))}; }
// the low / high eight lanes of x, widened to float64 (exact)
inline D widen_lo(F x) { return {_mm512_cvtps_pd(_mm512_castps512_ps256(x.v))}; }
inline D widen_hi(F x) {
  return {_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x.v), 1)))};
}

// div_flush (vec_scalar.h) through the reciprocal where that is provably the same float32:
// q = float64(e) * c (c = sc / sd correctly rounded; float64(e) * sc is exact) is within 3 ulp
// of the correctly rounded quotient x (three roundings of relative size <= 2^-53).  float32
// rounds q and x alike unless a float32 rounding midpoint lies between them; in the normal
// range the midpoints are the float64 values whose low 29 mantissa bits are 2^28, so a q whose
// low 29 bits are more than kQuotMidUlps (> 3) from 2^28 is safe.  Below 2^-125 the float32
// grid is the subnormal one: q < 2^-127 is still safe (x < 2^-127 (1 + 2^-50): both flush to
// 0), 2^-127 <= q < 2^-125 is not.  A vector with an unsafe lane (about one in 2^23 on real
// rows) takes the division.  Here the division would bound the drawn row's pass (the divider
// retires one float64 every two cycles); at AVX2 width it hides behind the other uops.
constexpr int64_t kQuotMidUlps = 8;

inline __mmask8 quot_unsafe(__m512d q) {
  const __m512i w = _mm512_and_si512(
      _mm512_add_epi64(_mm512_castpd_si512(q),
                       _mm512_set1_epi64(kQuotMidUlps - (int64_t(1) << 28))),
      _mm512_set1_epi64((int64_t(1) << 29) - 1));
  const __mmask8 mid = _mm512_cmplt_epu64_mask(w, _mm512_set1_epi64(2 * kQuotMidUlps + 1));
  const __mmask8 sub = _mm512_mask_cmp_pd_mask(
      _mm512_cmp_pd_mask(q, _mm512_set1_pd(0x1p-127), _CMP_GE_OQ), q, _mm512_set1_pd(0x1p-125),
      _CMP_LT_OQ);
  return __mmask8(mid | sub);
}

inline F div_flush(F e, const DivScale& s) {
  const __m512d el = widen_lo(e).v, eh = widen_hi(e).v;
  const __m512d vc = _mm512_set1_pd(s.c);
  __m512d lo = _mm512_mul_pd(el, vc), hi = _mm512_mul_pd(eh, vc);
  if (quot_unsafe(lo) | quot_unsafe(hi)) {
    const __m512d vd = _mm512_set1_pd(s.sd_sc);
    lo = _mm512_div_pd(el, vd);
    hi = _mm512_div_pd(eh, vd);
  }
  const __m512 p = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)),
                                      _mm512_cvtpd_ps(hi), 1);
  return {_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(p, _mm512_set1_ps(FLT_MIN_F32), _CMP_GE_OQ), p)};
}

// Writes the lanes of x selected by m to dst, in order (a full vector store: callers keep
// kSimdSlack >= 16 floats of room); returns how many.
inline int compress(float* dst, F x, M m) {
  _mm512_storeu_ps(dst, _mm512_maskz_compress_ps(m.v, x.v));
  return __builtin_popcount(unsigned(m.v));
}

}  // namespace avx512

SPECOPS_X86_VEC_TAG(Avx512, avx512, _mm512, 16, 512, true)

}  // namespace
}  // namespace simd
}  // namespace specops
