// The block residual is formed in float64 (a float32 rho * p would move the law by 2^-24); its
// mass runs as the active ISA's pass (simd/passes.h pq_masses, which reads p and q once and
// stores nothing), the draw's scan as draw.h's find_in_blocks over the same per-block sums.
#include "verify/block_rows.h"

namespace specops {

uint64_t block_mass(const PRow& p, const float* q, int64_t y, float p_y, double rho, int64_t V,
                    uint64_t* block_sums, uint64_t* beta, RowCheck* chk) {
  uint64_t S = passes().pq_masses(p, q, rho, V, block_sums, true, q ? beta : nullptr,
                                  q ? chk : nullptr);
  if (!q && y >= 0 && y < V) {  // point mass at y: rho * p(y) <= 1 = q(y) gives 0 there
    const uint64_t wy = block_weight(p_y, 0.0f, rho);
    S -= wy;
    if (block_sums) block_sums[y / kDrawBlock] -= wy;
  }
  return S;
}

uint64_t block_mass_until(const PRow& p, const float* q, double rho, int64_t V,
                          uint64_t* block_sums, uint64_t stop_at, bool* complete, RowCheck* chk) {
  // 16 draw blocks (64 KB of p and of q) a chunk: a few checks a row, each after enough
  // tokens that the call's fixed cost stays small
  constexpr int64_t kChunk = 16 * kDrawBlock;
  const Passes& ps = passes();
  uint64_t S = 0;
  for (int64_t c0 = 0; c0 < V; c0 += kChunk) {
    const int64_t n = V - c0 < kChunk ? V - c0 : kChunk;
    PRow pc = p;
    pc.p += c0;
    S += ps.pq_masses(pc, q + c0, rho, n, block_sums + c0 / kDrawBlock, true, nullptr, chk);
    if (S >= stop_at && c0 + n < V) {
      *complete = false;
      return S;
    }
  }
  *complete = true;
  return S;
}

}  // namespace specops
