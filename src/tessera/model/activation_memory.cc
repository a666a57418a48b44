#include "tessera/model/activation_memory.h"

namespace tessera::model {

double layer_activation_bytes(const ModelConfig& c, int64_t N, DType dtype,
                              RecomputePolicy::Granularity granularity) {
  using G = RecomputePolicy::Granularity;
  const double elem = static_cast<double>(dtype_size(dtype));
  const double C = c.hidden_size, F = c.ffn(), HD = c.head_dim();
  const double NH = c.num_attention_heads, KV = c.kv_heads();
  if (granularity == G::kFull) return elem * N * C;  // the layer's input only
  const double up = c.swiglu ? 2 * F : F;  // the up projection's output (gate and value)
  // Per norm: its fp32 statistics per row (LayerNorm mean and rstd, RMSNorm rstd).
  const double stats = c.normalization == Normalization::kLayerNorm ? 2 : 1;
  double bytes = elem * N *
                     (C /*input*/ + C /*norm1 output*/ + (NH + 2 * KV) * HD /*q, k, v*/ +
                      C /*attention output*/ + C /*residual*/ + C /*norm2 output*/ + up +
                      F /*activation output*/) +
                 4.0 * N * (2 * stats /*two norms*/ + NH /*attention log-sum-exp*/);
  // Selective recomputation reruns the attention core: its output and log-sum-exp are not kept.
  if (granularity == G::kSelective) bytes -= elem * N * C + 4.0 * N * NH;
  return bytes;
}

}  // namespace tessera::model
