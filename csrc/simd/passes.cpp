// The vectorised row passes, written once over the Vec types and compiled once per ISA level
// (see passes.h).  Each routine runs whole vectors of its level and hands the remaining
// elements to its own scalar instantiation, so the tail does the same operations.
//
// Exact integer sums: trunc(e * 2^40) for e in [0, 1] is split exactly as
// hi * 2^20 + lo with hi = trunc(e * 2^20), lo = trunc(frac * 2^20) (each step an exact
// float32 operation); the digits are summed in int32 lanes over kLaneBlock vectors, then in
// uint64.  The draw's weights trunc(r * 2^60) use three such digits.
#include "simd/passes.h"

#include "core/float_bits.h"
#include "core/pexp.h"
#include "simd/vec_scalar.h"

#if !defined(SPECOPS_ISA)
#error "simd/passes.cpp is compiled once per level with -DSPECOPS_ISA=0|1|2|3 (see CMakeLists.txt)"
#elif SPECOPS_ISA == 1
#include "simd/vec_sse2.h"
#elif SPECOPS_ISA == 2
#include <immintrin.h>

#include "simd/vec_avx2.h"
#elif SPECOPS_ISA == 3
#include <immintrin.h>

#include "simd/vec_avx512.h"
#endif

namespace specops {
namespace {

using simd::Scalar;
#if SPECOPS_ISA == 0
using Native = simd::Scalar;
#define SPECOPS_PASSES_TABLE kPassesScalar
#define SPECOPS_PASSES_NAME "scalar"
#elif SPECOPS_ISA == 1
using Native = simd::Sse2;
#define SPECOPS_PASSES_TABLE kPassesSse2
#define SPECOPS_PASSES_NAME "sse2"
#elif SPECOPS_ISA == 2
using Native = simd::Avx2;
#define SPECOPS_PASSES_TABLE kPassesAvx2
#define SPECOPS_PASSES_NAME "avx2"
#elif SPECOPS_ISA == 3
using Native = simd::Avx512;
#define SPECOPS_PASSES_TABLE kPassesAvx512
#define SPECOPS_PASSES_NAME "avx512"
#else
#error "SPECOPS_ISA must be 0 (scalar), 1 (sse2), 2 (avx2) or 3 (avx512)"
#endif

// Number of elements of [i, n) covered by whole vectors, at most `cap` vectors.
template <class S>
inline int64_t vec_span(int64_t i, int64_t n, int64_t cap) {
  const int64_t nv = (n - i) / S::W;
  return (nv < cap ? nv : cap) * S::W;
}

// ------------------------------------------------------------------ exact 20-bit digit sums
template <class S>
inline void add_mass(typename S::F e, typename S::I& hi, typename S::I& lo) {
  const typename S::F s20 = S::splat(0x1p20f);
  const typename S::F y = e * s20;
  const typename S::I h = to_int(y);
  hi = hi + h;
  lo = lo + to_int((y - to_float(h)) * s20);
}

template <class S>
inline uint64_t fold_mass(typename S::I hi, typename S::I lo) {
  int32_t h[S::W], l[S::W];
  store(h, hi);
  store(l, lo);
  uint64_t sum = 0;
  for (int k = 0; k < S::W; ++k) sum += (uint64_t(uint32_t(h[k])) << 20) + uint32_t(l[k]);
  return sum;
}

// The exact mass of the vectors e_at(i) returns for each whole vector i of [i, V): digits
// summed in int32 lanes per kLaneBlock vectors, then in uint64.  Advances i.
template <class S, class EAt>
inline uint64_t sum_mass(int64_t& i, int64_t V, EAt&& e_at) {
  uint64_t total = 0;
  while (i + S::W <= V) {
    const int64_t end = i + vec_span<S>(i, V, kLaneBlock);
    typename S::I hi = S::splat_i(0), lo = hi;
    for (; i < end; i += S::W) add_mass<S>(e_at(i), hi, lo);
    total += fold_mass<S>(hi, lo);
  }
  return total;
}

template <class S>
inline float hmax(typename S::F x) {
  float lane[S::W];
  store(lane, x);
  float m = -kInf;
  for (int k = 0; k < S::W; ++k) m = lane[k] > m ? lane[k] : m;
  return m;
}

// ------------------------------------------------------------------ pass 1: scale, flags, max
// Only NaN is tracked per element: for a NaN-free row, "+inf present" is max == +inf and
// "all -inf" is max == -inf.  (For inv_t > 0 the flags of l are those of x = l * inv_t.)
struct Scan {
  bool nan;
  float mx;
};

template <class S, bool STORE>
Scan scan(const float* src, float* dst, int64_t V, float inv_t) {
  using F = typename S::F;
  const F vit = S::splat(inv_t);
  F mx0 = S::splat(-kInf), mx1 = mx0;
  typename S::M nan = unord(S::splat(0.0f), S::splat(0.0f));  // all false
  int64_t i = 0;
  for (; i + 2 * S::W <= V; i += 2 * S::W) {  // two chains: max has latency
    const F x0 = S::load(src + i) * vit, x1 = S::load(src + i + S::W) * vit;
    if (STORE) {
      store(dst + i, x0);
      store(dst + i + S::W, x1);
    }
    nan = nan | unord(x0, x1);
    mx0 = max(mx0, x0);
    mx1 = max(mx1, x1);
  }
  for (; i + S::W <= V; i += S::W) {
    const F x0 = S::load(src + i) * vit;
    if (STORE) store(dst + i, x0);
    nan = nan | unord(x0, x0);
    mx0 = max(mx0, x0);
  }
  Scan r{any(nan), hmax<S>(max(mx0, mx1))};
  if constexpr (S::W > 1) {
    if (i < V) {
      const Scan t = scan<Scalar, STORE>(src + i, STORE ? dst + i : nullptr, V - i, inv_t);
      r.nan |= t.nan;
      r.mx = t.mx > r.mx ? t.mx : r.mx;
    }
  }
  return r;
}

RowScan scale_max(const float* src, float* dst, int64_t V, float inv_t) {
  const Scan s = dst ? scan<Native, true>(src, dst, V, inv_t)
                     : scan<Native, false>(src, nullptr, V, inv_t);
  RowScan r;
  r.bad = s.nan || s.mx == kInf;
  r.allneg = s.mx == -kInf;
  r.mx = s.mx;
  return r;
}

// ------------------------------------------------------------------ pass 2: exp and mass
#ifndef SPECOPS_EXP_GROUP
#define SPECOPS_EXP_GROUP 8
#endif
constexpr int kExpGroup = SPECOPS_EXP_GROUP;

// SPARSE (top-k rows): vectors entirely below thr are zeroed without the exp.  Without a
// threshold (thr = -inf) the compare is dropped: x >= -inf holds for every x of a NaN-free
// row, and pexp(-inf - m) = 0.
// TAIL: a vector whose kept lanes all have d = x - m < EXP_ZERO_MASS has no integer mass: it
// stores d itself (its kept lanes; masked lanes +0) and skips the exp and the digit sums.  A
// negative entry therefore means "e = pexp(entry), E = 0"; RowP and materialize turn it into
// e where a token's own probability is read (passes.h).
template <class S, bool SPARSE, bool TAIL, bool CUT, bool CAND>
uint64_t exp_t(float* x, int64_t V, float m, float thr, ExpOptions* opt) {
  constexpr bool OPT = CUT || CAND;
  using F = typename S::F;
  using M = typename S::M;
  // G vectors a step (pexp_n): their exp chains overlap; the scalar level needs no grouping
  constexpr int G = S::W > 1 ? kExpGroup : 1;
  const F vm = S::splat(m), vthr = S::splat(thr), zero = S::splat(0.0f);
  const F vz = S::splat(EXP_ZERO_MASS), ninf = S::splat(-kInf);
  const F vcut = S::splat(OPT ? opt->cut : 0.0f), vlo = S::splat(OPT ? opt->cand_lo : 0.0f);
  float* cand = OPT && opt->n_cand >= 0 ? opt->cand : nullptr;
  int64_t nc = OPT ? opt->n_cand : 0;
  // the prefetched row, spread evenly over this pass: pf_step bytes per step of G vectors
  const char* pf = opt && V > 0 ? opt->prefetch : nullptr;
  const char* const pf_end = pf ? pf + opt->prefetch_bytes : nullptr;
  const int64_t pf_step = pf ? (opt->prefetch_bytes * G * S::W + V - 1) / V : 0;
  uint64_t total = 0;
  int64_t i = 0;
  while (i + G * S::W <= V) {
    const int64_t end = i + vec_span<S>(i, V, kLaneBlock) / (G * S::W) * (G * S::W);
    typename S::I hi = S::splat_i(0), lo = hi;
    for (; i < end; i += G * S::W) {
      if (pf) {
        for (int64_t b = 0; b < pf_step && pf + b < pf_end; b += 64) __builtin_prefetch(pf + b);
        pf += pf_step;
        if (pf >= pf_end) pf = nullptr;
      }
      F d[G], e[G];
      M in[G];
      F dmax = ninf;  // the largest d of the group's kept lanes (-inf: none)
      for (int k = 0; k < G; ++k) {
        const F xv = S::load(x + i + k * S::W);
        d[k] = xv - vm;
        if (SPARSE) {
          in[k] = ge(xv, vthr);
          dmax = max(dmax, keep(in[k], d[k]) + keep(mnot(in[k]), ninf));  // disjoint
        } else {
          dmax = max(dmax, d[k]);
        }
      }
      // TAIL: no kept lane with integer mass in the group; SPARSE alone: no kept lane
      // (a kept lane of a NaN-free row has d > -inf unless x = -inf, whose e is 0 anyway)
      if ((SPARSE || TAIL) && !any(TAIL ? ge(dmax, vz) : gt(dmax, ninf))) {
        for (int k = 0; k < G; ++k)
          store(x + i + k * S::W, TAIL ? (SPARSE ? keep(in[k], d[k]) : d[k]) : zero);
        continue;
      }
      pexp_n<S, G>(d, e);
      M c = lt(zero, zero);  // all false
      for (int k = 0; k < G; ++k) {
        if (SPARSE) e[k] = keep(in[k], e[k]);
        store(x + i + k * S::W, e[k]);
        add_mass<S>(CUT ? keep(ge(e[k], vcut), e[k]) : e[k], hi, lo);
        if (CAND && cand) c = c | ge(e[k], vlo);  // (after an overflow: no more gathering)
      }
      if (CAND && cand && any(c)) {
        for (int k = 0; k < G; ++k) nc += compress(cand + nc, e[k], ge(e[k], vlo));
        if (nc > opt->cand_cap) cand = nullptr, nc = -1;  // too many: the caller's full select
      }
    }
    total += fold_mass<S>(hi, lo);
  }
  if (CAND) opt->n_cand = nc;
  if (opt) opt->prefetch = nullptr;  // (the scalar tail does not prefetch)
  if constexpr (S::W > 1)
    total += exp_t<Scalar, SPARSE, TAIL, CUT, CAND>(x + i, V - i, m, thr, opt);
  return total;
}

template <bool SPARSE, bool TAIL>
uint64_t exp_opt(float* x, int64_t V, float m, float thr, ExpOptions* opt) {
  if (opt && opt->cand) return exp_t<Native, SPARSE, TAIL, false, true>(x, V, m, thr, opt);
  if (opt && opt->cut > 0.0f)
    return exp_t<Native, SPARSE, TAIL, true, false>(x, V, m, thr, opt);
  return exp_t<Native, SPARSE, TAIL, false, false>(x, V, m, thr, opt);
}

uint64_t exp_pass(float* x, int64_t V, float m, float thr, bool tail, ExpOptions* opt) {
  const bool sparse = thr != -kInf;
  if (tail)
    return sparse ? exp_opt<true, true>(x, V, m, thr, opt) : exp_opt<false, true>(x, V, m, thr, opt);
  return sparse ? exp_opt<true, false>(x, V, m, thr, opt)
                : exp_opt<false, false>(x, V, m, thr, opt);
}

template <class S>
uint64_t masked_mass_t(const float* e, int64_t V, float cut) {
  const typename S::F vc = S::splat(cut);
  int64_t i = 0;
  uint64_t total = sum_mass<S>(i, V, [&](int64_t k) {
    const typename S::F ev = S::load(e + k);
    return keep(ge(ev, vc), ev);
  });
  if constexpr (S::W > 1) total += masked_mass_t<Scalar>(e + i, V - i, cut);
  return total;
}

uint64_t masked_mass(const float* e, int64_t V, float cut) {
  return masked_mass_t<Native>(e, V, cut);
}

// ------------------------------------------------------------------ probabilities
// Vectors of masked tokens (all below cut, or all zero) skip the float64 division.  Negative
// entries (tokens the exp pass skipped: they hold d) get their e = pexp(d) first.
template <class S>
void materialize_t(float* e, int64_t V, float cut, double sd) {
  using F = typename S::F;
  const F vcut = S::splat(cut), zero = S::splat(0.0f);
  const DivScale ds(kEScale, sd);
  const bool evaluate = !(cut >= 0x1p-40f);
  int64_t i = 0;
  for (; i + S::W <= V; i += S::W) {
    F ev = S::load(e + i);
    const typename S::M skipped = lt(ev, zero);
    if (any(skipped))  // with cut >= 2^-40 every skipped token (e < 2^-40) is masked anyway
      ev = keep(mnot(skipped), ev) + (evaluate ? keep(skipped, pexp_v<S>(ev)) : zero);
    const typename S::M in = ge(ev, vcut);
    if (!any(in & ne_u(ev, zero))) {
      store(e + i, zero);
      continue;
    }
    store(e + i, keep(in, div_flush(ev, ds)));
  }
  if constexpr (S::W > 1) materialize_t<Scalar>(e + i, V - i, cut, sd);
}

void materialize(float* e, int64_t V, float cut, double sd) { materialize_t<Native>(e, V, cut, sd); }

// ------------------------------------------------------------------ greedy argmax
template <class S>
int64_t first_eq_t(const float* x, int64_t n, float v) {
  const typename S::F vv = S::splat(v);
  int64_t i = 0;
  for (; i + 4 * S::W <= n; i += 4 * S::W) {  // four vectors a test: the row is in cache
    const typename S::M hit = eq_f(S::load(x + i), vv) | eq_f(S::load(x + i + S::W), vv) |
                              eq_f(S::load(x + i + 2 * S::W), vv) |
                              eq_f(S::load(x + i + 3 * S::W), vv);
    if (any(hit)) break;
  }
  for (; i + S::W <= n; i += S::W) {
    const int bits = movemask(eq_f(S::load(x + i), vv));
    if (bits) return i + __builtin_ctz(unsigned(bits));
  }
  if constexpr (S::W > 1) {
    const int64_t t = first_eq_t<Scalar>(x + i, n - i, v);
    return t < 0 ? -1 : i + t;
  }
  return -1;
}

int64_t first_eq(const float* x, int64_t n, float v) { return first_eq_t<Native>(x, n, v); }

// ------------------------------------------------------------------ candidate gathers
template <class S>
int64_t gather_ge_t(const float* x, int64_t n, float thr, float* out) {
  const typename S::F vt = S::splat(thr);
  int64_t c = 0, i = 0;
  for (; i + S::W <= n; i += S::W) {
    const typename S::F v = S::load(x + i);
    const typename S::M in = ge(v, vt);
    if (any(in)) c += compress(out + c, v, in);
  }
  if constexpr (S::W > 1) c += gather_ge_t<Scalar>(x + i, n - i, thr, out + c);
  return c;
}

int64_t gather_ge(const float* x, int64_t n, float thr, float* out) {
  return gather_ge_t<Native>(x, n, thr, out);
}

// order_key(bits) = bits ^ (sign ? 0xffffffff : 0x80000000): unsigned order = float order.
template <class S, bool ORDERED>
int64_t gather_key_t(const float* x, int64_t n, int shift, uint32_t mask, uint32_t key,
                     float* out) {
  using I = typename S::I;
  const I vkey = S::splat_i(int32_t(key)), vmask = S::splat_i(int32_t(mask)),
          sign = S::splat_i(INT32_MIN);
  int64_t c = 0, i = 0;
  for (; i + S::W <= n; i += S::W) {
    const typename S::F v = S::load(x + i);
    I u = as_int(v);
    if (ORDERED) u = u ^ (sra31(u) | sign);
    const typename S::M hit = eq(srl(u, shift) & vmask, vkey);
    if (any(hit)) c += compress(out + c, v, hit);
  }
  if constexpr (S::W > 1) c += gather_key_t<Scalar, ORDERED>(x + i, n - i, shift, mask, key, out + c);
  return c;
}

int64_t gather_key(const float* x, int64_t n, bool ordered, int shift, uint32_t mask,
                   uint32_t key, float* out) {
  return ordered ? gather_key_t<Native, true>(x, n, shift, mask, key, out)
                 : gather_key_t<Native, false>(x, n, shift, mask, key, out);
}

template <class S>
int64_t band_t(const float* e, int64_t V, float lo, float hi, float* out, uint64_t* mass) {
  using F = typename S::F;
  const F vlo = S::splat(lo), vhi = S::splat(hi);
  int64_t n = 0, i = 0;
  uint64_t M = sum_mass<S>(i, V, [&](int64_t k) {
    const F ev = S::load(e + k);
    const typename S::M above = ge(ev, vlo);
    n += compress(out + n, ev, above & lt(ev, vhi));
    return keep(above, ev);
  });
  if constexpr (S::W > 1) {
    uint64_t tail = 0;
    n += band_t<Scalar>(e + i, V - i, lo, hi, out + n, &tail);
    M += tail;
  }
  *mass = M;
  return n;
}

int64_t band_pass(const float* e, int64_t V, float lo, float hi, float* out, uint64_t* mass) {
  return band_t<Native>(e, V, lo, hi, out, mass);
}

// ------------------------------------------------------------------ draw weights
// Exact sum of trunc(r * 2^60) over the lanes added (0 <= r <= 1): three 20-bit digits, each
// an exact float32 step, summed in int32 lanes (kDrawBlock digits per lane at most).
template <class S>
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

#if SPECOPS_ISA == 3
// AVX-512 converts float64 to int64 (AVX512DQ): float64(r) * 2^60 is exact and <= 2^60, so
// its truncation is trunc(r * 2^60) itself, summed in int64 lanes.  Fewer uops than the digits.
template <>
struct WeightSum<simd::Avx512> {
  __m512i a = _mm512_setzero_si512();
  void add(simd::Avx512::F r) {
    const __m512d s60 = _mm512_set1_pd(0x1p60);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(r.v));
    const __m512d hi =
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r.v), 1)));
    a = _mm512_add_epi64(a, _mm512_add_epi64(_mm512_cvttpd_epi64(_mm512_mul_pd(lo, s60)),
                                             _mm512_cvttpd_epi64(_mm512_mul_pd(hi, s60))));
  }
  uint64_t total() const { return uint64_t(_mm512_reduce_add_epi64(a)); }
};
#endif

