#include "tessera/inference/engine.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/model/shard.h"

namespace tessera::inference {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kNone:
      break;
  }
  return "";
}

std::vector<int32_t> text_tokens(const std::vector<GeneratedToken>& tokens, FinishReason finish,
                                 const std::vector<int32_t>& stop_tokens) {
  std::vector<int32_t> out;
  for (const GeneratedToken& t : tokens) out.push_back(t.token);
  if (finish == FinishReason::kStop && !out.empty() &&
      std::find(stop_tokens.begin(), stop_tokens.end(), out.back()) != stop_tokens.end())
    out.pop_back();
  return out;
}

std::vector<int32_t> Generation::text_tokens() const {
  return inference::text_tokens(tokens, finish, request.stop_tokens);
}

Engine::Engine(model::GPTModel& model, const EngineOptions& options)
    : model_(model),
      options_(options),
      context_(model.config().max_positions()),
      vocab_(model.config().vocab_size) {
  const model::ModelConfig& c = model.config();
  if (options_.block_size < 1 || options_.max_sequences < 1 || options_.prefill_chunk < 1 ||
      options_.cache_tokens < 0)
    throw Error("inference engine: block size, sequences and prefill chunk must be >= 1");
  const int64_t tokens =
      options_.cache_tokens > 0 ? options_.cache_tokens : options_.max_sequences * context_;
  const int64_t blocks = (tokens + options_.block_size - 1) / options_.block_size;
  // This rank's key/value groups (replicated when fewer than the TP ranks).
  const int64_t kv = model::units_per_rank(c.kv_heads(), model.tensor_parallel().size());
  cache_ = std::make_unique<KvCache>(
      c.num_layers, 2 * kv * c.head_dim(),
      parse_kv_cache_dtype(options_.kv_cache_dtype, model.params().compute_dtype()),
      options_.block_size, blocks);
}

uint64_t Engine::submit(GenerationRequest request) {
  if (request.prompt.empty()) throw Error("prompt: must have at least one token");
  for (size_t i = 0; i < request.prompt.size(); ++i)
    if (request.prompt[i] < 0 || request.prompt[i] >= vocab_)
      throw Error("prompt: token " + std::to_string(request.prompt[i]) + " at position " +
                  std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(vocab_) +
                  ")");
  const int64_t P = static_cast<int64_t>(request.prompt.size());
  if (P >= context_)
    throw Error("prompt: " + std::to_string(P) +
                " tokens leave no room in the model's context of " + std::to_string(context_));
  if (request.max_tokens < 1)
    throw Error("max_tokens: must be >= 1, got " + std::to_string(request.max_tokens));
  if (const std::string why = request.sampling.check(); !why.empty()) throw Error(why);
  if (request.top_logprobs < 0)
    throw Error("top_logprobs: must be >= 0, got " + std::to_string(request.top_logprobs));
  for (int32_t t : request.stop_tokens)
    if (t < 0 || t >= vocab_)
      throw Error("stop token " + std::to_string(t) + " is outside the vocabulary");
  const int64_t need = cache_->blocks_for(std::min(P + request.max_tokens, context_));
  if (need > cache_->num_blocks())
    throw Error("request: needs " + std::to_string(need) + " cache blocks, the cache has " +
                std::to_string(cache_->num_blocks()));
  const uint64_t id = next_id_++;
  Generation& g = generations_[id];
  g.id = id;
  g.request = std::move(request);
  queue_.push_back(id);
  return id;
}

const Generation& Engine::generation(uint64_t id) const {
  const auto it = generations_.find(id);
  TESSERA_CHECK_MSG(it != generations_.end(), "no generation " + std::to_string(id));
  return it->second;
}

void Engine::finish(uint64_t id, FinishReason reason) {
  Generation& g = generations_.at(id);
  if (g.finished()) return;
  g.finish = reason;
  queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if (it->id == id) {
      cache_->release(it->blocks);
      running_.erase(it);
      break;
    }
}

void Engine::forget(uint64_t id) {
  const auto it = generations_.find(id);
  if (it != generations_.end() && it->second.finished()) generations_.erase(it);
}

void Engine::admit() {
  while (!queue_.empty() && static_cast<int>(running_.size()) < options_.max_sequences) {
    const Generation& g = generations_.at(queue_.front());
    Running seq{g.id, g.request.prompt, 0, {}};
    const int64_t total =
        std::min<int64_t>(static_cast<int64_t>(seq.tokens.size()) + g.request.max_tokens, context_);
    if (!cache_->reserve(seq.blocks, total)) return;  // waits for blocks, in order
    queue_.pop_front();
    running_.push_back(std::move(seq));
  }
}

