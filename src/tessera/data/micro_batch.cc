#include "tessera/core/clock.h"
#include "tessera/data/micro_batch.h"

#include <chrono>

#include "tessera/core/error.h"

namespace tessera::data {

void ltor_masks(const int32_t* tokens, int64_t T, const LtorOptions& options, float* loss_mask,
                int32_t* positions, int32_t* doc_start) {
  int64_t start = 0;  // first token of the current document
  for (int64_t t = 0; t < T; ++t) {
    const bool eod = tokens[t] == options.eod;
    if (loss_mask) loss_mask[t] = options.eod_mask_loss && eod ? 0.0f : 1.0f;
    if (positions) positions[t] = static_cast<int32_t>(options.reset_position_ids ? t - start : t);
    if (doc_start) doc_start[t] = static_cast<int32_t>(options.reset_attention_mask ? start : 0);
    if (eod) start = t + 1;
  }
}

void load_micro_batch(const TokenSampler& sampler, int64_t first, int64_t count,
                      const LtorOptions& options, MicroBatch& out) {
  const int64_t T = sampler.seq_length(), n = sampler.num_samples();
  TESSERA_CHECK(n > 0 && count >= 0);
  out.B = count;
  out.T = T;
  out.first_sample = first;
  out.tokens.resize(count * T);
  out.targets.resize(count * T);
  out.loss_mask.resize(options.eod_mask_loss ? count * T : 0);
  out.positions.resize(options.reset_position_ids ? count * T : 0);
  out.doc_start.resize(options.reset_attention_mask ? count * T : 0);
  std::vector<int32_t> buf(T + 1);
  for (int64_t b = 0; b < count; ++b) {
    sampler.sample((first + b) % n, buf.data());
    std::copy(buf.begin(), buf.end() - 1, out.tokens.begin() + b * T);
    std::copy(buf.begin() + 1, buf.end(), out.targets.begin() + b * T);
    if (options.any())
      ltor_masks(buf.data(), T, options,
                 options.eod_mask_loss ? out.loss_mask.data() + b * T : nullptr,
                 options.reset_position_ids ? out.positions.data() + b * T : nullptr,
                 options.reset_attention_mask ? out.doc_start.data() + b * T : nullptr);
  }
}

namespace {

// v (B, T) -> (B, T / N): each row's tokens of `split`, in the rank's order.
template <typename V>
void keep_chunks(std::vector<V>& v, int64_t B, int64_t T, SequenceSplit split) {
  if (v.empty()) return;
  const int64_t local = split.local(T);
  std::vector<V> out(static_cast<size_t>(B * local));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t u = 0; u < local; ++u) out[b * local + u] = v[b * T + split.global(u, T)];
  v = std::move(out);
}

}  // namespace

void keep_context_chunks(MicroBatch& mb, SequenceSplit split) {
  if (split.size == 1) return;
  TESSERA_CHECK(mb.T % (2 * split.size) == 0);
  const int64_t B = mb.B, T = mb.T;
  mb.doc_start_global = mb.doc_start;
  keep_chunks(mb.tokens, B, T, split);
  keep_chunks(mb.targets, B, T, split);
  keep_chunks(mb.loss_mask, B, T, split);
  keep_chunks(mb.positions, B, T, split);
  keep_chunks(mb.doc_start, B, T, split);
  mb.T = split.local(T);
}

Prefetcher::Prefetcher(Fill fill, int64_t count, int depth)
    : fill_(std::move(fill)), count_(count), slots_(static_cast<size_t>(depth + 1)) {
  TESSERA_CHECK(depth >= 1 && count >= 0);
  thread_ = std::thread([this] { run(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Prefetcher::run() {
  const int64_t S = static_cast<int64_t>(slots_.size());
  for (int64_t k = 0; k < count_; ++k) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Slot k % S is free once the consumer released result k - S.
      cv_.wait(lock, [&] { return stop_ || k - released_ < S; });
      if (stop_) return;
    }
    try {
      fill_(k, slots_[static_cast<size_t>(k % S)]);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      error_at_ = k;
      cv_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      produced_ = k + 1;
    }
    cv_.notify_all();
  }
}

const MicroBatch& Prefetcher::next() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  TESSERA_CHECK_MSG(consumed_ < count_, "Prefetcher::next past the last result");
  released_ = consumed_;  // the previous result is no longer in use
  cv_.notify_all();
  cv_.wait(lock, [&] { return produced_ > consumed_ || error_at_ == consumed_; });
  wait_s_ += seconds_since(t0);
  if (produced_ <= consumed_) std::rethrow_exception(error_);
  const int64_t k = consumed_++;
  return slots_[static_cast<size_t>(k % static_cast<int64_t>(slots_.size()))];
}

double Prefetcher::take_wait_seconds() {
  std::lock_guard<std::mutex> lock(mu_);
  const double s = wait_s_;
  wait_s_ = 0;
  return s;
}

}  // namespace tessera::data
