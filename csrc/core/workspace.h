// Per-thread scratch buffers: grown on demand, never shrunk, so the hot path does not
// allocate after the first calls.
#pragma once
#include <cstdint>
#include <vector>

#include "simd/passes.h"

namespace specops {

struct Work {
  std::vector<float> et, ed, tmp, r, cand;  // target e, draft e, select scratch, residual, band
  std::vector<int64_t> hmass;              // top-p mass histograms
  std::vector<int32_t> hcnt;               // top-k count histogram
  std::vector<uint64_t> bsum;              // draw block sums
  std::vector<double> rho;                 // block verification's running weights
  std::vector<uint64_t> block_bsum;        // block verification: two slots of draw block sums
  std::vector<std::vector<float>> block_t, block_d;  // block verification: two row slots
};

// v.data() with room for n floats plus kSimdSlack (vector stores past the end).
inline float* grow(std::vector<float>& v, int64_t n) {
  if (int64_t(v.size()) < n + kSimdSlack) v.resize(size_t(n + kSimdSlack));
  return v.data();
}

inline Work& work() {
  static thread_local Work w;
  return w;
}

}  // namespace specops
