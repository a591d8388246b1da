// The verify walk (reference section 1), one request at a time:
//
//   plain mode:  for j < kb: accept test at j; on a rejection, the residual draw at j; stop.
//                If every draft is accepted, the bonus draw at kb.
//   forced mode: positions j < j* = min(a, kb) are taken as accepted without reading any
//                row; at j* the bonus draw (j* == kb) or the rejection draw (j* < kb).
//
//   block mode:  block verification (section 9): every row of the block is read, tau is the
//                last position whose stopping test passes, then one draw at tau.
//
// A target row the walk needs that is invalid (or out of bounds) ends the request: accepted
// drafts, then -1; valid = false.  With out_rates, beta_j of every position read (section 10).
//
// With out_draft_bad, the default draft_probs check (reference walk.draft_check) of a sampled,
// plain-mode request with draft probabilities, made of what the walk reads anyway: q_j(y_j) of
// every accepted position (the accept test's value, or the block scan's), and the row of a
// residual draw at num_accepted < kb, checked by the draw's own pass over it (RowCheck: the
// residual weights, or block verification's mass at tau; decided by verify/draft_check.h).
// A greedy request never reads q.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "core/philox.h"
#include "core/rows.h"
#include "draw/draw.h"
#include "transform/transform.h"
#include "verify/block_rows.h"
#include "verify/draft_check.h"
#include "verify/request.h"

namespace specops {
namespace {

enum class Verdict { kAccept, kReject, kInvalid };

class Walk {
 public:
  Walk(const VerifyArgs& a, int64_t b, Work& w)
      : a_(a), r_(a, b), w_(w), out_(a.out_tokens + b * (a.max_k + 1)), b_(b) {
    std::fill(out_, out_ + a.max_k + 1, -1);
    a.out_num_accepted[b] = 0;
    a.out_valid[b] = 0;
    if (a.out_rates) {
      rates_ = a.out_rates + b * a.max_k;
      std::fill(rates_, rates_ + a.max_k, std::numeric_limits<float>::quiet_NaN());
    }
    check_ = a.out_draft_bad && a.draft.ptr && a.draft_is_probs && !r_.malformed &&
             !r_.forced && !r_.greedy;
  }

  // The walk, then its draft_probs check's answer.
  void run() {
    walk();
    if (a_.out_draft_bad) a_.out_draft_bad[b_] = int32_t(draft_bad_);
  }

 private:
  void walk() {
    const int64_t kb = r_.block.kb;
    if (r_.malformed) return;
    if (r_.forced) {
      if (r_.forced_accepted < 0) return finish(0, -1);
      const int64_t js = std::min(r_.forced_accepted, kb);
      for (int64_t j = 0; j < js; ++j) out_[j] = int32_t(draft_id(j));
      if (!r_.target_row_ok(js)) return finish(js, -1);
      Position pos(*this, js);
      return finish(js, js == kb ? bonus_draw(pos) : rejection_draw(pos));
    }
    if (a_.block && !r_.greedy) return run_block();
    for (int64_t j = 0; j < kb; ++j) {
      if (!r_.target_row_ok(j)) return finish(j, -1);
      Position pos(*this, j);
      const Verdict v = accept_test(pos);
      if (rates_ && v == Verdict::kReject) {  // beta_j from the residual draw's own read
        uint64_t M = 0;
        bool from_draw = false;
        const int64_t token = rejection_draw(pos, &M, &from_draw);
        rates_[j] = from_draw ? rate_from_mass(M) : rate(pos);
        return finish(j, token);
      }
      if (rates_ && v != Verdict::kInvalid) rates_[j] = rate(pos);
      if (v == Verdict::kAccept) {
        out_[j] = int32_t(pos.y);
        check_value(j, pos.q_y);
        continue;
      }
      return finish(j, v == Verdict::kInvalid ? -1 : rejection_draw(pos));
    }
    if (!r_.target_row_ok(kb)) return finish(kb, -1);
    Position pos(*this, kb);
    finish(kb, bonus_draw(pos));
  }

  enum class State { kUnread, kValid, kInvalid };