// r = p > q ? p - max(q, 0) : 0 (HAS_Q) or r = p; trunc(r * 2^60) over [i, end) added to
// sum; returns where the whole vectors stopped.  r outside [0, 1] sets `bad` (and counts 0).
// Vectors of masked tokens (p == 0: top-k / top-p / min-p rows are mostly zeros) store r = 0
// without reading q (a NaN p still takes the full path and its bad-row flag).
// MIN (acceptance rates, with q): r = min(p, q > 0 ? q : 0) instead of the residual.
// FROM_E: p is computed here from a transformed row (e, cut, sd: what materialize would
// store, see RowP), so the drawn row is not stored as p first.  Such a p is in [0, 1] (e <= 1
// and S' >= 2^40 + E of any other kept token), hence so is r: no check.
struct FromE {
  float cut = 0.0f;
  DivScale ds{kEScale, kEScale};
  bool sparse = true;  // the row has masked tokens: vectors of them skip the work
};

template <class S, bool HAS_Q, bool MIN = false, bool FROM_E = false>
int64_t weight_lanes(const float* p, const float* q, float* r, int64_t i, int64_t end,
                     uint64_t& sum, bool& bad, FromE fe = {}) {
  using F = typename S::F;
  const F one = S::splat(1.0f), zero = S::splat(0.0f);
  const F vcut = S::splat(fe.cut);
  const bool evaluate = !(fe.cut >= 0x1p-40f);  // see materialize_t
  WeightSum<S> ws;
  typename S::M vbad = lt(zero, zero);  // all false
  for (; i + S::W <= end; i += S::W) {
    F pv;
    if (FROM_E) {
      F ev = S::load(p + i);
      const typename S::M skipped = lt(ev, zero);
      if (any(skipped))
        ev = keep(mnot(skipped), ev) + (evaluate ? keep(skipped, pexp_v<S>(ev)) : zero);
      if (!fe.sparse) {  // every token kept (a zero e, d < -86, gives p = 0 anyway)
        pv = div_flush(ev, fe.ds);
      } else {
        const typename S::M in = ge(ev, vcut);
        if (!any(in & ne_u(ev, zero))) {
          store(r + i, zero);
          continue;
        }
        pv = keep(in, div_flush(ev, fe.ds));
      }
    } else {
      pv = S::load(p + i);
      if (!any(ne_u(pv, zero))) {
        store(r + i, zero);
        continue;
      }
    }
    F rv = pv;
    if (HAS_Q && MIN) {  // disjoint masks: one term is +0, the sum is exact
      const F qv = S::load(q + i);
      const F qq = keep(gt(qv, zero), qv);
      rv = keep(le(pv, qq), pv) + keep(gt(pv, qq), qq);
    } else if (HAS_Q) {
      const F qv = S::load(q + i);
      rv = keep(gt(pv, qv), pv - max(qv, zero));
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
  bad = bad || any(vbad);
  return i;
}

template <bool HAS_Q, bool FROM_E = false>
uint64_t weights_t(const float* p, const float* q, float* r, int64_t V, uint64_t* bsum,
                   bool* bad, FromE fe = {}) {
  uint64_t total = 0;
  bool b = false;
  for (int64_t b0 = 0, k = 0; b0 < V; b0 += kDrawBlock, ++k) {
    const int64_t b1 = V - b0 < kDrawBlock ? V : b0 + kDrawBlock;
    uint64_t s = 0;
    const int64_t i = weight_lanes<Native, HAS_Q, false, FROM_E>(p, q, r, b0, b1, s, b, fe);
    if constexpr (Native::W > 1)
      weight_lanes<Scalar, HAS_Q, false, FROM_E>(p, q, r, i, b1, s, b, fe);
    bsum[k] = s;
    total += s;
  }
  *bad = b;
  return total;
}

uint64_t row_weights(const float* e, float cut, double sd, bool sparse, const float* q, float* r,
                     int64_t V, uint64_t* bsum, bool* bad) {
  const FromE fe{cut, DivScale(kEScale, sd), sparse || cut > 0.0f};
  return q ? weights_t<true, true>(e, q, r, V, bsum, bad, fe)
           : weights_t<false, true>(e, nullptr, r, V, bsum, bad, fe);
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
                 bool* bad) {
  return q ? weights_t<true>(p, q, r, V, bsum, bad) : weights_t<false>(p, nullptr, r, V, bsum, bad);
}

// ------------------------------------------------------------------ block verification mass
// D = trunc(d * 2^60), d = rho * p - max(q, 0) where rho * p > q else 0, all in float64
// (q == nullptr: q = 0).  d <= 1, so d * 2^30 = hi + fr with hi = trunc < 2^31 and the
// fraction fr exact, and D = hi * 2^30 + trunc(fr * 2^30): two int32 digits per lane.
inline uint64_t block_weight(float p, const float* q, int64_t i, double rho) {
  const double a = rho * double(p), b = q ? double(q[i]) : 0.0;
  return a > b ? uint64_t(int64_t((a - (b > 0.0 ? b : 0.0)) * 0x1p60)) : 0;
}

uint64_t block_mass(const float* p, const float* q, double rho, int64_t V, uint64_t* bsum) {
  uint64_t total = 0;
  for (int64_t b0 = 0, k = 0; b0 < V; b0 += kDrawBlock, ++k) {
    const int64_t b1 = V - b0 < kDrawBlock ? V : b0 + kDrawBlock;
    int64_t i = b0;
    uint64_t s = 0;
#if SPECOPS_ISA >= 2  // AVX2 lanes (the AVX-512 level too)
    const __m256d vrho = _mm256_set1_pd(rho), zero = _mm256_setzero_pd();
    const __m256d s30 = _mm256_set1_pd(0x1p30);
    __m256i hi = _mm256_setzero_si256(), lo = hi;
    for (; i + 4 <= b1; i += 4) {
      const __m256d a = _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(p + i)), vrho);
      const __m256d b = q ? _mm256_cvtps_pd(_mm_loadu_ps(q + i)) : zero;
      const __m256d gt = _mm256_cmp_pd(a, b, _CMP_GT_OQ);  // NaN: false
      const __m256d d = _mm256_and_pd(gt, _mm256_sub_pd(a, _mm256_max_pd(b, zero)));
      const __m256d y = _mm256_mul_pd(d, s30);
      const __m128i h = _mm256_cvttpd_epi32(y);
      const __m128i l = _mm256_cvttpd_epi32(_mm256_mul_pd(_mm256_sub_pd(y, _mm256_cvtepi32_pd(h)), s30));
      hi = _mm256_add_epi64(hi, _mm256_cvtepi32_epi64(h));
      lo = _mm256_add_epi64(lo, _mm256_cvtepi32_epi64(l));
    }
    alignas(32) uint64_t lh[4], ll[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lh), hi);
    _mm256_store_si256(reinterpret_cast<__m256i*>(ll), lo);
    for (int t = 0; t < 4; ++t) s += (lh[t] << 30) + ll[t];
#endif
    for (; i < b1; ++i) s += block_weight(p[i], q, i, rho);
    if (bsum) bsum[k] = s;
    total += s;
  }
  return total;
}

