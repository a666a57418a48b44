// The global batch size as a function of the samples consumed so far, Megatron's
// num-microbatches calculators (megatron/core/num_microbatches_calculator.py):
//   constant   --global-batch-size B
//   rampup     --rampup-batch-size START INCREMENT SAMPLES: START + k INCREMENT once
//              floor(consumed / (SAMPLES / n)) = k increments were reached (n = (B - START) /
//              INCREMENT increments), B once more than SAMPLES samples were consumed
//   steps      --step-batch-size-schedule "T0:B0 T1:B1 ...": B_i from T_i tokens on (tokens
//              converted to samples by the sequence length; T0 = 0)
// Each iteration takes the batch of the samples consumed before it. Immutable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::train {

struct BatchStep {
  int64_t from_samples;  // consumed samples from which it applies
  int64_t batch;
};

class BatchSchedule {
 public:
  static BatchSchedule constant(int64_t batch);
  // Throws tessera::Error (naming --rampup-batch-size) unless 0 < start <= final, increment > 0
  // divides final - start, and samples >= 0.
  static BatchSchedule rampup(int64_t start, int64_t increment, int64_t samples, int64_t final);
  // `text` as --step-batch-size-schedule gives it; tessera::Error on a malformed one.
  static BatchSchedule steps(const std::string& text, int64_t seq_length);

  // The global batch of the iteration that starts after `consumed` samples.
  int64_t at(int64_t consumed) const;
  // The batch every iteration takes once the ramp or the steps are over.
  int64_t final_batch() const { return final_; }
  bool is_constant() const { return kind_ == Kind::kConstant; }
  // Every batch the schedule can give (for divisibility checks).
  std::vector<int64_t> batches() const;
  // Samples consumed by the first `iterations` iterations.
  int64_t samples_after(int64_t iterations) const;
  // Iterations of a run of `train_samples` samples, as Megatron counts them: the iterations of
  // the ramp (or steps) while they fit, then whole final batches.
  int64_t iterations_for(int64_t train_samples) const;

 private:
  enum class Kind { kConstant, kRampup, kSteps };
  Kind kind_ = Kind::kConstant;
  int64_t final_ = 0;
  int64_t start_ = 0, increment_ = 0, ramp_samples_ = 0;  // rampup
  double samples_per_increment_ = 0;
  std::vector<BatchStep> steps_;  // steps
};

}  // namespace tessera::train
