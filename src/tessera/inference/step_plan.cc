#include "tessera/inference/step_plan.h"

#include <algorithm>
#include <bit>
#include <string>

#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera::inference {
namespace {

constexpr int64_t kMagic = 0x54504c414e;  // "TPLAN"
constexpr int kPlanTag = 7101;            // apart from any other transfer on the group

class Reader {
 public:
  explicit Reader(std::span<const int64_t> words) : words_(words) {}
  int64_t next() {
    if (at_ >= words_.size()) throw Error("step plan: truncated after " + std::to_string(at_));
    return words_[at_++];
  }
  // A count that must fit in what is left.
  int64_t count() {
    const int64_t n = next();
    if (n < 0 || static_cast<uint64_t>(n) > words_.size() - at_)
      throw Error("step plan: bad count " + std::to_string(n) + " at word " + std::to_string(at_));
    return n;
  }
  double real() { return std::bit_cast<double>(next()); }
  bool at_end() const { return at_ == words_.size(); }

 private:
  std::span<const int64_t> words_;
  size_t at_ = 0;
};

void put_real(std::vector<int64_t>& w, double v) { w.push_back(std::bit_cast<int64_t>(v)); }

}  // namespace

std::vector<int64_t> encode_plan(const StepPlan& plan) {
  std::vector<int64_t> w{kMagic, plan.stop ? 1 : 0, static_cast<int64_t>(plan.submits.size())};
  for (const GenerationRequest& r : plan.submits) {
    w.push_back(static_cast<int64_t>(r.prompt.size()));
    w.insert(w.end(), r.prompt.begin(), r.prompt.end());
    w.push_back(r.max_tokens);
    w.push_back(static_cast<int64_t>(r.stop_tokens.size()));
    w.insert(w.end(), r.stop_tokens.begin(), r.stop_tokens.end());
    w.push_back(r.prompt_logprobs ? 1 : 0);
    w.push_back(r.top_logprobs);
    const SamplingParams& s = r.sampling;
    put_real(w, s.temperature);
    w.push_back(s.top_k);
    put_real(w, s.top_p);
    put_real(w, s.min_p);
    put_real(w, s.repetition_penalty);
    w.push_back(static_cast<int64_t>(s.seed));
  }
  w.push_back(static_cast<int64_t>(plan.finishes.size()));
  for (const auto& [id, reason] : plan.finishes) {
    w.push_back(static_cast<int64_t>(id));
    w.push_back(static_cast<int64_t>(reason));
  }
  w.push_back(kMagic);
  return w;
}

StepPlan decode_plan(std::span<const int64_t> words) {
  Reader in(words);
  if (in.next() != kMagic) throw Error("step plan: not a plan (bad magic)");
  StepPlan plan;
  plan.stop = in.next() != 0;
  for (int64_t n = in.count(); n > 0; --n) {
    GenerationRequest r;
    for (int64_t k = in.count(); k > 0; --k) r.prompt.push_back(static_cast<int32_t>(in.next()));
    r.max_tokens = in.next();
    for (int64_t k = in.count(); k > 0; --k)
      r.stop_tokens.push_back(static_cast<int32_t>(in.next()));
    r.prompt_logprobs = in.next() != 0;
    r.top_logprobs = static_cast<int>(in.next());
    r.sampling.temperature = in.real();
    r.sampling.top_k = static_cast<int>(in.next());
    r.sampling.top_p = in.real();
    r.sampling.min_p = in.real();
    r.sampling.repetition_penalty = in.real();
    r.sampling.seed = static_cast<uint64_t>(in.next());
    plan.submits.push_back(std::move(r));
  }
  for (int64_t n = in.count(); n > 0; --n) {
    const auto id = static_cast<uint64_t>(in.next());
    const int64_t reason = in.next();
    if (reason < 0 || reason > static_cast<int64_t>(FinishReason::kAbort))
      throw Error("step plan: bad finish reason " + std::to_string(reason));
    plan.finishes.emplace_back(id, static_cast<FinishReason>(reason));
  }
  if (in.next() != kMagic || !in.at_end()) throw Error("step plan: bad end");
  return plan;
}

void send_plan(comm::ProcessGroup& group, const StepPlan& plan) {
  const std::vector<int64_t> words = encode_plan(plan);
  Tensor length = Tensor::empty({1}, DType::kI64, MemoryCategory::kComm);
  length.data<int64_t>()[0] = static_cast<int64_t>(words.size());
  Tensor body =
      Tensor::empty({static_cast<int64_t>(words.size())}, DType::kI64, MemoryCategory::kComm);
  std::copy(words.begin(), words.end(), body.data<int64_t>());
  std::vector<comm::Work> sent;
  for (int peer = 1; peer < group.size(); ++peer) {
    sent.push_back(group.send(length, peer, kPlanTag));
    sent.push_back(group.send(body, peer, kPlanTag));
  }
  for (const comm::Work& w : sent) w.wait();
}

StepPlan receive_plan(comm::ProcessGroup& group) {
  Tensor length = Tensor::empty({1}, DType::kI64, MemoryCategory::kComm);
  group.recv(length, 0, kPlanTag).wait();
  const int64_t n = length.data<int64_t>()[0];
  if (n < 3 || n > (int64_t{1} << 31)) throw Error("step plan: bad length " + std::to_string(n));
  Tensor body = Tensor::empty({n}, DType::kI64, MemoryCategory::kComm);
  group.recv(body, 0, kPlanTag).wait();
  return decode_plan(std::span<const int64_t>(body.data<int64_t>(), static_cast<size_t>(n)));
}

double heartbeat_seconds() { return std::min(30.0, comm::ProcessGroup::timeout() / 4); }

std::vector<uint64_t> apply_plan(Engine& engine, StepPlan plan, std::vector<std::string>& errors) {
  std::vector<uint64_t> ids;
  errors.assign(plan.submits.size(), "");
  for (size_t i = 0; i < plan.submits.size(); ++i) {
    try {
      ids.push_back(engine.submit(std::move(plan.submits[i])));
    } catch (const Error& e) {
      ids.push_back(0);
      errors[i] = e.what();
    }
  }
  for (const auto& [id, reason] : plan.finishes) engine.finish(id, reason);
  return ids;
}

}  // namespace tessera::inference
