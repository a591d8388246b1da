// The draw's passes (reference sections 5, 9, 10, 11), written once over the Vec types and
// compiled once per ISA level like simd/passes.cpp (see simd/level.h): the weights of the drawn
// row (three exact 20-bit digits per token, or float64 where the level converts it to int64 in
// one instruction), the acceptance rates' min mass, and the float64 passes of block
// verification and of the tree residual.  Each routine runs whole vectors of the level and
// hands the remaining elements to its own Scalar instantiation, so the tail does the same
// operations.
#include "simd/draw_passes.h"

#include "core/float_bits.h"
#include "core/pexp.h"
#include "simd/passes.h"

namespace specops {
namespace SPECOPS_LEVEL {
namespace {

// How far ahead (floats) the passes over a draft row (and a probability row) request it from
// memory: such a row is read once, from memory, and the stream's own loads stalled these
// passes (the check's extra work showed it: 5-8% of a t0.8 call); a software prefetch one
// cache line, SPECOPS_PF floats ahead, keeps the stream ahead of the arithmetic.  A prefetch
// past the row's end is harmless (it never faults).
#ifndef SPECOPS_PF
#define SPECOPS_PF 256
#endif
constexpr int64_t kPrefetchAhead = SPECOPS_PF;

// One prefetch per 64-byte line of x (16 floats) at the vector starting at x + i.
template <class S>
inline void prefetch_ahead(const float* x, int64_t i) {
  if ((i & 15) < S::W) __builtin_prefetch(x + i + kPrefetchAhead);
}

// ------------------------------------------------------------------ draw weights
// Exact sum of trunc(r * 2^60) over the lanes added (0 <= r <= 1): three 20-bit digits, each
// an exact float32 step, summed in int32 lanes (kDrawBlock digits per lane at most).
template <class S, bool = S::kI64Convert>
struct WeightSum {
  typename S::I h = S::splat_i(0), m = h, l = h;
  void add(typename S::F r) {
    const typename S::F s20 = S::splat(0x1p20f);
    const typename S::F y1 = r * s20;
    const typename S::I dh = to_int(y1);
    const typename S::F y2 = (y1 - to_float(dh)) * s20;
    const typename S::I dm = to_int(y2);
    h = h + dh;
    m = m + dm;
    l = l + to_int((y2 - to_float(dm)) * s20);
  }
  uint64_t total() const {
    int32_t lh[S::W], lm[S::W], ll[S::W];
    store(lh, h);
    store(lm, m);
    store(ll, l);
    uint64_t t = 0;
    for (int k = 0; k < S::W; ++k)
      t += (uint64_t(uint32_t(lh[k])) << 40) + (uint64_t(uint32_t(lm[k])) << 20) + uint32_t(ll[k]);
    return t;
  }
};

// Where the level converts float64 to int64 in one instruction (AVX512DQ): float64(r) * 2^60
// is exact and <= 2^60, so its truncation is trunc(r * 2^60) itself, summed in int64 lanes.
// Fewer uops than the digits.
template <class S>
struct WeightSum<S, true> {
  typename S::L a = S::zero_l();
  void add(typename S::F r) {
    const typename S::D s60 = S::splat_d(0x1p60);
    a = a + trunc_l(widen_lo(r) * s60) + trunc_l(widen_hi(r) * s60);
  }
  uint64_t total() const { return hsum(a); }
};

// The draft_probs check of q's lanes (RowCheck), two operations a vector, neither waiting long
// on the previous vector's: a float32 lane sum in two accumulators taking the vectors in turn
// (each lane of each adds at most kDrawBlock / 2 entries between two totals: the error bound
// verify/draft_check.h relies on), and the unsigned max of the lanes' bits (> the bits of 1.0
// for every entry outside [+0, 1]: > 1, inf, NaN, and every sign bit, -0.0's included).
template <class S>
struct CheckSum {
  typename S::F s0 = S::splat(0.0f), s1 = s0;
  typename S::I mx = S::splat_i(0);
  void add(typename S::F q) {
    const typename S::F t = s1 + q;
    s1 = s0;
    s0 = t;
    mx = max_u(mx, as_int(q));
  }
  void into(RowCheck* c) const {
    float l0[S::W], l1[S::W];
    int32_t lm[S::W];
    store(l0, s0);
    store(l1, s1);
    store(lm, mx);
    double t = 0.0;
    for (int k = 0; k < S::W; ++k) {
      t += double(l0[k]) + double(l1[k]);
      if (uint32_t(lm[k]) > c->max_bits) c->max_bits = uint32_t(lm[k]);
    }
    c->sum += t;
  }
};

// r = p > q ? p - max(q, 0) : 0 (HAS_Q) or r = p; trunc(r * 2^60) over [i, end) added to
// sum; returns where the whole vectors stopped.  r outside [0, 1] sets `bad` (and counts 0).
// Vectors of masked tokens (p == 0: top-k / top-p / min-p rows are mostly zeros) store r = 0
// without reading q (a NaN p still takes the full path and its bad-row flag).
// MIN (acceptance rates, with q): r = min(p, q > 0 ? q : 0) instead of the residual.
// FROM_E: p is computed here from a transformed row (e, cut, sd: what materialize would
// store, see RowP), so the drawn row is not stored as p first.  Such a p is in [0, 1] (e <= 1
// and S' >= 2^40 + E of any other kept token), hence so is r: no check.
// BETA (with q, not MIN): also the acceptance rate's min mass (as MIN sums it, with MIN's
// range check where p is not FROM_E) into msum, from the same read of p and q.
// CHECK (with q, not MIN): q's draft_probs check into chk, from the same read; q is then read
// in the skipped vectors too.
struct FromE {
  float cut = 0.0f;
  DivScale ds{kEScale, kEScale};
  bool sparse = true;  // the row has masked tokens: vectors of them skip the work
};

// One vector of p at p_at: FROM_E, computed from the transformed row e as materialize would
// store it (a negative entry is a token the exp pass skipped, holding its d: its e = pexp(d)
// is evaluated here unless the cut masks it anyway, `evaluate`, see materialize_t); else loaded.  False when every lane is +0 or masked:
// the caller skips the vector (a NaN lane is kept, for the caller's checks).
template <class S, bool FROM_E>
// (always inlined: GCC left it out of line in some instantiations, a call per vector)
__attribute__((always_inline)) inline bool p_lanes(const float* p_at, const FromE& fe,
                                                   typename S::F vcut, bool evaluate,
                                                   typename S::F& pv) {
  using F = typename S::F;
  const F zero = S::splat(0.0f);
  if (!FROM_E) {
    pv = S::load(p_at);
    return any(ne_u(pv, zero));
  }
  F ev = S::load(p_at);
  const typename S::M skipped = lt(ev, zero);
  if (any(skipped))
    ev = keep(mnot(skipped), ev) + (evaluate ? keep(skipped, pexp_v<S>(ev)) : zero);
  if (!fe.sparse) {  // every token kept (a zero e, d < -86, gives p = 0 anyway)
    pv = div_flush(ev, fe.ds);
    return true;
  }
  const typename S::M in = ge(ev, vcut);
  if (!any(in & ne_u(ev, zero))) return false;
  pv = keep(in, div_flush(ev, fe.ds));
  return true;
}

template <class S, bool HAS_Q, bool MIN = false, bool FROM_E = false, bool BETA = false,
          bool CHECK = false>
int64_t weight_lanes(const float* p, const float* q, float* r, int64_t i, int64_t end,
                     uint64_t& sum, bool& bad, FromE fe = {}, uint64_t* msum = nullptr,
                     RowCheck* chk = nullptr) {
  using F = typename S::F;
  static_assert(!CHECK || (HAS_Q && !MIN), "the check reads a draft row of the residual");
  const F one = S::splat(1.0f), zero = S::splat(0.0f);
  const F vcut = S::splat(fe.cut);
  const bool evaluate = !(fe.cut >= 0x1p-40f);  // see materialize_t
  WeightSum<S> ws, wm;
  CheckSum<S> cs;
  typename S::M vbad = lt(zero, zero);  // all false
  for (; i + S::W <= end; i += S::W) {
    if (HAS_Q) prefetch_ahead<S>(q, i);
    if (!FROM_E) prefetch_ahead<S>(p, i);
    F pv;
    if (!p_lanes<S, FROM_E>(p + i, fe, vcut, evaluate, pv)) {
      if (CHECK) cs.add(S::load(q + i));
      store(r + i, zero);
      continue;
    }
    F rv = pv;
    if (HAS_Q && MIN) {  // disjoint masks: one term is +0, the sum is exact
      const F qv = S::load(q + i);
      const F qq = keep(gt(qv, zero), qv);
      rv = keep(le(pv, qq), pv) + keep(gt(pv, qq), qq);
    } else if (HAS_Q) {
      const F qv = S::load(q + i);
      if (CHECK) cs.add(qv);
      rv = keep(gt(pv, qv), pv - max(qv, zero));
      if (BETA) {
        const F qq = keep(gt(qv, zero), qv);
        const F mv = keep(le(pv, qq), pv) + keep(gt(pv, qq), qq);
        wm.add(FROM_E ? mv : keep(ge(mv, zero) & le(mv, one), mv));
      }
    }
    store(r + i, rv);
    if (FROM_E) {
      ws.add(rv);
    } else {
      const typename S::M ok = ge(rv, zero) & le(rv, one);
      vbad = vbad | mnot(ok);
      ws.add(keep(ok, rv));
    }
  }
  sum += ws.total();
  if (BETA) *msum += wm.total();
  if (CHECK) cs.into(chk);
  bad = bad || any(vbad);
  return i;
}

template <bool HAS_Q, bool FROM_E = false, bool BETA = false, bool CHECK = false>
uint64_t weights_t(const float* p, const float* q, float* r, int64_t V, uint64_t* bsum,
                   bool* bad, FromE fe = {}, uint64_t* beta = nullptr, RowCheck* chk = nullptr) {
  uint64_t total = 0, m = 0;
  bool b = false;
  for (int64_t b0 = 0, k = 0; b0 < V; b0 += kDrawBlock, ++k) {
    const int64_t b1 = V - b0 < kDrawBlock ? V : b0 + kDrawBlock;
    uint64_t s = 0;
    const int64_t i = weight_lanes<Native, HAS_Q, false, FROM_E, BETA, CHECK>(
        p, q, r, b0, b1, s, b, fe, &m, chk);
    if constexpr (Native::W > 1)
      weight_lanes<Scalar, HAS_Q, false, FROM_E, BETA, CHECK>(p, q, r, i, b1, s, b, fe, &m,
                                                              chk);
    bsum[k] = s;
    total += s;
  }
  *bad = b;
  if (BETA) *beta = m;
  return total;
}

// ------------------------------------------------------------------ block verification mass
// block verification (reference section 9): D = trunc(d * 2^60), d = rho * p - max(q, 0)
// where rho * p > q else 0, all in float64 (q == nullptr: q = 0).  rho * p <= 1, so
// 0 <= d * 2^60 <= 2^60 (trunc_l's range).  The lanes of [i, end) (whole vectors of S) added
// to s; returns where they stopped.
template <class S>
int64_t block_lanes(const float* p, const float* q, double rho, int64_t i, int64_t end,
                    uint64_t& s) {
  using D = typename S::D;
  const D vrho = S::splat_d(rho), zero = S::splat_d(0.0), s60 = S::splat_d(0x1p60);
  typename S::L acc = S::zero_l();
  for (; i + S::WD <= end; i += S::WD) {
    const D a = S::load_wide(p + i) * vrho;
    const D b = q ? S::load_wide(q + i) : zero;
    acc = acc + trunc_l(keep(gt(a, b), a - max(b, zero)) * s60);  // NaN: gt is false
  }
  s += hsum(acc);
  return i;
}

// ------------------------------------------------------------------ one pass over p and q
// The block mass and the min mass of a position read in one pass over p and q, p taken
// from a transformed row (FROM_E: what materialize would store, computed per vector as
// row_weights does) or from a probability row, so that block verification and the rates
// neither store p nor a residual row.  The sums are the ones block_lanes and the MIN
// weight_lanes form (integer sums: the order does not matter), per kDrawBlock for the draw.
// A vector whose p is all +0 adds 0 to both (d = 0 - max(q, 0) only where 0 > q, which is
// 0; min(0, .) = 0) and skips q, unless CHECK (with q): q's draft_probs check into chk, from
// the same read, over every vector of q.
template <class S, bool FROM_E, bool BLOCK, bool MIN, bool HAS_Q, bool CHECK = false>
int64_t pq_lanes(const float* p, const float* q, double rho, int64_t i, int64_t end,
                 uint64_t& sblock, uint64_t& smin, const FromE& fe, RowCheck* chk = nullptr) {
  static_assert(!CHECK || HAS_Q, "the check reads a draft row");
  using F = typename S::F;
  using D = typename S::D;
  constexpr int ND = S::W / S::WD;
  const F zero = S::splat(0.0f), one = S::splat(1.0f), vcut = S::splat(fe.cut);
  const bool evaluate = !(fe.cut >= 0x1p-40f);  // see materialize_t
  const D vrho = S::splat_d(rho), dzero = S::splat_d(0.0), s60 = S::splat_d(0x1p60);
  typename S::L acc = S::zero_l();
  WeightSum<S> ws;
  CheckSum<S> cs;
  for (; i + S::W <= end; i += S::W) {
    if (HAS_Q) prefetch_ahead<S>(q, i);
    if (!FROM_E) prefetch_ahead<S>(p, i);
    F pv;
    if (!p_lanes<S, FROM_E>(p + i, fe, vcut, evaluate, pv)) {
      if (CHECK) cs.add(S::load(q + i));
      continue;
    }
    if (CHECK) cs.add(S::load(q + i));
    if (BLOCK) {
      alignas(64) float pl[S::W];
      store(pl, pv);
      for (int k = 0; k < ND; ++k) {
        const D a = S::load_wide(pl + k * S::WD) * vrho;
        const D b = HAS_Q ? S::load_wide(q + i + k * S::WD) : dzero;
        acc = acc + trunc_l(keep(gt(a, b), a - max(b, dzero)) * s60);  // NaN: gt is false
      }
    }
    if (MIN) {  // disjoint masks: one term is +0, the sum is exact (weight_lanes' MIN)
      const F qv = S::load(q + i);
      const F qq = keep(gt(qv, zero), qv);
      const F rv = keep(le(pv, qq), pv) + keep(gt(pv, qq), qq);
      ws.add(FROM_E ? rv : keep(ge(rv, zero) & le(rv, one), rv));
    }
  }
  if (BLOCK) sblock += hsum(acc);
  if (MIN) smin += ws.total();
  if (CHECK) cs.into(chk);
  return i;
}

template <bool FROM_E, bool BLOCK, bool MIN, bool HAS_Q, bool CHECK = false>
uint64_t pq_t(const float* p, const float* q, double rho, int64_t V, uint64_t* bsum,
              uint64_t* min_out, const FromE& fe, RowCheck* chk = nullptr) {
  uint64_t total = 0, tmin = 0;
  for (int64_t b0 = 0, k = 0; b0 < V; b0 += kDrawBlock, ++k) {
    const int64_t b1 = V - b0 < kDrawBlock ? V : b0 + kDrawBlock;
    uint64_t s = 0;
    const int64_t i =
        pq_lanes<Native, FROM_E, BLOCK, MIN, HAS_Q, CHECK>(p, q, rho, b0, b1, s, tmin, fe, chk);
    if constexpr (Native::W > 1)
      pq_lanes<Scalar, FROM_E, BLOCK, MIN, HAS_Q, CHECK>(p, q, rho, i, b1, s, tmin, fe, chk);
    if (bsum) bsum[k] = s;
    total += s;
  }
  if (min_out) *min_out = tmin;
  return total;
}

template <bool FROM_E>
uint64_t pq_dispatch(const float* p, const float* q, double rho, int64_t V, uint64_t* bsum,
                     bool block, uint64_t* min_out, const FromE& fe, RowCheck* chk) {
  if (min_out && !q) return 0;  // (callers ask the min mass only with a draft row)
  if (chk && q && block) {      // block verification's mass of the row it may draw from
    return min_out ? pq_t<FROM_E, true, true, true, true>(p, q, rho, V, bsum, min_out, fe, chk)
                   : pq_t<FROM_E, true, false, true, true>(p, q, rho, V, bsum, nullptr, fe, chk);
  }
  if (block && min_out) return pq_t<FROM_E, true, true, true>(p, q, rho, V, bsum, min_out, fe);
  if (min_out) return pq_t<FROM_E, false, true, true>(p, q, rho, V, bsum, min_out, fe);
  return q ? pq_t<FROM_E, true, false, true>(p, q, rho, V, bsum, nullptr, fe)
           : pq_t<FROM_E, true, false, false>(p, nullptr, rho, V, bsum, nullptr, fe);
}

// ------------------------------------------------------------------ integer weights
// W = trunc(x * 2^60) for x in [0, 1] (tree verification's R and Qw): float64(x) * 2^60 is
// exact and <= 2^60 (trunc_l's range), the same integer as the float32 product's.  Stored
// to W when given, added to s; returns where the whole vectors stopped.
template <class S>
int64_t int_weight_lanes(const float* x, int64_t* W, int64_t i, int64_t end, uint64_t& s) {
  const typename S::D s60 = S::splat_d(0x1p60);
  typename S::L acc = S::zero_l();
  for (; i + S::WD <= end; i += S::WD) {
    const typename S::L w = trunc_l(S::load_wide(x + i) * s60);
    if (W) store(W + i, w);
    acc = acc + w;
  }
  s += hsum(acc);
  return i;
}

// ------------------------------------------------------------------ tree residual update
// One token of tree_update (passes.h): R' = max(trunc(d * 2^60), 0), d = R * ia - qn in float64
// (-2^60 <= d * 2^60 <= 2^61: converts exactly); the lanes below follow the same rule.
inline int64_t tree_weight(int64_t r, const int64_t* Qw, double ia, double iq, bool at_y) {
  const double qn = Qw ? double(*Qw) * iq : (at_y ? 1.0 : 0.0);
  const double d = double(r) * ia - qn;
  const int64_t w = int64_t(d * 0x1p60);
  return w > 0 ? w : 0;
}

// The tokens of [i, end) in whole vectors of S, with qn = Qw * iq (Qw null: qn = 0; the caller
// redoes the point mass's token), added to s; returns where the vectors stopped.  R < 2^62 and
// 0 <= max(d, 0) * 2^60 < 2^61 are the ranges of to_f64 and trunc_l.
template <class S>
int64_t tree_lanes(int64_t* R, const int64_t* Qw, double ia, double iq, int64_t i, int64_t end,
                   uint64_t& s) {
  using D = typename S::D;
  const D via = S::splat_d(ia), viq = S::splat_d(iq);
  const D zero = S::splat_d(0.0), s60 = S::splat_d(0x1p60);
  typename S::L acc = S::zero_l();
  for (; i + S::WD <= end; i += S::WD) {
    const D rn = to_f64(S::load_l(R + i)) * via;
    const D qn = Qw ? to_f64(S::load_l(Qw + i)) * viq : zero;
    const typename S::L w = trunc_l(max(rn - qn, zero) * s60);
    store(R + i, w);
    acc = acc + w;
  }
  s += hsum(acc);
  return i;
}

}  // namespace

uint64_t row_weights(const float* e, float cut, double sd, bool sparse, const float* q, float* r,
                     int64_t V, uint64_t* bsum, bool* bad, uint64_t* beta, RowCheck* chk) {
  const FromE fe{cut, DivScale(kEScale, sd), sparse || cut > 0.0f};
  if (q && chk) {
    return beta ? weights_t<true, true, true, true>(e, q, r, V, bsum, bad, fe, beta, chk)
                : weights_t<true, true, false, true>(e, q, r, V, bsum, bad, fe, nullptr, chk);
  }
  if (q && beta) return weights_t<true, true, true>(e, q, r, V, bsum, bad, fe, beta);
  return q ? weights_t<true, true>(e, q, r, V, bsum, bad, fe)
           : weights_t<false, true>(e, nullptr, r, V, bsum, bad, fe);
}

uint64_t pq_masses(const PRow& pr, const float* q, double rho, int64_t V, uint64_t* bsum,
                   bool block, uint64_t* min_out, RowCheck* chk) {
  if (!pr.from_e) return pq_dispatch<false>(pr.p, q, rho, V, bsum, block, min_out, FromE{}, chk);
  const FromE fe{pr.cut, DivScale(kEScale, pr.sd), pr.sparse || pr.cut > 0.0f};
  return pq_dispatch<true>(pr.p, q, rho, V, bsum, block, min_out, fe, chk);
}

// sum of trunc(min(p, q > 0 ? q : 0) * 2^60): beta of the acceptance rates (p, q valid rows)
uint64_t min_mass(const float* p, const float* q, float* r, int64_t V) {
  uint64_t total = 0;
  bool b = false;
  for (int64_t b0 = 0; b0 < V; b0 += kDrawBlock) {
    const int64_t b1 = V - b0 < kDrawBlock ? V : b0 + kDrawBlock;
    const int64_t i = weight_lanes<Native, true, true>(p, q, r, b0, b1, total, b);
    if constexpr (Native::W > 1) weight_lanes<Scalar, true, true>(p, q, r, i, b1, total, b);
  }
  return total;
}

uint64_t weights(const float* p, const float* q, float* r, int64_t V, uint64_t* bsum,
                 bool* bad, uint64_t* beta, RowCheck* chk) {
  if (q && chk) {
    return beta ? weights_t<true, false, true, true>(p, q, r, V, bsum, bad, FromE{}, beta, chk)
                : weights_t<true, false, false, true>(p, q, r, V, bsum, bad, FromE{}, nullptr,
                                                      chk);
  }
  if (q && beta) return weights_t<true, false, true>(p, q, r, V, bsum, bad, FromE{}, beta);
  return q ? weights_t<true>(p, q, r, V, bsum, bad) : weights_t<false>(p, nullptr, r, V, bsum, bad);
}

uint64_t block_mass(const float* p, const float* q, double rho, int64_t V, uint64_t* bsum) {
  uint64_t total = 0;
  for (int64_t b0 = 0, k = 0; b0 < V; b0 += kDrawBlock, ++k) {
    const int64_t b1 = V - b0 < kDrawBlock ? V : b0 + kDrawBlock;
    uint64_t s = 0;
    const int64_t i = block_lanes<Native>(p, q, rho, b0, b1, s);
    if constexpr (Native::WD > 1) block_lanes<Scalar>(p, q, rho, i, b1, s);
    if (bsum) bsum[k] = s;
    total += s;
  }
  return total;
}

uint64_t int_weights(const float* x, int64_t V, int64_t* W, uint64_t* bsum) {
  uint64_t total = 0;
  for (int64_t b0 = 0, k = 0; b0 < V; b0 += kDrawBlock, ++k) {
    const int64_t b1 = V - b0 < kDrawBlock ? V : b0 + kDrawBlock;
    uint64_t s = 0;
    const int64_t i = int_weight_lanes<Native>(x, W, b0, b1, s);
    if constexpr (Native::WD > 1) int_weight_lanes<Scalar>(x, W, i, b1, s);
    if (bsum) bsum[k] = s;
    total += s;
  }
  return total;
}

uint64_t tree_update(int64_t* R, const int64_t* Qw, double ia, double iq, int64_t y, int64_t V,
                     uint64_t* bsum) {
  uint64_t total = 0;
  for (int64_t b0 = 0, k = 0; b0 < V; b0 += kDrawBlock, ++k) {
    if (bsum[k] == 0) continue;
    const int64_t b1 = V - b0 < kDrawBlock ? V : b0 + kDrawBlock;
    const bool y_here = !Qw && y >= b0 && y < b1;
    const int64_t r_y = y_here ? R[y] : 0;  // the point mass's token, before the lanes write it
    uint64_t s = 0;
    const int64_t i = tree_lanes<Native>(R, Qw, ia, iq, b0, b1, s);
    if constexpr (Native::WD > 1) tree_lanes<Scalar>(R, Qw, ia, iq, i, b1, s);
    if (y_here) {  // the lanes took q = 0 at y: the point mass's token redone
      s -= uint64_t(R[y]);
      R[y] = tree_weight(r_y, nullptr, ia, iq, true);
      s += uint64_t(R[y]);
    }
    bsum[k] = s;
    total += s;
  }
  return total;
}

}  // namespace SPECOPS_LEVEL
}  // namespace specops
