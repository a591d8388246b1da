// Greedy multi-path block verification (reference section 15, reference/gbv.py), one request
// at a time.  The tree is a root with K chains of one length L (section 15's shape; any other
// shape is malformed).  Three steps:
//
//   select:  Y = the lexicographic maximum of the K chains under each node's order of p / q
//            (best = chain 0; chain k replaces it iff, at the first depth where their tokens
//            differ, its token ranks strictly above best's in the order of best's node);
//   skew:    at every position j of Y, q~_j = the law of the next token of the maximum of K
//            i.i.d. paths given the prefix: the node's tokens sorted by rank, integer prefix
//            masses F / F- (exact), the sum-of-products recurrence in the rescaled state (a, b);
//   verify:  section 9's block verification on Y with q~ in place of q (rho, the integer
//            scaled residual, h_j, tau = max{j : u_{j-1} < h_j}, the draw at tau).
//
// Every float operation is the reference's, in its order, correctly rounded (the build uses
// -ffp-contract=off); sums over the vocabulary are integers.  The sort uses float64 quotient
// keys, which order exactly as the reference's cross products (contract section 15: distinct
// ratios of float32 values are distinct float64 quotients).  The draw at tau < e recomputes
// the row of that position (its state was kept) instead of holding L rows.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/float_bits.h"
#include "core/parallel.h"
#include "core/philox.h"
#include "core/rows.h"
#include "core/workspace.h"
#include "draw/draw.h"
#include "transform/transform.h"
#include "verify/request.h"
#include "verify/tree.h"
#include "verify/tree_request.h"

namespace specops {
namespace {

// Per-thread scratch, grown on demand.
struct GbvWork {
  std::vector<int64_t> depth, nkids, only_kid, heads, chains, Qw, Fw;
  std::vector<std::pair<double, int64_t>> keys;
  std::vector<float> p, q, onehot;
};

GbvWork& gbv_work() {
  static thread_local GbvWork w;
  return w;
}

// reference gbv.rank_below: a ranks strictly below b (p / q ascending; q = 0 above every
// q > 0; ties, equal cross products or both q = 0, by the token id).  p or q nullptr: by id.
bool rank_below(const float* p, const float* q, int64_t a, int64_t b) {
  if (a == b) return false;
  if (p && q) {
    const bool za = !(q[a] > 0.0f), zb = !(q[b] > 0.0f);
    if (za != zb) return zb;
    if (!za) {
      const double lhs = double(p[a]) * double(q[b]);
      const double rhs = double(p[b]) * double(q[a]);
      if (lhs != rhs) return lhs < rhs;
    }
  }
  return a < b;
}

// reference gbv.skew_sum: sum_{i<K} X^i Y^(K-1-i) by s = 1, y = 1; y *= Y; s = s * X + y.
inline double skew_sum(double X, double Y, int64_t K) {
  double s = 1.0, y = 1.0;
  for (int64_t k = 1; k < K; ++k) {
    y = y * Y;
    s = s * X + y;
  }
  return s;
}

// The skewed row of one position: q, its integer weights and rank prefix masses, the state.
struct Skew {
  const float* q = nullptr;
  const int64_t* Qw = nullptr;
  const int64_t* Fw = nullptr;  // nullptr: K = 1 (q~ = q, no ranking needed)
  double a = 0.0, b = 1.0, iq = 0.0, inv_z = 1.0;
  int64_t K = 1;

  // reference gbv.skew_row at token x: X = a + b * F, Y = a + b * Fm, (q * S) * (1 / Z).
  double at(int64_t x) const {
    if (!Fw) return double(q[x]);
    const double F = double(Fw[x]) * iq;
    const double Fm = double(Fw[x] - Qw[x]) * iq;
    const double S = skew_sum(a + b * F, a + b * Fm, K);
    return (double(q[x]) * S) * inv_z;
  }
};

inline int64_t residual_weight(float p, double qt, double rho) {
  const double pd = double(p) * rho;
  return pd > qt ? int64_t((pd - qt) * 0x1p60) : 0;
}

class GbvWalk : TreeRequest {
 public:
  GbvWalk(const TreeArgs& a, int64_t b, Work& w, GbvWork& gw)
      : TreeRequest(a, b, w), gw_(gw), point_mass_(a.draft.ptr == nullptr) {}

  void run() {
    if (malformed(gw_.depth) || !chains_ok()) return;
    if (point_mass_ && K_ > 1) return;  // the selection and q~ need the draft rows
    if (inv_t_ == 0.0f) return greedy();
    const int64_t* path = chain(select_path());
    verify(path);
  }

