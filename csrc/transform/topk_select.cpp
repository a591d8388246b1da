// The top-k threshold: the k-th largest x of a NaN-free row (0 < k < V), exactly.
#include <algorithm>
#include <functional>

#include "core/float_bits.h"
#include "simd/passes.h"
#include "transform/transform.h"

namespace specops {
namespace {

constexpr int64_t kStreamMaxK = 4096;   // streaming select for k up to this
constexpr int64_t kStreamChunk = 512;   // elements gathered between compactions
constexpr int kHistShift = 21;          // histogram select: 2048 buckets of order keys
constexpr int kHistBuckets = 1 << (32 - kHistShift);

inline uint32_t order_key(float f) {  // unsigned order of the keys = float order
  const uint32_t u = float_to_bits(f);
  return u ^ (uint32_t(int32_t(u) >> 31) | 0x80000000u);
}

// Streaming select for small k: a buffer keeps every x >= thr, where thr is the k-th largest
// of the buffer at its last compaction (so thr never exceeds the row's k-th largest and no
// element >= it is ever dropped); the answer is the k-th largest of the final buffer.
// Returns false (the caller uses the histogram select) when ties keep the buffer from
// shrinking.
bool topk_stream(const float* x, int64_t V, int64_t k, Work& w, float& out) {
  const int64_t cap = std::min<int64_t>(V, 8 * k + 2048);
  float* c = grow(w.tmp, cap + kStreamChunk);
  int64_t n = 0;
  float thr = -kInf;
  const Passes& ps = passes();
  for (int64_t i = 0; i < V; i += kStreamChunk) {
    n += ps.gather_ge(x + i, std::min(kStreamChunk, V - i), thr, c + n);
    if (n <= cap) continue;
    std::nth_element(c, c + (k - 1), c + n, std::greater<float>());
    thr = c[k - 1];
    int64_t m = k;
    for (int64_t t = k; t < n; ++t)
      if (c[t] == thr) c[m++] = c[t];
    n = m;
    if (n > cap / 2) return false;
  }
  if (n < k) return false;  // unreachable for a NaN-free row with k < V
  std::nth_element(c, c + (k - 1), c + n, std::greater<float>());
  out = c[k - 1];
  return true;
}

// Radix select on the order keys (11-bit histogram), then nth_element among the candidates
// of the selected bucket.
float topk_histogram(const float* x, int64_t V, int64_t k, Work& w) {
  w.hcnt.assign(kHistBuckets, 0);
  int32_t* h = w.hcnt.data();
  for (int64_t i = 0; i < V; ++i) h[order_key(x[i]) >> kHistShift] += 1;
  int64_t above = 0;
  int b = kHistBuckets - 1;
  for (; b > 0; --b) {
    if (above + h[b] >= k) break;
    above += h[b];
  }
  const int64_t need = k - above;  // rank inside bucket b, 1-based
  float* c = grow(w.tmp, V);
  const int64_t nc = passes().gather_key(x, V, true, kHistShift, 0xffffffffu, uint32_t(b), c);
  std::nth_element(c, c + (need - 1), c + nc, std::greater<float>());
  return c[need - 1];
}

}  // namespace

float topk_threshold(const float* x, int64_t V, int64_t k, Work& w) {
  float thr;
  if (k <= kStreamMaxK && topk_stream(x, V, k, w, thr)) return thr;
  return topk_histogram(x, V, k, w);
}

}  // namespace specops
