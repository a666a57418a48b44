// A small GPT-2-style model and its deterministic token stream, shared by the data-parallel and
// ZeRO distributed tests: three layers of 64, so gradient buckets and ZeRO units span whole pages.
#pragma once

#include <vector>

#include "tessera/core/memory.h"
#include "tessera/distributed/data_parallel_grads.h"
#include "tessera/model/chunk_runner.h"
#include "tessera/model/gpt_model.h"

namespace tessera::testing {

inline model::ModelConfig small_model_config(bool tied = true) {
  model::ModelConfig c;
  c.num_layers = 3;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 8;
  c.max_position_embeddings = 8;
  c.vocab_size = 61;
  c.make_vocab_size_divisible_by = 8;
  c.init_method_std = 0.2f;
  c.untie_embeddings_and_output_weights = !tied;
  return c;
}

// Forward and backward of `mbs` samples starting at global sample `first` of a fixed token
// stream (sample s holds tokens s*T .. s*T + T - 1 of it), with dropout keyed by `first`.
inline void small_model_micro_batch(model::ChunkRunner& runner, int64_t first, int64_t mbs,
                                    float grad_scale) {
  const model::GPTModel& model = runner.model();
  const auto& cfg = model.config();
  std::vector<int32_t> tokens, targets;
  for (int64_t i = 0; i < mbs * cfg.seq_length; ++i) {
    const int64_t g = first * cfg.seq_length + i;
    tokens.push_back(static_cast<int32_t>((7 * g + 3) % cfg.vocab_size));
    targets.push_back(static_cast<int32_t>((5 * g + 1) % cfg.vocab_size));
  }
  const model::Batch batch{tokens.data(), targets.data(), nullptr, mbs, cfg.seq_length};
  runner.forward_backward(batch, model.context(mbs, cfg.seq_length, first, 5, 1, true), grad_scale);
}
// The same without policies (no ZeRO 3 access, no grads-ready hook).
inline void small_model_micro_batch(model::GPTModel& model, int64_t first, int64_t mbs,
                                    float grad_scale) {
  model::ChunkRunner runner(model);
  small_model_micro_batch(runner, first, mbs, grad_scale);
}

// Resident bytes of a flat buffer outside the increasing ranges `owned`.
inline int64_t resident_outside(const Tensor& flat,
                                const std::vector<distributed::FlatRange>& owned) {
  const auto* base = static_cast<const uint8_t*>(flat.raw());
  const int64_t elem = static_cast<int64_t>(dtype_size(flat.dtype()));
  int64_t total = 0, at = 0;
  for (const distributed::FlatRange& r : owned) {
    total += resident_bytes(base + at * elem, (r.begin - at) * elem);
    at = r.end;
  }
  return total + resident_bytes(base + at * elem, (flat.numel() - at) * elem);
}

}  // namespace tessera::testing
