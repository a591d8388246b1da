// Portable float32 exp for d <= 0 (specops/reference.py, section 2).  Every operation is a
// separately rounded float32 IEEE operation; the build uses -ffp-contract=off so that no
// multiply-add is fused.  Branch-free so that gcc -O3 vectorises loops that call it.
#pragma once
#include <cstdint>
#include <cstring>

namespace specops {

constexpr float EXP_CUTOFF = -86.0f;
constexpr float EXP_LOG2E = 1.44269502162933349609375f;
constexpr float EXP_ROUND = 12582912.0f;  // 1.5 * 2^23
constexpr float EXP_LN2_HI = 0.693145751953125f;
constexpr float EXP_LN2_LO = 1.428606765330187045e-06f;
constexpr float EXP_C0 = float(1.0 / 5040.0);
constexpr float EXP_C1 = float(1.0 / 720.0);
constexpr float EXP_C2 = float(1.0 / 120.0);
constexpr float EXP_C3 = float(1.0 / 24.0);
constexpr float EXP_C4 = float(1.0 / 6.0);
constexpr float EXP_C5 = 0.5f;
constexpr float EXP_C6 = 1.0f;
constexpr float EXP_C7 = 1.0f;

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float pexp(float d) {
  const bool ok = d >= EXP_CUTOFF;  // false for NaN and for d < -86
  const float dd = ok ? d : 0.0f;
  const float n = (dd * EXP_LOG2E + EXP_ROUND) - EXP_ROUND;
  const float r = (dd - n * EXP_LN2_HI) - n * EXP_LN2_LO;
  float s = EXP_C0;
  s = s * r + EXP_C1;
  s = s * r + EXP_C2;
  s = s * r + EXP_C3;
  s = s * r + EXP_C4;
  s = s * r + EXP_C5;
  s = s * r + EXP_C6;
  s = s * r + EXP_C7;
  const int32_t ni = int32_t(n);
  const float scale = bits_to_float(uint32_t(ni + 127) << 23);
  const float out = s * scale;
  return ok ? out : 0.0f;
}

}  // namespace specops
