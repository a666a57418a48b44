#include "tessera/data/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "testing/temp_dir.h"

namespace tessera::data {
namespace {

using testing::TempDir;

// Documents of the given lengths whose tokens are their global positions 0, 1, 2, ...
// (mod `modulo`), so a sample's content shows exactly which stream positions it took.
std::string write_positions(const TempDir& dir, const std::vector<int>& lengths,
                            int32_t modulo = 1 << 30) {
  const std::string prefix = dir.file("pos");
  IndexedDatasetWriter w(prefix, IndexDType::kInt32);
  int32_t next = 0;
  for (int len : lengths) {
    std::vector<int32_t> doc(len);
    for (auto& t : doc) t = next++ % modulo;
    w.add_document(doc);
  }
  w.finalize();
  return prefix;
}

// Lengths with an empty document in the middle and at the end, summing to 26.
const std::vector<int> kLengths = {5, 0, 3, 10, 1, 7, 0};

TEST(SequentialSampler, SamplesOverlapByOneAcrossDocuments) {
  TempDir dir;
  IndexedDataset ds(write_positions(dir, kLengths));
  ASSERT_EQ(ds.num_tokens(), 26);
  SequentialSampler s(ds, /*seq_length=*/4, 0, 26, /*vocab=*/1000);
  EXPECT_EQ(s.num_samples(), (26 - 1) / 4);
  EXPECT_EQ(s.seq_length(), 4);
  std::vector<int32_t> out(5), prev(5);
  for (int64_t k = 0; k < s.num_samples(); ++k) {
    s.sample(k, out.data());
    for (int t = 0; t < 5; ++t) EXPECT_EQ(out[t], 4 * k + t) << "sample " << k << " token " << t;
    if (k > 0) {
      EXPECT_EQ(out[0], prev[4]) << "sample " << k << " must start at the last label";
    }
    prev = out;
  }
  EXPECT_THROW(s.sample(s.num_samples(), out.data()), Error);
  EXPECT_THROW(s.sample(-1, out.data()), Error);
}

TEST(SequentialSampler, TokenRangesCarveTrainAndValidation) {
  TempDir dir;
  IndexedDataset ds(write_positions(dir, kLengths));
  // Train head [0, 20), validation tail [20, 26): samples never leave their range.
  SequentialSampler train(ds, 3, 0, 20, 1000);
  SequentialSampler valid(ds, 3, 20, 26, 1000);
  EXPECT_EQ(train.num_samples(), (20 - 1) / 3);
  EXPECT_EQ(valid.num_samples(), (6 - 1) / 3);
  std::vector<int32_t> out(4);
  train.sample(train.num_samples() - 1, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{15, 16, 17, 18}));
  valid.sample(0, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{20, 21, 22, 23}));

  SequentialSampler mid(ds, 7, 3, 19, 1000);
  EXPECT_EQ(mid.num_samples(), 2);
  std::vector<int32_t> long_out(8);
  mid.sample(1, long_out.data());
  EXPECT_EQ(long_out, (std::vector<int32_t>{10, 11, 12, 13, 14, 15, 16, 17}));
}

TEST(SequentialSampler, CountMatchesBruteForce) {
  TempDir dir;
  IndexedDataset ds(write_positions(dir, kLengths));
  for (int64_t seq = 1; seq <= 27; ++seq) {
    for (int64_t first : {0, 1, 7}) {
      for (int64_t last : {first, first + 1, int64_t{19}, int64_t{26}}) {
        if (last < first) continue;
        // Brute force: sample k fits if its last token first + k*seq + seq is < last.
        int64_t count = 0;
        while (first + count * seq + seq < last) ++count;
        SequentialSampler s(ds, seq, first, last, 1000);
        EXPECT_EQ(s.num_samples(), count) << seq << " " << first << " " << last;
      }
    }
  }
}

TEST(SequentialSampler, RejectsBadArguments) {
  TempDir dir;
  IndexedDataset ds(write_positions(dir, kLengths));
  EXPECT_THROW(SequentialSampler(ds, 0, 0, 26, 1000), Error);
  EXPECT_THROW(SequentialSampler(ds, 4, 0, 27, 1000), Error);
  EXPECT_THROW(SequentialSampler(ds, 4, 10, 9, 1000), Error);
  EXPECT_THROW(SequentialSampler(ds, 4, -1, 9, 1000), Error);
  EXPECT_THROW(SequentialSampler(ds, 4, 0, 26, 0), Error);
}