// One token of tree_update: the scalar rule every level shares (and the tail of the lanes).
inline int64_t tree_weight(int64_t r, const int64_t* Qw, double ia, double iq, bool at_y) {
  const double qn = Qw ? double(*Qw) * iq : (at_y ? 1.0 : 0.0);
  const double d = double(r) * ia - qn;
  const int64_t w = int64_t(d * 0x1p60);  // -2^60 <= d * 2^60 <= 2^61: converts exactly
  return w > 0 ? w : 0;
}

#if SPECOPS_ISA >= 2  // AVX2 lanes (the AVX-512 level too)
// float64 of 0 <= x < 2^62 in four lanes, correctly rounded: the two 31-bit digits convert
// exactly and one addition rounds (as a scalar int64 -> double conversion does).
inline __m256d i62_to_pd(__m256i x) {
  const __m256i pick = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  const __m256i lo = _mm256_and_si256(x, _mm256_set1_epi64x(0x7fffffff));
  const __m256i hi = _mm256_srli_epi64(x, 31);
  const __m128i lo32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(lo, pick));
  const __m128i hi32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(hi, pick));
  return _mm256_add_pd(_mm256_mul_pd(_mm256_cvtepi32_pd(hi32), _mm256_set1_pd(0x1p31)),
                       _mm256_cvtepi32_pd(lo32));
}
#endif

