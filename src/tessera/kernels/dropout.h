// Dropout with masks from counter-based Philox keyed by *global* coordinates.
//
// Element (n, c) of the local (N, C) buffer is kept iff uniform(key, global_row(n), c) >= p,
// and kept values are scaled by 1/(1-p). Because the mask is a function of the global token id
// and feature index only, any split of tokens (data, sequence, context parallel) reproduces the
// single-process mask. Backward recomputes the mask: nothing is saved. The mask is integer
// arithmetic and an exact comparison, and kept values are one fp32 product, so every CPU target
// gives the same bits (but for bf16 results that are fp32 subnormals, which the AVX-512-bf16
// target rounds to signed zeros: simd/vec_avx512.h).
#pragma once

#include <cstdint>

#include "tessera/core/philox.h"
#include "tessera/core/sequence_split.h"
#include "tessera/kernels/dispatch.h"

namespace tessera::kernels {

// Maps local row n of a (B_local * T_local) buffer to its global token id:
//   (sample_offset + n / local_seq) * global_seq + split.global(seq_offset + n % local_seq)
// where seq_offset counts in the context-parallel rank's part of the sequence (its two chunks,
// core/sequence_split.h; the whole sequence without context parallelism).
struct TokenCoords {
  int64_t sample_offset = 0;  // global index of this buffer's first sample
  int64_t seq_offset = 0;     // position of this buffer's first token in the rank's part
  int64_t local_seq = 1;      // tokens per sample held locally
  int64_t global_seq = 1;     // tokens per sample in the full sequence
  SequenceSplit split;        // the context-parallel rank's chunks (identity by default)
  int64_t global_row(int64_t n) const {
    return (sample_offset + n / local_seq) * global_seq +
           split.global(seq_offset + n % local_seq, global_seq);
  }
};

// out, inp (N,C); out may alias inp. p in [0, 1); p == 0 copies.
template <typename T>
void dropout_forward(T* out, const T* inp, PhiloxKey key, TokenCoords coords, int64_t N,
                     int64_t C, float p) {
  dispatch<&dropout_forward<T>>(out, inp, key, coords, N, C, p);
}
// dinp, dout (N,C); dinp may alias dout.
template <typename T>
void dropout_backward(T* dinp, const T* dout, PhiloxKey key, TokenCoords coords, int64_t N,
                      int64_t C, float p) {
  dispatch<&dropout_backward<T>>(dinp, dout, key, coords, N, C, p);
}

}  // namespace tessera::kernels
