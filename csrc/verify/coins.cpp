// Caller-supplied uniforms: sgl-kernel's tree walk (reference section 13,
// specops/reference/coins.py verify_coins_ref), one request per task.  A malformed request
// (specops._sgl_tree.malformed_sgl_requests: a link outside [-1, N), a node that is the target
// of two links, a link to the root, or a present node whose candidate is outside [0, V)) is
// found first, in O(N) reads of its own links, and emits nothing.  Integer masses
// trunc(p * 2^60) (an exact float32 product, truncated), int64 sums and compares, and the
// coin threshold floor(m * M / 2^24) as two exact int64 limb products; the only float64
// operations are the relaxed Ath's conversion and product, as in the reference.  Scalar code
// only (no SIMD pass), so every ISA level computes the same thing.
#include <cmath>
#include <cstdint>
#include <utility>
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
  std::vector<std::pair<int64_t, int64_t>> stack;  // malformed(): (node, tree depth)
  std::vector<uint8_t> linked;                     // malformed(): the node is a link's target

  int64_t id(const int64_t* t, int64_t node) const { return t[b * a.N + node]; }

  // The request's links are out of contract (convert_tree's malformed) or a present node
  // (reachable from the root through links, tree depth <= max_depth; the root excluded) has a
  // candidate outside [0, V).  With every link in [-1, N), no node the target of two links and
  // none into the root, what the root reaches is a tree (each node entered once): the walk
  // from the root ends after at most N nodes.
  bool malformed() {
    const int64_t N = a.N;
    linked.assign(size_t(N), 0);
    for (const int64_t* links : {a.next_token, a.next_sibling})
      for (int64_t n = 0; n < N; ++n) {
        const int64_t t = id(links, n);
        if (t < -1 || t >= N) return true;
        if (t < 0) continue;
        if (t == 0 || linked[size_t(t)]) return true;
        linked[size_t(t)] = 1;
      }
    // depth-first from the root: (node, tree depth); a child link adds 1, a sibling link 0;
    // nodes deeper than max_depth are absent, and so is everything below them
    // (the root's own sibling link counts: its target is present at depth 0)
    stack.clear();
    stack.push_back({0, 0});
    while (!stack.empty()) {
      const auto [n, depth] = stack.back();
      stack.pop_back();
      if (n != 0) {
        const int64_t y = id(a.candidates, n);
        if (y < 0 || y >= a.V) return true;
      }
      const int64_t child = id(a.next_token, n), sibling = id(a.next_sibling, n);
      if (child >= 0 && depth + 1 <= a.max_depth) stack.push_back({child, depth + 1});
      if (sibling >= 0) stack.push_back({sibling, depth});
    }
    return false;
  }

  void run() {
    const int64_t N = a.N, V = a.V, D = a.max_depth;
    int32_t* tokens = a.out_tokens + b * (D + 1);
    int32_t* nodes = a.out_nodes + b * D;
    for (int64_t k = 0; k <= D; ++k) tokens[k] = -1;
    for (int64_t k = 0; k < D; ++k) nodes[k] = -1;
    if (malformed()) {
      a.out_num_accepted[b] = 0;
      a.out_valid[b] = 0;
      return;
    }
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
          if (y < 0 || y >= V) {           // a present node: malformed() refused it already
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
  parallel_for(a.B, a.threads, [&](int64_t b) { CoinWalk{a, b, {}, {}, {}, {}}.run(); });
}

}  // namespace specops
