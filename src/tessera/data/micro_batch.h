// Micro-batches as the model consumes them (tokens, next-token targets, loss mask, position ids,
// document starts), Megatron's left-to-right masks, the sample schedule that makes a global batch
// independent of the data-parallel layout, and a background prefetcher.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/core/sequence_split.h"
#include "tessera/data/sampler.h"

namespace tessera::data {

// Megatron's --eod-mask-loss, --reset-position-ids, --reset-attention-mask; eod is the
// tokenizer's end-of-document id (they need one).
struct LtorOptions {
  int32_t eod = -1;
  bool eod_mask_loss = false;
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  bool any() const { return eod_mask_loss || reset_position_ids || reset_attention_mask; }
};

// Megatron's _get_ltor_masks_and_position_ids for one sample's T input tokens:
//   loss_mask[t] = 0 where tokens[t] == eod (with eod_mask_loss; the *input* token, so the
//     prediction made from an EOD — the first token of the next document — is not counted), else 1;
//   positions[t] = t, or with reset_position_ids t minus the index after the last EOD before t;
//   doc_start[t] = the index after the last EOD strictly before t (0 if none) with
//     reset_attention_mask, else 0: token t attends to keys [doc_start[t], t]. An EOD belongs to
//     the document it ends.
// Each output may be nullptr (not wanted).
void ltor_masks(const int32_t* tokens, int64_t T, const LtorOptions& options, float* loss_mask,
                int32_t* positions, int32_t* doc_start);

struct MicroBatch {
  int64_t B = 0, T = 0;
  int64_t first_sample = 0;        // global index of sample 0 of the micro-batch
  std::vector<int32_t> tokens;     // (B, T)
  std::vector<int32_t> targets;    // (B, T)
  std::vector<float> loss_mask;    // (B, T) with eod_mask_loss, else empty (all count)
  std::vector<int32_t> positions;  // (B, T) with reset_position_ids, else empty (0..T-1)
  std::vector<int32_t> doc_start;  // (B, T) with reset_attention_mask, else empty (causal)
  // Under context parallelism (keep_context_chunks) T is this rank's tokens per sample and
  // doc_start holds global positions; the whole sequences' doc_start stays here, (B, T * N).
  std::vector<int32_t> doc_start_global;
};

// Fills `out` with samples first, ..., first + count - 1 of `sampler`, each taken modulo
// sampler.num_samples() (a blend capped below the run's length starts over), and their masks.
// Throws what sampler.sample throws.
void load_micro_batch(const TokenSampler& sampler, int64_t first, int64_t count,
                      const LtorOptions& options, MicroBatch& out);

// Context parallelism: reduces a micro-batch of whole sequences to this rank's two chunks of
// each (core/sequence_split.h; T must divide by 2 * split.size, checked): tokens, targets, loss
// mask, positions and doc_start (its values stay global positions) of those tokens, in the
// rank's order; the whole doc_start moves to doc_start_global. A no-op at size 1.
void keep_context_chunks(MicroBatch& mb, SequenceSplit split);

// The global index of the first sample of micro-batch m (of mbs samples) of data-parallel rank
// `rank` of `dp` in the global batch starting at `consumed`: consumed + (m * dp + rank) * mbs.
// Concatenating micro-batch m of ranks 0..dp-1 for m = 0, 1, ... gives samples consumed,
// consumed + 1, ... in order, so the global batch does not depend on dp.
inline int64_t micro_batch_first_sample(int64_t consumed, int64_t m, int64_t dp, int64_t rank,
                                        int64_t mbs) {
  return consumed + (m * dp + rank) * mbs;
}

// Runs fill(k, slot) for k = 0, 1, ..., count - 1 on a background thread, up to `depth` ahead of
// the consumer, so loading overlaps training. next() hands out results in order; the returned
// reference stays valid until the next call of next(). An exception thrown by fill is rethrown
// by the next() that would have returned its result. The destructor stops and joins the thread.
// next() and wait_seconds() must be called from one thread.
class Prefetcher {
 public:
  using Fill = std::function<void(int64_t k, MicroBatch& out)>;
  Prefetcher(Fill fill, int64_t count, int depth = 2);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  const MicroBatch& next();
  // Seconds next() spent blocked since the last call (the time training waited for data).
  double take_wait_seconds();

 private:
  void run();

  Fill fill_;
  int64_t count_;
  std::vector<MicroBatch> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t produced_ = 0;  // results ready: k < produced_
  int64_t released_ = 0;  // slots the consumer is done with: k < released_
  int64_t consumed_ = 0;  // results handed out
  bool stop_ = false;
  std::exception_ptr error_;
  int64_t error_at_ = -1;
  double wait_s_ = 0;
  std::thread thread_;
};

}  // namespace tessera::data
