// Portable float32 exp for d <= 0 (specops/reference.py, section 2), written once over the
// Vec types of simd/vec_*.h (scalar, SSE2 and AVX2 lanes run the same operations).  Every
// operation is a separately rounded float32 IEEE operation; the build uses -ffp-contract=off
// and no FMA, so that no multiply-add is fused.
#pragma once

namespace specops {

constexpr float EXP_CUTOFF = -86.0f;
// Every float32 d < EXP_ZERO_MASS has trunc(pexp(d) * 2^40) == 0: such a token adds nothing
// to a row's integer mass S and can never be the top-p threshold, so the passes that compute
// S and the thresholds may skip its exp (reference section 2, "Tokens without integer mass";
// checked over every float32 below the bound by tests/test_zero_mass.py).  Derivation: for
// d < -27.75, n = round(d * log2e) <= -40.  n <= -41: pexp(d) <= 1.42 * 2^-41 < 2^-40.
// n = -40: r = d + 40 ln2 (+ < 1e-6 of rounding) < -0.024, so s = Horner(r) <= 0.98 and
// pexp(d) = s * 2^-40 < 2^-40.
constexpr float EXP_ZERO_MASS = -27.75f;
constexpr float EXP_LOG2E = 1.44269502162933349609375f;
constexpr float EXP_ROUND = 12582912.0f;  // 1.5 * 2^23
constexpr float EXP_LN2_HI = 0.693145751953125f;
constexpr float EXP_LN2_LO = 1.428606765330187045e-06f;
// Taylor coefficients of exp on |r| <= ln2/2, highest degree first (Horner order).
constexpr float EXP_COEFFS[8] = {float(1.0 / 5040.0), float(1.0 / 720.0), float(1.0 / 120.0),
                                 float(1.0 / 24.0),   float(1.0 / 6.0),   0.5f,
                                 1.0f,                1.0f};

// 0 if not d >= -86; else s * 2^n with n = round(d * log2e), r = d - n ln2 (two steps),
// s = Horner(EXP_COEFFS, r).  S is a Vec tag (simd/vec_*.h); its round_even and mul_pow2 are
// exact (n is an integer with |n| <= 125 where it matters, s * 2^n a normal float), so every
// level's way of spelling them gives the same bits.
template <class S>
inline typename S::F pexp_v(typename S::F d) {
  using F = typename S::F;
  const auto ok = ge(d, S::splat(EXP_CUTOFF));  // false for NaN and for d < -86
  const F dd = keep(ok, d);
  typename S::I ni;
  const F n = round_even(dd * S::splat(EXP_LOG2E), ni);
  const F r = (dd - n * S::splat(EXP_LN2_HI)) - n * S::splat(EXP_LN2_LO);
  F s = S::splat(EXP_COEFFS[0]);
  for (int c = 1; c < 8; ++c) s = s * r + S::splat(EXP_COEFFS[c]);
  return keep(ok, mul_pow2(s, n, ni));
}

// pexp_v of N independent vectors, step by step across them: the same operations per lane
// (so the same bits), interleaved so that N latency chains overlap (the Horner chain alone
// is 14 dependent operations).
template <class S, int N>
inline void pexp_n(const typename S::F* d, typename S::F* out) {
  using F = typename S::F;
  using Mk = decltype(ge(d[0], d[0]));
  const F cut = S::splat(EXP_CUTOFF);
  Mk ok[N];
  F dd[N], n[N], r[N], s[N];
  typename S::I ni[N];
  for (int k = 0; k < N; ++k) ok[k] = ge(d[k], cut);
  for (int k = 0; k < N; ++k) dd[k] = keep(ok[k], d[k]);
  for (int k = 0; k < N; ++k) n[k] = round_even(dd[k] * S::splat(EXP_LOG2E), ni[k]);
  for (int k = 0; k < N; ++k) r[k] = (dd[k] - n[k] * S::splat(EXP_LN2_HI)) - n[k] * S::splat(EXP_LN2_LO);
  for (int k = 0; k < N; ++k) s[k] = S::splat(EXP_COEFFS[0]);
  for (int c = 1; c < 8; ++c)
    for (int k = 0; k < N; ++k) s[k] = s[k] * r[k] + S::splat(EXP_COEFFS[c]);
  for (int k = 0; k < N; ++k) out[k] = keep(ok[k], mul_pow2(s[k], n[k], ni[k]));
}

}  // namespace specops
