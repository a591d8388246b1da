// specops CPU kernels: torch-free C++17 on raw pointers.  They implement exactly
// specops/reference.py (its module docstring is the specification).
#pragma once
#include <cstdint>

namespace specops {

enum DType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

// A [rows, cols] matrix of float32/bfloat16/float16 with unit column stride and row stride
// `stride` (in elements).  ptr == nullptr means "absent".
struct Mat {
  const void* ptr = nullptr;
  int dtype = kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;
};

struct VerifyArgs {
  Mat target;
  bool target_is_probs = false;
  const int64_t* target_row_start = nullptr;
  const int64_t* draft_ids = nullptr;
  int64_t num_ids = 0;  // length of draft_ids
  const int64_t* draft_row_start = nullptr;
  const int64_t* num_draft = nullptr;
  Mat draft;  // ptr == nullptr: point-mass drafts
  bool draft_is_probs = false;
  const float* inv_temp = nullptr;
  const int64_t* top_k = nullptr;
  const float* top_p = nullptr;
  const float* min_p = nullptr;
  const int64_t* seed = nullptr;
  const int64_t* offset = nullptr;
  int64_t B = 0;
  int64_t max_k = 0;
  int32_t* out_tokens = nullptr;  // [B, max_k + 1]
  int32_t* out_num_accepted = nullptr;  // [B]
  uint8_t* out_valid = nullptr;  // [B]
};

void verify(const VerifyArgs& a);

// logits [N, V] -> probs [N, V] float32 contiguous, valid [N].
void sampling_probs(const Mat& logits, const float* inv_temp, const int64_t* top_k,
                    const float* top_p, const float* min_p, float* out_probs,
                    uint8_t* out_valid);

struct ProbsOpArgs {
  Mat target;  // float32 probabilities
  const int64_t* target_row_start = nullptr;
  const int64_t* draft_ids = nullptr;
  int64_t num_ids = 0;
  const int64_t* draft_row_start = nullptr;
  const int64_t* num_draft = nullptr;
  Mat draft;  // float32 probabilities or absent
  const uint8_t* greedy = nullptr;
  const int64_t* seed = nullptr;
  const int64_t* offset = nullptr;
  const int32_t* num_accepted = nullptr;  // residual_sample only
  int64_t B = 0;
  int64_t max_k = 0;
};

void accept(const ProbsOpArgs& a, int32_t* out_num_accepted);
void residual_sample(const ProbsOpArgs& a, int32_t* out_tokens);

void pexp_array(const float* in, float* out, int64_t n);

}  // namespace specops
