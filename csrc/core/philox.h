// Philox4x32-10 (Random123), the specops stream layout (see specops/reference.py, section 4).
#pragma once
#include <cstdint>

namespace specops {

constexpr uint32_t PHILOX_M0 = 0xD2511F53u;
constexpr uint32_t PHILOX_M1 = 0xCD9E8D57u;
constexpr uint32_t PHILOX_W0 = 0x9E3779B9u;
constexpr uint32_t PHILOX_W1 = 0xBB67AE85u;
constexpr int PHILOX_ROUNDS = 10;
constexpr uint32_t TAG_ACCEPT = 0;
constexpr uint32_t TAG_SAMPLE = 1;

struct Philox4 {
  uint32_t w[4];
};

inline Philox4 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                          uint32_t k1, int rounds = PHILOX_ROUNDS) {
  for (int r = 0; r < rounds; ++r) {
    if (r) {
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    const uint64_t p0 = uint64_t(PHILOX_M0) * c0;
    const uint64_t p1 = uint64_t(PHILOX_M1) * c2;
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return Philox4{{c0, c1, c2, c3}};
}

inline Philox4 stream_words(uint64_t seed, uint64_t offset, uint64_t position, uint32_t tag) {
  return philox4x32(uint32_t(position), tag, uint32_t(offset), uint32_t(offset >> 32),
                    uint32_t(seed), uint32_t(seed >> 32));
}

// u_j = w0 * 2^-32 (exact in double).
inline double accept_uniform(uint64_t seed, uint64_t offset, uint64_t position) {
  return double(stream_words(seed, offset, position, TAG_ACCEPT).w[0]) * 0x1p-32;
}

// U = w0 | (w1 << 32).
inline uint64_t sample_uniform64(uint64_t seed, uint64_t offset, uint64_t position) {
  const Philox4 w = stream_words(seed, offset, position, TAG_SAMPLE);
  return uint64_t(w.w[0]) | (uint64_t(w.w[1]) << 32);
}

}  // namespace specops