TEST(SequentialSampler, OutOfVocabularyTokenNamesFileAndPosition) {
  TempDir dir;
  // Positions 0..25 as ids: with vocab 13, position 13 (sequence 3, offset 5) is the first bad.
  const std::string prefix = write_positions(dir, kLengths);
  IndexedDataset ds(prefix);
  SequentialSampler s(ds, 4, 0, 26, /*vocab=*/13);
  std::vector<int32_t> out(5);
  s.sample(0, out.data());  // positions 0..4: fine
  s.sample(1, out.data());  // positions 4..8: fine
  s.sample(2, out.data());  // positions 8..12: fine
  try {
    s.sample(3, out.data());  // positions 12..16
    ADD_FAILURE() << "no error for token 13 with vocab 13";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(prefix + ".bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("token id 13 at token position 13"), std::string::npos) << msg;
    EXPECT_NE(msg.find("sequence 3, offset 5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[0, 13)"), std::string::npos) << msg;
  }
}

TEST(MockSampler, IsDeterministicAndIndexAddressed) {
  MockSampler a(257, 33, /*seed=*/1234, 50);
  MockSampler b(257, 33, 1234, 50);
  MockSampler c(257, 33, 1235, 50);
  std::vector<int32_t> x(34), y(34), z(34);
  // b draws in reverse order: a sample must not depend on which were drawn before.
  std::vector<std::vector<int32_t>> from_b(50, std::vector<int32_t>(34));
  for (int64_t i = 49; i >= 0; --i) b.sample(i, from_b[i].data());
  int differing = 0;
  for (int64_t i = 0; i < 50; ++i) {
    a.sample(i, x.data());
    EXPECT_EQ(x, from_b[i]) << i;
    c.sample(i, z.data());
    differing += x != z;
    for (int32_t t : x) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, 257);
    }
  }
  EXPECT_EQ(differing, 50);
  EXPECT_THROW(a.sample(50, x.data()), Error);
  EXPECT_THROW(MockSampler(1, 8, 0, 1), Error);
  EXPECT_THROW(MockSampler(16, 8, 0, 1, 1.5), Error);
}

TEST(MockSampler, EntropyRateFormulaHasKnownValue) {
  // V = 257, p = 0.9: -(0.9 + 0.1/257) ln(0.9 + 0.1/257) - 256 (0.1/257) ln(0.1/257), by hand.
  const double v = 257, p = 0.9;
  const double hand = -(p + (1 - p) / v) * std::log(p + (1 - p) / v) -
                      (v - 1) * ((1 - p) / v) * std::log((1 - p) / v);
  MockSampler s(257, 16, 0, 1);
  EXPECT_NEAR(s.entropy_rate(), hand, 1e-12);
  EXPECT_NEAR(s.entropy_rate(), 0.877, 0.001);
  EXPECT_NEAR(MockSampler(64, 16, 0, 1, 0.0).entropy_rate(), std::log(64.0), 1e-12);
  EXPECT_NEAR(MockSampler(64, 16, 0, 1, 1.0).entropy_rate(), 0.0, 1e-12);
}

// Plug-in estimate of H(next | current) in nats from the samples' bigram counts.
double empirical_conditional_entropy(const MockSampler& s, int64_t* follow_count,
                                     int64_t* transitions) {
  const int64_t v = s.vocab_size(), len = s.seq_length() + 1;
  std::vector<int64_t> counts(v * v, 0);
  std::vector<int32_t> out(len);
  *follow_count = 0;
  for (int64_t i = 0; i < s.num_samples(); ++i) {
    s.sample(i, out.data());
    for (int64_t t = 1; t < len; ++t) {
      ++counts[out[t - 1] * v + out[t]];
      *follow_count += out[t] == s.successor(out[t - 1]);
    }
  }
  *transitions = s.num_samples() * (len - 1);
  double h = 0;
  for (int64_t a = 0; a < v; ++a) {
    const int64_t row = std::accumulate(&counts[a * v], &counts[a * v] + v, int64_t{0});
    for (int64_t b = 0; b < v && row > 0; ++b) {
      if (counts[a * v + b] == 0) continue;
      const double pab = static_cast<double>(counts[a * v + b]) / *transitions;
      h -= pab * std::log(static_cast<double>(counts[a * v + b]) / row);
    }
  }
  return h;
}

TEST(MockSampler, EmpiricalEntropyMatchesRateAndIsFarBelowUniform) {
  // V = 64: 400 x 256 = 102400 transitions, ~1600 per state. The plug-in estimate is biased
  // low by about (support - 1) / (2 * per-state count) ~ 63 / 3200 = 0.02 nats, hence 0.05.
  MockSampler small(64, 256, 7, 400);
  int64_t follow = 0, transitions = 0;
  const double h = empirical_conditional_entropy(small, &follow, &transitions);
  EXPECT_NEAR(h, small.entropy_rate(), 0.05);
  // Following probability p + (1-p)/V = 0.9016; binomial sd over 102400 draws ~ 0.001.
  EXPECT_NEAR(static_cast<double>(follow) / transitions, 0.9 + 0.1 / 64, 0.005);

  // The byte vocabulary: a model that learns the chain reaches ~0.88 nats, far below ln 257.
  MockSampler bytes(257, 128, 11, 200);
  const double hb = empirical_conditional_entropy(bytes, &follow, &transitions);
  EXPECT_LT(hb, 0.25 * std::log(257.0));
  EXPECT_LT(bytes.entropy_rate(), 0.2 * std::log(257.0));
}

}  // namespace
}  // namespace tessera::data
