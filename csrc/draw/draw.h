// The integer inverse-CDF draw (reference section 5).
#pragma once
#include <cstdint>

#include "core/workspace.h"
#include "simd/passes.h"

namespace specops {

// The token drawn with the 64-bit uniform U from the weights W_i = trunc(r_i * 2^60), where
// r = p > q ? p - max(q, 0) : 0 when q is given, else r = p with r[y] = 0 when 0 <= y < V
// (a point-mass draft), else r = p; r falls back to p when it has no mass.  The token is the
// smallest i with W_0 + ... + W_i > floor(U * S / 2^64).  Returns -1 when there is no mass,
// or when some r is outside [0, 1] (rows that passed the validity checks never do).
// With beta (and q): also the min mass of reference section 10 (sum trunc(min(p, max(q, 0)) *
// 2^60)) from the same read of p and q; with chk (and q), q's draft_probs check (RowCheck)
// from that read.
int64_t draw(const float* p, const float* q, int64_t y, int64_t V, uint64_t U, Work& w,
             uint64_t* beta = nullptr, RowCheck* chk = nullptr);

struct RowP;
// The same draw over the p of a transformed row, computed on the fly (P is left as it was,
// or materialised when the residual has no mass).
int64_t draw_row(RowP& P, const float* q, int64_t y, int64_t V, uint64_t U, Work& w,
                 uint64_t* beta = nullptr, RowCheck* chk = nullptr);

// floor(U * S / 2^64), exactly.
inline uint64_t draw_threshold(uint64_t U, uint64_t S) {
  return uint64_t((static_cast<unsigned __int128>(U) * S) >> 64);
}

// The smallest i with W_0 + ... + W_i > t, given the sums of W per kDrawBlock tokens
// (block_sums, nb blocks) and weight(i) = W_i: the scan touches one block.  -1 if none.
template <class Weight>
int64_t find_in_blocks(const uint64_t* block_sums, int64_t nb, int64_t V, uint64_t t,
                       Weight weight) {
  uint64_t cum = 0;
  for (int64_t k = 0; k < nb; ++k) {
    if (cum + block_sums[k] > t) {
      const int64_t b1 = V < (k + 1) * kDrawBlock ? V : (k + 1) * kDrawBlock;
      for (int64_t i = k * kDrawBlock; i < b1; ++i) {
        cum += weight(i);
        if (cum > t) return i;
      }
      return -1;
    }
    cum += block_sums[k];
  }
  return -1;
}

}  // namespace specops
