#include "tessera/train/batch_schedule.h"

#include <cmath>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera::train {
namespace {

// One count of --step-batch-size-schedule: a number with an optional K/M/B/T suffix.
int64_t count_with_suffix(const std::string& text, const std::string& item) {
  const auto bad = [&] {
    return Error("--step-batch-size-schedule: '" + text + "' in '" + item +
                 "' is not a count (a number, optionally with K, M, B or T)");
  };
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  double scale = 1;
  if (used + 1 == text.size()) {
    const char s = text.back();
    scale = s == 'K' ? 1e3 : s == 'M' ? 1e6 : s == 'B' ? 1e9 : s == 'T' ? 1e12 : 0;
    ++used;
  }
  if (used != text.size() || scale == 0 || !(v >= 0)) throw bad();
  return static_cast<int64_t>(std::llround(v * scale));
}

}  // namespace

BatchSchedule BatchSchedule::constant(int64_t batch) {
  BatchSchedule s;
  s.final_ = batch;
  return s;
}

BatchSchedule BatchSchedule::rampup(int64_t start, int64_t increment, int64_t samples,
                                    int64_t final) {
  const std::string given = "--rampup-batch-size " + std::to_string(start) + " " +
                            std::to_string(increment) + " " + std::to_string(samples);
  if (start <= 0 || increment <= 0 || samples < 0)
    throw Error(given + ": expected START > 0, INCREMENT > 0 and SAMPLES >= 0");
  if (start > final || (final - start) % increment != 0)
    throw Error(given + ": the global batch size " + std::to_string(final) +
                " must be START plus a whole number of INCREMENTs");
  if (start == final) return constant(final);
  BatchSchedule s;
  s.kind_ = Kind::kRampup;
  s.final_ = final;
  s.start_ = start;
  s.increment_ = increment;
  s.ramp_samples_ = samples;
  s.samples_per_increment_ =
      static_cast<double>(samples) / static_cast<double>((final - start) / increment);
  return s;
}

BatchSchedule BatchSchedule::steps(const std::string& text, int64_t seq_length) {
  BatchSchedule s;
  s.kind_ = Kind::kSteps;
  std::istringstream in(text);
  std::string item;
  while (in >> item) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos)
      throw Error("--step-batch-size-schedule: '" + item + "' is not TOKENS:BATCH");
    const int64_t tokens = count_with_suffix(item.substr(0, colon), item);
    const int64_t batch = count_with_suffix(item.substr(colon + 1), item);
    if (batch <= 0)
      throw Error("--step-batch-size-schedule: '" + item + "': the batch must be > 0");
    if (s.steps_.empty() && tokens != 0)
      throw Error("--step-batch-size-schedule: the first threshold must be 0, got '" + item + "'");
    const int64_t from = tokens / seq_length;  // tokens to samples, Megatron's conversion
    if (!s.steps_.empty() && from <= s.steps_.back().from_samples)
      throw Error("--step-batch-size-schedule: thresholds must increase by at least one sample ('" +
                  item + "')");
    s.steps_.push_back({from, batch});
  }
  if (s.steps_.empty())
    throw Error("--step-batch-size-schedule: empty (expected \"0:B0 T1:B1 ...\")");
  s.final_ = s.steps_.back().batch;
  if (s.steps_.size() == 1) return constant(s.final_);
  return s;
}

int64_t BatchSchedule::at(int64_t consumed) const {
  switch (kind_) {
    case Kind::kConstant:
      return final_;
    case Kind::kRampup: {
      if (consumed > ramp_samples_) return final_;
      const auto k = static_cast<int64_t>(static_cast<double>(consumed) / samples_per_increment_);
      return std::min(final_, start_ + k * increment_);
    }
    case Kind::kSteps: {
      int64_t batch = steps_.front().batch;
      for (const BatchStep& s : steps_)
        if (consumed >= s.from_samples) batch = s.batch;
      return batch;
    }
  }
  return final_;
}

std::vector<int64_t> BatchSchedule::batches() const {
  std::vector<int64_t> out;
  if (kind_ == Kind::kRampup)
    for (int64_t b = start_; b <= final_; b += increment_) out.push_back(b);
  for (const BatchStep& s : steps_) out.push_back(s.batch);
  if (out.empty()) out.push_back(final_);
  return out;
}

int64_t BatchSchedule::samples_after(int64_t iterations) const {
  int64_t consumed = 0;
  for (int64_t i = 0; i < iterations; ++i) {
    const int64_t b = at(consumed);
    if (b == final_ && (kind_ == Kind::kConstant || consumed > ramp_samples_ ||
                        (kind_ == Kind::kSteps && consumed >= steps_.back().from_samples)))
      return consumed + (iterations - i) * final_;  // the rest are final batches
    consumed += b;
  }
  return consumed;
}

int64_t BatchSchedule::iterations_for(int64_t train_samples) const {
  // Megatron's update_train_iters: the changing phase while it lasts (and the run does), then
  // whole final batches.
  const int64_t changing_until = kind_ == Kind::kRampup  ? ramp_samples_
                                 : kind_ == Kind::kSteps ? steps_.back().from_samples - 1
                                                         : -1;
  int64_t consumed = 0, iterations = 0;
  while (consumed <= changing_until && consumed <= train_samples) {
    consumed += at(consumed);
    ++iterations;
  }
  if (train_samples > consumed) iterations += (train_samples - consumed) / final_;
  return iterations;
}

}  // namespace tessera::train