 private:
  // reference gbv.gbv_chains: the root's children in node order, each followed down its only
  // child; false on a branch below the root or chains of different lengths.
  bool chains_ok() {
    const int64_t N = a_.N;
    gw_.nkids.assign(size_t(N), 0);
    gw_.only_kid.assign(size_t(N), -1);
    gw_.heads.clear();
    for (int64_t n = 1; n < n_; ++n) {
      if (depth_[n] < 0) continue;
      const int64_t p = parent(n);
      if (p == 0) {
        gw_.heads.push_back(n);
      } else if (gw_.nkids[size_t(p)]++ == 0) {
        gw_.only_kid[size_t(p)] = n;
      }
    }
    K_ = int64_t(gw_.heads.size());
    L_ = -1;
    gw_.chains.clear();
    for (int64_t h : gw_.heads) {
      int64_t len = 0;
      for (int64_t c = h;; c = gw_.only_kid[size_t(c)]) {
        gw_.chains.push_back(c);
        ++len;
        if (gw_.nkids[size_t(c)] == 0) break;
        if (gw_.nkids[size_t(c)] > 1) return false;
      }
      if (L_ >= 0 && len != L_) return false;
      L_ = len;
    }
    if (L_ < 0) L_ = 0;
    return true;
  }

  const int64_t* chain(int64_t k) const { return gw_.chains.data() + k * L_; }

  // The node at depth d of chain k (the root at d = 0).
  int64_t node_at(int64_t k, int64_t d) const { return d == 0 ? 0 : chain(k)[d - 1]; }

  // p of node c copied into the thread's row (the transform's scratch is reused), nullptr if
  // invalid.
  const float* p_row(int64_t c) {
    const float* p = target_p(c);
    if (!p || a_.target_is_probs) return p;
    float* dst = grow(gw_.p, V_);
    std::copy(p, p + V_, dst);
    return dst;
  }

  // q of node c (draft probabilities read in place, or transformed draft logits), nullptr if
  // unusable (section 3's probability-row check fails).
  const float* q_row(int64_t c) {
    const int64_t row = base_ + c;
    const float* q;
    if (a_.draft_is_probs) {
      q = f32_row(a_.draft, row);
    } else {
      RowP P;
      if (!transform_row(a_.draft, row, inv_t_, top_k_, top_p_, min_p_, grow(w_.ed, V_), w_,
                         P))
        return nullptr;
      P.materialize(V_);
      float* dst = grow(gw_.q, V_);
      std::copy(P.e, P.e + V_, dst);
      q = dst;
    }
    return probs_row_valid(q, V_) ? q : nullptr;
  }

  // reference gbv.select_path.
  int64_t select_path() {
    int64_t best = 0;
    for (int64_t k = 1; k < K_; ++k) {
      int64_t d = 0;
      while (d < L_ && id(chain(best)[d]) == id(chain(k)[d])) ++d;
      if (d == L_) continue;  // identical paths keep the best one
      const int64_t n = node_at(best, d);
      const float* p = p_row(n);
      const float* q = p ? q_row(n) : nullptr;
      if (rank_below(p, q, id(chain(best)[d]), id(chain(k)[d]))) best = k;
    }
    return best;
  }

  // The skewed row at a node with rows p, q (K > 1: the ranking and prefix masses).
  Skew skew(const float* p, const float* q, double a, double b) {
    Skew s;
    s.q = q;
    s.K = K_;
    if (K_ == 1) return s;
    int64_t* Qw = gw_.Qw.size() >= size_t(V_) ? gw_.Qw.data() : (gw_.Qw.resize(size_t(V_)),
                                                                   gw_.Qw.data());
    if (gw_.Fw.size() < size_t(V_)) gw_.Fw.resize(size_t(V_));
    int64_t* Fw = gw_.Fw.data();
    gw_.keys.resize(size_t(V_));
    uint64_t Q = 0;
    for (int64_t x = 0; x < V_; ++x) {
      Qw[x] = integer_weight(q[x]);
      Q += uint64_t(Qw[x]);
      gw_.keys[size_t(x)] = {q[x] > 0.0f ? double(p[x]) / double(q[x])
                                         : std::numeric_limits<double>::infinity(), x};
    }
    std::sort(gw_.keys.begin(), gw_.keys.end());  // by (key, id): the rank order
    int64_t cum = 0;
    for (const auto& kx : gw_.keys) {
      cum += Qw[kx.second];
      Fw[kx.second] = cum;
    }
    s.Qw = Qw;
    s.Fw = Fw;
    s.a = a;
    s.b = b;
    s.iq = 1.0 / double(int64_t(Q));
    s.inv_z = 1.0 / skew_sum(a + b * 1.0, a + b * 0.0, K_);
    return s;
  }

