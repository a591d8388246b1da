// Caller-supplied uniforms: sgl-kernel's tree walk (reference section 13,
// specops/reference/coins.py verify_coins_ref), one request per task.  Integer masses
// trunc(p * 2^60) (an exact float32 product, truncated), int64 sums and compares, and the
// coin threshold floor(m * M / 2^24) as two exact int64 limb products; the only float64
// operations are the relaxed Ath's conversion and product, as in the reference.  Scalar code
// only (no SIMD pass), so every ISA level computes the same thing.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "kernels.h"

namespace specops {
namespace {

constexpr int kCoinBits = 24;
constexpr int64_t kCoinTop = (int64_t(1) << kCoinBits) - 1;

// m(u): the float32 uniform on the 2^-24 grid (NaN and u <= 0: 0; u >= 1: the top).
int64_t coin_grid(float u) {
  if (!(u > 0.0f)) return 0;
  if (u >= 1.0f) return kCoinTop;
  return static_cast<int64_t>(std::floor(static_cast<double>(u) * double(1 << kCoinBits)));
}

// floor(m * M / 2^24), exact for 0 <= m < 2^24 and 0 <= M < 2^63.
int64_t coin_threshold(int64_t m, int64_t M) {
  const int64_t hi = M >> 32, lo = M & 0xFFFFFFFFLL;
  return ((m * hi) << (32 - kCoinBits)) + ((m * lo) >> kCoinBits);
}

// w = trunc(p * 2^60) (0 outside [0, 1], NaN included); returns A = sum w; *ok: section 3's
// probability-row check (sum trunc(p * 2^32) = sum (w >> 28) in (0, 2^34]).
int64_t row_weights(const float* p, int64_t V, int64_t* w, bool* ok) {
  int64_t A = 0, mass = 0;
  bool inside = true;
  for (int64_t x = 0; x < V; ++x) {
    const float v = p[x];
    const bool in = v >= 0.0f && v <= 1.0f;
    inside = inside && in;
    const int64_t wx = in ? static_cast<int64_t>(v * 1152921504606846976.0f) : 0;
    w[x] = wx;
    A += wx;
    mass += wx >> 28;
  }
  *ok = inside && mass > 0 && mass <= (int64_t(1) << 34);
  return A;
}

struct CoinWalk {
  const CoinArgs& a;
  int64_t b;
  std::vector<int64_t> w, tried;

  int64_t id(const int64_t* t, int64_t node) const { return t[b * a.N + node]; }

  void run() {
    const int64_t N = a.N, V = a.V, D = a.max_depth;
    int32_t* tokens = a.out_tokens + b * (D + 1);
    int32_t* nodes = a.out_nodes + b * D;
    for (int64_t k = 0; k <= D; ++k) tokens[k] = -1;
    for (int64_t k = 0; k < D; ++k) nodes[k] = -1;
    w.assign(V, 0);
    int64_t c = 0, j = 0;
    bool valid = true;
    while (true) {
      const float* p = a.target + (b * N + c) * V;
      bool ok = false;
      const int64_t A = row_weights(p, V, w.data(), &ok);
      if (!ok) {
        valid = false;
        break;
      }
      tried.clear();
      int64_t next = -1;
      if (j < D) {
        const int64_t Ath = a.acc_scale == 1.0 ? A
            : static_cast<int64_t>(std::floor(static_cast<double>(A) * a.acc_scale));
        const int64_t t = coin_threshold(coin_grid(a.coins[b * N + c]), Ath);
        int64_t C = 0;
        int64_t x = id(a.next_token, c);
        for (int64_t visits = 0; x >= 0 && x < N && visits < N; ++visits) {
          const int64_t y = id(a.candidates, x);
          if (y < 0 || y >= V) {           // out of contract (the caller checks): refuse
            valid = false;
            break;
          }
          bool dup = false;
          for (int64_t z : tried) dup = dup || z == y;
          if (!dup) C += w[y];
          if (C > t || (a.relaxed && p[y] >= a.single)) {
            next = x;
            break;
          }
          tried.push_back(y);
          x = id(a.next_sibling, x);
        }
        if (!valid) break;
      }
      if (next < 0) {
        tokens[j] = static_cast<int32_t>(draw(p, A));
        break;
      }
      nodes[j] = static_cast<int32_t>(next);
      tokens[j] = static_cast<int32_t>(id(a.candidates, next));
      c = next;
      ++j;
    }
    a.out_num_accepted[b] = static_cast<int32_t>(j);
    a.out_valid[b] = valid ? 1 : 0;
  }

  // The final draw: w without the tried tokens (w itself if that leaves nothing), the
  // smallest x whose cumulative weight exceeds thr(final coin, sum).
  int64_t draw(const float* p, int64_t A) {
    int64_t removed = 0;
    for (int64_t z : tried) {            // a repeated token finds 0 the second time
      removed += w[z];
      w[z] = 0;
    }
    int64_t S = A - removed;
    bool ok = false;
    if (S == 0) S = row_weights(p, a.V, w.data(), &ok);
    if (S == 0) return -1;
    const int64_t tf = coin_threshold(coin_grid(a.final_coins[b]), S);
    int64_t cum = 0;
    for (int64_t x = 0; x < a.V; ++x) {
      cum += w[x];
      if (cum > tf) return x;
    }
    return a.V - 1;                        // unreachable: tf < S
  }
};

}  // namespace

void coin_walk(const CoinArgs& a) {
  parallel_for(a.B, a.threads, [&](int64_t b) { CoinWalk{a, b, {}, {}}.run(); });
}

}  // namespace specops
