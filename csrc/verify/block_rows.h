// The row passes of block verification and of the acceptance rates (reference sections 9,
// 10): the scaled residual's integer mass, its draw, and beta = sum min(p, q).
#pragma once
#include <cstdint>

#include "core/workspace.h"

namespace specops {

// rho_{j+1} from rho_j, p_j(y_j), q_j(y_j) (float64; NaN gives 0).
inline double block_next_rho(double rho, float p_y, float q_y) {
  const double t = rho * double(p_y), q = double(q_y);
  if (t > 0.0 && t >= q) return 1.0;
  if (t > 0.0 && q > 0.0) return t / q;
  return 0.0;
}

// h_j = z / (z + (1 - rho)), z = S * 2^-60; 1 when the denominator is 0.
inline double block_stop_probability(uint64_t S, double rho) {
  const double z = double(int64_t(S)) * 0x1p-60;
  const double den = z + (1.0 - rho);
  return den > 0.0 ? z / den : 1.0;
}

// S = sum_x trunc(d(x) * 2^60), d = rho * p - max(q, 0) where rho * p > q else 0, in
// float64; q == nullptr: a point mass at y.  With `block_sums`, also the sums per
// kDrawBlock tokens (for the draw).
uint64_t block_mass(const float* p, const float* q, int64_t y, double rho, int64_t V,
                    uint64_t* block_sums);

// The draw of section 5 over the weights of block_mass (falling back to trunc(p * 2^60)
// when they sum to 0); -1 when there is no mass at all.
int64_t block_draw(const float* p, const float* q, int64_t y, double rho, int64_t V, uint64_t U,
                   Work& w);

// beta = float32(sum_x trunc(min(p(x), max(q(x), 0)) * 2^60) * 2^-60); NaN q counts 0.
float accept_rate(const float* p, const float* q, int64_t V, Work& w);

}  // namespace specops
