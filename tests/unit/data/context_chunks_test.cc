// Megatron's load-balanced context-parallel split (core/sequence_split.h) and the micro-batch
// reduced to a rank's chunks (data::keep_context_chunks), against the rule written out by hand.
#include <gtest/gtest.h>

#include <vector>

#include "tessera/core/sequence_split.h"
#include "tessera/data/micro_batch.h"

namespace tessera {
namespace {

// T = 16, N = 4: chunks of 2; rank r holds chunks r and 7 - r.
TEST(SequenceSplit, RankHoldsChunksRAnd2NMinus1MinusR) {
  const std::vector<std::vector<int64_t>> expected = {
      {0, 1, 14, 15}, {2, 3, 12, 13}, {4, 5, 10, 11}, {6, 7, 8, 9}};
  std::vector<int> seen(16, 0);
  for (int r = 0; r < 4; ++r) {
    const SequenceSplit s{4, r};
    ASSERT_EQ(s.local(16), 4);
    for (int64_t u = 0; u < 4; ++u) {
      EXPECT_EQ(s.global(u, 16), expected[r][u]) << "rank " << r << " token " << u;
      ++seen[s.global(u, 16)];
    }
  }
  for (int n : seen) EXPECT_EQ(n, 1);  // every position on exactly one rank
  EXPECT_EQ((SequenceSplit{1, 0}.global(9, 16)), 9);
}

// The causal work of a rank (keys its queries see) is the same on every rank.
TEST(SequenceSplit, CausalWorkIsBalanced) {
  const int64_t T = 64;
  for (int N : {2, 4, 8}) {
    std::vector<int64_t> work;
    for (int r = 0; r < N; ++r) {
      int64_t w = 0;
      for (int64_t u = 0; u < T / N; ++u) w += SequenceSplit{N, r}.global(u, T) + 1;
      work.push_back(w);
    }
    for (int64_t w : work) EXPECT_EQ(w, work[0]) << "N = " << N;
  }
}

TEST(KeepContextChunks, KeepsTheRanksTokensAndTheirMasks) {
  data::MicroBatch mb;
  mb.B = 2;
  mb.T = 8;
  for (int64_t i = 0; i < 16; ++i) {
    mb.tokens.push_back(static_cast<int32_t>(100 + i));
    mb.targets.push_back(static_cast<int32_t>(200 + i));
    mb.loss_mask.push_back(i % 3 == 0 ? 0.0f : 1.0f);
    mb.positions.push_back(static_cast<int32_t>(i % 8 % 5));
    mb.doc_start.push_back(static_cast<int32_t>(i % 8 < 5 ? 0 : 5));
  }
  const std::vector<int32_t> whole_doc = mb.doc_start;
  data::keep_context_chunks(mb, {2, 1});  // chunks of 2: positions 2, 3, 4, 5
  const std::vector<int64_t> rows = {2, 3, 4, 5, 10, 11, 12, 13};
  ASSERT_EQ(mb.T, 4);
  ASSERT_EQ(mb.tokens.size(), 8u);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(mb.tokens[i], 100 + rows[i]);
    EXPECT_EQ(mb.targets[i], 200 + rows[i]);
    EXPECT_EQ(mb.loss_mask[i], rows[i] % 3 == 0 ? 0.0f : 1.0f);
    EXPECT_EQ(mb.positions[i], rows[i] % 8 % 5);
    EXPECT_EQ(mb.doc_start[i], rows[i] % 8 < 5 ? 0 : 5);  // still global positions
  }
  EXPECT_EQ(mb.doc_start_global, whole_doc);
}

}  // namespace
}  // namespace tessera