  // What the walk has read at position j (rows are read lazily, at most once).
  struct Position {
    int64_t j;
    int64_t y;                        // draft id (-1 at kb)
    const float* tprob = nullptr;     // target row (target_is_probs)
    State target = State::kUnread;    // full target row checked (and transformed)
    RowP P;                           // transformed target row (logits)
    int64_t argmax = -1;              // greedy requests
    bool draft_read = false;
    const float* dprob = nullptr;     // draft probability row
    RowP Q;                           // transformed draft row (draft logits)
    bool q_nan = false;               // invalid draft logits row: q = NaN everywhere
    float q_y = 1.0f;

    Position(const Walk& wk, int64_t j_) : j(j_), y(j_ < wk.r_.block.kb ? wk.draft_id(j_) : -1) {
      if (wk.a_.target_is_probs) tprob = f32_row(wk.a_.target, wk.r_.t0 + j);
    }
  };

  int64_t draft_id(int64_t j) const { return a_.draft_ids[r_.d0 + j]; }

  // Where row j is transformed: the one scratch row, or in block mode slot scan_slot_ of its
  // side: with the rates one of two (the row of the current tau, where the draw may land,
  // and the row being scanned, so that two rows stay in the cache), without them one per
  // position (the tests run after the scan, from the end: run_block).
  float* row_buf(std::vector<float>& one, std::vector<std::vector<float>>& slots) {
    if (!block_rows_) return grow(one, r_.V);
    if (slots.size() < size_t(scan_slot_) + 1) slots.resize(size_t(scan_slot_) + 1);
    return grow(slots[size_t(scan_slot_)], r_.V);
  }

  // The full target row p_j: checked in full (and transformed, or its argmax for greedy
  // requests); false if it is invalid.
  bool target_p(Position& pos) {
    if (pos.target == State::kUnread) {
      const int64_t row = r_.t0 + pos.j;
      bool ok;
      if (r_.greedy) {
        if (a_.target_is_probs)
          pos.argmax = probs_row_valid(pos.tprob, r_.V) ? argmax_f32(pos.tprob, r_.V) : -1;
        else
          pos.argmax = greedy_argmax_row(a_.target, row, grow(w_.et, r_.V));
        ok = pos.argmax >= 0;
      } else if (a_.target_is_probs) {
        ok = probs_row_valid(pos.tprob, r_.V);
      } else {
        const NextRow nx = next_row(pos);
        ok = transform_row(a_.target, row, r_.inv_t, r_.top_k, r_.top_p, r_.min_p,
                           row_buf(w_.et, w_.block_t), w_, pos.P, nx.ptr, nx.bytes);
      }
      pos.target = ok ? State::kValid : State::kInvalid;
    }
    return pos.target == State::kValid;
  }

  struct NextRow {
    const char* ptr = nullptr;
    int64_t bytes = 0;
  };
  // What row j's exp pass prefetches: target row j + 1, which the walk reads if y_j is
  // accepted (block mode: always).  (Prefetching the draft row instead, read in full on a
  // rejection, measured no gain: the drawn row's pass streams it while it computes.)
  NextRow next_row(const Position& pos) const {
    NextRow nx;
    if (!r_.forced && pos.j < r_.block.kb && r_.target_row_ok(pos.j + 1)) {
      nx.ptr = row_ptr(a_.target, r_.t0 + pos.j + 1);
      nx.bytes = r_.V * (a_.target.dtype == kF32 ? 4 : 2);
    }
    return nx;
  }

  // p_j for the passes that read it whole (after target_p succeeded, non-greedy): the
  // probability row, or the transformed row whose p the pass computes as it reads (p is
  // never stored).
  PRow p_row(const Position& pos) const {
    PRow pr;
    if (a_.target_is_probs) {
      pr.p = pos.tprob;
      return pr;
    }
    pr.p = pos.P.e;
    pr.from_e = true;
    pr.cut = pos.P.cut;
    pr.sd = pos.P.sd;
    pr.sparse = pos.P.sparse;
    return pr;
  }

  // p_j(i) of one token (after target_p succeeded, non-greedy)
  float p_at(const Position& pos, int64_t i) const {
    return a_.target_is_probs ? pos.tprob[i] : pos.P(i);
  }

  void read_draft(Position& pos) {
    if (pos.draft_read || !a_.draft.ptr) return;
    pos.draft_read = true;
    const int64_t row = r_.d0 + pos.j;
    if (a_.draft_is_probs) {
      pos.dprob = f32_row(a_.draft, row);
      pos.q_y = pos.dprob[pos.y];
    } else if (transform_row(a_.draft, row, r_.inv_t, r_.top_k, r_.top_p, r_.min_p,
                             row_buf(w_.ed, w_.block_d), w_, pos.Q)) {
      pos.q_y = pos.Q(pos.y);
    } else {
      pos.q_nan = true;
      pos.q_y = std::numeric_limits<float>::quiet_NaN();
    }
  }

