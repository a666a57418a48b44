// Randomised robustness: mutated, truncated and mistyped tokenizer.json files load or fail with
// tessera::Error (never another exception or a crash), and random bytes go through every
// lossless encoder and back unchanged.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "tessera/core/error.h"
#include "tessera/data/byte_tokenizer.h"
#include "tessera/data/tokenizer/bpe_trainer.h"
#include "tessera/data/tokenizer/hf_tokenizer.h"

namespace tessera::data {
namespace {

using Json = nlohmann::json;

// A small but complete tokenizer.json: trained byte-level BPE plus a normalizer, a Split and
// a decoder sequence, so mutations reach every component's loader.
Json base_file() {
  BpeTrainer trainer;
  for (int i = 0; i < 20; ++i) trainer.add_text("the cat sat on the mat, that hat; 123 4567 ok");
  const auto t = trainer.train(290);
  Json vocab = Json::object();
  for (const auto& [s, id] : t.vocab) vocab[s] = id;
  Json merges = Json::array();
  for (const auto& [l, r] : t.merges) merges.push_back(Json::array({l, r}));
  Json j;
  j["model"] = {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", merges},
                {"byte_fallback", false},
                {"unk_token", nullptr}};
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       Json::array(
           {{{"type", "NFC"}},
            {{"type", "Replace"}, {"pattern", {{"Regex", "\\r\\n"}}}, {"content", "\n"}}})}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       Json::array({{{"type", "Split"},
                     {"pattern", {{"Regex", "\\p{N}{1,3}"}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}})}};
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       Json::array({{{"type", "ByteLevel"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 0}, {"stop", 0}}})}};
  j["added_tokens"] = Json::array({{{"id", 289}, {"content", "<|endoftext|>"}, {"special", true}},
                                   {{"id", 290}, {"content", "<x>"}, {"special", false}}});
  return j;
}

// Every JSON node, for picking one at random.
void collect(Json& j, std::vector<Json*>& out) {
  out.push_back(&j);
  if (j.is_structured())
    for (auto& child : j) collect(child, out);
}

Json random_value(std::mt19937& rng) {
  switch (rng() % 8) {
    case 0:
      return nullptr;
    case 1:
      return static_cast<int64_t>(rng() % 2 ? -1 : (int64_t{1} << 40));
    case 2:
      return 3.5;
    case 3:
      return "zz q";
    case 4:
      return Json::array({"x", 1});
    case 5:
      return Json::object({{"type", "Nope"}});
    case 6:
      return true;
    default:
      return static_cast<int64_t>(rng() % 400);
  }
}

std::string random_bytes(std::mt19937& rng, int max_len) {
  std::string s;
  const int n = static_cast<int>(rng() % max_len);
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(rng() % 256));
  return s;
}

TEST(TokenizerFuzz, MutatedJsonLoadsOrThrowsError) {
  const Json base = base_file();
  const std::string text = base.dump();
  ASSERT_NO_THROW(HfTokenizer(text, "base"));
  std::mt19937 rng(5);
  int loaded = 0, rejected = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string mutated;
    const int kind = trial % 4;
    if (kind == 0) {  // truncated
      mutated = text.substr(0, rng() % text.size());
    } else if (kind == 1) {  // a few random bytes overwritten
      mutated = text;
      for (int k = 0; k < 3; ++k) mutated[rng() % mutated.size()] = static_cast<char>(rng() % 256);
    } else if (kind == 2) {  // a node replaced by a value of another type, or removed
      Json j = base;
      std::vector<Json*> nodes;
      collect(j, nodes);
      Json* n = nodes[rng() % nodes.size()];
      *n = random_value(rng);
      mutated = j.dump();
    } else {  // a merge naming an unknown token, or a bad added token
      Json j = base;
      if (rng() % 2)
        j["model"]["merges"].push_back(Json::array({"Ġthe", "q\xC3\xA9"}));
      else
        j["added_tokens"].push_back({{"id", rng() % 300}, {"content", "<y>"}});
      mutated = j.dump();
    }
    try {
      HfTokenizer tok(mutated, "fuzz");
      ++loaded;
      for (int k = 0; k < 3; ++k) {
        const std::string s = random_bytes(rng, 40);
        try {
          tok.decode(tok.encode(s));
        } catch (const Error&) {
        }
      }
    } catch (const Error& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find("fuzz"), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "trial " << trial << ": not a tessera::Error: " << e.what();
    }
  }
  EXPECT_GT(rejected, 100);  // the mutations do exercise the error paths
  EXPECT_GT(loaded, 0);      // and some harmless ones load
}

TEST(TokenizerFuzz, RandomBytesRoundTripThroughLosslessEncoders) {
  Json j = base_file();
  j["normalizer"] = nullptr;  // NFC is not lossless; everything else in the file is
  const HfTokenizer hf(j.dump(), "hf");
  const ByteTokenizer bytes;
  std::mt19937 rng(9);
  for (int trial = 0; trial < 500; ++trial) {
    const std::string s = random_bytes(rng, 80);
    ASSERT_EQ(hf.decode(hf.encode(s)), s) << "trial " << trial;
    ASSERT_EQ(bytes.decode(bytes.encode(s)), s) << "trial " << trial;
  }
}

}  // namespace
}  // namespace tessera::data
