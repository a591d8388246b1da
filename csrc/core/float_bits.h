// Float bit patterns, exact conversions, index checks and the scale constants of the spec
// (specops/reference.py, sections 2 and 5).  Header-only, ISA-independent.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>

namespace specops {

constexpr int E_SCALE_BITS = 40;  // E = trunc(e * 2^40): masses in the transform
constexpr int W_SCALE_BITS = 60;  // W = trunc(r * 2^60): weights of the inverse-CDF draw
constexpr int P_CHECK_BITS = 32;  // coarse mass check of probability rows
// the default draft_probs check (reference checks.draft_row_ok): |sum trunc(q * 2^32) - 2^32|
// at most this (1e-2 of 2^32, truncated)
constexpr int64_t DRAFT_MASS_TOLERANCE = 42949672;
constexpr int64_t MAX_VOCAB = int64_t(1) << 22;
constexpr float FLT_MIN_F32 = 1.17549435082228750797e-38f;  // smallest normal float
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kEScale = 0x1p40;   // 2^E_SCALE_BITS
constexpr float kEScaleF = 0x1p40f;
constexpr float kWScaleF = 0x1p60f;  // 2^W_SCALE_BITS

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// float -> int64 truncation; out of range / NaN gives INT64_MIN (what x86 and numpy do),
// without undefined behaviour.
inline int64_t f2i64(float v) {
  return (v >= -9.2233715e18f && v < 9.2233715e18f) ? int64_t(v)
                                                     : std::numeric_limits<int64_t>::min();
}

// The transform's probability p = float32(float64(e) * sc / sd) (sc = 2^40: the product is
// exact), reference section 2.  Since sc is a power of two, float64(e) / (sd / sc) is the same
// correctly rounded quotient (sd / sc is exact: 1 <= sd / sc <= 2^22), one multiply fewer;
// c = sc / sd lets the AVX-512 level multiply where it can prove the float32 result equal
// (simd/vec_avx512.h).  Every level gives the bits of the division.
struct DivScale {
  double sc, sd, c, sd_sc;
  DivScale(double sc_, double sd_) : sc(sc_), sd(sd_), c(sc_ / sd_), sd_sc(sd_ / sc_) {}
};

// Integer mass of an e value in [0, 1] (exact).
// E of a transformed row's entry; a negative entry (a token the exp pass skipped, holding
// d = x - m < EXP_ZERO_MASS, see simd/passes.h) has E = 0.
inline int64_t emass(float e) { return e > 0.0f ? f2i64(e * kEScaleF) : 0; }

// index base + j inside [0, n) without overflow
inline bool in_range(int64_t base, int64_t j, int64_t n) {
  return base >= 0 && base < n && j >= 0 && j < n - base;
}

}  // namespace specops