  // Accept y_j iff p_j(y_j) > 0 and u_j * q_j(y_j) < p_j(y_j) (greedy: iff y_j is the
  // argmax; p > 0 keeps an unchecked negative q from accepting a token of probability 0).
  // With target probabilities only p_j(y_j) is read here.
  Verdict accept_test(Position& pos) {
    float p_y;
    if (r_.greedy || !a_.target_is_probs) {
      if (!target_p(pos)) return Verdict::kInvalid;
      if (r_.greedy) return pos.y == pos.argmax ? Verdict::kAccept : Verdict::kReject;
      p_y = pos.P(pos.y);
    } else {
      p_y = pos.tprob[pos.y];
    }
    read_draft(pos);
    const double u = accept_uniform(r_.seed, r_.offset, uint64_t(pos.j));
    return p_y > 0.0f && u * double(pos.q_y) < double(p_y) ? Verdict::kAccept
                                                           : Verdict::kReject;
  }

  // After a rejection at j: a draw from the residual of p_j and q_j (greedy: the argmax).
  // With beta: where the draw reads a draft row q_j, the min mass of beta_j (section 10)
  // from the same read, and *got = true.
  int64_t rejection_draw(Position& pos, uint64_t* beta = nullptr, bool* got = nullptr) {
    if (!target_p(pos)) return -1;
    if (r_.greedy) return pos.argmax;
    read_draft(pos);
    const uint64_t U = sample_uniform64(r_.seed, r_.offset, uint64_t(pos.j));
    if (!a_.draft.ptr) return draw_p(pos, nullptr, pos.y, U);  // point mass at y
    if (pos.q_nan) return draw_p(pos, nullptr, -1, U);  // no residual mass: p
    const float* q = pos.dprob;
    if (!a_.draft_is_probs) {
      pos.Q.materialize(r_.V);
      q = pos.Q.e;
    }
    if (got) *got = beta != nullptr;
    RowCheck chk;
    const int64_t token = draw_p(pos, q, -1, U, beta, check_ ? &chk : nullptr);
    row_bad_ = check_ && !draft_row_ok(chk, q, r_.V);
    return token;
  }

  // The draw from p_j (minus q): from the transformed row directly, without storing p.
  int64_t draw_p(Position& pos, const float* q, int64_t y, uint64_t U, uint64_t* beta = nullptr,
                 RowCheck* chk = nullptr) {
    if (a_.target_is_probs) return draw(pos.tprob, q, y, r_.V, U, w_, beta, chk);
    return draw_row(pos.P, q, y, r_.V, U, w_, beta, chk);
  }

  // Bonus / end of block at j = kb: a draw from p_j (greedy: the argmax).
  int64_t bonus_draw(Position& pos) {
    if (!target_p(pos)) return -1;
    if (r_.greedy) return pos.argmax;
    return draw_p(pos, nullptr, -1, sample_uniform64(r_.seed, r_.offset, uint64_t(pos.j)));
  }

