// RoPE's inverse frequencies: theta^(-2i/HD) per rotated pair, optionally rescaled as Llama 3.x
// does (Transformers' rope_type "llama3", Megatron-LM's --use-rope-scaling). Not a kernel (no
// per-target code): rope.cc builds its cos/sin table from these, and tests check them directly.
#pragma once

#include <vector>

namespace tessera::kernels {

// Llama 3.x's frequency rescaling. Off unless `llama3`; the other fields default to Llama 3.1's
// constants (Megatron's --use-rope-scaling uses those, with --rope-scaling-factor). With
// L = original_max_position_embeddings and wavelen = 2π / inv_freq:
//   wavelen > L / low_freq_factor   -> inv_freq / factor            (low frequencies)
//   wavelen < L / high_freq_factor  -> inv_freq                     (high frequencies)
//   otherwise, s = (L / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor):
//                                   -> (1 - s) inv_freq / factor + s inv_freq
struct RopeScaling {
  bool llama3 = false;
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;

  bool operator==(const RopeScaling&) const = default;
};

// The HD/2 inverse frequencies, in fp32 and in the order of operations Transformers uses
// (inv_freq[i] = 1 / theta^(float(2i) / HD); then, with scaling, _compute_llama3_parameters'
// float32 tensor arithmetic), so the angles match Transformers' bit for bit where the math
// library does. HD even and theta > 0 (the caller's contract, checked); a llama3 scaling needs
// factor > 0, original_max_position_embeddings > 0 and low_freq_factor != high_freq_factor
// (ModelConfig::validate refuses the rest).
std::vector<float> rope_inv_freq(int HD, float theta, const RopeScaling& scaling = {});

}  // namespace tessera::kernels
