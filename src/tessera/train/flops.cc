#include "tessera/train/flops.h"

namespace tessera::train {

double model_flops(const model::ModelConfig& cfg, int64_t padded_vocab, int64_t sequences) {
  const double s = cfg.seq_length, h = cfg.hidden_size, L = cfg.num_layers;
  const double kv = static_cast<double>(cfg.kv_heads()) * cfg.head_dim();
  const double F = cfg.ffn();
  // Multiply-adds per token.
  const double qkv = h * (h + 2 * kv);
  const double proj = h * h;
  const double mlp = (cfg.swiglu ? 3.0 : 2.0) * h * F;
  const double attention = s * h;  // QK^T and PV: 2 s h, halved for the causal mask
  const double per_token = L * (qkv + proj + mlp + attention) + padded_vocab * h;
  return 3.0 * 2.0 * per_token * s * static_cast<double>(sequences);
}

}  // namespace tessera::train
