// EmbeddingRowGrads: one micro-batch's gradient of the word embedding, kept as the rows its
// tokens touched instead of being added into the whole (V, C) gradient.
//
// Why: the word embedding's backward runs last, so under data parallelism its bucket (for GPT-2
// 124M, 154 MB of its 498 MB of gradients, the output layer's share included when tied) is
// reduced only after backward, where nothing hides it. Its input-side gradient is sparse: a
// micro-batch of N tokens touches at most N of the V rows. With this sink the rest of the
// embedding's gradient (the output layer's, when tied, and earlier micro-batches' sums) is final
// as soon as the output layer's backward is, and is reduced while backward goes on; only these
// rows are summed over the ranks at the end (distributed::DataParallelGrads).
//
// Contract: GPTModel::embed_backward, given a sink, leaves the embedding's flat gradient alone
// and fills `rows` (this rank's local vocabulary rows, increasing, each once) and `grad`
// (rows.size(), C) fp32, each row the sum of its tokens' gradients in token order (the same
// order, and so the same bits, as adding them into a zero row of the whole gradient). `armed`
// says a ChunkRunner promised to route the next backward of the embedding here; `filled` that it
// did.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::model {

struct EmbeddingRowGrads {
  std::vector<int32_t> rows;
  Tensor grad;
  bool armed = false;
  bool filled = false;

  // Sets `rows` to the distinct tokens of tokens[0, n) inside [vocab_start, vocab_start + V),
  // shifted to local rows and sorted, and writes to `local` (n) each token's index in `rows`
  // (-1 for tokens outside the range: another tensor-parallel rank's rows).
  void collect(const int32_t* tokens, int64_t n, int64_t vocab_start, int64_t V,
               std::vector<int32_t>& local);
  // Forgets the rows (after they were reduced); keeps nothing allocated.
  void clear();
};

}  // namespace tessera::model
