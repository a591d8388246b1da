// Vec types, scalar level: one lane.  What non-x86 builds compile, the tails of the SIMD
// loops, and the SPECOPS_CPU_ISA=scalar level.  Same operations, same rounding as the SSE2,
// AVX2 and AVX-512 headers; every routine in simd/*_passes.cpp is written once over these
// types.  F / I / M: float32 lanes, their int32 companions and masks (W of them); D / L / MD:
// float64 lanes, their int64 companions and masks (WD of them: W / 2 at the SIMD levels), for
// the passes that work in float64 (block verification, the tree residual).
//
// Everything here has internal linkage (anonymous namespace): the file is compiled into each
// per-ISA translation unit with that unit's flags, and no copy built with -mavx2 may be
// shared with another unit by the linker.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/float_bits.h"

namespace specops {
namespace simd {
namespace {
namespace scalar {

struct F {
  float v;
};
struct I {
  int32_t v;
};
struct M {
  bool v;
};

inline F operator+(F a, F b) { return {a.v + b.v}; }
inline F operator-(F a, F b) { return {a.v - b.v}; }
inline F operator*(F a, F b) { return {a.v * b.v}; }
inline F max(F a, F b) { return {a.v > b.v ? a.v : b.v}; }  // x86 maxps: b unless a > b
inline M ge(F a, F b) { return {a.v >= b.v}; }
inline M gt(F a, F b) { return {a.v > b.v}; }
inline M lt(F a, F b) { return {a.v < b.v}; }
inline M le(F a, F b) { return {a.v <= b.v}; }
inline M eq_f(F a, F b) { return {a.v == b.v}; }
inline M ne_u(F a, F b) { return {!(a.v == b.v)}; }  // true where either is NaN
inline M unord(F a, F b) { return {a.v != a.v || b.v != b.v}; }
inline M operator&(M a, M b) { return {a.v && b.v}; }
inline M operator|(M a, M b) { return {a.v || b.v}; }
inline M mnot(M a) { return {!a.v}; }
inline bool any(M a) { return a.v; }
inline int movemask(M a) { return int(a.v); }
inline F keep(M m, F x) { return {m.v ? x.v : 0.0f}; }  // x where m, +0 elsewhere

// float -> int32 truncation; out of range / NaN gives INT32_MIN, as cvttps2dq does.
inline I to_int(F x) {
  return {(x.v >= -2147483648.0f && x.v < 2147483648.0f) ? int32_t(x.v) : INT32_MIN};
}
inline F to_float(I x) { return {float(x.v)}; }
inline I operator+(I a, I b) { return {int32_t(uint32_t(a.v) + uint32_t(b.v))}; }
inline I operator&(I a, I b) { return {a.v & b.v}; }
inline I operator|(I a, I b) { return {a.v | b.v}; }
inline I operator^(I a, I b) { return {a.v ^ b.v}; }
inline I shl23(I a) { return {int32_t(uint32_t(a.v) << 23)}; }
inline I srl(I a, int n) { return {int32_t(uint32_t(a.v) >> n)}; }
inline I sra31(I a) { return {a.v < 0 ? -1 : 0}; }
inline M eq(I a, I b) { return {a.v == b.v}; }
inline I max_u(I a, I b) { return {uint32_t(a.v) > uint32_t(b.v) ? a.v : b.v}; }  // unsigned
inline I as_int(F x) {
  I r;
  std::memcpy(&r.v, &x.v, 4);
  return r;
}
inline F as_float(I x) {
  F r;
  std::memcpy(&r.v, &x.v, 4);
  return r;
}

// pexp's exact steps (core/pexp.h): y rounded to the nearest integer, ties to even
// (|y| < 2^22: adding and subtracting 1.5 * 2^23 rounds it; the levels that can also return
// it as an integer in ni), and s * 2^n for an integer-valued n >= -126 (2^n built from its
// exponent bits; ni is n as an integer where round_even gave it).
inline F round_even(F y, I& ni) {
  const float n = (y.v + 12582912.0f) - 12582912.0f;
  ni.v = int32_t(n);
  return {n};
}
inline F mul_pow2(F s, F n, I ni) {
  const uint32_t bits = uint32_t(ni.v + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return {s.v * scale};
}

inline void store(float* p, F x) { *p = x.v; }
inline void store(int32_t* p, I x) { *p = x.v; }
// flush(float32(float64(e) * sc / sd)) per lane: the correctly rounded float64 quotient,
// rounded to float32, 0 below FLT_MIN (reference section 2)
inline F div_flush(F e, const DivScale& s) {
  const float p = float(double(e.v) * s.sc / s.sd);
  return {p >= FLT_MIN_F32 ? p : 0.0f};
}
// Writes the lanes of x selected by m to dst, in order; returns how many.  May write up to
// W floats at dst whatever m is (callers keep kSimdSlack floats of room).
inline int compress(float* dst, F x, M m) {
  *dst = x.v;
  return int(m.v);
}

// ---- float64 lanes
struct D {
  double v;
};
struct L {
  int64_t v;
};
struct MD {
  bool v;
};

inline D operator*(D a, D b) { return {a.v * b.v}; }
inline D operator-(D a, D b) { return {a.v - b.v}; }
inline D max(D a, D b) { return {a.v > b.v ? a.v : b.v}; }  // x86 maxpd: b unless a > b
inline MD gt(D a, D b) { return {a.v > b.v}; }
inline D keep(MD m, D x) { return {m.v ? x.v : 0.0}; }  // x where m, +0 elsewhere
inline L operator+(L a, L b) { return {int64_t(uint64_t(a.v) + uint64_t(b.v))}; }
// float64 of 0 <= x < 2^62, correctly rounded (what every level's conversion gives there)
inline D to_f64(L x) { return {double(x.v)}; }
// trunc(x) for 0 <= x < 2^61 (exact at every level there)
inline L trunc_l(D x) { return {int64_t(x.v)}; }
inline void store(int64_t* p, L x) { *p = x.v; }
inline uint64_t hsum(L x) { return uint64_t(x.v); }
inline D load_wide(const float* p) { return {double(*p)}; }

}  // namespace scalar

struct Scalar {
  static constexpr int W = 1;
  static constexpr int WD = 1;
  // float64 <-> int64 in one instruction per vector (AVX512DQ): the draw's weights may go
  // through float64 instead of three float32 digits (simd/draw_passes.cpp, WeightSum)
  static constexpr bool kI64Convert = false;
  using F = scalar::F;
  using I = scalar::I;
  using M = scalar::M;
  using D = scalar::D;
  using L = scalar::L;
  using MD = scalar::MD;
  static F load(const float* p) { return {*p}; }
  static F splat(float x) { return {x}; }
  static I splat_i(int32_t x) { return {x}; }
  static D splat_d(double x) { return {x}; }
  static L load_l(const int64_t* p) { return {*p}; }
  static L zero_l() { return {0}; }
  // WD float32 at p, widened to float64
  static D load_wide(const float* p) { return scalar::load_wide(p); }
};

}  // namespace
}  // namespace simd
}  // namespace specops
