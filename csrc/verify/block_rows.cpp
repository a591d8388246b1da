// The block residual is formed in float64 (a float32 rho * p would move the law by 2^-24); its
// mass runs as the active ISA's pass (simd/passes.cpp), the scan as draw.h's find_in_blocks.
#include "verify/block_rows.h"

#include <algorithm>

#include "core/float_bits.h"
#include "draw/draw.h"
#include "simd/passes.h"

namespace specops {
namespace {

inline uint64_t dweight(float px, float qx, double rho) {
  const double a = rho * double(px), b = double(qx);
  // a <= 1, so d * 2^60 <= 2^60 converts exactly to int64
  return a > b ? uint64_t(int64_t((a - (b > 0.0 ? b : 0.0)) * 0x1p60)) : 0;
}

inline uint64_t pweight(float px, double rho) {
  const double a = rho * double(px);
  return a > 0.0 ? uint64_t(int64_t(a * 0x1p60)) : 0;
}

}  // namespace

uint64_t block_mass(const float* p, const float* q, int64_t y, double rho, int64_t V,
                    uint64_t* block_sums) {
  uint64_t S = passes().block_mass(p, q, rho, V, block_sums);
  if (!q && y >= 0 && y < V) {  // point mass at y: rho * p(y) <= 1 = q(y) gives 0 there
    const uint64_t wy = pweight(p[y], rho);
    S -= wy;
    if (block_sums) block_sums[y / kDrawBlock] -= wy;
  }
  return S;
}

int64_t block_draw(const float* p, const float* q, int64_t y, double rho, int64_t V, uint64_t U,
                   Work& w) {
  if (V <= 0) return -1;
  const int64_t nb = (V + kDrawBlock - 1) / kDrawBlock;
  if (int64_t(w.bsum.size()) < nb) w.bsum.resize(size_t(nb));
  uint64_t* bs = w.bsum.data();
  const uint64_t S = block_mass(p, q, y, rho, V, bs);
  if (S == 0) return draw(p, nullptr, -1, V, U, w);  // no residual mass: p
  return find_in_blocks(bs, nb, V, draw_threshold(U, S), [=](int64_t i) {
    return q ? dweight(p[i], q[i], rho) : (i == y ? 0 : pweight(p[i], rho));
  });
}

float accept_rate(const float* p, const float* q, int64_t V, Work& w) {
  const uint64_t S = passes().min_mass(p, q, grow(w.r, V), V);
  return std::min(float(double(int64_t(S)) * 0x1p-60), 1.0f);   // at most 1 (section 10)
}

}  // namespace specops
