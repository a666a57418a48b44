// Which tokens of a sequence a context-parallel rank holds: Megatron's load-balanced split for
// causal attention (megatron/core/utils.py, get_batch_on_this_cp_rank). The sequence of T tokens
// is cut into 2N chunks of T / (2N); rank r of N holds chunks r and 2N - 1 - r, in that order,
// so every rank holds one early (cheap) and one late (expensive) chunk of the causal triangle.
// Local token u of rank r is global token
//   u < c:  r * c + u          c = T / (2N)
//   u >= c: (2N - 1 - r) * c + (u - c)
// N = 1 is the identity. Plain arithmetic shared by the kernels (dropout coordinates), the data
// loader, the model and the context-parallel attention.
#pragma once

#include <cstdint>

namespace tessera {

struct SequenceSplit {
  int size = 1;  // context-parallel ranks N
  int rank = 0;  // this rank r

  // Tokens of one chunk and of one rank, for a sequence of `seq` tokens (seq % (2N) == 0).
  int64_t chunk(int64_t seq) const { return seq / (2 * size); }
  int64_t local(int64_t seq) const { return seq / size; }
  // Global position of local token u (0 <= u < local(seq)) of this rank.
  int64_t global(int64_t u, int64_t seq) const {
    if (size == 1) return u;
    const int64_t c = chunk(seq);
    return u < c ? rank * c + u : (2 * size - 1 - rank) * c + (u - c);
  }
};

}  // namespace tessera