uint64_t tree_update(int64_t* R, const int64_t* Qw, double ia, double iq, int64_t y, int64_t V,
                     uint64_t* bsum) {
  uint64_t total = 0;
  for (int64_t b0 = 0, k = 0; b0 < V; b0 += kDrawBlock, ++k) {
    if (bsum[k] == 0) continue;
    const int64_t b1 = V - b0 < kDrawBlock ? V : b0 + kDrawBlock;
    int64_t i = b0;
    uint64_t s = 0;
#if SPECOPS_ISA >= 2  // AVX2 lanes (the AVX-512 level too)
    const bool y_here = !Qw && y >= b0 && y < b1;
    const int64_t r_y = y_here ? R[y] : 0;  // the point mass's token, before the lanes write it
    const __m256d via = _mm256_set1_pd(ia), viq = _mm256_set1_pd(iq);
    const __m256d s30 = _mm256_set1_pd(0x1p30), zero = _mm256_setzero_pd();
    __m256i acc = _mm256_setzero_si256();
    for (; i + 4 <= b1; i += 4) {
      const __m256d rn = _mm256_mul_pd(
          i62_to_pd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(R + i))), via);
      const __m256d qn = Qw ? _mm256_mul_pd(i62_to_pd(_mm256_loadu_si256(
                                  reinterpret_cast<const __m256i*>(Qw + i))), viq)
                            : zero;
      // trunc(max(d, 0) * 2^60) as two 30-bit digits (d * 2^30 < 2^31 since d <= 1 + 2^-52)
      const __m256d t = _mm256_mul_pd(_mm256_max_pd(_mm256_sub_pd(rn, qn), zero), s30);
      const __m128i h = _mm256_cvttpd_epi32(t);
      const __m128i l = _mm256_cvttpd_epi32(_mm256_mul_pd(_mm256_sub_pd(t, _mm256_cvtepi32_pd(h)), s30));
      const __m256i w = _mm256_add_epi64(_mm256_slli_epi64(_mm256_cvtepi32_epi64(h), 30),
                                         _mm256_cvtepi32_epi64(l));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(R + i), w);
      acc = _mm256_add_epi64(acc, w);
    }
    alignas(32) uint64_t la[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(la), acc);
    s = la[0] + la[1] + la[2] + la[3];
    if (y_here && y < i) {  // the lanes took q = 0 at y: the point mass's token redone
      s -= uint64_t(R[y]);
      R[y] = tree_weight(r_y, nullptr, ia, iq, true);
      s += uint64_t(R[y]);
    }
#endif
    for (; i < b1; ++i) {
      R[i] = tree_weight(R[i], Qw ? Qw + i : nullptr, ia, iq, i == y);
      s += uint64_t(R[i]);
    }
    bsum[k] = s;
    total += s;
  }
  return total;
}

}  // namespace

extern const Passes SPECOPS_PASSES_TABLE = {
    SPECOPS_PASSES_NAME, &scale_max, &exp_pass,  &masked_mass, &materialize,
    &first_eq,           &gather_ge, &gather_key, &band_pass,   &weights,
    &row_weights,        &block_mass, &min_mass,  &tree_update,
};

}  // namespace specops
