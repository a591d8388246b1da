// The target transform over one row (reference section 2): scale + checks, top-k threshold,
// exp and integer mass, top-p / min-p cut, probabilities.  The passes over the row run through
// the active ISA table (simd/passes.h); the selects are in topk_select.cpp / topp_select.cpp.
#include "transform/transform.h"

#include <algorithm>
#include <cstring>

#include "core/float_bits.h"
#include "core/parallel.h"
#include "core/pexp.h"
#include "core/rows.h"
#include "simd/passes.h"
#include "simd/vec_scalar.h"

namespace specops {
namespace {
// Rows shorter than this take the top-p select directly; a row whose candidates exceed
// V / kCandFraction (flat rows) too.
constexpr int64_t kCandMinV = 4096;
constexpr int64_t kCandFraction = 16;
}  // namespace

float RowP::operator()(int64_t i) const {
  float ei = e[i];
  if (ei < 0.0f) ei = pexp_v<simd::Scalar>(simd::Scalar::splat(ei)).v;  // skipped: ei is d
  const float p = float(double(ei) * kEScale / sd);
  return (ei >= cut && p >= FLT_MIN_F32) ? p : 0.0f;
}

void RowP::materialize(int64_t V) {
  passes().materialize(e, V, cut, sd);
  cut = -kInf;  // e now holds p itself: float(p * 2^40 / 2^40) = p
  sd = kEScale;
}

bool probs_row_valid(const float* p, int64_t V) {
  int bad = 0;
  uint64_t mass = 0;
  for (int64_t i = 0; i < V; ++i) {
    const float v = p[i];
    const bool ok = v >= 0.0f && v <= 1.0f;
    bad |= int(!ok);
    mass += uint64_t(int64_t(double(ok ? v : 0.0f) * 0x1p32));
  }
  if (bad) return false;
  const int64_t m = int64_t(mass);
  return m > 0 && m <= (int64_t(1) << (P_CHECK_BITS + 2));
}

int64_t argmax_f32(const float* p, int64_t V) {
  if (V <= 0) return -1;
  float mx = p[0];
  for (int64_t i = 1; i < V; ++i) mx = p[i] > mx ? p[i] : mx;
  for (int64_t i = 0; i < V; ++i)
    if (p[i] == mx) return i;
  return 0;
}

bool transform_row(const Mat& m, int64_t r, float inv_t, int64_t top_k, float top_p,
                   float min_p, float* ebuf, Work& w, RowP& out, const char* prefetch,
                   int64_t prefetch_bytes) {
  const int64_t V = m.cols;
  if (V <= 0 || !(inv_t > 0.0f)) return false;
  const Passes& ps = passes();
  // pass 1: x = l * inv_t into ebuf, validity, max
  const RowScan scan = ps.scale_max(row_as_f32(m, r, V, ebuf), ebuf, V, inv_t);
  if (scan.bad || scan.allneg) return false;
  // top-k: keep x >= the k-th largest x (ties kept)
  const float thr = (top_k > 0 && top_k < V) ? topk_threshold(ebuf, V, top_k, w) : -kInf;
  // pass 2: e = pexp(x - m) for kept tokens, S = sum trunc(e * 2^40) (tokens without
  // integer mass keep d: see RowP).  With min-p alone the pass sums S' (e >= min_p) instead;
  // with top-p it gathers the candidates e >= (1 - top_p) / V: every token below that holds
  // less than (1 - top_p) * 2^40 / V mass units and S >= 2^40 (the argmax), so the tokens
  // below hold at most S - top_p * S and tau is almost always among the candidates.
  ExpOptions opt;
  const bool top_p_on = top_p < 1.0f;
  if (!top_p_on && min_p > 0.0f) opt.cut = min_p;
  if (top_p_on && V >= kCandMinV) {
    opt.cand_lo = float((1.0 - double(top_p)) / double(V));
    opt.cand = grow(w.cand, V);
    opt.cand_cap = V / kCandFraction;
  }
  if (thr == -kInf) {  // (a top-k row's exp pass skips most groups: too short to hide a row)
    opt.prefetch = prefetch;
    opt.prefetch_bytes = prefetch_bytes;
  }
  uint64_t S = ps.exp_pass(ebuf, V, scan.mx, thr, true, &opt);
  // top-p, then min-p: one cut on e; S' = the mass kept
  float cut = 0.0f;
  int64_t kept = opt.cut > 0.0f ? int64_t(S) : kKeptUnknown;
  if (top_p_on) {
    TopP tp;
    if (!(opt.cand && opt.cand_lo > 0.0f && opt.n_cand >= 0 &&
          top_p_from_candidates(opt.cand, opt.n_cand, top_p, int64_t(S), w, tp)))
      tp = top_p_select(ebuf, V, top_p, int64_t(S), w);
    cut = tp.tau;
    kept = tp.kept;
  }
  if (min_p > 0.0f && min_p > cut) {
    cut = min_p;
    if (top_p_on) kept = kKeptUnknown;
  }
  if (top_p_on || min_p > 0.0f)
    S = kept != kKeptUnknown ? uint64_t(kept) : ps.masked_mass(ebuf, V, cut);
  out.e = ebuf;
  out.cut = cut;
  out.sd = double(int64_t(S));
  out.sparse = thr != -kInf || cut > 0.0f;
  return true;
}

int64_t greedy_argmax_row(const Mat& m, int64_t r, float* buf) {
  const int64_t V = m.cols;
  if (V <= 0) return -1;
  const float* src = row_as_f32(m, r, V, buf);
  const Passes& ps = passes();
  const RowScan scan = ps.scale_max(src, nullptr, V, 1.0f);
  if (scan.bad || scan.allneg) return -1;
  return ps.first_eq(src, V, scan.mx);
}

// ------------------------------------------------------------------ entry points
void sampling_probs(const Mat& lg, const TransformParams& prm, float* out_probs,
                    uint8_t* out_valid, int threads) {
  const int64_t V = lg.cols;
  parallel_for(lg.rows, threads, [&](int64_t i) {
    float* out = out_probs + i * V;
    out_valid[i] = 0;
    const float inv_t = prm.inv_temp[i];
    if (!params_ok(inv_t, prm.top_k[i], prm.top_p[i], prm.min_p[i])) {
      std::fill(out, out + V, 0.0f);
      return;
    }
    if (inv_t == 0.0f) {
      const int64_t am = greedy_argmax_row(lg, i, out);
      std::fill(out, out + V, 0.0f);
      if (am >= 0) {
        out[am] = 1.0f;
        out_valid[i] = 1;
      }
      return;
    }
    RowP P;
    if (!transform_row(lg, i, inv_t, prm.top_k[i], prm.top_p[i], prm.min_p[i], out, work(), P)) {
      std::fill(out, out + V, 0.0f);
      return;
    }
    P.materialize(V);  // in place over e
    out_valid[i] = 1;
  });
}

void pexp_array(const float* in, float* out, int64_t n) {
  // Through the same vectorised pass the transform uses (pexp(x - 0) == pexp(x) bitwise), so
  // that the tests hold every ISA level's exp to the reference too.
  if (n <= 0) return;
  std::memcpy(out, in, size_t(n) * sizeof(float));
  (void)passes().exp_pass(out, n, 0.0f, -kInf, false, nullptr);
}

uint64_t exp_pass_array(float* x, int64_t n, float m, float thr, bool tail) {
  return n > 0 ? passes().exp_pass(x, n, m, thr, tail, nullptr) : 0;
}

void materialize_array(float* e, int64_t n, float cut, double sd) {
  if (n > 0) passes().materialize(e, n, cut, sd);
}

}  // namespace specops
