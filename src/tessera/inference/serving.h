// The engine behind a server: one thread owns the Engine and steps it while any request runs;
// connection threads submit requests and read their tokens as they come (continuous batching:
// a request joins the running batch at the next step). A request is a Stream: its tokens so far,
// whether it finished and why, or the error that refused it. Closing a stream early (the client
// went away) ends its generation at the next step and frees its cache blocks.
//
// Bounded: at most `max_requests` requests are queued or running; more are refused at once
// (the server answers 503); a request that has not finished after `timeout_s` is ended with
// finish reason "length" — its tokens so far are its answer.
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

namespace tessera::inference {

class Stream {
 public:
  // Waits until there are tokens beyond `seen`, the generation finished, or it was refused;
  // returns the tokens so far (all of them) and sets `finish` (kNone while running) and
  // `error` (non-empty: refused, with the reason).
  std::vector<GeneratedToken> wait(size_t seen, FinishReason& finish, std::string& error);
  // The client is gone: the generation ends at the next step.
  void close();

 private:
  friend class ServingLoop;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<GeneratedToken> tokens_;
  FinishReason finish_ = FinishReason::kNone;
  std::string error_;
  bool closed_ = false;
  uint64_t id_ = 0;
  double deadline_ = 0;
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

 private:
  void run();

  Engine engine_;
  const int max_requests_;
  const double timeout_s_;
  const int64_t vocab_, context_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<GenerationRequest, std::shared_ptr<Stream>>> incoming_;
  std::vector<std::shared_ptr<Stream>> live_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::inference
