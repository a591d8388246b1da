// What every tree walk of one request shares (tree.cpp: section 11; traversal.cpp: section
// 14): its outputs (cleared on construction: a malformed request emits nothing, section 8),
// its parameters, the tree's shape check and child order, the greedy walk and the walk's end.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/rows.h"
#include "core/workspace.h"
#include "kernels.h"
#include "transform/transform.h"
#include "verify/request.h"

namespace specops {

class TreeRequest {
 protected:
  TreeRequest(const TreeArgs& a, int64_t b, Work& w)
      : a_(a), w_(w), b_(b), base_(b * a.N), V_(a.target.cols), D_(a.max_depth),
        out_(a.out_tokens + b * (a.max_depth + 1)), nodes_(a.out_nodes + b * a.max_depth) {
    std::fill(out_, out_ + D_ + 1, -1);
    std::fill(nodes_, nodes_ + D_, -1);
    a.out_num_accepted[b] = 0;
    a.out_valid[b] = 0;
    inv_t_ = a.params.inv_temp[b];
    top_k_ = a.params.top_k[b];
    top_p_ = a.params.top_p[b];
    min_p_ = a.params.min_p[b];
    seed_ = uint64_t(a.seed[b]);
    offset_ = uint64_t(a.offset[b]);
  }

  int64_t id(int64_t n) const { return a_.node_ids[base_ + n]; }
  int64_t parent(int64_t n) const { return a_.parents[base_ + n]; }

  // The request's parameters or its tree are malformed (nothing is read, nothing emitted);
  // else the depths are in `depth` (the caller's per-thread scratch, [N]).
  bool malformed(std::vector<int64_t>& depth) {
    return params_malformed(inv_t_, top_k_, top_p_, min_p_, a_.target_is_probs) ||
           !shape_ok(depth);
  }

  // reference tree.tree_depths: the depths (root 0, absent -1), false if malformed.  Only
  // indices inside [0, N) are read: parents outside [-1, n) are rejected before use.
  bool shape_ok(std::vector<int64_t>& depth) {
    n_ = a_.num_nodes[b_];
    if (n_ < 1 || n_ > a_.N || parent(0) != -1) return false;
    if (int64_t(depth.size()) < a_.N) depth.resize(size_t(a_.N));
    depth_ = depth.data();
    std::fill(depth_, depth_ + a_.N, -1);
    depth_[0] = 0;
    for (int64_t n = 1; n < n_; ++n) {
      const int64_t p = parent(n);
      if (p < -1 || p >= n) return false;
      if (p == -1 || depth_[p] < 0) continue;  // absent (padding) node
      depth_[n] = depth_[p] + 1;
      const int64_t y = id(n);
      if (y < 0 || y >= V_ || depth_[n] > D_) return false;
    }
    return true;
  }

  // The next child of c after node `after` (pass c for the first), -1 if none.
  int64_t child_after(int64_t c, int64_t after) const {
    for (int64_t n = after + 1; n < n_; ++n)
      if (depth_[n] >= 0 && parent(n) == c) return n;
    return -1;
  }

  // p_c: transformed (logits; in the transform's scratch row, valid until the next
  // transform) or checked in full (probabilities, read in place); nullptr if invalid.
  const float* target_p(int64_t c) {
    const int64_t row = base_ + c;
    if (a_.target_is_probs) {
      const float* p = f32_row(a_.target, row);
      return probs_row_valid(p, V_) ? p : nullptr;
    }
    RowP P;
    if (!transform_row(a_.target, row, inv_t_, top_k_, top_p_, min_p_, grow(w_.et, V_), w_, P))
      return nullptr;
    P.materialize(V_);
    return P.e;
  }

  // Greedy requests: the lowest-index argmax of p_c, -1 if the row is invalid.
  int64_t greedy_argmax(int64_t c) {
    const int64_t row = base_ + c;
    if (!a_.target_is_probs) return greedy_argmax_row(a_.target, row, grow(w_.et, V_));
    const float* p = f32_row(a_.target, row);
    return probs_row_valid(p, V_) ? argmax_f32(p, V_) : -1;
  }

  // Section 11's greedy walk (every tree method's at temperature 0): from the root, the
  // first child whose token is the argmax, until none is; the argmax ends the walk.
  void greedy() {
    int64_t c = 0, j = 0;
    for (;;) {
      const int64_t best = greedy_argmax(c);
      if (best < 0) return finish(j, -1);
      int64_t x = child_after(c, c);
      while (x >= 0 && id(x) != best) x = child_after(c, x);
      if (x < 0) return finish(j, best);
      accept_child(j, x);  // x has depth j + 1 <= max_depth (shape_ok): j < max_depth
      c = x;
      ++j;
    }
  }

  // Node x (its token) accepted at output position j.
  void accept_child(int64_t j, int64_t x) {
    out_[j] = int32_t(id(x));
    nodes_[j] = int32_t(x);
  }

  // The walk ends after j accepted nodes with `token` (-1: invalid, nothing emitted there).
  void finish(int64_t j, int64_t token) {
    a_.out_num_accepted[b_] = int32_t(j);
    if (token >= 0 && token < V_) {
      out_[j] = int32_t(token);
      a_.out_valid[b_] = 1;
    }
  }

  const TreeArgs& a_;
  Work& w_;
  const int64_t b_, base_, V_, D_;
  int32_t* out_;
  int32_t* nodes_;
  float inv_t_, top_p_, min_p_;
  int64_t top_k_;
  uint64_t seed_, offset_;
  int64_t n_ = 0;             // num_nodes of this request (after shape_ok)
  int64_t* depth_ = nullptr;  // [N]
};

}  // namespace specops
