// The row passes of block verification and of the acceptance rates (reference sections 9,
// 10): the scaled residual's integer mass, its draw, and beta = sum min(p, q).
#pragma once
#include <cstdint>

#include "core/workspace.h"
#include "draw/draw.h"
#include "simd/passes.h"

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

// The weight trunc(d * 2^60) of one token, d = rho * p - max(q, 0) where rho * p > q else 0,
// in float64 (a <= 1, so d * 2^60 <= 2^60 converts exactly to int64).
inline uint64_t block_weight(float px, float qx, double rho) {
  const double a = rho * double(px), b = double(qx);
  return a > b ? uint64_t(int64_t((a - (b > 0.0 ? b : 0.0)) * 0x1p60)) : 0;
}

// S = sum_x trunc(d(x) * 2^60) of position j's scaled residual (section 9) in one read of p
// and q (Passes::pq_masses), q == nullptr: a point mass at y, whose own token (p(y) = p_y)
// is taken out.  With `block_sums`, also the sums per kDrawBlock tokens (for the draw); with
// `beta` (and q), the acceptance rate's mass (section 10) from the same read; with `chk` (and
// q), q's draft_probs check (RowCheck) from that read.
uint64_t block_mass(const PRow& p, const float* q, int64_t y, float p_y, double rho, int64_t V,
                    uint64_t* block_sums, uint64_t* beta, RowCheck* chk = nullptr);

// The least S from which the stop test u < block_stop_probability(S, rho) holds for every
// S' >= S as well (UINT64_MAX: none found, e.g. rho = 1, where the caller needs no S).  The
// computed h of an S is within 2^-50 (relative: three roundings and the int64 -> float64
// conversion) of the exact S / (S + c * 2^60), c = 1 - rho as computed, which grows with S;
// a margin of 2^-40 over u at the returned S keeps every larger S's computed h above u.
// The scan of a position may stop once its partial (unsigned, growing) mass reaches it.
inline uint64_t block_stop_at(double u, double rho) {
  if (!(rho >= 0.0 && rho < 1.0) || !(u >= 0.0 && u < 1.0)) return UINT64_MAX;
  if (u == 0.0) return 1;  // h >= 2^-61 > 0 for every S >= 1 (den <= 2)
  const double z = u * (1.0 - rho) / (1.0 - u);  // h(z) = u
  const double s = z * 0x1p60 * (1.0 + 0x1p-30) + 2.0;
  if (!(s < 0x1p61)) return UINT64_MAX;  // (S <= 2^60 always: sum of d <= rho <= 1)
  const uint64_t S = uint64_t(s);
  return block_stop_probability(S, rho) > u * (1.0 + 0x1p-40) ? S : UINT64_MAX;
}

// block_mass (with q, no beta) scanned a chunk of kDrawBlock blocks at a time, stopping once
// the partial sum reaches stop_at (*complete = false: S and the block sums are partial, S >=
// stop_at, and so is `chk`); else the full S and block sums, *complete = true.  The chunks'
// sums are the full pass's (per-block integer sums).  With `chk`, q's draft_probs check
// (RowCheck) of the chunks read.
uint64_t block_mass_until(const PRow& p, const float* q, double rho, int64_t V,
                          uint64_t* block_sums, uint64_t stop_at, bool* complete,
                          RowCheck* chk = nullptr);

// The draw of section 9 at tau over the weights whose total S and per-block sums block_mass
// gave; p_at(i) is p(i).  (S == 0, the fallback to p, is the caller's.)
template <class PAt>
int64_t block_find(const uint64_t* block_sums, uint64_t S, uint64_t U, int64_t V, PAt p_at,
                   const float* q, int64_t y, double rho) {
  const int64_t nb = (V + kDrawBlock - 1) / kDrawBlock;
  return find_in_blocks(block_sums, nb, V, draw_threshold(U, S), [&](int64_t i) {
    return q ? block_weight(p_at(i), q[i], rho) : (i == y ? 0 : block_weight(p_at(i), 0.0f, rho));
  });
}

// beta = float32(M * 2^-60) of a min mass M, at most 1 (section 10).
inline float rate_from_mass(uint64_t M) {
  const float b = float(double(int64_t(M)) * 0x1p-60);
  return b < 1.0f ? b : 1.0f;
}

}  // namespace specops
