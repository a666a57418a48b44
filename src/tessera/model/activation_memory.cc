#include "tessera/model/activation_memory.h"

#include <algorithm>

namespace tessera::model {

double layer_activation_bytes(const ModelConfig& c, int64_t N, DType dtype,
                              RecomputePolicy::Granularity granularity, int tp,
                              bool sequence_parallel) {
  using G = RecomputePolicy::Granularity;
  const double elem = static_cast<double>(dtype_size(dtype));
  const double C = c.hidden_size, F = c.ffn() / static_cast<double>(tp), HD = c.head_dim();
  const double NH = c.num_attention_heads / static_cast<double>(tp);
  const double KV = std::max(1, c.kv_heads() / tp);  // a group replicated below one per rank
  // The residual stream's rows on this rank.
  const double rows = sequence_parallel ? static_cast<double>(N) / tp : static_cast<double>(N);
  if (granularity == G::kFull) return elem * rows * C;  // the layer's input only
  const double up = c.swiglu ? 2 * F : F;  // the up projection's output (gate and value)
  // Per norm: its fp32 statistics per row (LayerNorm mean and rstd, RMSNorm rstd).
  const double stats = c.normalization == Normalization::kLayerNorm ? 2 : 1;
  double bytes = elem * rows * (C /*input*/ + C /*residual*/) +
                 elem * N *
                     (C /*norm1 output, gathered*/ + (NH + 2 * KV) * HD /*q, k, v*/ +
                      NH * HD /*attention output*/ + C /*norm2 output, gathered*/ + up +
                      F /*activation output*/) +
                 4.0 * (2 * stats * rows /*two norms*/ + N * NH /*attention log-sum-exp*/);
  // Selective recomputation reruns the attention core: its output and log-sum-exp are not kept.
  if (granularity == G::kSelective) bytes -= elem * N * NH * HD + 4.0 * N * NH;
  return bytes;
}

double layer_backward_working_bytes(const ModelConfig& c, int64_t N, DType dtype, int tp,
                                    bool sequence_parallel) {
  const double elem = static_cast<double>(dtype_size(dtype));
  const double C = c.hidden_size, F = c.ffn() / static_cast<double>(tp);
  const double up = c.swiglu ? 2 * F : F;
  const double rows = sequence_parallel ? static_cast<double>(N) / tp : static_cast<double>(N);
  return elem * (rows * C /*incoming gradient*/ + N * F /*d activation*/ + N * up /*d up*/ +
                 N * C /*d input, before the reduction*/ +
                 (sequence_parallel ? rows * C : 0.0) /*its reduce-scattered slice*/ +
                 (c.hidden_dropout > 0 ? rows * C : 0.0) /*the dropout's gradient, a copy*/);
}

}  // namespace tessera::model
