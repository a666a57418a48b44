#include "tessera/train/flops.h"

namespace tessera::train {

double model_flops(const model::ModelConfig& cfg, int64_t padded_vocab, int64_t sequences) {
  const double s = cfg.seq_length, h = cfg.hidden_size;
  const double kv = static_cast<double>(cfg.kv_heads()) * cfg.head_dim();
  const double F = cfg.ffn();
  // Multiply-adds per token.
  const double qkv = h * (h + 2 * kv);
  const double proj = h * h;
  const double mats = cfg.swiglu ? 3.0 : 2.0;  // matrices per MLP
  const double mlp = mats * h * F;
  // An MoE layer's token runs the router, its k experts and the shared expert (active FLOPs).
  const double moe = h * cfg.moe.num_experts + cfg.moe.topk * mats * h * cfg.moe_ffn() +
                     mats * h * cfg.moe.shared_expert_size;
  const double attention = s * h;  // QK^T and PV: 2 s h, halved for the causal mask
  double per_token = padded_vocab * h;
  for (const bool moe_layer : cfg.moe_layer_mask())
    per_token += qkv + proj + attention + (moe_layer ? moe : mlp);
  return 3.0 * 2.0 * per_token * s * static_cast<double>(sequences);
}

}  // namespace tessera::train
