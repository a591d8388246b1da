// Exact top-p select (reference section 2, step 5).
//
// tau = the largest e with float64(sum of E over e >= tau) >= float64(top_p) * float64(S), and
// the kept mass S' = sum of E over e >= tau, found without sorting the row: e >= 0, so the
// float bit patterns order like the values and a radix select on them is exact.
//   level 1: integer mass per bucket of bits >> 20 (1/8 binade; keys <= 0x3f8 for e <= 1),
//            two interleaved histograms so that neighbouring tokens do not serialise on
//            one counter;
//   level 2: the tokens of the crossing bucket (vectorised gather), mass per bucket of
//            their next 10 bits;
//   level 3: the few tokens of that sub-bucket, sorted, walked in tie groups.
// Every mass is an exact integer sum, so the answer is the reference's bit for bit.
// (e >= 0 here: +0 for masked tokens, pexp otherwise; or negative, for tokens without integer
// mass whose exp was skipped (simd/passes.h): emass gives them 0 and their level-1 keys lie
// above every e <= 1's, in buckets without mass, so they never reach levels 2 and 3.)
#include <algorithm>
#include <cstring>
#include <functional>

#include "core/float_bits.h"
#include "simd/passes.h"
#include "transform/transform.h"

namespace specops {
namespace {

// Every non-negative float pattern has bits >> 20 < 2048 (e in [0, 1] uses keys <= 0x3f8), so
// the key is a plain shift, masked only to stay inside the table whatever the input.
constexpr int kP1Shift = 20;
constexpr int kP1NB = 1 << (32 - 1 - kP1Shift);  // 2048
constexpr int kP2Shift = 10;
constexpr int kP2NB = 1 << (kP1Shift - kP2Shift);  // 1024
constexpr int64_t kLevel2Min = 32;  // fewer candidates than this: sort them directly

inline uint32_t p1_key(float e) { return (float_to_bits(e) >> kP1Shift) & (kP1NB - 1); }

// The select over e[0..n).  Whole row: mass_from = kKeptUnknown.  Band (see top_p_select):
// mass_from = the row's mass over e >= the band's lower edge; the mass above the band is then
// mass_from - (the band's mass).  *tau_above_band: that mass already reaches the target (tau
// lies above the band; the result is meaningless).
TopP select_core(const float* e, int64_t n, double target, int64_t mass_from, Work& w,
                 bool* tau_above_band) {
  // level 1 (no allocation after the first call: hmass only grows)
  if (w.hmass.size() < size_t(2 * kP1NB + kP2NB)) w.hmass.resize(size_t(2 * kP1NB + kP2NB));
  int64_t* ha = w.hmass.data();
  int64_t* hb = ha + kP1NB;
  std::memset(ha, 0, sizeof(int64_t) * 2 * kP1NB);
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) {
    ha[p1_key(e[i])] += emass(e[i]);
    hb[p1_key(e[i + 1])] += emass(e[i + 1]);
  }
  if (i < n) ha[p1_key(e[i])] += emass(e[i]);
  int64_t above = 0;
  if (tau_above_band) *tau_above_band = false;
  if (mass_from != kKeptUnknown) {
    int64_t band_mass = 0;
    for (int k = 0; k < kP1NB; ++k) band_mass += ha[k] + hb[k];
    above = mass_from - band_mass;
    if (!(double(above) < target)) {
      *tau_above_band = true;
      return {1.0f, kKeptUnknown};
    }
  }
  // For target > 0 the crossing group has E > 0, so buckets without mass are skipped.
  int k1 = -1;
  for (int k = kP1NB - 1; k >= 0; --k) {
    const int64_t m = ha[k] + hb[k];
    if (!m) continue;
    if (double(above + m) >= target) {
      k1 = k;
      break;
    }
    above += m;
  }
  if (k1 < 0) {  // unreachable for top_p < 1; mirror the reference's fallback (min e)
    float mn = kInf;
    for (int64_t t = 0; t < n; ++t) mn = e[t] < mn ? e[t] : mn;
    return {mn, kKeptUnknown};
  }
  float* c = grow(w.tmp, n);
  int64_t nc = passes().gather_key(e, n, false, kP1Shift, kP1NB - 1, uint32_t(k1), c);
  // level 2 over the candidates (keys relative to the bucket base, clamped: monotone)
  if (nc > kLevel2Min) {
    const int64_t above1 = above;
    int64_t* h2 = w.hmass.data() + 2 * kP1NB;
    std::memset(h2, 0, sizeof(int64_t) * kP2NB);
    const uint32_t base = uint32_t(k1) << kP1Shift;
    auto key2 = [base](float v) {
      const uint32_t u = float_to_bits(v);
      return std::min<uint32_t>(u >= base ? (u - base) >> kP2Shift : 0, kP2NB - 1);
    };
    for (int64_t t = 0; t < nc; ++t) h2[key2(c[t])] += emass(c[t]);
    int k2 = -1;
    for (int k = kP2NB - 1; k >= 0; --k) {
      const int64_t m = h2[k];
      if (!m) continue;
      if (double(above + m) >= target) {
        k2 = k;
        break;
      }
      above += m;
    }
    if (k2 >= 0) {
      int64_t n2 = 0;
      for (int64_t t = 0; t < nc; ++t)
        if (int(key2(c[t])) == k2) c[n2++] = c[t];
      nc = n2;
    } else {  // unreachable (the level-1 bucket's mass crosses): walk all its candidates
      above = above1;
    }
  }
  std::sort(c, c + nc, std::greater<float>());
  int64_t run = above;
  for (int64_t t = 0; t < nc; ++t) {
    run += emass(c[t]);
    if ((t + 1 == nc || c[t] != c[t + 1]) && double(run) >= target) return {c[t], run};
  }
  return {c[nc - 1], kKeptUnknown};
}

// Band pre-filter for long rows.  With D = S - target (the mass that may lie below tau), a
// strided sample of the row (every kBandStride-th token, level-1 keys) estimates the mass
// below each bucket edge; lo / hi are the edges where that estimate is about kBandLo * D /
// kBandHi * D.  One vectorised pass then computes M = sum of E over e >= lo exactly and copies
// the tokens with lo <= e < hi (the band) to a buffer.  If float64(M) >= target, tau >= lo
// (the smallest e >= lo has exactly mass M above it); if also float64(M - band mass) <
// target, every value >= hi fails and tau < hi.  Then tau is in the band, the mass above a
// band value v is (M - band mass) + the band's mass over e >= v, and the select over the band
// alone gives the same tau and kept mass, bit for bit.  Otherwise (the sample misjudged) the
// caller runs the select over the whole row: the estimate only decides the speed, never the
// answer.
constexpr int64_t kBandMinV = 4096;
constexpr int64_t kBandStride = 32;
constexpr double kBandLo = 0.8;
constexpr double kBandHi = 1.2;

enum class Band { kInside, kTauBelow, kTauAbove };

// The select restricted to the band [lo, hi).
Band select_in_band(const float* e, int64_t V, float lo, float hi, double target, Work& w,
                    TopP& out) {
  if (w.cand.size() < size_t(V + kSimdSlack)) w.cand.resize(size_t(V + kSimdSlack));
  float* c = w.cand.data();
  uint64_t M = 0;
  const int64_t n = passes().band_pass(e, V, lo, hi, c, &M);
  if (double(int64_t(M)) < target) return Band::kTauBelow;
  bool tau_above = false;
  out = select_core(c, n, target, int64_t(M), w, &tau_above);
  if (tau_above) return Band::kTauAbove;
  // the select over the band found tau (kept known) or fell back (kept unknown): both are
  // the whole row's answer only when tau is inside the band
  return out.kept != kKeptUnknown ? Band::kInside : Band::kTauBelow;
}

}  // namespace