  // q of position j of the path (nodes[j] -> token y), the one-hot row for point masses.
  const float* draft_of(int64_t c, int64_t y) {
    if (!point_mass_) return q_row(c);
    float* oh = grow(gw_.onehot, V_);
    std::fill(oh, oh + V_, 0.0f);
    oh[y] = 1.0f;
    return oh;
  }

  // reference gbv.gbv_plan and the walk of verify_gbv_ref on the selected path.
  void verify(const int64_t* path) {
    const int64_t g = L_;
    std::vector<double>& rho = w_.rho;
    rho.assign(size_t(g + 1), 1.0);
    std::vector<double> av(size_t(g + 1), 0.0), bv(size_t(g + 1), 1.0);
    double h_last = 1.0;
    int64_t e = g, tau = 0;
    bool end_ok = true;
    double a = 0.0, b = 1.0;
    for (int64_t j = 0; j <= g; ++j) {
      const int64_t c = j == 0 ? 0 : path[j - 1];
      const float* p = p_row(c);
      if (!p) {
        e = j;
        end_ok = false;
        break;
      }
      if (j == g) break;
      const int64_t y = id(path[j]);
      const float* q = draft_of(c, y);
      if (!q) {
        e = j;  // an unusable draft row: a valid cut
        break;
      }
      av[size_t(j)] = a;
      bv[size_t(j)] = b;
      const Skew s = skew(p, q, a, b);
      if (j >= 1) {
        uint64_t A = 0;
        for (int64_t x = 0; x < V_; ++x) A += uint64_t(residual_weight(p[x], s.at(x), rho[j]));
        const double zA = double(int64_t(A)) * 0x1p-60;
        const double den = zA + (1.0 - rho[size_t(j)]);
        const double h = den > 0 ? zA / den : 1.0;
        if (accept_uniform(seed_, offset_, uint64_t(j - 1)) < h) tau = j;
      }
      const double qt_y = s.at(y);
      const double t = rho[size_t(j)] * double(p[y]);
      rho[size_t(j + 1)] = (t > 0 && t >= qt_y) ? 1.0 : ((t > 0 && qt_y > 0) ? t / qt_y : 0.0);
      if (K_ > 1) {
        const double Fm = double(s.Fw[y] - s.Qw[y]) * s.iq;
        const double qn = double(s.Qw[y]) * s.iq;
        const double na = a + b * Fm, nb = b * qn, den = na + nb;
        if (den > 0) {
          a = na / den;
          b = nb / den;
        } else {
          a = 1.0;
          b = 0.0;
        }
      }
    }
    h_last = e >= 1 ? rho[size_t(e)] : 1.0;
    if (e >= 1 && accept_uniform(seed_, offset_, uint64_t(e - 1)) < h_last) tau = e;
    for (int64_t k = 0; k < tau; ++k) accept_child(k, path[k]);
    if (tau == e && !end_ok) return finish(tau, -1);
    const int64_t c = tau == 0 ? 0 : path[tau - 1];
    const float* p = p_row(c);
    const uint64_t U = sample_uniform64(seed_, offset_, uint64_t(tau));
    if (tau == e) return finish(tau, draw(p, nullptr, -1, V_, U, w_));
    const Skew s = skew(p, draft_of(c, id(path[tau])), av[size_t(tau)], bv[size_t(tau)]);
    const double r = rho[size_t(tau)];
    uint64_t A = 0;
    for (int64_t x = 0; x < V_; ++x) A += uint64_t(residual_weight(p[x], s.at(x), r));
    if (A == 0) return finish(tau, draw(p, nullptr, -1, V_, U, w_));
    const uint64_t th = draw_threshold(U, A);
    uint64_t cum = 0;
    for (int64_t x = 0; x < V_; ++x) {
      cum += uint64_t(residual_weight(p[x], s.at(x), r));
      if (cum > th) return finish(tau, x);
    }
    finish(tau, -1);
  }

  GbvWork& gw_;
  const bool point_mass_;
  int64_t K_ = 0, L_ = 0;
};

}  // namespace

void verify_gbv(const TreeArgs& a) {
  parallel_for(a.B, a.threads, [&](int64_t b) { GbvWalk(a, b, work(), gbv_work()).run(); });
}

}  // namespace specops