  // Block verification (reference section 9).  Each position's rows are read once: the exp
  // pass of the transform, then (where its stop test needs it) one pass over p (computed
  // from e) and q for S_j, its per-block sums (kept for the draw at tau) and, with the rates,
  // beta_j.  Row kb is only checked (the scale pass) until the draw needs it.
  void run_block() {
    const int64_t kb = r_.block.kb, V = r_.V;
    const int64_t nb = (V + kDrawBlock - 1) / kDrawBlock;
    std::vector<double>& rho = w_.rho;
    if (int64_t(rho.size()) < kb + 1) rho.resize(size_t(kb + 1));
    if (int64_t(w_.block_bsum.size()) < 2 * nb) w_.block_bsum.resize(size_t(2 * nb));
    uint64_t* bsums[2] = {w_.block_bsum.data(), w_.block_bsum.data() + nb};
    // Without the rates, tau = max{j : u_{j-1} < h_j} is decided from the end: the first
    // test that passes, walking back from j = e, is tau, and the tests before it need no
    // mass at all.  The scan then only transforms the rows (each in its own slot) and forms
    // rho; the masses come after it.  With the rates every position's pass runs anyway
    // (beta), so the tests run in the scan and rows share two slots per side.
    const bool backward = rates_ == nullptr;
    rho[0] = 1.0;
    int64_t tau = 0, e = kb;
    Test t;  // the test of the current tau (tau = 0: no mass yet)
    int tau_slot = 0;
    bool end_ok = true;
    block_rows_ = true;
    std::vector<Position>& kept = positions_;
    kept.clear();
    kept.reserve(size_t(kb + 1));
    for (int64_t j = 0; j <= kb; ++j) {
      scan_slot_ = backward ? int(j) : 1 - tau_slot;
      if (!r_.target_row_ok(j)) {
        e = j, end_ok = false;
        break;
      }
      kept.emplace_back(*this, j);
      Position& pos = kept.back();
      if (j == kb) {  // the end row: checked now, transformed only if the draw lands there
        if (!(a_.target_is_probs ? target_p(pos) : logits_row_ok(pos))) e = j, end_ok = false;
        break;
      }
      if (!target_p(pos)) {
        e = j, end_ok = false;
        break;
      }
      if (j == 0) tau_slot = scan_slot_;  // tau = 0 until a stop test passes
      const float* q = q_row(pos);
      const float p_y = p_at(pos, pos.y);
      if (pos.q_nan) {  // an unusable draft row ends the block here
        if (rates_) rates_[j] = 0.0f;
        e = j;
        break;
      }
      if (!backward && j >= 1) {  // row 0 is summed only if the draw lands there (h_0 = 1)
        const Test tj = stop_test(pos, q, rho[j], bsums[scan_slot_], rates_ + j);
        if (tj.pass) tau = j, tau_slot = scan_slot_, t = tj;
      } else if (rates_ && j == 0) {
        rates_[j] = q ? rate(pos) : p_y;
      }
      rho[j + 1] = block_next_rho(rho[j], p_y, pos.q_y);
    }
    if (e >= 1 && accept_uniform(r_.seed, r_.offset, uint64_t(e - 1)) < rho[e]) {
      tau = e;
    } else if (backward) {
      for (int64_t j = e - 1; j >= 1; --j) {
        const Test tj = stop_test(kept[size_t(j)], q_row(kept[size_t(j)]), rho[j], bsums[0],
                                  nullptr);
        if (tj.pass) {
          tau = j, t = tj;
          break;
        }
      }
    }
    for (int64_t j = 0; j < tau; ++j) {
      out_[j] = int32_t(draft_id(j));
      check_value(j, kept[size_t(j)].q_y);
    }
    if (tau == e && !end_ok) return finish(e, -1);
    Position& pos = kept[size_t(tau)];  // transformed in the scan, in a slot the scan kept
    if (tau == e) {
      if (backward) scan_slot_ = int(e);  // (forward: the free slot of the two)
      return finish(e, bonus_draw(pos));
    }
    const float* q = q_row(pos);
    const uint64_t U = sample_uniform64(r_.seed, r_.offset, uint64_t(tau));
    uint64_t* bs = backward ? bsums[0] : bsums[tau_slot];
    if (!t.complete) {  // tau = 0, or a tau whose stop test needed no (full) mass
      t.chk = RowCheck{};
      t.S = block_mass(p_row(pos), q, pos.y, p_at(pos, pos.y), rho[tau], V, bs, nullptr,
                       check_ ? &t.chk : nullptr);
    }
    row_bad_ = check_ && !draft_row_ok(t.chk, q, V);  // (tau's mass pass read its draft row)
    if (t.S == 0) return finish(tau, draw_p(pos, nullptr, -1, U));  // no residual mass: p
    finish(tau, block_find(bs, t.S, U, V, [&](int64_t i) { return p_at(pos, i); }, q, pos.y,
                           rho[tau]));
  }