bool top_p_from_candidates(const float* c, int64_t n, float top_p, int64_t S, Work& w,
                           TopP& out) {
  const double target = double(top_p) * double(S);
  if (!(target > 0.0) || n <= 0) return false;
  int64_t M = 0;  // the mass over e >= the candidates' lower edge: every such token is one
  for (int64_t i = 0; i < n; ++i) M += emass(c[i]);
  if (double(M) < target) return false;  // tau lies below the edge
  bool tau_above = false;
  out = select_core(c, n, target, M, w, &tau_above);
  return !tau_above && out.kept != kKeptUnknown;
}

TopP top_p_select(const float* e, int64_t V, float top_p, int64_t S, Work& w) {
  const double target = double(top_p) * double(S);
  if (!(target > 0.0)) return {1.0f, kKeptUnknown};  // the largest e (= 1, the argmax) qualifies
  const double D = double(S) - target;
  if (V < kBandMinV || !(D > 0.0)) return select_core(e, V, target, kKeptUnknown, w, nullptr);
  // sampled mass per level-1 key
  if (w.hmass.size() < size_t(3 * kP1NB + kP2NB)) w.hmass.resize(size_t(3 * kP1NB + kP2NB));
  int64_t* hs = w.hmass.data() + 2 * kP1NB + kP2NB;
  std::memset(hs, 0, sizeof(int64_t) * kP1NB);
  for (int64_t i = kBandStride / 2; i < V; i += kBandStride) hs[p1_key(e[i])] += emass(e[i]);
  const int ktop = int(p1_key(1.0f)) + 1;  // edges stay <= this key's (just above 1)
  int klo = -1, khi = -1;
  double below = 0.0;  // estimated mass of e < bucket k's lower edge
  for (int k = 0; k <= ktop; ++k) {
    if (below <= kBandLo * D) klo = k;
    if (below >= kBandHi * D) {
      khi = k;
      break;
    }
    below += double(kBandStride) * double(hs[k]);
  }
  if (klo <= 0) return select_core(e, V, target, kKeptUnknown, w, nullptr);
  TopP r{0.0f, kKeptUnknown};
  // The bound band: V * trunc(t * 2^40) <= D makes the mass above t >= target (checked
  // exactly all the same); used when the sample cannot place the lower edge (peaked rows,
  // whose mass below tau sits in a few tokens the sample misses).
  const float t = float(D / double(V) * 0x1p-40);
  if (klo == ktop) {  // the estimate never reached kBandLo * D
    if (t > 0.0f && select_in_band(e, V, t, kInf, target, w, r) == Band::kInside) return r;
    return select_core(e, V, target, kKeptUnknown, w, nullptr);
  }
  const float lo = bits_to_float(uint32_t(klo) << kP1Shift);
  const float hi = khi < 0 ? kInf : bits_to_float(uint32_t(khi) << kP1Shift);
  const Band b = select_in_band(e, V, lo, hi, target, w, r);
  if (b == Band::kInside) return r;
  if (b == Band::kTauAbove) {  // tau >= hi: the band [hi, inf)
    if (select_in_band(e, V, hi, kInf, target, w, r) == Band::kInside) return r;
  } else if (t > 0.0f && t < lo) {  // tau < lo: [t, lo)
    if (select_in_band(e, V, t, lo, target, w, r) == Band::kInside) return r;
  }
  return select_core(e, V, target, kKeptUnknown, w, nullptr);
}

}  // namespace specops
