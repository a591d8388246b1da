// The integer rows of tree verification (reference section 11): the residual R and the draft
// weights Qw at scale 2^60, the update of R after a rejected child, and the final draw.
//
// Everything the walk compares or emits is an integer or a correctly rounded float64
// operation on integers (the build uses -ffp-contract=off), so it is bit-identical to
// specops/reference_tree.py whatever the order of the sums.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/float_bits.h"
#include "draw/draw.h"
#include "simd/passes.h"

namespace specops {

// The residual r of the node being verified: R[z] = trunc(r(z) * 2^60), its sums per
// kDrawBlock tokens (so that the final draw scans one block, draw.h) and A = sum R.
struct Residual {
  int64_t* R = nullptr;
  uint64_t* block_sums = nullptr;
  int64_t V = 0;
  uint64_t A = 0;
};

// 1 / A: the total converted to float64 (round to nearest, as numpy), then one correctly
// rounded division.  Sums stay below 2^63, so the int64 view is exact.
inline double reciprocal(uint64_t total) { return 1.0 / double(int64_t(total)); }

// R(z) * (1 / A): the weight converted to float64, one correctly rounded product (section
// 11 multiplies by the reciprocal: one division per node instead of one per token).
inline double weight_ratio(int64_t w, double inv_total) { return double(w) * inv_total; }

// W[i] = trunc(x[i] * 2^60) for x in [0, 1] (stored when W is given); the sums per
// kDrawBlock tokens into block_sums when given.  Returns sum W.  The active ISA's pass.
inline uint64_t integer_weights(const float* x, int64_t V, int64_t* W, uint64_t* block_sums) {
  return passes().int_weights(x, V, W, block_sums);
}

// One token's trunc(x * 2^60) (x in [0, 1]: the float32 product is exact), as the pass.
inline int64_t integer_weight(float x) { return f2i64(x * kWScaleF); }

// After rejecting token y (A > 0, Q > 0): R'(z) = trunc(d * 2^60) if d > 0 else 0, with
// d = R(z)*(1/A) - Qw(z)*(1/Q) in float64 (two products, one subtraction); Qw == nullptr is the
// point mass at y (Qw(z)/Q is 1 at y, 0 elsewhere).  -1 <= d <= 1, so d * 2^60 converts to
// int64 whatever its sign, and max(trunc(d * 2^60), 0) is the rule without a branch on the
// sign of d (unpredictable: a branch there costs more than the arithmetic).  A block whose
// R is all 0 stays 0 (d <= 0 there) and is skipped: after top-k / top-p, or where real logits
// put no mass, most of the row.  The per-ISA pass (simd/passes.cpp, tree_update) does it.
inline void reject_update(Residual& r, const int64_t* Qw, uint64_t Q, int64_t y) {
  r.A = passes().tree_update(r.R, Qw, reciprocal(r.A), Qw ? reciprocal(Q) : 0.0, y, r.V,
                             r.block_sums);
}

// The draw of section 5 over R (A > 0): the smallest z with R(0) + ... + R(z) >
// floor(U * A / 2^64); -1 if none.
inline int64_t draw_residual(const Residual& r, uint64_t U) {
  const int64_t nb = (r.V + kDrawBlock - 1) / kDrawBlock;
  const int64_t* R = r.R;
  return find_in_blocks(r.block_sums, nb, r.V, draw_threshold(U, r.A),
                        [R](int64_t i) { return uint64_t(R[i]); });
}

}  // namespace specops
