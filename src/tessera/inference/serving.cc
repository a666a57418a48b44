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

void Stream::close(FinishReason reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ == FinishReason::kNone) closed_ = reason;
}

ServingLoop::ServingLoop(model::GPTModel& model, const EngineOptions& options, int max_requests,
                         double timeout_s)
    : engine_(model, options),
      followers_(model.tensor_parallel().size() > 1 ? model.tensor_parallel().group().get()
                                                    : nullptr),
      max_requests_(max_requests),
      timeout_s_(timeout_s),
      vocab_(engine_.vocab_size()),
      context_(engine_.context_length()) {
  TESSERA_CHECK_MSG(followers_ == nullptr || followers_->rank() == 0,
                    "a tensor-parallel server's loop runs on the group's rank 0");
  stats_.cache_blocks = stats_.free_cache_blocks = engine_.cache().num_blocks();
  thread_ = std::thread([this] { run(); });
}

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

ServingStats ServingLoop::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
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
  // (Only with followers: asking the comm runtime its timeout would start it.)
  const auto heartbeat =
      std::chrono::duration<double>(followers_ != nullptr ? heartbeat_seconds() : 0.0);
  for (;;) {
    std::deque<std::pair<GenerationRequest, std::shared_ptr<Stream>>> arrived;
    std::vector<std::shared_ptr<Stream>> live;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto work = [&] { return stopping_ || !incoming_.empty() || !live_.empty(); };
      if (followers_ == nullptr) {
        cv_.wait(lock, work);
      } else if (!cv_.wait_for(lock, heartbeat, work)) {
        lock.unlock();
        send_plan(*followers_, StepPlan{});  // idle: keeps the followers' receive short
        continue;
      }
      if (stopping_) break;
      arrived.swap(incoming_);
      live = live_;
    }
    // What ends now (a stop string matched, the client went away, the request ran too long)
    // and what arrived: the plan every rank applies before the step.
    StepPlan plan;
    for (const std::shared_ptr<Stream>& s : live) {
      FinishReason closed;
      {
        std::lock_guard<std::mutex> lock(s->mu_);
        closed = s->closed_;
      }
      if (closed != FinishReason::kNone)
        plan.finishes.emplace_back(s->id_, closed);
      else if (now_s() > s->deadline_)
        plan.finishes.emplace_back(s->id_, FinishReason::kLength);
    }
    int64_t prompt_tokens = 0, refused = 0;
    for (const auto& [request, stream] : arrived) plan.submits.push_back(request);
    if (followers_ != nullptr) send_plan(*followers_, plan);
    std::vector<std::string> errors;
    const std::vector<uint64_t> ids = apply_plan(engine_, std::move(plan), errors);
    std::vector<std::shared_ptr<Stream>> added;
    for (size_t i = 0; i < arrived.size(); ++i) {
      const std::shared_ptr<Stream>& stream = arrived[i].second;
      if (!errors[i].empty()) {
        ++refused;
        std::lock_guard<std::mutex> lock(stream->mu_);
        stream->error_ = errors[i];
        stream->cv_.notify_all();
        continue;
      }
      stream->id_ = ids[i];
      stream->deadline_ = now_s() + timeout_s_;
      prompt_tokens += static_cast<int64_t>(arrived[i].first.prompt.size());
      added.push_back(stream);
    }
    live.insert(live.end(), added.begin(), added.end());
    engine_.step();
    // Every live stream takes its new tokens; finished ones leave.
    std::vector<std::shared_ptr<Stream>> still;
    int64_t generated = 0, finished[4] = {0, 0, 0, 0};
    for (const std::shared_ptr<Stream>& s : live) {
      const Generation& g = engine_.generation(s->id_);
      {
        std::lock_guard<std::mutex> lock(s->mu_);
        if (g.tokens.size() > s->tokens_.size() || g.finished()) {
          generated += static_cast<int64_t>(g.tokens.size() - s->tokens_.size());
          s->tokens_.insert(s->tokens_.end(), g.tokens.begin() + s->tokens_.size(), g.tokens.end());
          s->finish_ = g.finish;
          s->cv_.notify_all();
        }
      }
      if (g.finished()) {
        ++finished[static_cast<int>(g.finish)];
        engine_.forget(s->id_);
      } else {
        still.push_back(s);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    // live_ changes only on this thread: the survivors replace it.
    live_ = std::move(still);
    stats_.running = engine_.running();
    stats_.waiting = engine_.queued() + static_cast<int>(incoming_.size());
    stats_.free_cache_blocks = engine_.cache().free_blocks();
    stats_.prompt_tokens += prompt_tokens;
    stats_.generation_tokens += generated;
    stats_.refused += refused;
    for (int r = 0; r < 4; ++r) stats_.finished[r] += finished[r];
    ++stats_.steps;
  }
  if (followers_ != nullptr) {
    StepPlan stop;
    stop.stop = true;
    send_plan(*followers_, stop);
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

void follow_serving(model::GPTModel& model, const EngineOptions& options) {
  TESSERA_CHECK_MSG(model.tensor_parallel().size() > 1 && model.tensor_parallel().rank() != 0,
                    "follow_serving runs on the ranks of a tensor-parallel group but its first");
  Engine engine(model, options);
  comm::ProcessGroup& group = *model.tensor_parallel().group();
  for (;;) {
    StepPlan plan = receive_plan(group);
    if (plan.stop) return;
    std::vector<uint64_t> ended;
    for (const auto& [id, reason] : plan.finishes) ended.push_back(id);
    std::vector<std::string> errors;  // rank 0 answers them
    apply_plan(engine, std::move(plan), errors);
    // Forgotten as rank 0's loop forgets them: once finished.
    for (const uint64_t id : ended) engine.forget(id);
    for (const uint64_t id : engine.step())
      if (engine.generation(id).finished()) engine.forget(id);
  }
}

}  // namespace tessera::inference
