// The inference engine: many generation requests decoded together over one model and one KV
// cache, with continuous batching — requests join the running batch between steps as slots and
// cache blocks allow, and leave it as soon as they finish.
//
// A step is one forward of the model (GPTModel::forward_cached) over the rows of every running
// sequence: a sequence still reading its prompt adds up to `prefill_chunk` prompt tokens
// (chunked prefill), one that generates adds its last token. Where a row completes the prompt or
// is a generated token, its logits (fp32, the real vocabulary) choose the next token
// (sampling.h); with `prompt_logprobs` every prompt row's logits also give the log-probability
// of the prompt's next token. A sequence finishes when it produces one of its stop tokens, its
// max_tokens-th token, or fills the model's context.
//
// Admission reserves a request's whole cache (prompt + max_tokens, within the context) up
// front, so a running sequence never waits for blocks and none is ever preempted; a request
// waits in FIFO order until the pool has them.
//
// Tensor parallelism: every rank of the model's TP group runs the same engine with the same
// requests in the same order; each computes its heads, its KV cache (its key/value groups) and
// its vocabulary columns, which are gathered, so every rank samples the same tokens. Not
// thread-safe: one thread calls submit() and step().
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "tessera/inference/kv_cache.h"
#include "tessera/inference/sampling.h"
#include "tessera/model/gpt_model.h"

namespace tessera::inference {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 16;
  std::vector<int32_t> stop_tokens;  // generation ends after producing one (it is kept)
  bool prompt_logprobs = false;      // log p(prompt[t + 1] | prompt[0..t]) for every t
  int top_logprobs = 0;              // the most likely alternatives of each generated token
};

// kAbort: ended because its client went away (vLLM's name; no client sees it).
enum class FinishReason { kNone, kLength, kStop, kAbort };
const char* finish_reason_name(FinishReason reason);  // "", "length", "stop" (OpenAI's), "abort"

struct GeneratedToken {
  int32_t token = 0;
  TokenLogprob logprob;  // under the model's distribution at that position
};

struct Generation {
  uint64_t id = 0;
  GenerationRequest request;
  std::vector<GeneratedToken> tokens;
  std::vector<double> prompt_logprobs;  // prompt.size() - 1 values when asked for
  FinishReason finish = FinishReason::kNone;
  bool finished() const { return finish != FinishReason::kNone; }
  // The generated tokens that are text: all but a final stop token (text_tokens below).
  std::vector<int32_t> text_tokens() const;
};

// `tokens` without a final one of `stop_tokens` when the generation finished with kStop.
std::vector<int32_t> text_tokens(const std::vector<GeneratedToken>& tokens, FinishReason finish,
                                 const std::vector<int32_t>& stop_tokens);

// The logits of every vocabulary column from this rank's (m, V / TP) fp32 columns, gathered over
// the TP group (the local tensor itself in one process): each column comes from the one rank that
// computed it, so every rank holds the same logits.
Tensor gather_vocabulary(const Tensor& local, const parallel::TensorParallel& tp);

struct EngineOptions {
  int64_t block_size = 16;      // tokens per cache block
  int64_t cache_tokens = 0;     // the pool's size in tokens (0: max_sequences x context length)
  int max_sequences = 8;        // sequences in the running batch at most
  int64_t prefill_chunk = 512;  // prompt tokens a sequence adds per step at most
  // The cache's element type (parse_kv_cache_dtype, kv_cache.h): "auto" is the compute dtype;
  // fp8 halves a bf16 cache, its keys and values rounded to 8 bits when written.
  std::string kv_cache_dtype = "auto";
};

class Engine {
 public:
  // `model`: the whole model on this rank, its layers split over TP or not
  // (GPTModel::forward_cached's conditions).
  Engine(model::GPTModel& model, const EngineOptions& options);

  // Queues a request and returns its id. tessera::Error naming the field when it cannot run: an
  // empty prompt, a token outside the vocabulary, max_tokens < 1, a prompt that leaves no room
  // in the context, sampling parameters out of range, or a request larger than the whole cache.
  uint64_t submit(GenerationRequest request);
  // One step (see above). Returns the ids whose generation changed: a token produced (and maybe
  // finished).
  std::vector<uint64_t> step();
  // Nothing queued or running.
  bool idle() const { return queue_.empty() && running_.empty(); }
  int running() const { return static_cast<int>(running_.size()); }
  int queued() const { return static_cast<int>(queue_.size()); }
  const Generation& generation(uint64_t id) const;
  // Ends a generation now with `reason` (a stop string the caller found in its text): it leaves
  // the queue or the running batch and gives its cache blocks back. No-op when finished.
  void finish(uint64_t id, FinishReason reason = FinishReason::kStop);
  // Forgets a finished generation (the caller has what it needs).
  void forget(uint64_t id);

  const KvCache& cache() const { return *cache_; }
  int64_t context_length() const { return context_; }
  int64_t vocab_size() const { return vocab_; }

 private:
  struct Running {
    uint64_t id;
    std::vector<int32_t> tokens;  // prompt, then generated
    int64_t cached = 0;           // tokens whose keys and values are in the cache
    std::vector<int32_t> blocks;  // the block table
  };
  void admit();
  // Samples the next token of `seq` from `logits` and records it; true when it finished.
  bool take_token(Running& seq, std::vector<float> logits);

  model::GPTModel& model_;
  EngineOptions options_;
  int64_t context_, vocab_;
  std::unique_ptr<KvCache> cache_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Generation> generations_;
  std::deque<uint64_t> queue_;
  std::vector<Running> running_;
};

}  // namespace tessera::inference
