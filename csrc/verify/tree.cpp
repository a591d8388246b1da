// Tree verification (reference section 11), one request at a time:
//
//   shape:  the depth of every present node, or the request is malformed (section 8: nothing
//           is read, nothing emitted), checked before any row is read;
//   walk:   at node c (depth j) read p_c; try c's children in rank order against the integer
//           residual R (and the draft weights Qw of q_c, tree.h); the first child accepted
//           becomes c; if none is, one draw from R (from p when R has no mass) ends the walk.
//
// Rows are read only along the walk: the target row of every node visited, the draft row of
// a visited node that has children.  An invalid target row ends the request invalid.
#include <algorithm>
#include <vector>

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

// Per-thread scratch of the walk, grown on demand and never shrunk (as core/workspace.h's
// Work, which holds the transform's rows): no allocation per request once warm.
struct TreeWork {
  std::vector<int64_t> R, Qw;   // residual and draft weights [V]
  std::vector<uint64_t> rsum;   // R's sums per kDrawBlock tokens
  std::vector<int64_t> depth;   // [N], -1: absent
  std::vector<int64_t> tried;   // rsd: tokens of the siblings tried so far
};

TreeWork& tree_work() {
  static thread_local TreeWork w;
  return w;
}

template <class T>
T* sized(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

class TreeWalk : TreeRequest {
 public:
  TreeWalk(const TreeArgs& a, int64_t b, Work& w, TreeWork& tw) : TreeRequest(a, b, w), tw_(tw) {}

  void run() {
    if (malformed(tw_.depth)) return;
    if (inv_t_ == 0.0f) return greedy();
    int64_t c = 0, j = 0;
    for (;;) {
      const float* p = target_p(c);
      if (!p) return finish(j, -1);
      const int64_t x = try_children(c, j, p);
      if (x < 0) return finish(j, final_draw(j, p));
      accept_child(j, x);  // x has depth j + 1 <= max_depth (shape_ok), so j < max_depth
      c = x;
      ++j;
    }
  }

 private:
  // q_c (the probability row, or the transformed draft row materialised) and Q = sum
  // trunc(q_c * 2^60); Q = 0 for an unusable row.  Qw itself is written only at the node's
  // first rejection (lazy_rows).  A transformed row always passes the probability-row check
  // (entries in [0, 1]; the argmax is kept, so p_max >= 1/V and the mass is about 1), so
  // only probability rows are checked.
  uint64_t draft_mass(int64_t c, const float*& q) {
    const int64_t row = base_ + c;
    if (a_.draft_is_probs) {
      q = f32_row(a_.draft, row);
      if (!probs_row_valid(q, V_)) return 0;
    } else {
      RowP Q;
      if (!transform_row(a_.draft, row, inv_t_, top_k_, top_p_, min_p_, grow(w_.ed, V_), w_, Q))
        return 0;
      Q.materialize(V_);
      q = Q.e;
    }
    return integer_weights(q, V_, nullptr, nullptr);
  }

  // R = trunc(p * 2^60) and Qw = trunc(q * 2^60) as arrays, at a node's first rejection:
  // until then the coins read the two rows at the child's token (a node whose first child is
  // accepted never writes them).
  void lazy_rows(const float* p, const float* q, int64_t* Qw) {
    if (rows_written_) return;
    integer_weights(p, V_, res_.R, res_.block_sums);
    if (Qw) integer_weights(q, V_, Qw, nullptr);
    rows_written_ = true;
  }

  // The children of c in rank order i against the residual of p = p_c: returns the child
  // accepted, or -1 with the residual left in res_ (A = 0 for a leaf: its draw is from p).
  int64_t try_children(int64_t c, int64_t j, const float* p) {
    res_.A = 0;
    rows_written_ = false;
    int64_t x = child_after(c, c);
    if (x < 0) return -1;
    res_.V = V_;
    res_.R = sized(tw_.R, V_);
    res_.block_sums = sized(tw_.rsum, (V_ + kDrawBlock - 1) / kDrawBlock);
    res_.A = integer_weights(p, V_, nullptr, res_.block_sums);
    int64_t* Qw = nullptr;  // point-mass drafts: each child's own one-hot
    const float* q = nullptr;
    uint64_t Q = 0;
    if (a_.draft.ptr) {
      Qw = sized(tw_.Qw, V_);
      Q = draft_mass(c, q);
    }
    std::vector<int64_t>& tried = tw_.tried;
    tried.clear();
    for (int64_t i = 0; x >= 0; ++i, x = child_after(c, x)) {
      const int64_t y = id(x);
      if (a_.rsd) {  // a duplicate cannot be drawn without replacement: skipped, no coin
        if (std::find(tried.begin(), tried.end(), y) != tried.end()) continue;
        tried.push_back(y);
      }
      // No mass left (or an unusable draft row): this child and every later one are
      // rejected without a coin, and nothing changes.
      if (res_.A == 0 || (Qw && Q == 0)) return -1;
      const double u =
          double(stream_words(seed_, offset_, uint64_t(j), uint32_t(2 * i)).w[0]) * 0x1p-32;
      const int64_t r_y = rows_written_ ? res_.R[y] : integer_weight(p[y]);
      const double rn = weight_ratio(r_y, reciprocal(res_.A));
      double qn = 1.0;
      if (Qw) qn = weight_ratio(rows_written_ ? Qw[y] : integer_weight(q[y]), reciprocal(Q));
      if (u * qn < rn) return x;
      lazy_rows(p, q, Qw);
      reject_update(res_, Qw, Q, y);
      if (a_.rsd && Qw) {  // y leaves the draft, renormalised through Q
        Q -= uint64_t(Qw[y]);
        Qw[y] = 0;
      }
    }
    return -1;
  }

  // Every child rejected (or none): the draw of section 5 over R, or over trunc(p * 2^60)
  // when R has no mass (or was never formed: a leaf).  Stream tag 1 at depth j.  R not yet
  // written (no coin was tossed) is trunc(p * 2^60) itself: the same draw as from p.
  int64_t final_draw(int64_t j, const float* p) {
    const uint64_t U = sample_uniform64(seed_, offset_, uint64_t(j));
    if (res_.A > 0 && !rows_written_) {
      const int64_t nb = (V_ + kDrawBlock - 1) / kDrawBlock;
      return find_in_blocks(res_.block_sums, nb, V_, draw_threshold(U, res_.A),
                            [p](int64_t i) { return uint64_t(integer_weight(p[i])); });
    }
    return res_.A > 0 ? draw_residual(res_, U) : draw(p, nullptr, -1, V_, U, w_);
  }

  TreeWork& tw_;
  Residual res_;
  bool rows_written_ = false;  // res_.R (and Qw) hold this node's arrays (lazy_rows)
};

}  // namespace

void verify_tree(const TreeArgs& a) {
  parallel_for(a.B, a.threads, [&](int64_t b) { TreeWalk(a, b, work(), tree_work()).run(); });
}

}  // namespace specops
