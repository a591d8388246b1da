// The shard-local passes of specops.distributed (reference section 12) on the CPU: the same
// numbers as the eager torch code of specops/distributed/_transform.py, _radix.py and
// _walk.py, row by row on the active ISA level's passes (simd/passes.h) where one exists and
// in plain scalar C++ where the shard protocol needs something the verifier never computes
// (the radix histograms, the point mass's excluded column, the draw's search inside a
// shard).  The collectives stay in Python (torch.distributed): each function here is one
// local step between two of them.
//
// Buffers arrive as addresses of tensors the Python side allocated and keeps alive (float32
// rows with a row stride in elements, int64 / float32 / float64 / bool vectors); rows are
// independent, so each call runs its rows on the thread pool (core/parallel.h).
#include "distributed/shard_passes.h"

#include <cstring>
#include <vector>

#include "core/float_bits.h"
#include "core/parallel.h"
#include "simd/passes.h"

namespace specops {
namespace {

constexpr int64_t kM32 = 0xFFFFFFFFll;

// _radix.signed_key: the float's bits (-0.0 taken as +0.0) with a negative float's
// magnitude bits flipped, as int32 ordered like the floats.
inline int32_t signed_key(float v) {
  const int32_t b = int32_t(float_to_bits(v + 0.0f));
  return b ^ ((b >> 31) & 0x7FFFFFFF);
}

// _radix.pack_max: signed_key(v) * 2^32 + (2^32 - 1 - index), as int64.
inline int64_t pack_max(float v, int64_t index) {
  return int64_t(signed_key(v)) * (int64_t(1) << 32) + (kM32 - index);
}

// Per-thread scratch rows, grown on demand and never shrunk (as core/workspace.h): a pass
// allocates nothing after the first calls.
inline float* scratch_f(int64_t V) {
  static thread_local std::vector<float> v;
  if (int64_t(v.size()) < V + kSimdSlack) v.resize(size_t(V + kSimdSlack));
  return v.data();
}
inline uint64_t* scratch_bsum(int64_t V) {
  static thread_local std::vector<uint64_t> v;
  const int64_t n = (V + kDrawBlock - 1) / kDrawBlock + 1;
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

// The draw weights of one entry (reference section 5 / 9, as _walk.weights computes them).
inline int64_t w_of(float r) { return f2i64(r * kWScaleF); }

inline int64_t block_w(float p, double qd, double rho) {
  const double pd = double(p) * rho;
  if (!(pd > qd)) return 0;  // NaN q: no weight
  const double d = (pd - (qd > 0.0 ? qd : 0.0)) * 0x1p60;
  return int64_t(d);
}

// The weight of column i of a request's row under `kind` (see shard_passes.h).
inline int64_t weight_at(int kind, const float* p, const float* q, int64_t i, int64_t y,
                         double rho) {
  switch (kind) {
    case kBonus:
      return w_of(p[i]);
    case kResidual:
      if (!q) return i == y ? 0 : w_of(p[i]);
      return w_of(p[i] > q[i] ? p[i] - (q[i] > 0.0f ? q[i] : 0.0f) : 0.0f);
    default:  // kBlock
      return block_w(p[i], q ? double(q[i]) : (i == y ? 1.0 : 0.0), rho);
  }
}

// A row's sum of weights per kDrawBlock tokens (bsum) and its total, on the level's passes;
// the point mass's own column (y, -1: not in this shard) taken out where the passes read
// q = 0 there.
uint64_t row_weight_sums(int kind, const float* p, const float* q, int64_t y, double rho,
                         int64_t V, float* scratch, uint64_t* bsum) {
  const Passes& ps = passes();
  bool bad = false;
  uint64_t total;
  if (kind == kBonus) {
    total = ps.weights(p, nullptr, scratch, V, bsum, &bad, nullptr, nullptr);
  } else if (kind == kResidual) {
    total = ps.weights(p, q, scratch, V, bsum, &bad, nullptr, nullptr);
  } else if (kind == kBlock) {
    total = ps.block_mass(p, q, rho, V, bsum);
  } else {  // kMin
    return ps.min_mass(p, q, scratch, V);
  }
  if (!q && kind != kBonus && y >= 0 && y < V) {  // the lanes took q = 0 at y
    const uint64_t took =
        kind == kResidual ? uint64_t(w_of(p[y])) : uint64_t(block_w(p[y], 0.0, rho));
    const uint64_t want = uint64_t(weight_at(kind, p, q, y, y, rho));
    bsum[y / kDrawBlock] = bsum[y / kDrawBlock] - took + want;
    total = total - took + want;
  }
  return total;
}

}  // namespace

void shard_stats(const float* src, const int64_t* src_row, int64_t src_stride, float* rows,
                 int64_t n, int64_t V, int64_t stride, const float* inv_t,
                 int64_t vocab_start, int64_t* stats, int threads) {
  const Passes& ps = passes();
  parallel_for(n, threads, [&](int64_t r) {
    float* x = rows + r * stride;
    const float* lg = src ? src + src_row[r] * src_stride : x;
    const float it = inv_t[r];
    int64_t* o = stats + 5 * r;
    if (it != 0.0f) {
      // A sampled row reads only x: one pass.  Its l flags are implied by x's (inv_t > 0 or
      // NaN: NaN / +inf in l stay NaN / +inf in x; l all -inf makes x all -inf, and either
      // x flag makes the row invalid), and its argmax is never read (only greedy rows'
      // are), so the l entries are x's and the argmax column 0.
      const RowScan s = ps.scale_max(lg, x, V, it);  // x = l * inv_t, into the row
      o[0] = pack_max(s.mx, vocab_start);
      o[1] = pack_max(s.mx, 0);
      o[2] = s.bad ? 1 : 0;
      o[3] = o[4] = s.allneg ? 0 : 1;
      return;
    }
    // A greedy row reads only l (its max, lowest-index argmax and flags): x = l * 0 is
    // never read (the row is not hot, its p is the one-hot), so it is not stored.
    const RowScan l = ps.scale_max(lg, nullptr, V, 1.0f);
    int64_t am = 0;
    if (!l.bad && !l.allneg) am = ps.first_eq(lg, V, l.mx);
    // torch's argmax of a row with NaN is its first NaN; such a row is invalid on every
    // rank (the flag is max-reduced), so its argmax is never read: any index will do.
    if (am < 0) am = 0;
    const float lmax = l.bad ? lg[am] : l.mx;
    o[0] = pack_max(lmax, am + vocab_start);
    o[1] = pack_max(0.0f, 0);  // m: not read for a greedy row
    o[2] = l.bad ? 1 : 0;
    o[3] = l.allneg ? 0 : 1;
    o[4] = 1;                  // x's flag: ignored for a greedy row
  });
}

void shard_masses(float* rows, int64_t n, int64_t V, int64_t stride, const float* m,
                  const float* thr, const bool* hot, const float* min_p, int64_t* mass,
                  int threads) {
  const Passes& ps = passes();
  parallel_for(n, threads, [&](int64_t r) {
    float* x = rows + r * stride;
    int64_t* o = mass + 2 * r;
    if (!hot[r]) {  // greedy or invalid: e = 0
      std::memset(x, 0, sizeof(float) * size_t(V));
      o[0] = o[1] = 0;
      return;
    }
    const uint64_t S = ps.exp_pass(x, V, m[r], thr[r], false, nullptr);
    o[0] = int64_t(S);
    // every e >= 0 >= min_p where min_p <= 0 (a NaN min_p is malformed: the row is not hot)
    o[1] = min_p[r] > 0.0f ? int64_t(ps.masked_mass(x, V, min_p[r])) : int64_t(S);
  });
}

void shard_hist(const float* rows, int64_t n, int64_t V, int64_t stride, bool weighted,
                int shift, const int64_t* prefix, int64_t* hist, int threads) {
  const Passes& ps = passes();
  parallel_for(n, threads, [&](int64_t r) {
    const float* x = rows + r * stride;
    int64_t* h = hist + 256 * r;
    const int hs = shift + 8;
    const uint32_t want = hs >= 32 ? 0u : uint32_t(uint64_t(prefix[r]) >> hs);
    if (weighted) {
      // top-p: keys are e's own bits (e >= 0), weights E = trunc(e 2^40) (an entry of no
      // mass adds 0 to its bin).  The first round bins every entry; later rounds gather the
      // entries inside the chosen bucket (vectorised) and bin those.
      if (hs >= 32) {  // every entry: four partial histograms (equal digits in a row)
        int64_t part[4][256] = {};
        int64_t i = 0;
        for (; i + 4 <= V; i += 4)
          for (int k = 0; k < 4; ++k) {
            const float e = x[i + k];
            part[k][(float_to_bits(e) ^ 0x80000000u) >> 24] += emass(e);
          }
        for (; i < V; ++i) part[0][(float_to_bits(x[i]) ^ 0x80000000u) >> 24] += emass(x[i]);
        for (int d = 0; d < 256; ++d) h[d] += part[0][d] + part[1][d] + part[2][d] + part[3][d];
        return;
      }
      float* cand = scratch_f(V);
      const int64_t c = ps.gather_key(x, V, false, hs, 0xFFFFFFFFu >> hs,
                                      want ^ (0x80000000u >> hs), cand);
      for (int64_t i = 0; i < c; ++i) {
        const float e = cand[i];
        h[((float_to_bits(e) ^ 0x80000000u) >> shift) & 255] += emass(e);
      }
      return;
    }
    // top-k: count the x by signed_key order (-0.0 counted as +0.0).  The first round counts
    // every entry (four partial histograms, so that runs of equal digits do not serialise on
    // one counter); later rounds gather the entries of the chosen bucket with the level's
    // order_key filter, which orders -0.0 below +0.0: the two buckets next to zero are
    // counted by the scalar loop instead.
    std::vector<int64_t> part(4 * 256, 0);
    const bool near_zero = hs < 32 && (want == (0x80000000u >> hs) || want == (0x7FFFFFFFu >> hs));
    if (hs < 32 && !near_zero) {
      float* cand = scratch_f(V);
      const int64_t c = ps.gather_key(x, V, true, hs, 0xFFFFFFFFu >> hs, want, cand);
      for (int64_t i = 0; i < c; ++i)
        ++h[((uint32_t(signed_key(cand[i])) ^ 0x80000000u) >> shift) & 255];
      return;
    }
    int64_t i = 0;
    if (hs >= 32) {
      for (; i + 4 <= V; i += 4)
        for (int k = 0; k < 4; ++k)
          ++part[256 * k + ((uint32_t(signed_key(x[i + k])) ^ 0x80000000u) >> 24)];
    }
    for (; i < V; ++i) {
      const uint32_t u = uint32_t(signed_key(x[i])) ^ 0x80000000u;
      if (hs < 32 && (u >> hs) != want) continue;
      ++part[(u >> shift) & 255];
    }
    for (int d = 0; d < 256; ++d) h[d] += part[d] + part[256 + d] + part[512 + d] + part[768 + d];
  });
}

void shard_materialize(float* rows, int64_t n, int64_t V, int64_t stride, const bool* hot,
                       const float* cut, const double* div, int threads) {
  const Passes& ps = passes();
  parallel_for(n, threads, [&](int64_t r) {
    if (hot[r]) ps.materialize(rows + r * stride, V, cut[r], div[r]);
  });
}

void shard_row_sums(const RowRefs& a, int64_t n, int64_t V, bool want_p, int64_t* out,
                    int threads) {
  parallel_for(n, threads, [&](int64_t r) {
    float* scratch = scratch_f(V);
    uint64_t* bsum = scratch_bsum(V);
    const float* p = a.p + a.p_row[r] * a.p_stride;
    const float* q = a.q && a.q_row[r] >= 0 ? a.q + a.q_row[r] * a.q_stride : nullptr;
    const int kind = a.kind[r];
    out[2 * r] = int64_t(row_weight_sums(kind, p, q, a.y[r], a.rho[r], V, scratch, bsum));
    out[2 * r + 1] =
        kind == kBonus ? out[2 * r]
        : want_p ? int64_t(row_weight_sums(kBonus, p, nullptr, -1, 1.0, V, scratch, bsum))
                 : 0;
  });
}

void shard_draw_search(const RowRefs& a, int64_t n, int64_t V, const int64_t* t,
                       int64_t* idx, int threads) {
  parallel_for(n, threads, [&](int64_t r) {
    if (t[r] < 0 || a.kind[r] == kMin) return;  // not this shard's draw: idx left as given
    uint64_t* bsum = scratch_bsum(V);
    const float* p = a.p + a.p_row[r] * a.p_stride;
    const float* q = a.q && a.q_row[r] >= 0 ? a.q + a.q_row[r] * a.q_stride : nullptr;
    const int kind = a.kind[r];
    row_weight_sums(kind, p, q, a.y[r], a.rho[r], V, scratch_f(V), bsum);
    // torch.searchsorted(cumsum, t, right=True): the number of prefix sums <= t
    uint64_t before = 0;
    const uint64_t target = uint64_t(t[r]);
    int64_t k = 0;
    for (; k * kDrawBlock < V && before + bsum[k] <= target; ++k) before += bsum[k];
    int64_t i = k * kDrawBlock < V ? k * kDrawBlock : V;  // V: t past the row's mass
    for (; i < V; ++i) {
      before += uint64_t(weight_at(kind, p, q, i, a.y[r], a.rho[r]));
      if (before > target) break;
    }
    idx[r] = i;
  });
}

}  // namespace specops
