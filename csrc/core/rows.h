// Reading rows of the [rows, V] input matrices (float32 / bfloat16 / float16, unit column
// stride, any row stride) and per-request columns (any element stride, stride 0 included).
#pragma once
#include <cstdint>

#include "core/float_bits.h"
#include "kernels.h"

namespace specops {

inline float bf16_to_f32(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }

inline float f16_to_f32(uint16_t h) {
  // Exact, branch-free, and independent of the FTZ/DAZ state (no subnormal float operand).
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  const uint32_t normal = (em << 13) + (112u << 23);
  const uint32_t sub = float_to_bits(float(int32_t(em)) * 0x1p-24f);
  const uint32_t special = (em << 13) | 0x7f800000u;
  const uint32_t mag = em >= 0x7c00u ? special : (em >= 0x0400u ? normal : sub);
  return bits_to_float(sign | mag);
}

inline const char* row_ptr(const Mat& m, int64_t r) {
  const int64_t esz = m.dtype == kF32 ? 4 : 2;
  return static_cast<const char*>(m.ptr) + r * m.stride * esz;
}

inline const float* f32_row(const Mat& m, int64_t r) {
  return reinterpret_cast<const float*>(row_ptr(m, r));
}

// Row r of m as float32: the row itself when it is float32, else converted into buf.
inline const float* row_as_f32(const Mat& m, int64_t r, int64_t V, float* buf) {
  const char* p = row_ptr(m, r);
  if (m.dtype == kF32) return reinterpret_cast<const float*>(p);
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  if (m.dtype == kBF16) {
    for (int64_t i = 0; i < V; ++i) buf[i] = bf16_to_f32(h[i]);
  } else {
    for (int64_t i = 0; i < V; ++i) buf[i] = f16_to_f32(h[i]);
  }
  return buf;
}

}  // namespace specops
