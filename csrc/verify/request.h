// One request's view of the verify arguments: its row starts, effective block length and
// sampling parameters, read once (with every bound the walk relies on).
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/float_bits.h"
#include "kernels.h"

namespace specops {

struct Block {
  int64_t kb = 0;    // effective block length
  bool oob = false;  // draft index d0 + kb is outside the draft arrays: invalid at kb
};

// min(num_draft, max_k, the first j whose id is outside [0, V) or whose draft index d0 + j
// is outside [0, tlim)).
inline Block block_length(const IntCol& ids, int64_t d0, int64_t nd, int64_t max_k,
                          int64_t tlim, int64_t V) {
  Block bl;
  bl.kb = std::max<int64_t>(std::min(nd, max_k), 0);
  for (int64_t j = 0; j < bl.kb; ++j) {
    if (!in_range(d0, j, tlim)) {
      bl.kb = j;
      bl.oob = true;
      break;
    }
    const int64_t id = ids[d0 + j];
    if (id < 0 || id >= V) {
      bl.kb = j;
      break;
    }
  }
  return bl;
}

struct RequestView {
  int64_t V = 0, N = 0;   // vocabulary, target rows
  int64_t t0 = 0, d0 = 0;  // first target row, first draft index
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
    block = block_length(a.draft_ids, d0, a.num_draft[b], a.max_k, tlim, V);
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
