// The integer inverse-CDF draw (reference section 5).
#pragma once
#include <cstdint>

#include "core/workspace.h"

namespace specops {

// The token drawn with the 64-bit uniform U from the weights W_i = trunc(r_i * 2^60), where
// r = p > q ? p - max(q, 0) : 0 when q is given, else r = p with r[y] = 0 when 0 <= y < V
// (a point-mass draft), else r = p; r falls back to p when it has no mass.  The token is the
// smallest i with W_0 + ... + W_i > floor(U * S / 2^64).  Returns -1 when there is no mass,
// or when some r is outside [0, 1] (rows that passed the validity checks never do).
int64_t draw(const float* p, const float* q, int64_t y, int64_t V, uint64_t U, Work& w);

}  // namespace specops
