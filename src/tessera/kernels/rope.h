// Rotary position embedding, Hugging Face LLaMA's rotate-half convention: within each head,
// dimension i (< HD/2) pairs with i + HD/2, angle = position * inv_freq[i] computed in fp32
// as Transformers does (inv_freq = theta^(-2i/HD) in fp32, rescaled as Llama 3.x does when
// `scaling` says so (rope_frequencies.h), then position * inv_freq in fp32).
#pragma once

#include <cstdint>

#include "tessera/kernels/dispatch.h"
#include "tessera/kernels/rope_frequencies.h"

namespace tessera::kernels {

// Rotates the query and key heads of a packed qkv buffer in place.
// qkv (B, T, (NH + 2*KV) * HD): per token NH query heads, then KV key heads, then KV value
// heads (values untouched). positions (T): the global position of each local token, the same
// for every sample; with per_sample, positions (B, T) in [0, T) (checked): one row per sample
// (Megatron's --reset-position-ids, positions restarting at each document); with max_position
// > 0 the per-sample positions lie in [0, max_position) instead (a context-parallel rank's T
// tokens of a longer sequence). `scaling`: Llama 3.x's frequency rescaling (default: none).
// (The storage type is named Float, not T, because T is the sequence length here.)
template <typename Float>
void rope_forward(Float* qkv, const int32_t* positions, int64_t B, int64_t T, int NH, int KV,
                  int HD, float theta, bool per_sample = false, int64_t max_position = 0,
                  const RopeScaling& scaling = {}) {
  dispatch<&rope_forward<Float>>(qkv, positions, B, T, NH, KV, HD, theta, per_sample, max_position,
                                 scaling);
}
// The transpose (inverse rotation) applied in place to dqkv's query and key heads.
template <typename Float>
void rope_backward(Float* dqkv, const int32_t* positions, int64_t B, int64_t T, int NH, int KV,
                   int HD, float theta, bool per_sample = false, int64_t max_position = 0,
                   const RopeScaling& scaling = {}) {
  dispatch<&rope_backward<Float>>(dqkv, positions, B, T, NH, KV, HD, theta, per_sample,
                                  max_position, scaling);
}

}  // namespace tessera::kernels
