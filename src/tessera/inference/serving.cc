#include "tessera/inference/serving.h"

#include <algorithm>
#include <chrono>

#include "tessera/core/error.h"

namespace tessera::inference {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::vector<GeneratedToken> Stream::wait(size_t seen, FinishReason& finish, std::string& error) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    return tokens_.size() > seen || finish_ != FinishReason::kNone || !error_.empty();
  });
  finish = finish_;
  error = error_;
  return tokens_;
}

void Stream::close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
}

ServingLoop::ServingLoop(model::GPTModel& model, const EngineOptions& options, int max_requests,
                         double timeout_s)
    : engine_(model, options),
      max_requests_(max_requests),
      timeout_s_(timeout_s),
      vocab_(engine_.vocab_size()),
      context_(engine_.context_length()),
      thread_([this] { run(); }) {}

ServingLoop::~ServingLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int ServingLoop::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(incoming_.size() + live_.size());
}

std::shared_ptr<Stream> ServingLoop::submit(GenerationRequest request) {
  auto stream = std::make_shared<Stream>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(incoming_.size() + live_.size()) >= max_requests_) return nullptr;
    incoming_.emplace_back(std::move(request), stream);
  }
  cv_.notify_all();
  return stream;
}

void ServingLoop::run() {
  for (;;) {
    std::deque<std::pair<GenerationRequest, std::shared_ptr<Stream>>> arrived;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !incoming_.empty() || !live_.empty(); });
      if (stopping_) break;
      arrived.swap(incoming_);
    }
    std::vector<std::shared_ptr<Stream>> added;
    for (auto& [request, stream] : arrived) {
      try {
        stream->id_ = engine_.submit(std::move(request));
        stream->deadline_ = now_s() + timeout_s_;
        added.push_back(stream);
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(stream->mu_);
        stream->error_ = e.what();
        stream->cv_.notify_all();
      }
    }
    std::vector<std::shared_ptr<Stream>> live;
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.insert(live_.end(), added.begin(), added.end());
      live = live_;
    }
    // Clients gone or too slow: their generations end now.
    for (const std::shared_ptr<Stream>& s : live) {
      bool closed;
      {
        std::lock_guard<std::mutex> lock(s->mu_);
        closed = s->closed_;
      }
      if (closed)
        engine_.finish(s->id_, FinishReason::kStop);
      else if (now_s() > s->deadline_)
        engine_.finish(s->id_, FinishReason::kLength);
    }
    engine_.step();
    // Every live stream takes its tokens; finished ones leave.
    std::vector<std::shared_ptr<Stream>> still;
    for (const std::shared_ptr<Stream>& s : live) {
      const Generation& g = engine_.generation(s->id_);
      {
        std::lock_guard<std::mutex> lock(s->mu_);
        if (g.tokens.size() > s->tokens_.size() || g.finished()) {
          // Only the new ones: the others are already there.
          s->tokens_.insert(s->tokens_.end(), g.tokens.begin() + s->tokens_.size(), g.tokens.end());
          s->finish_ = g.finish;
          s->cv_.notify_all();
        }
      }
      if (g.finished()) {
        engine_.forget(s->id_);
      } else {
        still.push_back(s);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    // live_ may have grown only through this thread; replace it by the survivors.
    live_ = std::move(still);
  }
  // Shutting down: every waiting client gets an answer.
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::shared_ptr<Stream>& s : live_) {
    std::lock_guard<std::mutex> slock(s->mu_);
    s->error_ = "the server is shutting down";
    s->cv_.notify_all();
  }
  for (auto& [request, s] : incoming_) {
    std::lock_guard<std::mutex> slock(s->mu_);
    s->error_ = "the server is shutting down";
    s->cv_.notify_all();
  }
}

}  // namespace tessera::inference
