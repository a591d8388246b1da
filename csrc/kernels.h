// specops CPU kernels: torch-free C++17 on raw pointers.  They implement exactly
// specops/reference.py (its module docstring is the specification).
#pragma once
#include <cstdint>

namespace specops {

enum DType : int { kF32 = 0, kBF16 = 1, kF16 = 2, kI32 = 3, kI64 = 4 };

// A [rows, cols] matrix of float32/bfloat16/float16 with unit column stride and row stride
// `stride` (in elements).  ptr == nullptr means "absent".
struct Mat {
  const void* ptr = nullptr;
  int dtype = kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;
};

// A column of int32 or int64 values: element i at ptr + i * stride elements (stride 0: one
// value shared by every index).  ptr == nullptr means "absent".
struct IntCol {
  const void* ptr = nullptr;
  int64_t stride = 0;
  bool is_i32 = false;
  int64_t operator[](int64_t i) const {
    return is_i32 ? int64_t(static_cast<const int32_t*>(ptr)[i * stride])
                  : static_cast<const int64_t*>(ptr)[i * stride];
  }
};

// A column of float32 values (same layout rules as IntCol).
struct FloatCol {
  const float* ptr = nullptr;
  int64_t stride = 0;
  float operator[](int64_t i) const { return ptr[i * stride]; }
};

// Per-row (or per-request) parameters of the target transform.
struct TransformParams {
  FloatCol inv_temp;  // 0: greedy
  IntCol top_k;       // 0: off
  FloatCol top_p;     // 1: off
  FloatCol min_p;     // 0: off
};

struct VerifyArgs {
  Mat target;  // logits, or float32 probabilities when target_is_probs
  bool target_is_probs = false;
  Mat draft;  // ptr == nullptr: point-mass drafts
  bool draft_is_probs = false;
  IntCol draft_ids;  // [num_ids]
  int64_t num_ids = 0;
  // per-request [B] columns
  IntCol target_row_start;
  IntCol draft_row_start;
  IntCol num_draft;
  TransformParams params;
  IntCol seed;
  IntCol offset;
  IntCol forced_num_accepted;  // ptr == nullptr: the plain verify
  bool block = false;          // block verification (reference section 9)
  int64_t B = 0;
  int64_t max_k = 0;
  int32_t* out_tokens = nullptr;        // [B, max_k + 1]
  int32_t* out_num_accepted = nullptr;  // [B]
  uint8_t* out_valid = nullptr;         // [B]
  float* out_rates = nullptr;           // [B, max_k] or nullptr (reference section 10)
  // [B] or nullptr: the default draft_probs check (reference walk.draft_check): -1, or the
  // first draft position whose values the walk read are not probabilities (q_j(y_j) of an
  // accepted position; the whole row a residual token was drawn from)
  int32_t* out_draft_bad = nullptr;
  int threads = 1;                      // requests run on at most this many threads
};

void verify(const VerifyArgs& a);

// Tree verification (reference section 11).  Request b owns nodes b * N .. b * N + N - 1:
// node n's token and parent at index b * N + n of node_ids / parents, its target (and draft)
// row b * N + n of target (draft).
struct TreeArgs {
  Mat target;  // [B * N, V] logits, or float32 probabilities when target_is_probs
  bool target_is_probs = false;
  Mat draft;  // [B * N, V]; ptr == nullptr: point-mass drafts
  bool draft_is_probs = false;
  IntCol node_ids;  // [B * N]
  IntCol parents;   // [B * N]
  // per-request [B] columns
  IntCol num_nodes;
  TransformParams params;
  IntCol seed;
  IntCol offset;
  bool rsd = true;  // false: mss (siblings drawn i.i.d.)
  int64_t B = 0;
  int64_t N = 0;
  int64_t max_depth = 0;
  int32_t* out_tokens = nullptr;        // [B, max_depth + 1]
  int32_t* out_num_accepted = nullptr;  // [B]
  int32_t* out_nodes = nullptr;         // [B, max_depth]
  uint8_t* out_valid = nullptr;         // [B]
  int threads = 1;                      // requests run on at most this many threads
};

void verify_tree(const TreeArgs& a);

// Caller-supplied uniforms: sgl-kernel's tree walk (reference section 13) on its
// first-child / next-sibling layout.  All arrays contiguous; request b's node n at b * N + n.
// Any links and candidates are read safely: a malformed request (a link outside [-1, N), a
// node that is the target of two links, a link to the root, a present node's candidate
// outside [0, V)) emits tokens -1, num_accepted 0, nodes -1, valid false.
struct CoinArgs {
  const float* target = nullptr;        // [B, N, V] float32 probabilities
  const int64_t* candidates = nullptr;  // [B, N]
  const int64_t* next_token = nullptr;  // [B, N]
  const int64_t* next_sibling = nullptr;
  const float* coins = nullptr;         // [B, N]
  const float* final_coins = nullptr;   // [B]
  int64_t B = 0, N = 0, V = 0;
  int64_t max_depth = 0;                // min(num_spec, N) - 1
  bool relaxed = false;                 // thresholds other than (1, 1)
  float single = 1.0f;                  // threshold_single (float32)
  double acc_scale = 1.0;               // 1: Ath = A; else max(threshold_acc, 1e-9f)
  int32_t* out_tokens = nullptr;        // [B, max_depth + 1]
  int32_t* out_num_accepted = nullptr;  // [B]
  int32_t* out_nodes = nullptr;         // [B, max_depth]: sgl slots
  uint8_t* out_valid = nullptr;         // [B]
  int threads = 1;
};

void coin_walk(const CoinArgs& a);
// Traversal verification (reference section 14) on the same arguments: rsd = siblings drawn
// without replacement (method "traversal"), else i.i.d. ("traversal_iid").
void verify_traversal(const TreeArgs& a);

// GBV (reference section 15): a root with K chains of one length; verify_tree's fields.
void verify_gbv(const TreeArgs& a);

// logits [N, V] -> probs [N, V] float32 contiguous, valid [N]; rows run on at most `threads`
// threads.
void sampling_probs(const Mat& logits, const TransformParams& params, float* out_probs,
                    uint8_t* out_valid, int threads = 1);

void pexp_array(const float* in, float* out, int64_t n);

// The transform's exp pass over x (in place) at the active ISA level: e = x >= thr ?
// pexp(x - m) : 0, with `tail` the entries of skipped zero-mass vectors hold d = x - m
// (simd/passes.h); returns S = sum trunc(e * 2^40).  For the tests of that encoding.
uint64_t exp_pass_array(float* x, int64_t n, float m, float thr, bool tail);

// The transform's probability pass over e (in place) at the active ISA level:
// p = e >= cut ? flush(float32(float64(e) * 2^40 / sd)) : 0 (reference section 2).  For the
// tests of the division-free quotient (simd/vec_avx512.h).
void materialize_array(float* e, int64_t n, float cut, double sd);

}  // namespace specops
