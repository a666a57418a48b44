// Token embedding lookup (+ optional learned absolute position embedding).
//
// Vocabulary sharding: this rank owns rows [vocab_start, vocab_start + V) of the embedding
// table; tokens outside that range contribute zeros (Megatron's VocabParallelEmbedding), so
// the full table's output is the sum over ranks. Single process: vocab_start 0, V = all rows.
#pragma once

#include <cstdint>

#include "tessera/kernels/dispatch.h"

namespace tessera::kernels {

// out (N,C) = wte[tokens[n] - vocab_start] (zero when out of range) + (wpe ? wpe[positions[n]] : 0).
// tokens, positions (N); wte (V,C); wpe (P,C) or nullptr (then positions may be nullptr).
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const int32_t* positions, const T* wte,
                       const T* wpe, int64_t N, int64_t C, int64_t vocab_start, int64_t V) {
  dispatch<&embedding_forward<T>>(out, tokens, positions, wte, wpe, N, C, vocab_start, V);
}

// out (N,C) += wpe[positions[n]], in fp32: the position embedding added after the token rows
// (which tensor parallelism reduces across ranks first). wpe (P,C).
template <typename T>
void position_embedding_forward(T* out, const int32_t* positions, const T* wpe, int64_t N,
                                int64_t C) {
  dispatch<&position_embedding_forward<T>>(out, positions, wpe, N, C);
}

// dwte (V,C), dwpe (P,C) fp32 accumulated; dout (N,C). Either may be nullptr (not wanted);
// tokens may be nullptr when dwte is, positions when dwpe is.
template <typename T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens,
                        const int32_t* positions, int64_t N, int64_t C, int64_t vocab_start,
                        int64_t V) {
  dispatch<&embedding_backward<T>>(dwte, dwpe, dout, tokens, positions, N, C, vocab_start, V);
}

}  // namespace tessera::kernels
