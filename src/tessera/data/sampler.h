// Token samplers: what the trainer draws (seq_length + 1)-token training samples from.
//
// A sample of seq_length + 1 tokens gives a model input (the first seq_length tokens) and its
// next-token labels (the last seq_length tokens), as in Megatron's GPTDataset. Implementations:
// GPTDataset and BlendedDataset (gpt_dataset.h) over indexed datasets, MockSampler below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::data {

// Source of fixed-length token samples addressed by index in [0, num_samples()).
// Implementations are deterministic (the same index always gives the same tokens) and
// sample() is safe to call concurrently from several threads.
class TokenSampler {
 public:
  virtual ~TokenSampler() = default;
  virtual int64_t num_samples() const = 0;
  // Tokens per sample are seq_length() + 1.
  virtual int64_t seq_length() const = 0;
  // Every token written is in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // Writes sample `index` to out[0, seq_length() + 1). Throws tessera::Error if index is out of
  // range or the data holds a token outside [0, vocab_size()).
  virtual void sample(int64_t index, int32_t* out) const = 0;
};

// A synthetic, deterministic stream with learnable structure, for tests and benchmarks without
// data files. Each sample is a path of a fixed first-order Markov chain over [0, vocab):
//   token 0 is uniform; then with probability `stickiness` the next token is succ[prev] (a fixed
//   random successor of each token), otherwise it is uniform over the vocabulary.
// succ is drawn from Philox keyed by seed; the tokens of sample i from Philox keyed by
// (seed, i), so a sample never depends on which others were drawn, or by which rank.
// Every row of the transition matrix has one entry p + (1-p)/V and V-1 entries (1-p)/V, so the
// entropy rate (the best achievable mean next-token loss, in nats) is
//   H = -(p + (1-p)/V) ln(p + (1-p)/V) - (V-1) (1-p)/V ln((1-p)/V)
// e.g. 0.877 nats for V = 257, p = 0.9, against ln(257) = 5.55 for a model that learned nothing.
class MockSampler final : public TokenSampler {
 public:
  static constexpr double kDefaultStickiness = 0.9;

  // Throws tessera::Error if vocab < 2, seq_length < 1, num_samples < 0 or stickiness is not in
  // [0, 1].
  MockSampler(int64_t vocab, int64_t seq_length, uint64_t seed, int64_t num_samples,
              double stickiness = kDefaultStickiness);

  int64_t num_samples() const override { return num_samples_; }
  int64_t seq_length() const override { return seq_length_; }
  int64_t vocab_size() const override { return vocab_; }
  void sample(int64_t index, int32_t* out) const override;

  // The chain's entropy rate H in nats (formula above).
  double entropy_rate() const;
  // The fixed successor of token t.
  int32_t successor(int32_t t) const { return successor_[static_cast<size_t>(t)]; }

 private:
  int64_t vocab_, seq_length_, num_samples_;
  uint64_t seed_;
  double stickiness_;
  uint64_t stick_threshold_;  // a 32-bit draw below this follows succ (2^32: always)
  std::vector<int32_t> successor_;
};

}  // namespace tessera::data
