// The integer inverse-CDF draw.  The weights are summed per block of kDrawBlock tokens
// (exactly, by the active ISA's weights pass), so the scan for the token touches one block.
#include "draw/draw.h"

#include "core/float_bits.h"
#include "simd/passes.h"
#include "transform/transform.h"

namespace specops {
namespace {

inline uint64_t weight(float r) { return uint64_t(f2i64(r * kWScaleF)); }

// The draw over p (P == nullptr) or over the row P holds (P->e is p once materialised).
int64_t draw_impl(const float* p, RowP* P, const float* q, int64_t y, int64_t V, uint64_t U,
                  Work& w, uint64_t* beta, RowCheck* chk) {
  if (V <= 0) return -1;
  float* r = grow(w.r, V);
  const int64_t nb = (V + kDrawBlock - 1) / kDrawBlock;
  if (int64_t(w.bsum.size()) < nb) w.bsum.resize(size_t(nb));
  uint64_t* bs = w.bsum.data();
  const Passes& ps = passes();
  bool bad = false;
  uint64_t S = P ? ps.row_weights(P->e, P->cut, P->sd, P->sparse, q, r, V, bs, &bad, beta, chk)
                 : ps.weights(p, q, r, V, bs, &bad, beta, chk);
  if (bad) return -1;
  if (!q && y >= 0 && y < V) {  // point-mass draft: the residual is p with p[y] zeroed
    const uint64_t wy = weight(r[y]);
    S -= wy;
    bs[y / kDrawBlock] -= wy;
    r[y] = 0.0f;
  }
  if (S == 0) {  // the residual has no mass: fall back to p
    if (P) {
      P->materialize(V);
      p = P->e;
    }
    S = ps.weights(p, nullptr, r, V, bs, &bad, nullptr, nullptr);
    if (bad) return -1;
  }
  if (S == 0 || int64_t(S) < 0) return -1;
  return find_in_blocks(bs, nb, V, draw_threshold(U, S),
                        [r](int64_t i) { return weight(r[i]); });
}

}  // namespace

int64_t draw(const float* p, const float* q, int64_t y, int64_t V, uint64_t U, Work& w,
             uint64_t* beta, RowCheck* chk) {
  return draw_impl(p, nullptr, q, y, V, U, w, beta, chk);
}

int64_t draw_row(RowP& P, const float* q, int64_t y, int64_t V, uint64_t U, Work& w,
                 uint64_t* beta, RowCheck* chk) {
  return draw_impl(nullptr, &P, q, y, V, U, w, beta, chk);
}

}  // namespace specops
