// Traversal verification (reference section 14, reference/traversal.py), one request at a
// time: a depth-first walk over the tree with an explicit stack of the nodes on the current
// path.  Each level holds its node's state: the weight rho, the target row p (or, after a
// deletion, the integer residual R with its sum A), the draft row q (or, without replacement
// after a removal, the integer weights Qw with their sum Q), and the cursor over its children.
//
//   descend: the next child x of the top node (rank order, skipping what section 14 skips)
//            gets rho_x = w(rho, m(y), s(y)) and is pushed;
//   leaf:    the top node has no child left: the root is accepted; another node n is
//            accepted iff u_n < rho (Philox counter (n - 1, tag 0)); else it is popped and
//            its parent deletes it: R, A and rho updated in float64 exactly as the reference.
//
// Every comparison is on integers or on correctly rounded float64 operations in the
// reference's order (the build uses -ffp-contract=off), so the tokens are the reference's.
// The passes are scalar loops: the same code runs at every ISA level (only the transform of
// a row is vectorised, and it is bit-identical across levels).
#include <algorithm>
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

struct Level {
  int64_t c = 0;           // the node
  double rho = 1.0;        // its weight
  const float* p = nullptr;  // target row (nullptr: invalid, children cut)
  const float* q = nullptr;  // draft row while no token was removed
  int64_t* R = nullptr;    // residual after a deletion (updated)
  int64_t* Qw = nullptr;   // integer draft weights (without replacement)
  uint64_t A = 0, Q = 0;
  bool updated = false, removed = false, live = true;
  int64_t cursor = 0;      // the last child visited (c itself before the first)
  int64_t y = -1;          // the token of the child being visited
};

// Per-thread rows of every level, grown on demand; after each request the rows of the levels
// past kKeptLevels are freed (a deep tree needs depth x V x ~24 bytes while it is walked,
// which a thread of the pool would otherwise keep).
constexpr size_t kKeptLevels = 8;

struct TravWork {
  std::vector<std::vector<float>> p, q;
  std::vector<std::vector<int64_t>> R, Qw;
  std::vector<int64_t> depth, tried;
  std::vector<size_t> tried_start;  // level k's tried tokens: tried[tried_start[k]..]
  std::vector<Level> stack;
};

TravWork& trav_work() {
  static thread_local TravWork w;
  return w;
}

template <class T>
void keep_levels(std::vector<std::vector<T>>& rows) {
  if (rows.size() > kKeptLevels) {
    rows.resize(kKeptLevels);
    rows.shrink_to_fit();
  }
}

void trim(TravWork& w) {
  keep_levels(w.p);
  keep_levels(w.q);
  keep_levels(w.R);
  keep_levels(w.Qw);
}

template <class T>
T* level_row(std::vector<std::vector<T>>& rows, size_t k, int64_t n) {
  if (rows.size() <= k) rows.resize(k + 1);
  if (int64_t(rows[k].size()) < n + kSimdSlack) rows[k].resize(size_t(n + kSimdSlack));
  return rows[k].data();
}

// The reference's child_weight: min(rho * m / s, 1), the product rounded first.
inline double child_weight(double rho, double m, double s) {
  const double t = rho * m;
  if (t > 0 && t >= s) return 1.0;
  if (t > 0 && s > 0) return t / s;
  return 0.0;
}

class TraversalWalk : TreeRequest {
 public:
  TraversalWalk(const TreeArgs& a, int64_t b, Work& w, TravWork& tw)
      : TreeRequest(a, b, w), tw_(tw), point_mass_(a.draft.ptr == nullptr) {}

  void run() {
    if (malformed(tw_.depth)) return;
    if (inv_t_ == 0.0f) return greedy();
    std::vector<Level>& st = tw_.stack;
    st.clear();
    tw_.tried.clear();
    tw_.tried_start.clear();
    push(0, 1.0);
    for (;;) {
      Level& L = st.back();
      const int64_t x = next_child(L);
      if (x >= 0) {
        L.cursor = x;
        L.y = id(x);
        tw_.tried.push_back(L.y);
        const double s = draft_mass(L, L.y);
        push(x, child_weight(L.rho, target_mass(L, L.y), s));
        continue;
      }
      if (L.c == 0 || coin(L.c) < L.rho) return accept();
      st.pop_back();
      tw_.tried.resize(tw_.tried_start.back());
      tw_.tried_start.pop_back();
      delete_child(st.back());
    }
  }

 private:
  // The target row of node c at level k (copied out of the transform's scratch), nullptr
  // if invalid.
  const float* target_row(int64_t c, size_t k) {
    const float* p = target_p(c);
    if (!p || a_.target_is_probs) return p;  // (a probability row is read in place)
    float* dst = level_row(tw_.p, k, V_);
    std::copy(p, p + V_, dst);
    return dst;
  }

