// The transform's row passes (reference section 2: scale and max, exp and the exact integer
// mass, probabilities, the greedy argmax, the top-k / top-p gathers), written once over the Vec
// types and compiled once per ISA level (see passes.h and simd/level.h), and the level's
// Passes table (the draw's passes are in simd/draw_passes.cpp).  Each routine runs whole
// vectors of its level and hands the remaining elements to its own scalar instantiation, so
// the tail does the same operations.
//
// Exact integer sums: trunc(e * 2^40) for e in [0, 1] is split exactly as
// hi * 2^20 + lo with hi = trunc(e * 2^20), lo = trunc(frac * 2^20) (each step an exact
// float32 operation); the digits are summed in int32 lanes over kLaneBlock vectors, then in
// uint64.
#include "simd/passes.h"

#include "core/float_bits.h"
#include "core/pexp.h"
#include "simd/draw_passes.h"
#include "simd/level.h"

namespace specops {
namespace {

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

// The level's table, filled member by member.
constexpr Passes level_passes() {
  Passes p{};
  p.name = SPECOPS_LEVEL_NAME;
  p.scale_max = &scale_max;
  p.exp_pass = &exp_pass;
  p.masked_mass = &masked_mass;
  p.materialize = &materialize;
  p.first_eq = &first_eq;
  p.gather_ge = &gather_ge;
  p.gather_key = &gather_key;
  p.band_pass = &band_pass;
  p.weights = &SPECOPS_LEVEL::weights;
  p.row_weights = &SPECOPS_LEVEL::row_weights;
  p.block_mass = &SPECOPS_LEVEL::block_mass;
  p.min_mass = &SPECOPS_LEVEL::min_mass;
  p.pq_masses = &SPECOPS_LEVEL::pq_masses;
  p.int_weights = &SPECOPS_LEVEL::int_weights;
  p.tree_update = &SPECOPS_LEVEL::tree_update;
  return p;
}

}  // namespace

extern const Passes SPECOPS_PASSES_TABLE = level_passes();
static_assert(complete(level_passes()), "every member of Passes needs its pass");

}  // namespace specops
