// Model FLOPs per iteration, Megatron-LM's accounting (REFERENCE.md §6; docs/performance.md):
// 3 passes (forward, input grad, weight grad) x 2 FLOPs per multiply-add over every GEMM;
// causal attention counts half of the T x T products; recomputation is not counted. For a
// dense MHA GPT with a 4C GELU MLP this is 72 B s L h^2 (1 + s/(12h) + V/(12 L h)); the general
// form here also covers GQA (smaller K/V projections) and SwiGLU (three MLP matrices). An MoE
// layer counts the FLOPs a token activates (Megatron's MoE accounting): the router (h x E), k
// experts' MLPs and the shared expert's, instead of the dense MLP.
#pragma once

#include <cstdint>

#include "tessera/model/config.h"

namespace tessera::train {

// FLOPs of forward + backward over `sequences` sequences of cfg.seq_length tokens, with the
// output layer over the padded vocabulary `padded_vocab`.
double model_flops(const model::ModelConfig& cfg, int64_t padded_vocab, int64_t sequences);

}  // namespace tessera::train
