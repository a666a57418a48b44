// Causal self-attention, flash-style: blocked online softmax, so the extra memory is O(T) per
// head (the log-sum-exp of each query row); the T x T score matrix is never stored. Backward
// recomputes scores block by block from q, k and the saved log-sum-exp. MHA and GQA: query head
// h attends to key/value group h / (NH / KV).
//
// Threads: the calling thread's OpenMP team; forward splits over (sample, head, runs of query
// blocks), backward over (sample, head). Results are bitwise identical for any thread count (no
// atomics; every sum has a fixed order). Scratch, fp32: forward 2 T*HD per thread; backward
// 5 T*HD per thread plus, with GQA (KV < NH), 2 B*NH*T*HD for per-head dK/dV partials.
#pragma once

#include <cstdint>

#include "tessera/core/philox.h"
#include "tessera/kernels/dispatch.h"

namespace tessera::kernels {

// Attention-probability dropout keyed by global coordinates: the probability (q, k) of head h
// in sample b is dropped iff
//   uniform(key, ((sample_offset + b) * NH_global + head_offset + h) * T + q, k) < p,
// uniform(key, row, col) being lane col % 4 of philox_block(key, row, col / 4) through
// uint_to_unit_float. Kept probabilities are scaled by 1 / (1 - p); the softmax
// normalisation (and lse) is taken before dropout.
struct AttentionDropout {
  float p = 0.0f;
  PhiloxKey key{0, 0};
  int64_t sample_offset = 0;  // global index of the first local sample
  int head_offset = 0;        // global index of the first local query head
  int num_heads_global = 0;   // NH over all tensor-parallel ranks (0 means NH)
};

// out (B, T, NH*HD); lse (B, NH, T) fp32, saved for backward;
// qkv (B, T, (NH + 2*KV) * HD) packed as in rope.h. scale = 1/sqrt(HD).
// doc_start (B, T) or nullptr: with it, query t of sample b attends to keys
// [doc_start[b*T + t], t] only (document masking, Megatron's --reset-attention-mask); each value
// must be in [0, t] (checked). window > 0: sliding-window attention, query t attends to keys
// t - window < j <= t only (Transformers' Mistral mask: `kv_idx > q_idx - sliding_window`, so
// `window` keys including its own), within its document when doc_start is given; window 0 or
// >= T is plain causal attention. Key blocks no query of a block can see are skipped.
// (The storage type is named Float, not T, because T is the sequence length here.)
template <typename Float>
void attention_forward(Float* out, float* lse, const Float* qkv, int64_t B, int64_t T, int NH,
                       int KV, int HD, const AttentionDropout& dropout,
                       const int32_t* doc_start = nullptr, int64_t window = 0) {
  dispatch<&attention_forward<Float>>(out, lse, qkv, B, T, NH, KV, HD, dropout, doc_start, window);
}

// dqkv (B, T, (NH + 2*KV) * HD) overwritten; dout, out (B, T, NH*HD); lse from forward;
// doc_start and window as given to the forward pass.
template <typename Float>
void attention_backward(Float* dqkv, const Float* dout, const Float* qkv, const Float* out,
                        const float* lse, int64_t B, int64_t T, int NH, int KV, int HD,
                        const AttentionDropout& dropout, const int32_t* doc_start = nullptr,
                        int64_t window = 0) {
  dispatch<&attention_backward<Float>>(dqkv, dout, qkv, out, lse, B, T, NH, KV, HD, dropout,
                                       doc_start, window);
}

}  // namespace tessera::kernels
