// The block residual is formed in float64 (a float32 rho * p would move the law by 2^-24); its
// mass runs as the active ISA's pass (simd/passes.h pq_masses, which reads p and q once and
// stores nothing), the draw's scan as draw.h's find_in_blocks over the same per-block sums.
#include "verify/block_rows.h"

namespace specops {

uint64_t block_mass(const PRow& p, const float* q, int64_t y, float p_y, double rho, int64_t V,
                    uint64_t* block_sums, uint64_t* beta) {
  uint64_t S = passes().pq_masses(p, q, rho, V, block_sums, true, q ? beta : nullptr);
  if (!q && y >= 0 && y < V) {  // point mass at y: rho * p(y) <= 1 = q(y) gives 0 there
    const uint64_t wy = block_weight(p_y, 0.0f, rho);
    S -= wy;
    if (block_sums) block_sums[y / kDrawBlock] -= wy;
  }
  return S;
}

}  // namespace specops
