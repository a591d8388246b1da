// One request's view of the verify arguments: its row starts, effective block length and
// sampling parameters, read once (with every bound the walk relies on).
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/float_bits.h"
#include "kernels.h"
#include "transform/transform.h"

namespace specops {

struct Block {
  int64_t kb = 0;    // effective block length
  bool oob = false;  // draft index d0 + kb is outside the draft arrays: invalid at kb
};

// min(num_draft, the first j whose id is -1 or whose draft index d0 + j is outside
// [0, tlim)); num_draft is in [0, max_k] and every id in [-1, V) (request_malformed).
inline Block block_length(const IntCol& ids, int64_t d0, int64_t nd, int64_t tlim) {
  Block bl;
  bl.kb = nd;
  for (int64_t j = 0; j < bl.kb; ++j) {
    if (!in_range(d0, j, tlim)) {
      bl.kb = j;
      bl.oob = true;
      break;
    }
    if (ids[d0 + j] == -1) {
      bl.kb = j;
      break;
    }
  }
  return bl;
}

// Section 8's parameter rules: out of range, or a transform asked of target probabilities.
inline bool params_malformed(float inv_t, int64_t top_k, float top_p, float min_p,
                             bool target_is_probs) {
  if (!params_ok(inv_t, top_k, top_p, min_p)) return true;
  return target_is_probs &&
         !((inv_t == 0.0f || inv_t == 1.0f) && top_k == 0 && top_p == 1.0f && min_p == 0.0f);
}

// Request b is malformed (reference section 8): it emits nothing and reads no row.
inline bool request_malformed(const VerifyArgs& a, int64_t b) {
  if (params_malformed(a.params.inv_temp[b], a.params.top_k[b], a.params.top_p[b],
                       a.params.min_p[b], a.target_is_probs))
    return true;
  const int64_t nd = a.num_draft[b], d0 = a.draft_row_start[b], V = a.target.cols;
  if (nd < 0 || nd > a.max_k) return true;
  for (int64_t j = 0; j < nd; ++j) {
    if (!in_range(d0, j, a.num_ids)) continue;
    const int64_t id = a.draft_ids[d0 + j];
    if (id < -1 || id >= V) return true;
  }
  return false;
}

struct RequestView {
  int64_t V = 0, N = 0;   // vocabulary, target rows
  int64_t t0 = 0, d0 = 0;  // first target row, first draft index
  bool malformed = false;  // nothing is read or emitted
  Block block;
  float inv_t = 0.0f;
  bool greedy = false;
  int64_t top_k = 0;
  float top_p = 1.0f, min_p = 0.0f;
  uint64_t seed = 0, offset = 0;
  bool forced = false;          // forced mode: a = forced_accepted
  int64_t forced_accepted = 0;

  RequestView(const VerifyArgs& a, int64_t b) {
    V = a.target.cols;
    N = a.target.rows;
    const bool has_draft = a.draft.ptr != nullptr;
    // draft indices must be inside draft_ids and, with a draft matrix, inside its rows
    int64_t tlim = a.num_ids;
    if (has_draft) tlim = std::min(tlim, a.draft.rows);
    if (has_draft && a.draft.cols != V) tlim = 0;  // cannot happen through cpu.py
    t0 = a.target_row_start[b];
    d0 = a.draft_row_start[b];
    malformed = request_malformed(a, b);
    if (!malformed) block = block_length(a.draft_ids, d0, a.num_draft[b], tlim);
    inv_t = a.params.inv_temp[b];
    greedy = inv_t == 0.0f;
    top_k = a.params.top_k[b];
    top_p = a.params.top_p[b];
    min_p = a.params.min_p[b];
    seed = uint64_t(a.seed[b]);
    offset = uint64_t(a.offset[b]);
    forced = a.forced_num_accepted.ptr != nullptr;
    if (forced) forced_accepted = a.forced_num_accepted[b];
  }

  // target row t0 + j exists (and the block did not end on an out-of-range draft index)
  bool target_row_ok(int64_t j) const {
    return !(block.oob && j == block.kb) && in_range(t0, j, N);
  }
};

}  // namespace specops
