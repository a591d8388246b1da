// The vectorised row passes and the run-time ISA dispatch table.
//
// simd/passes.cpp (the transform's passes) and simd/draw_passes.cpp (the draw's) are compiled
// once per ISA level (CMake: -DSPECOPS_ISA=0 scalar, 1 SSE2, 2 AVX2 with -mavx2, 3 AVX-512
// with -mavx512f -mavx512dq; only the scalar level on non-x86 targets; see simd/level.h),
// each level defining one `Passes` table.  simd/isa.cpp picks the active table: the
// best level the CPU supports, or the one named by SPECOPS_CPU_ISA=scalar|sse2|avx2|avx512.
// Every level gives the same bits.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/float_bits.h"

namespace specops {

// Extra floats every buffer written by a compressing pass must have beyond its count
// (a vector store may write a full register at the current end).
constexpr int64_t kSimdSlack = 16;

// Lane block of the exact 20-bit-digit sums: each int32 lane adds at most kLaneBlock digits
// < 2^21, so it cannot overflow (kLaneBlock * 2^21 <= 2^31).
constexpr int64_t kLaneBlock = 256;

// Block of the inverse-CDF draw: weights are summed per block of kDrawBlock tokens (three
// 20-bit digits, each lane adds at most kDrawBlock digits <= 2^20) so that the draw's scan
// touches one block only.
constexpr int64_t kDrawBlock = 1024;

// Pass 1 of a logits row: x = l * inv_t; bad = NaN or +inf present, allneg = every x is -inf.
struct RowScan {
  bool bad = false;
  bool allneg = true;
  float mx = -__builtin_inff();
};

// Extras of the exp pass.  cut > 0: the mass returned is over e >= cut only (min-p without
// top-p: S' in the same pass).  cand != null: the e >= cand_lo (> 0) are appended to cand
// (room for V + kSimdSlack floats) and counted in n_cand, the top-p select's candidates; past
// cand_cap of them the gather stops and n_cand is -1.  (cand and cut are not used together:
// with cand the returned mass is S.)
struct ExpOptions {
  float cut = 0.0f;
  float cand_lo = 0.0f;
  float* cand = nullptr;
  int64_t cand_cap = 0;
  int64_t n_cand = 0;
  // A row the caller will probably read next (prefetch_bytes of it): the pass requests one
  // cache line of it per step, so that its transfer from memory overlaps this pass's
  // arithmetic instead of stalling the next row's scan.
  const char* prefetch = nullptr;
  int64_t prefetch_bytes = 0;
};

// The p of a position for pq_masses: a probability row (from_e false: p itself), or a
// transformed row as RowP (transform/transform.h) holds it (e, cut, sd, sparse), whose p is
// computed per vector exactly as materialize would store it.
struct PRow {
  const float* p = nullptr;
  bool from_e = false;
  float cut = 0.0f;
  double sd = 1.0;
  bool sparse = true;
};

// The default draft_probs check of one row (reference checks.draft_row_ok: every entry in
// [0, 1], NaN failing, and |sum trunc(q * 2^32) - 2^32| <= DRAFT_MASS_TOLERANCE), gathered by
// a pass that reads the row anyway (the residual draw's weights, block verification's mass):
// two operations a vector (a float32 lane sum, the unsigned max of the entries' bits), decided
// exactly by verify/draft_check.h (which rescans the row only where these cannot decide it).
// A pass given one reads every vector of q (also where p is masked and the pass would skip q).
struct RowCheck {
  double sum = 0.0;       // the float32 lane sums of q (<= kDrawBlock terms each), in float64
  uint32_t max_bits = 0;  // the largest entry's bits, unsigned: <= 0x3f800000 iff all in [+0, 1]
};

struct Passes {
  const char* name;
  // x = src * inv_t (stored to dst unless dst is null), with its flags and max
  RowScan (*scale_max)(const float* src, float* dst, int64_t V, float inv_t);
  // in place: e = x >= thr ? pexp(x - m) : 0; returns sum of trunc(e * 2^40).  With `tail`,
  // vectors whose kept lanes all have no integer mass (x - m < EXP_ZERO_MASS, core/pexp.h)
  // keep d = x - m instead of e (masked lanes +0): a negative entry stands for pexp(entry).
  // Every reader of such a row accepts that (the masses and selects treat it as E = 0,
  // RowP and materialize evaluate it); without `tail` every entry is e.
  // `opt` (may be null) adds what the transform's next steps would otherwise re-read the row
  // for (see ExpOptions).
  uint64_t (*exp_pass)(float* x, int64_t V, float m, float thr, bool tail, ExpOptions* opt);
  // sum of trunc(e * 2^40) over e >= cut
  uint64_t (*masked_mass)(const float* e, int64_t V, float cut);
  // in place: p = e >= cut ? flush(float32(float64(e) * 2^40 / sd)) : 0 (a negative entry:
  // e = pexp(entry) first)
  void (*materialize)(float* e, int64_t V, float cut, double sd);
  // the first i with x[i] == v (-1 if none): the greedy rows' lowest-index argmax
  int64_t (*first_eq)(const float* x, int64_t n, float v);
  // appends the x >= thr to out; returns the count
  int64_t (*gather_ge)(const float* x, int64_t n, float thr, float* out);
  // appends the x whose key ((ordered ? order_key(bits) : bits) >> shift) & mask == key
  int64_t (*gather_key)(const float* x, int64_t n, bool ordered, int shift, uint32_t mask,
                        uint32_t key, float* out);
  // *mass = sum of trunc(e * 2^40) over e >= lo; appends the lo <= e < hi to out
  int64_t (*band_pass)(const float* e, int64_t V, float lo, float hi, float* out,
                       uint64_t* mass);
  // r = residual (q given) or p; weights trunc(r * 2^60) summed per kDrawBlock into
  // block_sums; *bad when some r is outside [0, 1]; returns the total.  With beta (and q):
  // also min_mass's sum from the same read (the rates of a rejected position); with chk (and
  // q): q's draft_probs check (RowCheck) from the same read
  uint64_t (*weights)(const float* p, const float* q, float* r, int64_t V,
                      uint64_t* block_sums, bool* bad, uint64_t* beta, RowCheck* chk);
  // weights of the p a transformed row (e, cut, sd, sparse: RowP) holds, without storing p
  uint64_t (*row_weights)(const float* e, float cut, double sd, bool sparse, const float* q,
                          float* r, int64_t V, uint64_t* block_sums, bool* bad, uint64_t* beta,
                          RowCheck* chk);
  // block verification (reference section 9): sum of trunc(d * 2^60), d = rho * p - max(q, 0)
  // where rho * p > q else 0, in float64 (q null: 0); per kDrawBlock into block_sums if given
  uint64_t (*block_mass)(const float* p, const float* q, double rho, int64_t V,
                         uint64_t* block_sums);
  // acceptance rates (reference section 10): sum of trunc(min(p, q > 0 ? q : 0) * 2^60);
  // r: scratch of V floats
  uint64_t (*min_mass)(const float* p, const float* q, float* r, int64_t V);
  // block_mass (block: the returned total, per kDrawBlock into block_sums if given; q null:
  // q = 0) and, with min_out (and q), min_mass, in one read of p and q that stores nothing;
  // with chk (block, and q), q's draft_probs check (RowCheck) from the same read
  uint64_t (*pq_masses)(const PRow& p, const float* q, double rho, int64_t V,
                        uint64_t* block_sums, bool block, uint64_t* min_out, RowCheck* chk);
  // W = trunc(x * 2^60) for x in [0, 1] (stored when W is given), summed per kDrawBlock into
  // block_sums when given; returns the total (tree verification's R and Qw)
  uint64_t (*int_weights)(const float* x, int64_t V, int64_t* W, uint64_t* block_sums);
  // tree verification (reference section 11), in place over R [V] (0 <= R <= 2^61):
  // R = max(trunc((R * ia - (Qw ? Qw * iq : z == y)) * 2^60), 0) in float64, skipping the
  // kDrawBlock blocks whose block_sums entry is 0 (they stay 0); block_sums updated; returns
  // the total
  uint64_t (*tree_update)(int64_t* R, const int64_t* Qw, double ia, double iq, int64_t y,
                          int64_t V, uint64_t* block_sums);
};

// Every member set (each level's table is checked at compile time).
constexpr bool complete(const Passes& p) {
  return p.name && p.scale_max && p.exp_pass && p.masked_mass && p.materialize && p.first_eq &&
         p.gather_ge && p.gather_key && p.band_pass && p.weights && p.row_weights &&
         p.block_mass && p.min_mass && p.pq_masses &&
         p.int_weights && p.tree_update;
}

// Levels, lowest first.  The tables a build contains (see isa.cpp).
extern const Passes kPassesScalar;
#if defined(SPECOPS_WITH_SSE2)
extern const Passes kPassesSse2;
#endif
#if defined(SPECOPS_WITH_AVX2)
extern const Passes kPassesAvx2;
#endif
#if defined(SPECOPS_WITH_AVX512)
extern const Passes kPassesAvx512;
#endif

// The active table (never null).
const Passes& passes();
// Name of the active level; throws std::invalid_argument while SPECOPS_CPU_ISA names a level
// that is unknown or unsupported (until set_isa is called).
std::string isa();
// Throws std::invalid_argument (message naming SPECOPS_CPU_ISA) if the environment asked for
// a level that cannot run here.
void check_isa_env();
// Switch level in-process (tests); throws std::invalid_argument for an unknown or
// unsupported level.  Not thread-safe with kernels running.
void set_isa(const std::string& name);
// Levels this build contains and this CPU runs, lowest first.
std::vector<std::string> available_isas();

}  // namespace specops
