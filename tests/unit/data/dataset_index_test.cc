// Megatron's index definitions on cases small enough to work out by hand (the worked values are
// in the comments); the shuffles are checked for structure, since they are Philox's, not numpy's.
#include "tessera/data/dataset_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::data {
namespace {

// Four documents of 3, 5, 2 and 7 tokens: 17 tokens per epoch.
const std::vector<int32_t> kLengths = {3, 5, 2, 7};
constexpr DocumentRange kAll{0, 4};

TEST(DatasetIndex, SplitRoundsHalfToEvenLikePython) {
  // 0.5 * 5 = 2.5: Python's round gives 2 (std::round would give 3).
  auto r = split_document_ranges({0.5, 0.5, 0.0}, 5);
  ASSERT_TRUE(r[0] && r[1]);
  EXPECT_EQ(r[0]->begin, 0);
  EXPECT_EQ(r[0]->end, 2);
  EXPECT_EQ(r[1]->begin, 2);
  EXPECT_EQ(r[1]->end, 5);
  EXPECT_FALSE(r[2]) << "a zero weight makes no dataset";
  // 969,30,1 over 1000 documents.
  r = split_document_ranges({0.969, 0.030, 0.001}, 1000);
  ASSERT_TRUE(r[0] && r[1] && r[2]);
  EXPECT_EQ(r[0]->end, 969);
  EXPECT_EQ(r[1]->begin, 969);
  EXPECT_EQ(r[1]->end, 999);
  EXPECT_EQ(r[2]->begin, 999);
  EXPECT_EQ(r[2]->end, 1000);
  // 0.15 * 10 = 1.5 rounds to 2 and (0.15 + 0.3) * 10 = 4.5 to 4 (both to even, as Python's
  // round does): train [0,2), valid [2,4), test [4,10).
  r = split_document_ranges({0.15, 0.3, 0.55}, 10);
  EXPECT_EQ(r[0]->end, 2);
  EXPECT_EQ(r[1]->end, 4);
  EXPECT_EQ(r[2]->end, 10);
}

TEST(DatasetIndex, PlanCountsEpochsAndTheFinalEpochRule) {
  // 8 samples of 4 + 1 tokens need 8*4+1 = 33 tokens: 2 epochs (34). Before the final epoch
  // (17-1)/4 = 4 samples; the final epoch gives 8-4 = 4 >= int(0.8 * 4) = 3: not separate.
  IndexPlan p = plan_index(kLengths, kAll, 8, 4, 1);
  EXPECT_EQ(p.num_tokens_per_epoch, 17);
  EXPECT_EQ(p.num_epochs, 2);
  EXPECT_FALSE(p.separate_final_epoch);
  // 5 samples: still 2 epochs (21 > 17), but the final epoch gives 5-4 = 1 < 3: separate.
  p = plan_index(kLengths, kAll, 5, 4, 1);
  EXPECT_EQ(p.num_epochs, 2);
  EXPECT_TRUE(p.separate_final_epoch);
  EXPECT_EQ(p.num_samples_sans_final_epoch, 4);
  // 4 samples fit in one epoch (4*4+1 = 17); -1 (no count) is one epoch.
  EXPECT_EQ(plan_index(kLengths, kAll, 4, 4, 1).num_epochs, 1);
  EXPECT_EQ(plan_index(kLengths, kAll, -1, 4, 1).num_epochs, 1);
  // 20 samples: 81 tokens, 5 epochs; (4*17-1)/4 = 16 before, 4 after >= 3: not separate.
  p = plan_index(kLengths, kAll, 20, 4, 1);
  EXPECT_EQ(p.num_epochs, 5);
  EXPECT_FALSE(p.separate_final_epoch);
  // A split of documents [2, 3): 2 tokens, one sample of 1 + 1.
  EXPECT_EQ(plan_index(kLengths, {2, 3}, 1, 1, 1).num_tokens_per_epoch, 2);
  EXPECT_THROW(plan_index(kLengths, {2, 2}, 1, 4, 1), Error) << "no tokens: no sample";
}

TEST(DatasetIndex, SampleIndexOverTwoEpochsByHand) {
  // Document index given in order so the boundaries can be worked out: positions 0..7 hold
  // documents 0,1,2,3,0,1,2,3, i.e. flat token ranges [0,3) [3,8) [8,10) [10,17) [17,20)
  // [20,25) [25,27) [27,34). Samples start every 4 tokens: flat 0,4,...,32 and hold 5 tokens.
  // (34 - 1) / 4 = 8 samples.
  const std::vector<int64_t> doc_index = {0, 1, 2, 3, 0, 1, 2, 3};
  const IndexPlan plan = plan_index(kLengths, kAll, 8, 4, 1);
  const std::vector<int64_t> s = build_sample_index(kLengths, doc_index, 4, plan, 1);
  // flat 0 -> (0,0); 4 -> (1,1); 8 -> (2,0); 12 -> (3,2); 16 -> (3,6); 20 -> (5,0);
  // 24 -> (5,4); 28 -> (7,1); 32 -> (7,5).
  const std::vector<int64_t> expected = {0, 0, 1, 1, 2, 0, 3, 2, 3, 6, 5, 0, 5, 4, 7, 1, 7, 5};
  EXPECT_EQ(s, expected);
}

TEST(DatasetIndex, SampleIndexWithoutTheExtraToken) {
  // add_extra_token_to_sequence = 0: (17 - 0) / 4 = 4 samples of 4 tokens, boundaries at flat
  // 0, 4, 8, 12, 16. A boundary that falls exactly on a document's end stays in that document
  // at offset = its length (Megatron's quirk): flat 8 is (1, 5), not (2, 0).
  const std::vector<int64_t> doc_index = {0, 1, 2, 3};
  const IndexPlan plan = plan_index(kLengths, kAll, -1, 4, 0);
  const std::vector<int64_t> s = build_sample_index(kLengths, doc_index, 4, plan, 0);
  const std::vector<int64_t> expected = {0, 0, 1, 1, 1, 5, 3, 2, 3, 6};
  EXPECT_EQ(s, expected);
}

// The multiset of v[begin, end) as a sorted vector.
std::vector<int64_t> sorted(const std::vector<int64_t>& v, size_t begin, size_t end) {
  std::vector<int64_t> out(v.begin() + begin, v.begin() + end);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(DatasetIndex, DocumentIndexShufflesEpochsTogetherOrFinalEpochApart) {
  // Not separate: one shuffle over both epochs, so the multiset is each document twice.
  IndexPlan p = plan_index(kLengths, kAll, 8, 4, 1);
  std::vector<int64_t> d = build_document_index(kAll, p, 1234);
  EXPECT_EQ(sorted(d, 0, 8), (std::vector<int64_t>{0, 0, 1, 1, 2, 2, 3, 3}));
  // Separate: the first epoch and the final epoch are each a permutation of the documents.
  p = plan_index(kLengths, kAll, 5, 4, 1);
  d = build_document_index(kAll, p, 1234);
  ASSERT_EQ(d.size(), 8u);
  EXPECT_EQ(sorted(d, 0, 4), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(sorted(d, 4, 8), (std::vector<int64_t>{0, 1, 2, 3}));
  // A sub-range of documents keeps its ids.
  d = build_document_index({1, 3}, plan_index(kLengths, {1, 3}, -1, 2, 1), 7);
  EXPECT_EQ(sorted(d, 0, 2), (std::vector<int64_t>{1, 2}));
  // Deterministic in the seed, and the seed matters (over 40 documents, a collision of two
  // permutations is out of the question).
  const IndexPlan big{40, 1, false, 0};
  EXPECT_EQ(build_document_index({0, 40}, big, 5), build_document_index({0, 40}, big, 5));
  EXPECT_NE(build_document_index({0, 40}, big, 5), build_document_index({0, 40}, big, 6));
}

TEST(DatasetIndex, ShuffleIndexKeepsTheFinalEpochApart) {
  // 5 samples asked over 2 epochs with the final one separate: 8 samples in the index, the
  // first 4 (before the final epoch) shuffled among themselves, the last 4 among themselves.
  const std::vector<int64_t> sh = build_shuffle_index(4, 8, 1234);
  EXPECT_EQ(sorted(sh, 0, 4), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(sorted(sh, 4, 8), (std::vector<int64_t>{4, 5, 6, 7}));
  const std::vector<int64_t> all = build_shuffle_index(8, 8, 1234);
  EXPECT_EQ(sorted(all, 0, 8), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(DatasetIndex, PhiloxShuffleIsRoughlyUniform) {
  // Position of element 0 after shuffling 4 elements, over 4000 seeds: each of the 4 places
  // about 1000 times (a binomial with sd ~27; 150 is > 5 sd).
  std::vector<int> where(4, 0);
  for (uint64_t seed = 0; seed < 4000; ++seed) {
    std::vector<int64_t> v = {0, 1, 2, 3};
    philox_shuffle(v, seed, 0);
    ++where[std::find(v.begin(), v.end(), 0) - v.begin()];
  }
  for (int c : where) EXPECT_NEAR(c, 1000, 150);
}

TEST(DatasetIndex, BlendingPicksTheLargestErrorByHand) {
  // Weights 0.3 / 0.7. Sample i picks the d maximising w_d * max(i, 1) - taken_d:
  // i=0: 0.3, 0.7 -> B; i=1: 0.3, -0.3 -> A; i=2: -0.4, 0.4 -> B; i=3: -0.1, 0.1 -> B;
  // i=4: 0.2, -0.2 -> A; i=5: -0.5, 0.5 -> B; i=6: -0.2, 0.2 -> B; i=7: 0.1, -0.1 -> A;
  // i=8: -0.6, 0.6 -> B; i=9: -0.3, 0.3 -> B.
  const std::vector<double> w = {0.3, 0.7};
  const BlendingIndices b = build_blending_indices(w, 10);
  EXPECT_EQ(b.dataset_index, (std::vector<int16_t>{1, 0, 1, 1, 0, 1, 1, 0, 1, 1}));
  EXPECT_EQ(b.dataset_sample_index, (std::vector<int64_t>{0, 0, 1, 2, 1, 3, 4, 2, 5, 6}));
  // Ties go to the first dataset: 0.5 / 0.5 alternates A, B, A, B.
  const std::vector<double> half = {0.5, 0.5};
  EXPECT_EQ(build_blending_indices(half, 4).dataset_index, (std::vector<int16_t>{0, 1, 0, 1}));
}

TEST(DatasetIndex, BlendSizesWithMegatronsMargin) {
  // 10 * 0.3 = 3, 10 * 0.7 = 7: the blend has 10 samples.
  const std::vector<double> w = {0.3, 0.7};
  EXPECT_EQ(blend_sizes(w, 10, 0.0), (std::vector<int64_t>{3, 7}));
  // With the 0.5% surplus each dataset is built bigger: ceil(3.015) = 4, ceil(7.035) = 8.
  EXPECT_EQ(blend_sizes(w, 10, 0.005), (std::vector<int64_t>{4, 8}));
  // 1000 samples: 300 -> ceil(301.5) = 302, 700 -> ceil(703.5) = 704.
  EXPECT_EQ(blend_sizes(w, 1000, 0.005), (std::vector<int64_t>{302, 704}));
}

TEST(DatasetIndex, NormalizeWeightsRejectsBadOnes) {
  const std::vector<double> ok = {1, 3};
  EXPECT_EQ(normalize_weights(ok, "x"), (std::vector<double>{0.25, 0.75}));
  const std::vector<double> neg = {1, -1};
  const std::vector<double> zero = {0, 0};
  EXPECT_THROW(normalize_weights(neg, "x"), Error);
  EXPECT_THROW(normalize_weights(zero, "x"), Error);
}

}  // namespace
}  // namespace tessera::data
