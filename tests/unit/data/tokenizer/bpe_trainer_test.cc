// The byte-level BPE trainer: the incremental pair counts give the merges of a naive trainer
// that recounts every pair each step; the written tokenizer.json loads as a HuggingFaceTokenizer
// whose ids equal GPT2BPETokenizer's on the same vocabulary and merges; decode(encode(x)) == x
// for random bytes; training is deterministic.
#include "tessera/data/tokenizer/bpe_trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "tessera/core/error.h"
#include "tessera/data/tokenizer/gpt2_split.h"
#include "tessera/data/tokenizer/gpt2_tokenizer.h"
#include "tessera/data/tokenizer/hf_tokenizer.h"
#include "tessera/data/tokenizer/unicode.h"

namespace tessera::data {
namespace {

std::vector<std::string> corpus() {
  std::vector<std::string> docs;
  std::mt19937 rng(3);
  const std::vector<std::string> words = {"the",   "cat",  "sat", "on",   "mat",  "then",
                                          "that",  "thin", "hat", "日本", "😀",    "42",
                                          "don't", "\n",   "  ",  "ab",   "aaaa", "ba"};
  for (int d = 0; d < 60; ++d) {
    std::string doc;
    for (int w = 0; w < 40; ++w) doc += (w ? " " : "") + words[rng() % words.size()];
    docs.push_back(doc);
  }
  return docs;
}

// Reference: recount every pair of every word before each merge.
std::vector<MergePair> naive_merges(const std::vector<std::string>& docs, int64_t vocab_size) {
  std::map<std::string, int64_t> counts;
  for (const auto& d : docs) {
    std::vector<std::string_view> pieces;
    gpt2_split(d, pieces);
    for (auto p : pieces) ++counts[std::string(p)];
  }
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [w, c] : counts) {
    std::vector<int32_t> s;
    for (char ch : w) s.push_back(static_cast<uint8_t>(ch));
    words.push_back({s, c});
  }
  std::vector<std::string> tokens(256);
  for (int b = 0; b < 256; ++b) unicode::append_utf8(tokens[b], unicode::byte_to_char()[b]);
  std::vector<MergePair> merges;
  while (static_cast<int64_t>(tokens.size()) < vocab_size - 1) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
    for (const auto& [s, c] : words)
      for (size_t i = 0; i + 1 < s.size(); ++i) pairs[{s[i], s[i + 1]}] += c;
    std::pair<int32_t, int32_t> best{-1, -1};
    int64_t best_count = 0;
    for (const auto& [p, c] : pairs)  // map order: ties go to the smaller pair
      if (c > best_count) best = p, best_count = c;
    if (best_count < 2) break;
    const int32_t id = static_cast<int32_t>(tokens.size());
    tokens.push_back(tokens[best.first] + tokens[best.second]);
    merges.emplace_back(tokens[best.first], tokens[best.second]);
    for (auto& [s, c] : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == best.first && s[i + 1] == best.second) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(s[i]);
        }
      }
      s = out;
    }
  }
  return merges;
}

TEST(BpeTrainer, IncrementalCountsMatchNaiveRecount) {
  const auto docs = corpus();
  BpeTrainer trainer;
  for (const auto& d : docs) trainer.add_text(d);
  const auto trained = trainer.train(320);
  const auto expected = naive_merges(docs, 320);
  ASSERT_GT(expected.size(), 20u);
  EXPECT_EQ(trained.merges, expected);
  EXPECT_EQ(trained.vocab.size(), 256 + trained.merges.size() + 1);
  EXPECT_EQ(trained.vocab.back().first, "<|endoftext|>");
  // Deterministic: the same input trains the same merges.
  BpeTrainer again;
  for (const auto& d : docs) again.add_text(d);
  EXPECT_EQ(again.train(320).merges, trained.merges);
  EXPECT_THROW(trainer.train(256), Error);
}

TEST(BpeTrainer, WrittenFileLoadsWithGpt2IdsAndRoundTrips) {
  const auto docs = corpus();
  BpeTrainer trainer;
  for (const auto& d : docs) trainer.add_text(d);
  const auto trained = trainer.train(300);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tessera-bpe-trainer-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  write_byte_level_bpe_json((dir / "tokenizer.json").string(), trained.vocab, trained.merges,
                            "<|endoftext|>");
  // The same model as GPT-2's two files, read by the other code path.
  nlohmann::json encoder = nlohmann::json::object();
  for (const auto& [t, id] : trained.vocab) encoder[t] = id;
  std::ofstream((dir / "encoder.json").string()) << encoder.dump();
  {
    std::ofstream merges((dir / "vocab.bpe").string());
    merges << "#version: 0.2\n";
    for (const auto& [l, r] : trained.merges) merges << l << ' ' << r << '\n';
  }
  const HfTokenizer hf((dir / "tokenizer.json").string());
  const Gpt2BpeTokenizer gpt2((dir / "encoder.json").string(), (dir / "vocab.bpe").string());
  EXPECT_EQ(hf.vocab_size(), 300);
  EXPECT_EQ(hf.eod(), 299);
  EXPECT_EQ(gpt2.eod(), 299);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    if (trial % 2 == 0) {
      text = docs[rng() % docs.size()].substr(0, rng() % 200);
    } else {
      const int n = static_cast<int>(rng() % 64);
      for (int i = 0; i < n; ++i) text.push_back(static_cast<char>(rng() % 256));
    }
    const auto ids = hf.encode(text);
    ASSERT_EQ(ids, gpt2.encode(text)) << "trial " << trial;
    ASSERT_EQ(hf.decode(ids), text) << "trial " << trial;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::data
