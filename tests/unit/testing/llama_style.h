// Test helper: turns a small test config into the LLaMA architecture (RMSNorm, RoPE, SwiGLU,
// untied output layer, no linear biases) with grouped-query attention of `query_groups` groups,
// keeping its sizes. SwiGLU's width is the caller's (ffn_hidden_size).
#pragma once

#include "tessera/model/config.h"

namespace tessera::testing {

inline void make_llama_style(model::ModelConfig& c, int query_groups) {
  c.group_query_attention = true;
  c.num_query_groups = query_groups;
  c.normalization = model::Normalization::kRMSNorm;
  c.position_embedding = model::PositionEmbedding::kRope;
  c.swiglu = true;
  c.untie_embeddings_and_output_weights = true;
  c.add_bias_linear = false;
}

}  // namespace tessera::testing
