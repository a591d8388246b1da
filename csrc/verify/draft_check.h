// The decision of the default draft_probs check of one row (reference checks.draft_row_ok):
// every entry in [0, 1] (NaN fails) and |M - 2^32| <= DRAFT_MASS_TOLERANCE, M = the exact
// integer sum of trunc(q * 2^32), from what the pass that read the row gathered (RowCheck),
// and exactly the reference's decision at every ISA level and memory layout:
//
// * no entry's bits above 1.0's (0x3f800000, unsigned): every entry is in [+0, 1];
// * S (the float32 lane sums, each of at most kDrawBlock = 1024 entries in [0, 1], added in
//   float64) is within 1023 * 2^-24 (1 + ...) < 2^-14 of sum q, relatively, plus float64
//   roundings far below that; and M * 2^-32 is in (sum q - V * 2^-32, sum q].  So
//   M * 2^-32 lies in [lo, hi] = [S (1 - 2^-11) - V 2^-32, S (1 + 2^-11)] (a margin of 8x),
//   and where [lo, hi] is inside the tolerance, or outside it, the decision is made;
// * otherwise (an entry with its sign bit set, such as -0.0, or > 1, NaN or inf; or a mass
//   within about 5e-4 of the tolerance's edge, which a row of probabilities, summing to 1
//   within float rounding, never is) the row is read again and decided by the reference's
//   rule itself (draft_row_exact).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/float_bits.h"
#include "simd/passes.h"

namespace specops {

// The reference's rule, entry by entry (scalar: the same at every level).
inline bool draft_row_exact(const float* q, int64_t V) {
  uint64_t mass = 0;
  for (int64_t x = 0; x < V; ++x) {
    const float v = q[x];
    if (!(v >= 0.0f && v <= 1.0f)) return false;
    mass += uint64_t(double(v) * 0x1p32);  // exact product, truncated
  }
  const uint64_t one = uint64_t(1) << P_CHECK_BITS;
  return (mass > one ? mass - one : one - mass) <= uint64_t(DRAFT_MASS_TOLERANCE);
}

// Whether the row q [V] that `c` was gathered from is a probability row.
inline bool draft_row_ok(const RowCheck& c, const float* q, int64_t V) {
  if (c.max_bits <= 0x3f800000u) {  // every entry in [+0, 1] (so a finite sum)
    const double t = double(DRAFT_MASS_TOLERANCE) * 0x1p-32;  // (1 +- t: exact in float64)
    const double lo = c.sum * (1.0 - 0x1p-11) - double(V) * 0x1p-32;
    const double hi = c.sum * (1.0 + 0x1p-11);
    if (lo >= 1.0 - t && hi <= 1.0 + t) return true;
    if (hi < 1.0 - t || lo > 1.0 + t) return false;
  }
  return draft_row_exact(q, V);
}

}  // namespace specops
