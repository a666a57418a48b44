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

// Standard normal values of global elements (row, col), via Box-Muller on the lanes of each
// element's block (lanes 0,1 give the pair for lanes 0,1; lanes 2,3 for 2,3). The elements of a
// block share its Philox rounds and those of a pair its logarithm and square root: visiting a
// row's elements in order (as parameter initialisation does) computes each once, where a
// value-by-value call computes them per element. The values do not depend on the order of the
// calls. (ParameterSet::allocate of 124 M parameters, 2 threads: 3.3-3.7 s with a key, a block
// and a pair per element, 1.2 s this way; docs/performance.md, "Parameter initialisation".)
class PhiloxNormals {
 public:
  explicit PhiloxNormals(PhiloxKey key) : key_(key) {}
  float operator()(uint64_t row, uint64_t col) {
    const uint64_t col4 = col / 4;
    if (!block_valid_ || row != row_ || col4 != col4_) {
      block_ = philox_block(key_, row, col4);
      row_ = row;
      col4_ = col4;
      block_valid_ = true;
      pair_valid_[0] = pair_valid_[1] = false;
    }
    const int pair = static_cast<int>(col % 4) / 2;
    if (!pair_valid_[pair]) {
      // (x + 0.5) / 2^24 keeps u1 away from 0 so log() is finite.
      const double u1 = ((block_[2 * pair] >> 8) + 0.5) / 16777216.0;
      const double u2 = (block_[2 * pair + 1] >> 8) / 16777216.0;
      const double radius = std::sqrt(-2.0 * std::log(u1)), angle = 6.283185307179586 * u2;
      // Both of the pair's values at once: GCC makes the two calls one sincos, whose results
      // are glibc's cos and sin bit for bit (the same routines).
      values_[2 * pair] = static_cast<float>(radius * std::cos(angle));
      values_[2 * pair + 1] = static_cast<float>(radius * std::sin(angle));
      pair_valid_[pair] = true;
    }
    return values_[col % 4];
  }

 private:
  PhiloxKey key_;
  bool block_valid_ = false;
  uint64_t row_ = 0, col4_ = 0;
  std::array<uint32_t, 4> block_{};
  bool pair_valid_[2] = {false, false};
  float values_[4] = {0.0f, 0.0f, 0.0f, 0.0f};
};

// One standard normal value for global element (row, col): PhiloxNormals' value.
inline float philox_normal(PhiloxKey key, uint64_t row, uint64_t col) {
  return PhiloxNormals(key)(row, col);
}

}  // namespace tessera
