// GPTDataset/BlendedDataset over real files: round trip through the byte tokenizer, the index
// cache, blends, the left-to-right masks, layout independence of the global batch, prefetching.
#include "tessera/data/gpt_dataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/data/byte_tokenizer.h"
#include "tessera/data/micro_batch.h"
#include "testing/temp_dir.h"

namespace tessera::data {
namespace {

using testing::TempDir;

const std::vector<std::string> kTexts = {"The quick brown fox",
                                         "jumps over",
                                         "the lazy dog.",
                                         "",
                                         "Pack my box with five dozen",
                                         "liquor jugs!",
                                         "Sphinx of black quartz, judge my vow.",
                                         "x"};

// The texts as a byte-level dataset, each document ending with EOD (as --append-eod writes).
std::string write_texts(const TempDir& dir, const std::string& name,
                        const std::vector<std::string>& texts = kTexts) {
  ByteTokenizer tok;
  const std::string prefix = dir.file(name);
  IndexedDatasetWriter w(prefix, IndexDType::kUInt16);
  for (const std::string& t : texts) {
    std::vector<int32_t> ids = tok.encode(t);
    ids.push_back(tok.eod());
    w.add_document(ids);
  }
  w.finalize();
  return prefix;
}

GPTDatasetOptions options(const TempDir& dir, int64_t T, uint64_t seed = 1234) {
  GPTDatasetOptions o;
  o.seq_length = T;
  o.vocab_size = ByteTokenizer::kVocabSize;
  o.seed = seed;
  o.cache_dir = dir.file("cache");
  return o;
}

TEST(GPTDataset, OneEpochUnshuffledReproducesTheDocuments) {
  TempDir dir;
  auto data = std::make_shared<const IndexedDataset>(write_texts(dir, "text"));
  const int64_t T = 7;
  GPTDataset ds(data, {0, data->num_sequences()}, Split::kTrain, -1, options(dir, T));
  ASSERT_EQ(ds.plan().num_epochs, 1);
  // (tokens - 1) / T samples; together (minus the shared token) they are the first
  // samples * T + 1 tokens of the documents in document_index order.
  EXPECT_EQ(ds.num_samples(), (data->num_tokens() - 1) / T);
  std::vector<int32_t> stream, sample(T + 1);
  for (int64_t i = 0; i < ds.num_samples(); ++i) {
    ds.unshuffled_sample(i, sample.data());
    stream.insert(stream.end(), sample.begin() + (i == 0 ? 0 : 1), sample.end());
  }
  std::string expected;
  for (int64_t d : ds.document_index()) expected += kTexts[d] + "<|endoftext|>";
  ByteTokenizer tok;
  const std::string decoded = tok.decode(stream);
  EXPECT_EQ(decoded, expected.substr(0, decoded.size()));
  // Everything but the last partial sample is covered.
  EXPECT_EQ(stream.size(), static_cast<size_t>(ds.num_samples() * T + 1));
  // The document index is a permutation of the documents; the shuffle index of the samples.
  std::set<int64_t> docs(ds.document_index().begin(), ds.document_index().end());
  EXPECT_EQ(docs.size(), kTexts.size());
  std::set<int64_t> samples(ds.shuffle_index().begin(), ds.shuffle_index().end());
  EXPECT_EQ(static_cast<int64_t>(samples.size()), ds.num_samples());
  // sample(i) is unshuffled_sample(shuffle_index[i]).
  std::vector<int32_t> a(T + 1), b(T + 1);
  ds.sample(3, a.data());
  ds.unshuffled_sample(ds.shuffle_index()[3], b.data());
  EXPECT_EQ(a, b);
  EXPECT_THROW(ds.sample(ds.num_samples(), a.data()), Error);
}

// Documents of 3, 5, 2 and 7 tokens whose ids say (document, offset): 100 d + offset.
std::string write_3527(const TempDir& dir) {
  const std::string prefix = dir.file("d3527");
  IndexedDatasetWriter w(prefix, IndexDType::kInt32);
  const int lengths[] = {3, 5, 2, 7};
  for (int d = 0; d < 4; ++d) {
    std::vector<int32_t> doc(lengths[d]);
    for (int o = 0; o < lengths[d]; ++o) doc[o] = 100 * d + o;
    w.add_document(doc);
  }
  w.finalize();
  return prefix;
}

TEST(GPTDataset, SamplesMatchBruteForceFlatteningOfTheShuffledDocuments) {
  // The hand-worked corpus of DatasetIndex.SampleIndexOverTwoEpochsByHand, now with the real
  // (Philox) document index: unshuffled sample i must be tokens [4 i, 4 i + 5) of the documents
  // concatenated in document_index order. 8 samples: both epochs shuffled together; 5 samples:
  // the final epoch apart.
  TempDir dir;
  auto data = std::make_shared<const IndexedDataset>(write_3527(dir));
  for (int64_t n : {8, 5}) {
    GPTDatasetOptions o = options(dir, 4);
    o.vocab_size = 1000;
    GPTDataset ds(data, {0, 4}, Split::kTrain, n, o);
    EXPECT_EQ(ds.plan().num_epochs, 2);
    EXPECT_EQ(ds.plan().separate_final_epoch, n == 5);
    std::vector<int32_t> flat;
    for (int64_t d : ds.document_index()) {
      std::vector<int32_t> doc(data->sequence_length(d));
      data->get(d, 0, doc.size(), doc.data());
      flat.insert(flat.end(), doc.begin(), doc.end());
    }
    ASSERT_EQ(flat.size(), 34u);
    ASSERT_EQ(ds.num_samples(), 8);
    std::vector<int32_t> sample(5);
    for (int64_t i = 0; i < 8; ++i) {
      ds.unshuffled_sample(i, sample.data());
      EXPECT_EQ(sample, std::vector<int32_t>(flat.begin() + 4 * i, flat.begin() + 4 * i + 5))
          << "n " << n << ", sample " << i;
    }
  }
}

TEST(GPTDataset, ManyEpochsCoverEveryDocumentEqually) {
  TempDir dir;
  auto data = std::make_shared<const IndexedDataset>(write_texts(dir, "text"));
  const int64_t per_epoch = (data->num_tokens() - 1) / 5;
  GPTDataset ds(data, {0, data->num_sequences()}, Split::kTrain, 10 * per_epoch + 3,
                options(dir, 5));
  EXPECT_GE(ds.num_samples(), 10 * per_epoch + 3);
  std::vector<int64_t> count(kTexts.size(), 0);
  for (int64_t d : ds.document_index()) ++count[d];
  for (int64_t c : count) EXPECT_EQ(c, ds.plan().num_epochs);
}

TEST(GPTDataset, SecondConstructionMapsTheCacheAndKeysDiffer) {
  TempDir dir;
  auto data = std::make_shared<const IndexedDataset>(write_texts(dir, "text"));
  const DocumentRange all{0, data->num_sequences()};
  GPTDataset first(data, all, Split::kTrain, 40, options(dir, 6));
  EXPECT_TRUE(first.built_anew());
  const std::string shuffle_file = first.cache_prefix() + "shuffle_index.npy";
  ASSERT_TRUE(std::filesystem::exists(shuffle_file));
  const auto mtime = std::filesystem::last_write_time(shuffle_file);
  GPTDataset again(data, all, Split::kTrain, 40, options(dir, 6));
  EXPECT_FALSE(again.built_anew()) << "the second construction must read the cache";
  EXPECT_EQ(std::filesystem::last_write_time(shuffle_file), mtime);
  EXPECT_EQ(first.cache_prefix(), again.cache_prefix());
  EXPECT_TRUE(std::equal(first.shuffle_index().begin(), first.shuffle_index().end(),
                         again.shuffle_index().begin(), again.shuffle_index().end()));
  // Load-only finds it too.
  GPTDatasetOptions load = options(dir, 6);
  load.mode = CacheMode::kLoadOnly;
  EXPECT_FALSE(GPTDataset(data, all, Split::kTrain, 40, load).built_anew());
  // Anything the indices depend on changes the key.
  const std::set<std::string> keys = {
      first.cache_prefix(),
      GPTDataset(data, all, Split::kTrain, 40, options(dir, 6, 99)).cache_prefix(),  // seed
      GPTDataset(data, all, Split::kTrain, 40, options(dir, 5)).cache_prefix(),      // seq length
      GPTDataset(data, {0, 5}, Split::kTrain, 40, options(dir, 6)).cache_prefix(),   // split
      GPTDataset(data, all, Split::kTrain, 41, options(dir, 6)).cache_prefix(),      // samples
      GPTDataset(data, all, Split::kValid, 40, options(dir, 6)).cache_prefix()};     // split name
  EXPECT_EQ(keys.size(), 6u);
  // A load-only construction of indices nobody built is one clear error.
  EXPECT_THROW(GPTDataset(data, all, Split::kTrain, 77, load), Error);
  // A damaged cache file is an error naming it, not a crash.
  std::filesystem::resize_file(shuffle_file, 100);
  EXPECT_THROW(GPTDataset(data, all, Split::kTrain, 40, options(dir, 6)), Error);
}

TEST(GPTDataset, DefaultCacheSitsNextToTheData) {
  TempDir dir;
  const std::string prefix = write_texts(dir, "text");
  auto data = std::make_shared<const IndexedDataset>(prefix);
  GPTDatasetOptions o = options(dir, 6);
  o.cache_dir.clear();
  GPTDataset ds(data, {0, data->num_sequences()}, Split::kTrain, 10, o);
  EXPECT_EQ(ds.cache_prefix().rfind(prefix + "/cache/GPTDataset_indices/", 0), 0u);
}

TEST(GPTDataset, BuilderSplitsAndBlends) {
  TempDir dir;
  const std::string a = write_texts(dir, "a");
  std::vector<std::string> other(40, "bbbbbbbbbb");
  const std::string b = write_texts(dir, "b", other);
  DataSpec spec;
  spec.blend = parse_blend({"0.3", a, "0.7", b}, "--data-path");
  spec.split = {1, 0, 0};
  auto sets = build_gpt_datasets(spec, {10, 0, 0}, options(dir, 4));
  ASSERT_TRUE(sets[0]);
  EXPECT_FALSE(sets[1]);
  const auto* blend = dynamic_cast<const BlendedDataset*>(sets[0].get());
  ASSERT_NE(blend, nullptr);
  // ceil(10 * 0.3) + ceil(10 * 0.7) = 10 samples, chosen as worked out in
  // DatasetIndex.BlendingPicksTheLargestErrorByHand.
  EXPECT_EQ(blend->num_samples(), 10);
  EXPECT_EQ(std::vector<int16_t>(blend->dataset_index().begin(), blend->dataset_index().end()),
            (std::vector<int16_t>{1, 0, 1, 1, 0, 1, 1, 0, 1, 1}));
  // Dataset b holds only 'b' and EOD: its samples are recognisable.
  std::vector<int32_t> s(5);
  for (int64_t i = 0; i < 10; ++i) {
    blend->sample(i, s.data());
    const bool from_b =
        std::all_of(s.begin(), s.end(), [](int32_t t) { return t == 'b' || t == 256; });
    EXPECT_EQ(from_b, blend->dataset_index()[i] == 1) << "sample " << i;
  }
  // Unweighted: the blend weighs each prefix by its one-epoch sample count, capped at the size.
  spec.blend = parse_blend({a, b}, "--data-path");
  sets = build_gpt_datasets(spec, {5, 0, 0}, options(dir, 4));
  EXPECT_EQ(sets[0]->num_samples(), 5);
  // Per-split paths: the whole prefix belongs to its split.
  DataSpec per;
  per.per_split[0] = parse_blend({a}, "--train-data-path");
  per.per_split[1] = parse_blend({b}, "--valid-data-path");
  sets = build_gpt_datasets(per, {3, 3, 0}, options(dir, 4));
  ASSERT_TRUE(sets[0] && sets[1]);
  sets[1]->sample(0, s.data());
  EXPECT_TRUE(std::all_of(s.begin(), s.end(), [](int32_t t) { return t == 'b' || t == 256; }));
}

TEST(GPTDataset, ParseBlendRejectsMalformedLists) {
  EXPECT_TRUE(parse_blend({"A", "B"}, "--data-path").weights.empty());
  EXPECT_EQ(parse_blend({"1", "A", "3", "B"}, "--data-path").weights, (std::vector<double>{1, 3}));
  EXPECT_THROW(parse_blend({"0.3", "A", "-0.7", "B"}, "--data-path"), Error);
  EXPECT_THROW(parse_blend({"0.3", "A", "x", "B"}, "--data-path"), Error);
  EXPECT_THROW(parse_blend({"0.3", "A", "B"}, "--data-path"), Error);
  EXPECT_THROW(parse_blend({"0", "A", "0", "B"}, "--data-path"), Error);
  EXPECT_THROW(parse_blend({}, "--data-path"), Error);
}

TEST(MicroBatch, LtorMasksFollowMegatron) {
  // Tokens with EOD (9) at 2 and 5: documents [0,2], [3,5], [6,7].
  const std::vector<int32_t> t = {1, 2, 9, 3, 4, 9, 5, 6};
  LtorOptions o;
  o.eod = 9;
  o.eod_mask_loss = o.reset_position_ids = o.reset_attention_mask = true;
  std::vector<float> mask(8);
  std::vector<int32_t> pos(8), ds(8);
  ltor_masks(t.data(), 8, o, mask.data(), pos.data(), ds.data());
  EXPECT_EQ(mask, (std::vector<float>{1, 1, 0, 1, 1, 0, 1, 1}));
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1}));
  EXPECT_EQ(ds, (std::vector<int32_t>{0, 0, 0, 3, 3, 3, 6, 6}));
  // Flags off: all ones, 0..T-1, causal.
  ltor_masks(t.data(), 8, LtorOptions{9}, mask.data(), pos.data(), ds.data());
  EXPECT_EQ(mask, std::vector<float>(8, 1.0f));
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(ds, std::vector<int32_t>(8, 0));
}

