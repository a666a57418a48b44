#include "tessera/data/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "tessera/core/error.h"
#include "tessera/core/philox.h"

namespace tessera::data {
namespace {

std::string range_text(int64_t lo, int64_t hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
}

// Uniform in [0, n) from a 32-bit draw (multiply-shift; bias < n / 2^32).
int32_t scale_to(uint32_t u, int64_t n) {
  return static_cast<int32_t>((static_cast<uint64_t>(u) * static_cast<uint64_t>(n)) >> 32);
}

// Philox stream ids inside RngPurpose::kData, so the mock's two tables never share a stream.
constexpr uint64_t kMockSuccessorStream = 0x6d6f636b00000001ull;
constexpr uint64_t kMockSampleStream = 0x6d6f636b00000002ull;

}  // namespace

// ---------------------------------------------------------------------------------------------
// MockSampler

MockSampler::MockSampler(int64_t vocab, int64_t seq_length, uint64_t seed, int64_t num_samples,
                         double stickiness)
    : vocab_(vocab),
      seq_length_(seq_length),
      num_samples_(num_samples),
      seed_(seed),
      stickiness_(stickiness),
      stick_threshold_(0) {
  if (vocab < 2 || vocab > (int64_t{1} << 31) - 1) {
    throw Error("mock data: vocabulary size " + std::to_string(vocab) + ": expected in [2, 2^31)");
  }
  if (seq_length < 1) {
    throw Error("mock data: sequence length " + std::to_string(seq_length) + ": expected >= 1");
  }
  if (num_samples < 0) {
    throw Error("mock data: number of samples " + std::to_string(num_samples) + ": expected >= 0");
  }
  if (!(stickiness >= 0.0 && stickiness <= 1.0)) {
    throw Error("mock data: stickiness " + std::to_string(stickiness) + ": expected in [0, 1]");
  }
  stick_threshold_ = static_cast<uint64_t>(std::llround(stickiness * 4294967296.0));
  const PhiloxKey key = philox_key(seed, RngPurpose::kData, kMockSuccessorStream);
  successor_.resize(static_cast<size_t>(vocab));
  for (int64_t t = 0; t < vocab; ++t) {
    successor_[static_cast<size_t>(t)] = scale_to(philox_block(key, t, 0)[0], vocab);
  }
}

void MockSampler::sample(int64_t index, int32_t* out) const {
  if (index < 0 || index >= num_samples_) {
    throw Error("mock data: sample " + std::to_string(index) + " out of range: expected " +
                range_text(0, num_samples_));
  }
  const PhiloxKey key = philox_key(seed_, RngPurpose::kData, kMockSampleStream);
  // Token t uses lanes 2*(t%2) (follow-or-jump draw) and 2*(t%2)+1 (uniform token) of block
  // (index, t/2): two draws per token, a pure function of (seed, index, t).
  std::array<uint32_t, 4> block{};
  for (int64_t t = 0; t <= seq_length_; ++t) {
    if (t % 2 == 0) block = philox_block(key, static_cast<uint64_t>(index), t / 2);
    const int lane = static_cast<int>(t % 2) * 2;
    const int32_t uniform = scale_to(block[lane + 1], vocab_);
    if (t == 0) {
      out[t] = uniform;
    } else {
      const bool follow = static_cast<uint64_t>(block[lane]) < stick_threshold_;
      out[t] = follow ? successor_[static_cast<size_t>(out[t - 1])] : uniform;
    }
  }
}

double MockSampler::entropy_rate() const {
  const double v = static_cast<double>(vocab_);
  const double p_other = (1.0 - stickiness_) / v;
  const double p_succ = stickiness_ + p_other;
  auto plogp = [](double p) { return p > 0.0 ? p * std::log(p) : 0.0; };
  return -plogp(p_succ) - (v - 1.0) * plogp(p_other);
}

}  // namespace tessera::data
