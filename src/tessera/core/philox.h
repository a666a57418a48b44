// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// A random value is a pure function of (key, counter): no stream is consumed, so the value
// for an element depends only on its *global* coordinates. That is what makes dropout masks
// and parameter initialisation identical whatever the tensor/pipeline/data sharding: a rank
// holding columns [512, 768) of a weight computes exactly the values the single process would
// for those columns.
//
// Conventions used across the project:
//   key     = philox_key(seed, purpose, a)  (purpose: kInit, kDropout, kData...; `a` is e.g.
//             the layer number or a hash of the parameter name)
//   counter = (row, column / 4) of the global element; the element takes lane column % 4.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace tessera {

enum class RngPurpose : uint32_t {
  kInit = 1,
  kAttentionDropout = 2,
  kHiddenDropout = 3,
  kData = 4,
  kTest = 5,
  kSampling = 6,  // inference: the draw of each generated token (inference/sampling.h)
};

struct PhiloxKey {
  uint32_t k0, k1;
};

// Philox4x32 with 10 rounds: four 32-bit outputs for a 128-bit counter.
inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, PhiloxKey key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ k0, static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return ctr;
}

// 64-bit FNV-1a; used to turn a parameter name into part of a key.
inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Mixes (seed, purpose, a) into a key. Different purposes never share a stream.
inline PhiloxKey philox_key(uint64_t seed, RngPurpose purpose, uint64_t a) {
  auto out = philox4x32({static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32),
                         static_cast<uint32_t>(purpose), 0x7e55e4a1u},
                        {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return {out[0], out[1]};
}

// Four 32-bit values for global element block (row, col4): elements (row, 4*col4 + lane).
inline std::array<uint32_t, 4> philox_block(PhiloxKey key, uint64_t row, uint64_t col4) {
  return philox4x32({static_cast<uint32_t>(row), static_cast<uint32_t>(row >> 32),
                     static_cast<uint32_t>(col4), static_cast<uint32_t>(col4 >> 32)},
                    key);
}

// Uniform in [0, 1) with 24 random bits.
inline float uint_to_unit_float(uint32_t x) { return (x >> 8) * (1.0f / 16777216.0f); }

// A standard normal value for global element (row, col), via Box-Muller on the block's lanes
// (lanes 0,1 give the pair for lanes 0,1; lanes 2,3 for 2,3).
inline float philox_normal(PhiloxKey key, uint64_t row, uint64_t col) {
  const auto r = philox_block(key, row, col / 4);
  const int pair = static_cast<int>(col % 4) / 2;
  // (x + 0.5) / 2^24 keeps u1 away from 0 so log() is finite.
  const double u1 = ((r[2 * pair] >> 8) + 0.5) / 16777216.0;
  const double u2 = (r[2 * pair + 1] >> 8) / 16777216.0;
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 6.283185307179586 * u2;
  return static_cast<float>(col % 2 == 0 ? radius * std::cos(angle) : radius * std::sin(angle));
}

}  // namespace tessera
