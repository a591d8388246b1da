// The target transform (logits -> probabilities, reference section 2) and the row checks.
#pragma once
#include <cstdint>

#include "core/float_bits.h"
#include "core/workspace.h"
#include "kernels.h"

namespace specops {

// Probabilities of a transformed row, evaluated lazily from e:
// p_i = e_i >= cut ? flush(float32(float64(e_i) * 2^40 / float64(S'))) : 0, where a negative
// entry (a token without integer mass whose exp the pass skipped) holds d and e_i = pexp(d).
struct RowP {
  float* e = nullptr;
  float cut = 0.0f;
  double sd = 1.0;
  bool sparse = true;  // tokens may be masked (top-k / top-p / min-p): passes skip zero vectors
  float operator()(int64_t i) const;
  // p over the whole row, in place over e (afterwards e holds p and cut / sd are neutral)
  void materialize(int64_t V);
};

// Transforms row r of m (non-greedy: inv_t > 0) into ebuf; false if the row is invalid
// (or inv_t is not > 0, outside the canonical arguments).
// `prefetch` (may be null): prefetch_bytes of a row the caller will probably read next; they
// are prefetched during this row's exp pass (ExpOptions::prefetch).
bool transform_row(const Mat& m, int64_t r, float inv_t, int64_t top_k, float top_p,
                   float min_p, float* ebuf, Work& w, RowP& out, const char* prefetch = nullptr,
                   int64_t prefetch_bytes = 0);

// Greedy rows: the lowest-index argmax of row r of logits, -1 if the row is invalid.
int64_t greedy_argmax_row(const Mat& m, int64_t r, float* buf);

// Probability rows: every entry in [0, 1] and 0 < sum trunc(p * 2^32) <= 2^34.
bool probs_row_valid(const float* p, int64_t V);
int64_t argmax_f32(const float* p, int64_t V);

// The thresholds (transform/topk_select.cpp, transform/topp_select.cpp).
float topk_threshold(const float* x, int64_t V, int64_t k, Work& w);
struct TopP {
  float tau;
  int64_t kept;  // S' = sum of E over e >= tau, or kKeptUnknown: the caller sums it
};
constexpr int64_t kKeptUnknown = -1;
TopP top_p_select(const float* e, int64_t V, float top_p, int64_t S, Work& w);
// The same tau and kept mass from the n candidates c (every e >= some lo > 0, gathered by
// the exp pass), when tau lies among them; false when it does not (then top_p_select).
bool top_p_from_candidates(const float* c, int64_t n, float top_p, int64_t S, Work& w,
                           TopP& out);

// The sampling parameters are inside the contract (reference section 8); a row whose own
// parameters are not is invalid, a request malformed.
inline bool params_ok(float inv_t, int64_t top_k, float top_p, float min_p) {
  return inv_t >= 0.0f && inv_t < kInf && top_k >= 0 && top_p > 0.0f && top_p <= 1.0f &&
         min_p >= 0.0f && min_p <= 1.0f;
}

}  // namespace specops