  // The draft row of node c (nullptr: unusable), its integer weights Qw and their sum.
  const float* draft_row(int64_t c, size_t k, int64_t* Qw, uint64_t& Q) {
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
      float* dst = level_row(tw_.q, k, V_);
      std::copy(P.e, P.e + V_, dst);
      q = dst;
    }
    if (!probs_row_valid(q, V_)) return nullptr;
    Q = integer_weights(q, V_, Qw, nullptr);
    return q;
  }

  void push(int64_t c, double rho) {
    const size_t k = tw_.stack.size();
    Level L;
    L.c = c;
    L.rho = rho;
    L.cursor = c;
    L.p = target_row(c, k);
    L.R = level_row(tw_.R, k, V_);
    if (L.p && !point_mass_ && child_after(c, c) >= 0) {
      L.Qw = level_row(tw_.Qw, k, V_);
      L.q = draft_row(c, k, L.Qw, L.Q);
      if (!L.q) L.live = false;  // unusable draft row: no child is tried
    }
    tw_.tried_start.push_back(tw_.tried.size());
    tw_.stack.push_back(L);
  }

  // The next child to visit: rank order; none after an invalid row, once the node is dead,
  // and (without replacement) a token already tried among the siblings is skipped.
  int64_t next_child(const Level& L) const {
    if (!L.p || !L.live) return -1;
    const auto first = tw_.tried.begin() + int64_t(tw_.tried_start.back());
    for (int64_t x = child_after(L.c, L.cursor); x >= 0; x = child_after(L.c, x)) {
      if (a_.rsd && std::find(first, tw_.tried.end(), id(x)) != tw_.tried.end()) continue;
      return x;
    }
    return -1;
  }

  double target_mass(const Level& L, int64_t z) const {
    return L.updated ? double(L.R[z]) * inv_A_(L) : double(L.p[z]);
  }
  static double inv_A_(const Level& L) { return 1.0 / double(int64_t(L.A)); }

  double draft_mass(const Level& L, int64_t z) const {
    if (point_mass_) return z == L.y ? 1.0 : 0.0;
    if (L.removed) return double(L.Qw[z]) * (1.0 / double(int64_t(L.Q)));
    return double(L.q[z]);
  }

  // The parent L deletes its child of token L.y (reference traversal.delete_update).
  void delete_child(Level& L) {
    const double rho = L.rho;
    const double ia = L.updated ? inv_A_(L) : 0.0;
    const double iq = L.removed ? 1.0 / double(int64_t(L.Q)) : 0.0;
    uint64_t A = 0;
    for (int64_t z = 0; z < V_; ++z) {
      const double m = L.updated ? double(L.R[z]) * ia : double(L.p[z]);
      const double s = point_mass_ ? (z == L.y ? 1.0 : 0.0)
                                   : (L.removed ? double(L.Qw[z]) * iq : double(L.q[z]));
      const double pd = m * rho;
      const double d = pd > s ? pd - s : 0.0;
      L.R[z] = int64_t(d * 0x1p60);
      A += uint64_t(L.R[z]);
    }
    L.updated = true;
    L.A = A;
    const double zA = double(int64_t(A)) * 0x1p-60;
    const double den = zA + (1.0 - rho);
    L.rho = den > 0 ? zA / den : 1.0;
    if (A == 0) {
      L.live = false;
      return;
    }
    if (a_.rsd && !point_mass_) {
      L.Q -= uint64_t(L.Qw[L.y]);
      L.Qw[L.y] = 0;
      if (int64_t(L.Q) <= 0) {
        L.live = false;
        return;
      }
      L.removed = true;
    }
  }

  double coin(int64_t n) const {
    return double(stream_words(seed_, offset_, uint64_t(n - 1), 0u).w[0]) * 0x1p-32;
  }

  // The top of the stack is accepted: the path's tokens, then the draw at its depth.
  void accept() {
    const std::vector<Level>& st = tw_.stack;
    const int64_t j = int64_t(st.size()) - 1;
    for (int64_t k = 1; k <= j; ++k) accept_child(k - 1, st[k].c);
    const Level& L = st.back();
    if (!L.p) return finish(j, -1);
    const uint64_t U = sample_uniform64(seed_, offset_, uint64_t(j));
    if (!L.updated || L.A == 0) return finish(j, draw(L.p, nullptr, -1, V_, U, w_));
    const uint64_t t = draw_threshold(U, L.A);
    uint64_t cum = 0;
    for (int64_t z = 0; z < V_; ++z) {
      cum += uint64_t(L.R[z]);
      if (cum > t) return finish(j, z);
    }
    finish(j, -1);
  }

  TravWork& tw_;
  const bool point_mass_;
};

}  // namespace

void verify_traversal(const TreeArgs& a) {
  parallel_for(a.B, a.threads, [&](int64_t b) {
    TravWork& tw = trav_work();
    TraversalWalk(a, b, work(), tw).run();
    trim(tw);
  });
}

}  // namespace specops