  struct Test {
    bool pass = false;
    bool complete = false;  // S, the block sums and chk are the position's full ones
    uint64_t S = 0;
    RowCheck chk;           // with check_: the draft row's, from the mass pass
  };
  // The stop test u_{j-1} < h_j of position j >= 1 (section 9), with its mass S_j and block
  // sums into bs as far as the test needed them.  With rho_j = 1, h_j = 1 whatever S_j is
  // (z / z, or 1 for a zero denominator) and u < 1: no pass.  Else the scan stops once the
  // partial mass decides the test (block_stop_at).  With `beta` (the rates) the pass runs in
  // full and *beta gets the position's rate.
  Test stop_test(Position& pos, const float* q, double rho, uint64_t* bs, float* beta) {
    Test t;
    const int64_t j = pos.j;
    if (beta && !q) *beta = p_at(pos, pos.y);  // point-mass draft: beta = p(y)
    RowCheck* chk = check_ ? &t.chk : nullptr;
    if (beta && q) {
      uint64_t M = 0;
      t.S = block_mass(p_row(pos), q, pos.y, p_at(pos, pos.y), rho, r_.V, bs, &M, chk);
      *beta = rate_from_mass(M);
      t.complete = true;
      t.pass = accept_uniform(r_.seed, r_.offset, uint64_t(j - 1)) <
               block_stop_probability(t.S, rho);
      return t;
    }
    if (rho == 1.0) {
      t.pass = true;
      return t;
    }
    const double u = accept_uniform(r_.seed, r_.offset, uint64_t(j - 1));
    t.complete = true;
    if (q)
      t.S = block_mass_until(p_row(pos), q, rho, r_.V, bs, block_stop_at(u, rho), &t.complete,
                             chk);
    else
      t.S = block_mass(p_row(pos), q, pos.y, p_at(pos, pos.y), rho, r_.V, bs, nullptr);
    t.pass = !t.complete || u < block_stop_probability(t.S, rho);
    return t;
  }

  // A logits row the block only may need: valid (reference section 2's checks) without its
  // exp pass; target_p transforms it if it is drawn from.
  bool logits_row_ok(const Position& pos) {
    const Mat& m = a_.target;
    const float* src = row_as_f32(m, r_.t0 + pos.j, r_.V, grow(w_.tmp, r_.V));
    const RowScan sc = passes().scale_max(src, nullptr, r_.V, r_.inv_t);
    return !sc.bad && !sc.allneg;
  }

  // The draft row q_j as an array, nullptr for point-mass drafts (and, with q_nan, for an
  // unusable draft-logits row).
  const float* q_row(Position& pos) {
    read_draft(pos);
    if (!a_.draft.ptr || pos.q_nan) return nullptr;
    if (a_.draft_is_probs) return pos.dprob;
    pos.Q.materialize(r_.V);
    return pos.Q.e;
  }

  // beta_j of a position whose accept test or block step read its rows (section 10): one
  // read of p (from e) and q, storing nothing.
  float rate(Position& pos) {
    if (r_.greedy) return pos.y == pos.argmax ? 1.0f : 0.0f;
    if (!target_p(pos)) return std::numeric_limits<float>::quiet_NaN();
    if (!a_.draft.ptr) return p_at(pos, pos.y);
    const float* q = q_row(pos);
    if (!q) return 0.0f;
    uint64_t M = 0;
    passes().pq_masses(p_row(pos), q, 0.0, r_.V, nullptr, false, &M, nullptr);
    return rate_from_mass(M);
  }

  void finish(int64_t j, int64_t token) {
    a_.out_num_accepted[b_] = int32_t(j);
    if (token >= 0 && token < r_.V && j <= a_.max_k) {
      out_[j] = int32_t(token);
      a_.out_valid[b_] = 1;
      if (row_bad_ && j < r_.block.kb && draft_bad_ < 0) draft_bad_ = j;  // the drawn row
    }
  }

  // The check of a q_j(y_j) the walk read at an accepted position j (reference
  // checks.draft_value_ok: finite and in [0, 1]); positions come in increasing order.
  void check_value(int64_t j, float q_y) {
    if (check_ && draft_bad_ < 0 && !(q_y >= 0.0f && q_y <= 1.0f)) draft_bad_ = j;
  }

  const VerifyArgs& a_;
  const RequestView r_;
  Work& w_;
  int32_t* out_;
  int64_t b_;
  float* rates_ = nullptr;
  bool check_ = false;               // the draft_probs check runs (out_draft_bad, see above)
  bool row_bad_ = false;             // the residual draw's row failed it
  int64_t draft_bad_ = -1;           // the check's answer
  bool block_rows_ = false;          // rows go to slots (block mode: row_buf)
  int scan_slot_ = 0;                // block mode: the slot of the row being scanned
  std::vector<Position> positions_;  // block mode: every position read
};

}  // namespace

void verify(const VerifyArgs& a) {
  parallel_for(a.B, a.threads, [&](int64_t b) { Walk(a, b, work()).run(); });
}

}  // namespace specops
