#include "tessera/pipeline/executor.h"

#include <chrono>
#include <thread>

#include "tessera/core/error.h"

namespace tessera::pipeline {
namespace {

// A transfer in flight and its buffer.
struct Transfer {
  comm::Work work;
  Tensor buffer;
};

using Key = std::pair<int, int>;  // (micro-batch, local chunk)

}  // namespace

PipelineExecutor::PipelineExecutor(model::ChunkRunner& runner,
                                   std::shared_ptr<comm::ProcessGroup> pp, ScheduleKind kind,
                                   const ScheduleShape& shape)
    : runner_(runner),
      model_(runner.model()),
      pp_(std::move(pp)),
      kind_(kind),
      shape_(shape),
      rank_(pp_ ? pp_->rank() : 0) {
  TESSERA_CHECK(shape_.pp_size == (pp_ ? pp_->size() : 1));
  TESSERA_CHECK(model_.num_chunks() == shape_.virtual_stages);
  steps_ = build_schedule(kind_, shape_, rank_);
}

void PipelineExecutor::set_num_microbatches(int num_microbatches) {
  if (num_microbatches == shape_.num_microbatches) return;
  shape_.num_microbatches = num_microbatches;
  validate_schedule(kind_, shape_);
  steps_ = build_schedule(kind_, shape_, rank_);
}

int PipelineExecutor::tag(bool gradient, int m, int receiving_model_chunk) const {
  // Unique within an iteration up to 16383 (micro-batch, chunk) pairs; beyond, messages with
  // equal tags are far apart in time (at most ~P*V transfers are in flight per pair of ranks).
  const int64_t id =
      static_cast<int64_t>(m) * shape_.virtual_stages * shape_.pp_size + receiving_model_chunk;
  return static_cast<int>((id * 2 + (gradient ? 1 : 0)) % 32768);
}

Tensor PipelineExecutor::activation_buffer(const model::StepContext& ctx) const {
  return Tensor::empty({ctx.local_N(), model_.config().hidden_size},
                       model_.params().compute_dtype(), MemoryCategory::kActivations);
}

model::LossSum PipelineExecutor::train(const MicroBatchLoader& load, float grad_scale,
                                       const BackwardHooks& hooks, Timeline* timeline) {
  using Phase = Timeline::Phase;
  const int V = shape_.virtual_stages;
  std::map<int, std::unique_ptr<MicroBatch>> batches;
  std::map<Key, model::ChunkActivations> acts;
  std::map<Key, Transfer> inbox[2];   // posted receives: [0] activations, [1] gradients
  std::map<Key, Tensor> outbound[2];  // results waiting for their send, likewise
  std::vector<Transfer> outbox;       // sends in flight
  std::map<int, int> chunks_done;     // backwards finished per micro-batch
  auto batch_of = [&](int m) -> MicroBatch& {
    auto it = batches.find(m);
    if (it == batches.end()) it = batches.emplace(m, load(m)).first;
    return *it->second;
  };
  // Waits for a posted receive and hands over its buffer.
  auto take = [&](bool grad, const Key& key) {
    auto it = inbox[grad].find(key);
    TESSERA_CHECK(it != inbox[grad].end());
    {
      TimelineScope t(timeline, Phase::kRecv, key.first, key.second);
      it->second.work.wait();
    }
    Tensor x = it->second.buffer;
    inbox[grad].erase(it);
    return x;
  };
  model::LossSum loss;
  for (const Step& st : steps_) {
    const Key key{st.microbatch, st.chunk};
    const int j = model_chunk(shape_, rank_, st.chunk);
    switch (st.action) {
      case Action::kRecvActivation:
      case Action::kRecvGrad: {
        const bool grad = st.action == Action::kRecvGrad;
        Transfer t;
        t.buffer = activation_buffer(batch_of(st.microbatch).ctx);
        t.work = pp_->recv(t.buffer, st.peer, tag(grad, st.microbatch, j));
        inbox[grad].emplace(key, std::move(t));
        break;
      }
      case Action::kForward: {
        MicroBatch& mb = batch_of(st.microbatch);
        Tensor x;
        if (j > 0) x = take(false, key);
        TimelineScope t(timeline, Phase::kForward, st.microbatch, st.chunk);
        if (forward_delay_ > 0)
          std::this_thread::sleep_for(std::chrono::duration<double>(forward_delay_));
        Tensor y = runner_.forward_chunk(st.chunk, x, mb.batch, mb.ctx, &acts[key]);
        if (j < shape_.pp_size * V - 1) outbound[0][key] = y;  // the last chunk keeps its own
        break;
      }
      case Action::kSendActivation:
      case Action::kSendGrad: {
        const bool grad = st.action == Action::kSendGrad;
        auto it = outbound[grad].find(key);
        TESSERA_CHECK(it != outbound[grad].end());
        TimelineScope t(timeline, Phase::kSend, st.microbatch, st.chunk);
        const int to_chunk = grad ? j - 1 : j + 1;
        outbox.push_back(
            {pp_->send(it->second, st.peer, tag(grad, st.microbatch, to_chunk)), it->second});
        outbound[grad].erase(it);
        break;
      }
      case Action::kBackward: {
        MicroBatch& mb = batch_of(st.microbatch);
        Tensor dy;
        if (j < shape_.pp_size * V - 1) dy = take(true, key);
        if (V == 1 && hooks.before) hooks.before(st.microbatch);
        Tensor dx;
        {
          TimelineScope t(timeline, Phase::kBackward, st.microbatch, st.chunk);
          dx = runner_.backward_chunk(st.chunk, dy, mb.batch, mb.ctx, grad_scale, acts.at(key),
                                     &loss);
        }
        acts.erase(key);
        if (j > 0) outbound[1][key] = dx;
        if (++chunks_done[st.microbatch] == V) {
          if (hooks.after) {
            TimelineScope t(timeline, Phase::kGradSync, st.microbatch);
            hooks.after(st.microbatch);
          }
          batches.erase(st.microbatch);
        }
        break;
      }
    }
    // Sends that completed no longer need their buffers.
    std::erase_if(outbox, [](const Transfer& t) { return t.work.done(); });
  }
  for (Transfer& t : outbox) t.work.wait();
  TESSERA_CHECK(inbox[0].empty() && inbox[1].empty() && acts.empty());
  return loss;
}

model::LossSum PipelineExecutor::evaluate(const MicroBatchLoader& load, int count) {
  const int V = shape_.virtual_stages, P = shape_.pp_size;
  const int prev = (rank_ + P - 1) % P, next = (rank_ + 1) % P;
  model::LossSum loss;
  std::vector<Transfer> outbox;
  // Each rank takes (micro-batch, chunk) in increasing order: every input comes from an
  // earlier (micro-batch, model chunk), so this order cannot deadlock.
  for (int m = 0; m < count; ++m) {
    std::unique_ptr<MicroBatch> mb = load(m);
    for (int c = 0; c < V; ++c) {
      const int j = model_chunk(shape_, rank_, c);
      Tensor x;
      if (j > 0) {
        x = activation_buffer(mb->ctx);
        pp_->recv(x, prev, tag(false, m, j)).wait();
      }
      Tensor y = runner_.forward_chunk(c, x, mb->batch, mb->ctx, nullptr);
      if (j == P * V - 1) {
        const model::LossSum s = runner_.head_loss(y, mb->batch);
        loss.loss_sum += s.loss_sum;
        loss.tokens += s.tokens;
      } else {
        outbox.push_back({pp_->send(y, next, tag(false, m, j + 1)), y});
      }
    }
    // Nothing downstream holds the first stages back: bound the activations in flight (a later
    // stage slower than this one would otherwise queue every micro-batch's).
    std::erase_if(outbox, [](const Transfer& t) { return t.work.done(); });
    while (outbox.size() > static_cast<size_t>(P * V)) {
      outbox.front().work.wait();
      outbox.erase(outbox.begin());
    }
  }
  for (Transfer& t : outbox) t.work.wait();
  return loss;
}

}  // namespace tessera::pipeline