bool Engine::take_token(Running& seq, std::vector<float> logits) {
  Generation& g = generations_.at(seq.id);
  const GenerationRequest& r = g.request;
  GeneratedToken out;
  const int64_t position = static_cast<int64_t>(seq.tokens.size());
  std::vector<float> scratch = logits;
  out.token = sample_token(scratch, r.sampling, seq.tokens, position);
  out.logprob = token_logprob(logits, out.token, r.top_logprobs);
  g.tokens.push_back(out);
  seq.tokens.push_back(out.token);
  if (std::find(r.stop_tokens.begin(), r.stop_tokens.end(), out.token) != r.stop_tokens.end())
    g.finish = FinishReason::kStop;
  else if (static_cast<int64_t>(g.tokens.size()) >= r.max_tokens ||
           static_cast<int64_t>(seq.tokens.size()) >= context_)
    g.finish = FinishReason::kLength;
  return g.finished();
}

Tensor gather_vocabulary(const Tensor& local, const parallel::TensorParallel& tp) {
  if (tp.size() == 1) return local;
  const int64_t m = local.dim(0), cols = local.dim(1), T = tp.size();
  Tensor all = Tensor::empty({T * m, cols}, DType::kF32, MemoryCategory::kComm);
  tp.group()->all_gather(local, all).wait();
  Tensor out = Tensor::empty({m, T * cols}, DType::kF32, MemoryCategory::kActivations);
  for (int64_t r = 0; r < T; ++r)
    for (int64_t i = 0; i < m; ++i)
      std::copy_n(all.data<float>() + (r * m + i) * cols, cols,
                  out.data<float>() + i * T * cols + r * cols);
  return out;
}

std::vector<uint64_t> Engine::step() {
  admit();
  if (running_.empty()) return {};
  // The rows of this step: each sequence's next prompt chunk or its last generated token.
  std::vector<int32_t> tokens, positions;
  std::vector<model::CachedSequence> seqs;
  for (Running& s : running_) {
    const int64_t pending = static_cast<int64_t>(s.tokens.size()) - s.cached;
    const int64_t rows = std::min(pending, options_.prefill_chunk);
    for (int64_t i = 0; i < rows; ++i) {
      tokens.push_back(s.tokens[s.cached + i]);
      positions.push_back(static_cast<int32_t>(s.cached + i));
    }
    seqs.push_back({rows, s.cached, &s.blocks});
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  const Tensor hidden = model_.forward_cached(tokens.data(), positions.data(), n, *cache_, seqs);

  // The rows whose logits are needed: a sequence's last row when it predicts a new token, and
  // with prompt log-probabilities every prompt row that predicts a prompt token.
  std::vector<int64_t> wanted;
  int64_t r0 = 0;
  for (size_t k = 0; k < running_.size(); ++k) {
    const Running& s = running_[k];
    const Generation& g = generations_.at(s.id);
    const int64_t rows = seqs[k].rows, P = static_cast<int64_t>(g.request.prompt.size());
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t pos = s.cached + i;
      const bool predicts_new = pos == static_cast<int64_t>(s.tokens.size()) - 1;
      if (predicts_new || (g.request.prompt_logprobs && pos + 1 < P)) wanted.push_back(r0 + i);
    }
    r0 += rows;
  }
  const int64_t C = hidden.dim(1), m = static_cast<int64_t>(wanted.size());
  if (m == 0) {  // every sequence is still reading its prompt
    for (size_t k = 0; k < running_.size(); ++k) running_[k].cached += seqs[k].rows;
    return {};
  }
  Tensor x = Tensor::empty({m, C}, hidden.dtype());
  for (int64_t i = 0; i < m; ++i)
    x.slice_rows(i, i + 1).copy_from(hidden.slice_rows(wanted[i], wanted[i] + 1));
  const Tensor logits = gather_vocabulary(
      model_.logits(x, 1).to(DType::kF32, MemoryCategory::kActivations), model_.tensor_parallel());
  const int64_t padded = logits.dim(1);
  const auto row_logits = [&](int64_t i) {
    const float* row = logits.data<float>() + i * padded;
    return std::vector<float>(row, row + vocab_);
  };

  std::vector<uint64_t> changed;
  int64_t w = 0;
  r0 = 0;
  std::vector<Running> still;
  for (size_t k = 0; k < running_.size(); ++k) {
    Running& s = running_[k];
    Generation& g = generations_.at(s.id);
    const int64_t rows = seqs[k].rows, P = static_cast<int64_t>(g.request.prompt.size());
    bool finished = false;
    for (int64_t i = 0; i < rows; ++i) {
      if (w >= m || wanted[w] != r0 + i) continue;
      const int64_t pos = s.cached + i;
      std::vector<float> l = row_logits(w++);
      if (g.request.prompt_logprobs && pos + 1 < P)
        g.prompt_logprobs.push_back(token_logprob(l, g.request.prompt[pos + 1]).logprob);
      if (pos == static_cast<int64_t>(s.tokens.size()) - 1) {
        finished = take_token(s, std::move(l));
        changed.push_back(s.id);
      }
    }
    s.cached += rows;
    r0 += rows;
    if (finished) {
      cache_->release(s.blocks);
    } else {
      still.push_back(std::move(s));
    }
  }
  running_ = std::move(still);
  return changed;
}

}  // namespace tessera::inference
