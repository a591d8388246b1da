// The shard-local passes of specops.distributed on the CPU (distributed/shard_passes.cpp):
// each is one local step of specops/distributed/_transform.py, _radix.py or _walk.py between
// two collectives, giving the numbers the torch code gives, bit for bit, at every ISA level.
// Bound as specops._C.shard_* (bindings/shard.cpp).
#pragma once
#include <cstdint>

namespace specops {

// Row statistics of logits rows (round 1 of the transform): l is row src_row[r] of src
// (src_stride floats apart), or the row itself where src is null; each row becomes
// x = l * inv_t; stats [n, 5] int64 = packed (max l, its lowest global index), packed (max x,
// 0), bad (NaN or +inf in l, or in x of a non-greedy row), l not all -inf, x not all -inf.
// Only what the transform reads is computed: a sampled row's l entries come from x (the same
// validity; column 0 holds max x at index 0: its argmax is never read), a greedy row's x
// entries are placeholders (m and x's flag are not read there) and its x is not stored.
void shard_stats(const float* src, const int64_t* src_row, int64_t src_stride, float* rows,
                 int64_t n, int64_t V, int64_t stride, const float* inv_t,
                 int64_t vocab_start, int64_t* stats, int threads);

// The exp pass, in place over x: e = hot ? (x >= thr ? pexp(x - m) : 0) : 0; mass [n, 2] =
// (sum of trunc(e 2^40), the same over e >= min_p).
void shard_masses(float* rows, int64_t n, int64_t V, int64_t stride, const float* m,
                  const float* thr, const bool* hot, const float* min_p, int64_t* mass,
                  int threads);

// One round of the radix select (_radix.radix_select): adds into hist [n, 256] the count
// (weighted = false: keys signed_key(x)) or the mass trunc(e 2^40) (weighted = true: keys
// e's bits) of the entries whose unsigned key (key + 2^31) matches prefix[r] above bit
// shift + 8, binned by the key's digit at shift.
void shard_hist(const float* rows, int64_t n, int64_t V, int64_t stride, bool weighted,
                int shift, const int64_t* prefix, int64_t* hist, int threads);

// The renormalisation, in place over the hot rows: p = e >= cut ? flush(float32(float64(e)
// 2^40 / div)) : 0.
void shard_materialize(float* rows, int64_t n, int64_t V, int64_t stride, const bool* hot,
                       const float* cut, const double* div, int threads);

// Weight kinds of a request's row (reference sections 5, 9, 10).
enum : int { kBonus = 0, kResidual = 1, kBlock = 2, kMin = 3 };

// The rows of n requests: p row p_row[r] of p (stride p_stride floats); q row q_row[r] of q
// (q null or q_row[r] < 0: the point mass at local column y[r], -1 when another shard holds
// it); kind[r]; rho[r] (kBlock).
struct RowRefs {
  const float* p;
  const int64_t* p_row;
  int64_t p_stride;
  const float* q;
  const int64_t* q_row;
  int64_t q_stride;
  const int64_t* y;
  const int8_t* kind;
  const double* rho;
};

// out [n, 2]: the sum of the row's weights under its kind (kBonus: trunc(p 2^60); kResidual:
// trunc(r 2^60), r = p > q ? p - max(q, 0) : 0, or p off y; kBlock: trunc(d 2^60), d = rho p -
// max(q, 0) where rho p > q in float64; kMin: trunc(min(p, q > 0 ? q : 0) 2^60)), and (want_p)
// the kBonus sum.
void shard_row_sums(const RowRefs& a, int64_t n, int64_t V, bool want_p, int64_t* out,
                    int threads);

// idx[r] = the number of prefix sums of the row's weights that are <= t[r] (searchsorted,
// right side; V where t[r] is past the row's mass), for every r with t[r] >= 0 and a kind
// other than kMin (others untouched).
void shard_draw_search(const RowRefs& a, int64_t n, int64_t V, const int64_t* t,
                       int64_t* idx, int threads);

}  // namespace specops