TEST(MicroBatch, GlobalBatchIsTheSameForDp124) {
  TempDir dir;
  auto data = std::make_shared<const IndexedDataset>(write_texts(dir, "text"));
  GPTDataset ds(data, {0, data->num_sequences()}, Split::kTrain, 64, options(dir, 6));
  LtorOptions o{256, true, true, true};
  const int64_t gbs = 8, mbs = 2;
  // Iteration 3's global batch (consumed 16) at DP 1: micro-batches 0..3 of rank 0.
  auto global_batch = [&](int64_t dp) {
    std::vector<int32_t> tokens, pos;
    std::vector<float> mask;
    for (int64_t m = 0; m < gbs / (mbs * dp); ++m)
      for (int64_t r = 0; r < dp; ++r) {
        MicroBatch mb;
        load_micro_batch(ds, micro_batch_first_sample(2 * gbs, m, dp, r, mbs), mbs, o, mb);
        tokens.insert(tokens.end(), mb.tokens.begin(), mb.tokens.end());
        pos.insert(pos.end(), mb.positions.begin(), mb.positions.end());
        mask.insert(mask.end(), mb.loss_mask.begin(), mb.loss_mask.end());
      }
    return std::make_tuple(tokens, pos, mask);
  };
  const auto one = global_batch(1);
  EXPECT_EQ(global_batch(2), one);
  EXPECT_EQ(global_batch(4), one);
  // And it is samples 16..23 of the dataset in order.
  std::vector<int32_t> s(7), expected;
  for (int64_t i = 16; i < 24; ++i) {
    ds.sample(i, s.data());
    expected.insert(expected.end(), s.begin(), s.end() - 1);
  }
  EXPECT_EQ(std::get<0>(one), expected);
}

TEST(MicroBatch, PrefetcherDeliversInOrderAndRethrows) {
  std::vector<int64_t> seen;
  {
    Prefetcher p([](int64_t k, MicroBatch& out) { out.first_sample = 10 * k; }, 20, 3);
    for (int k = 0; k < 20; ++k) seen.push_back(p.next().first_sample);
    EXPECT_GE(p.take_wait_seconds(), 0.0);
  }
  for (int k = 0; k < 20; ++k) EXPECT_EQ(seen[k], 10 * k);
  Prefetcher failing(
      [](int64_t k, MicroBatch& out) {
        if (k == 2) throw Error("bad token");
        out.first_sample = k;
      },
      5);
  EXPECT_EQ(failing.next().first_sample, 0);
  EXPECT_EQ(failing.next().first_sample, 1);
  EXPECT_THROW(failing.next(), Error);
  // Destroyed early (the run stopped): the thread is joined without consuming the rest.
  Prefetcher abandoned([](int64_t, MicroBatch&) {}, 1000);
  abandoned.next();
}

}  // namespace
}  // namespace tessera::data
