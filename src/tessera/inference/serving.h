// The engine behind a server: one thread owns the Engine and steps it while any request runs;
// connection threads submit requests and read their tokens as they come (continuous batching:
// a request joins the running batch at the next step). A request is a Stream: its tokens so far,
// whether it finished and why, or the error that refused it. Closing a stream early (the client
// went away) ends its generation at the next step and frees its cache blocks.
//
// Bounded: at most `max_requests` requests are queued or running; more are refused at once
// (the server answers 503); a request that has not finished after `timeout_s` is ended with
// finish reason "length" — its tokens so far are its answer.
//
// Tensor parallelism (the model's TP group has several ranks): rank 0 runs the ServingLoop and
// the others follow_serving(); before each step rank 0 sends the others a StepPlan of what
// arrived and what ends (step_plan.h), so every rank's engine steps the same batch.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/inference/engine.h"
#include "tessera/inference/step_plan.h"

namespace tessera::inference {

class Stream {
 public:
  // Waits until there are tokens beyond `seen`, the generation finished, or it was refused;
  // returns the tokens so far (all of them) and sets `finish` (kNone while running) and
  // `error` (non-empty: refused, with the reason).
  std::vector<GeneratedToken> wait(size_t seen, FinishReason& finish, std::string& error);
  // The generation ends at the next step with `reason`: kStop (a stop string matched) or
  // kAbort (the client is gone).
  void close(FinishReason reason = FinishReason::kStop);

 private:
  friend class ServingLoop;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<GeneratedToken> tokens_;
  FinishReason finish_ = FinishReason::kNone;
  std::string error_;
  FinishReason closed_ = FinishReason::kNone;
  uint64_t id_ = 0;
  double deadline_ = 0;
};

// What the loop has done, for GET /metrics: a snapshot after the last step.
struct ServingStats {
  int running = 0;           // sequences in the engine's batch
  int waiting = 0;           // requests submitted and not yet in the batch
  int64_t cache_blocks = 0;  // KV-cache blocks on this rank
  int64_t free_cache_blocks = 0;
  int64_t prompt_tokens = 0;      // of every request accepted, in total
  int64_t generation_tokens = 0;  // produced, in total
  int64_t refused = 0;            // requests the engine refused (an error answer)
  // Requests finished, by FinishReason (index kLength, kStop, kAbort).
  int64_t finished[4] = {0, 0, 0, 0};
  int64_t steps = 0;
};

class ServingLoop {
 public:
  ServingLoop(model::GPTModel& model, const EngineOptions& options, int max_requests,
              double timeout_s);
  ~ServingLoop();  // stops the thread (running requests end)

  // The request's stream, or nullptr when max_requests are already in (the caller answers 503).
  // Invalid requests come back as a stream whose error says why (the Engine's message).
  std::shared_ptr<Stream> submit(GenerationRequest request);
  int64_t vocab_size() const { return vocab_; }
  int64_t context_length() const { return context_; }
  int active() const;
  ServingStats stats() const;

 private:
  void run();

  Engine engine_;
  // The TP group when it has other ranks (this is its rank 0): each step's plan goes to them.
  comm::ProcessGroup* followers_ = nullptr;
  const int max_requests_;
  const double timeout_s_;
  const int64_t vocab_, context_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<GenerationRequest, std::shared_ptr<Stream>>> incoming_;
  std::vector<std::shared_ptr<Stream>> live_;
  bool stopping_ = false;
  ServingStats stats_;
  std::thread thread_;
};

// A rank other than 0 of a tensor-parallel server: runs its engine on `model` (this rank's
// shards) step for step with rank 0's ServingLoop, applying each StepPlan received, until rank 0
// stops.
void follow_serving(model::GPTModel& model, const EngineOptions& options);

}  // namespace tessera::inference
