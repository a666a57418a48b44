// HuggingFaceTokenizer on small tokenizer.json files written here: byte-level (GPT-2 style),
// metaspace + byte_fallback (LLaMA-2 style, old and new spelling), Split regex + ignore_merges
// (LLaMA-3 style), added and special tokens, and clear errors.
#include "tessera/data/tokenizer/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "tessera/core/error.h"
#include "tessera/data/tokenizer/hf_pretokenizer.h"
#include "tessera/data/tokenizer/unicode.h"

namespace tessera::data {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<int32_t>;
const std::string kMeta = "\xE2\x96\x81";  // ▁

// A byte-level vocabulary: the 256 byte characters (ids 0..255, in byte order), then `extra`
// tokens given in byte-level form, each made by the merge listed with it.
Json byte_level_model(const std::vector<std::pair<std::string, std::string>>& merges) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    unicode::append_utf8(s, unicode::byte_to_char()[b]);
    vocab[s] = b;
  }
  Json m = Json::array();
  int id = 256;
  for (const auto& [l, r] : merges) {
    const std::string t = unicode::to_byte_level(l + r);
    if (!vocab.contains(t)) vocab[t] = id++;
    m.push_back(unicode::to_byte_level(l) + " " + unicode::to_byte_level(r));
  }
  return {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}};
}

int32_t id_of(const Json& model, const std::string& raw) {
  return model["vocab"][unicode::to_byte_level(raw)].get<int32_t>();
}

TEST(HfTokenizer, ByteLevelGpt2Style) {
  Json j;
  j["model"] = byte_level_model({{"h", "e"},
                                 {"l", "l"},
                                 {"he", "ll"},
                                 {"hell", "o"},
                                 {" ", "w"},
                                 {"o", "r"},
                                 {" w", "or"},
                                 {" wor", "l"},
                                 {" worl", "d"}});
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = Json::array({{{"id", 300}, {"content", "<|endoftext|>"}, {"special", true}}});
  const HfTokenizer tok(j.dump(), "test");
  const Json& m = j["model"];
  EXPECT_EQ(tok.encode("hello world"), (Ids{id_of(m, "hello"), id_of(m, " world")}));
  // "hellow": no merge makes "ow"; the regex keeps "!" apart from letters.
  EXPECT_EQ(tok.encode("hellow!"), (Ids{id_of(m, "hello"), 'w', '!'}));
  EXPECT_EQ(tok.vocab_size(), 301);
  EXPECT_EQ(tok.eod(), 300);
  // The special token's text is encoded as text, and decodes from its id.
  // Pieces "<|", "endoftext", "|>": no merges apply, so one id per byte.
  EXPECT_EQ(tok.encode("<|endoftext|>").size(), 13u);
  EXPECT_EQ(tok.decode(Ids{300}), "<|endoftext|>");
  const std::string bytes = "a\xff\x80 \xe2\x82 \t\n z";
  EXPECT_EQ(tok.decode(tok.encode(bytes)), bytes);
}

// LLaMA-2's tokenizer.json: Prepend + Replace normalizers, no pre-tokenizer, byte_fallback.
Json llama2_style(bool new_spelling) {
  Json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int id = 259;
  for (const std::string& t :
       {kMeta, std::string("h"), std::string("i"), std::string("t"), std::string("e"),
        std::string("r"), kMeta + "h", kMeta + "hi", std::string("th"), std::string("re"),
        std::string("ere"), kMeta + "th", kMeta + "there"})
    vocab[t] = id++;
  const Json merges = Json::array(
      {kMeta + " h", kMeta + "h i", "t h", "r e", "e re", kMeta + " th", kMeta + "th ere"});
  Json j;
  j["model"] = {{"type", "BPE"},        {"vocab", vocab},   {"merges", merges},
                {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true}};
  j["added_tokens"] = Json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                   {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                   {{"id", 2}, {"content", "</s>"}, {"special", true}}});
  if (new_spelling) {
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Metaspace"},
                          {"replacement", kMeta},
                          {"prepend_scheme", "first"},
                          {"split", false}};
    j["decoder"] = {
        {"type", "Sequence"},
        {"decoders",
         Json::array({{{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "first"}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}}})}};
  } else {
    j["normalizer"] = {
        {"type", "Sequence"},
        {"normalizers",
         Json::array({{{"type", "Prepend"}, {"prepend", kMeta}},
                      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}})}};
    j["decoder"] = {
        {"type", "Sequence"},
        {"decoders",
         Json::array({{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  }
  return j;
}

TEST(HfTokenizer, MetaspaceByteFallbackLlama2Style) {
  for (const bool new_spelling : {false, true}) {
    const Json j = llama2_style(new_spelling);
    const HfTokenizer tok(j.dump(), "llama2");
    const auto& v = j["model"]["vocab"];
    const auto id = [&](const std::string& t) { return v[t].get<int32_t>(); };
    EXPECT_EQ(tok.encode("hi there"), (Ids{id(kMeta + "hi"), id(kMeta + "there")}));
    // "é" and the emoji are not in the vocabulary: their UTF-8 bytes become <0xXX> tokens.
    EXPECT_EQ(tok.encode("hi \xC3\xA9"), (Ids{id(kMeta + "hi"), id(kMeta), 3 + 0xC3, 3 + 0xA9}));
    EXPECT_EQ(tok.eod(), 2);
    EXPECT_EQ(tok.vocab_size(), static_cast<int64_t>(v.size()));
    for (const std::string s : {"hi there", "x\xF0\x9F\x98\x80 y", "\xff\x80z"})
      EXPECT_EQ(tok.decode(tok.encode(s)), s) << (new_spelling ? "new" : "old") << " spelling";
    // A leading space: the old spelling prepends "▁" anyway and strips one space when decoding;
    // Metaspace does not prepend to text that starts with one, and drops it, as Hugging Face.
    EXPECT_EQ(tok.decode(tok.encode("  two")), new_spelling ? " two" : "  two");
  }
}

TEST(HfTokenizer, SplitRegexIgnoreMergesLlama3Style) {
  const std::string llama3 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  Json j;
  j["model"] = byte_level_model({{"1", "2"}, {"12", "3"}, {"'", "V"}, {"'V", "E"}});
  j["model"]["vocab"][unicode::to_byte_level(" ok")] = 400;  // reachable only through ignore_merges
  j["model"]["ignore_merges"] = true;
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       Json::array({{{"type", "Split"},
                     {"pattern", {{"Regex", llama3}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = Json::array({{{"id", 500}, {"content", "<|end_of_text|>"}, {"special", true}},
                                   {{"id", 501}, {"content", "<tool>"}, {"special", false}}});
  const HfTokenizer tok(j.dump(), "llama3");
  const Json& m = j["model"];
  // Pieces: "I", "'VE", " ", "123", "45", " ok" ("(?i:'ve)" matches "'VE"; numbers by threes).
  EXPECT_EQ(tok.encode("I'VE 12345 ok"),
            (Ids{'I', id_of(m, "'VE"), ' ', id_of(m, "123"), '4', '5', 400}));
  // The non-special added token is matched in the text; the special one is not.
  EXPECT_EQ(tok.encode("a<tool>b"), (Ids{'a', 501, 'b'}));
  // Encoded as text: pieces "<|", "end", "_of", "_text", "|>" and, with no merges, 15 bytes.
  EXPECT_EQ(tok.encode("<|end_of_text|>").size(), 15u);
  EXPECT_EQ(tok.eod(), 500);
  EXPECT_EQ(tok.decode(Ids{'a', 501, 500}), "a<tool><|end_of_text|>");
  const std::string s = "Tab\there  \n\n x \xff 1234567";
  EXPECT_EQ(tok.decode(tok.encode(s)), s);
}

TEST(HfTokenizer, NormalizersNfkcLowercase) {
  Json j;
  j["model"] = byte_level_model({});
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", Json::array({{{"type", "NFKC"}}, {{"type", "Lowercase"}}})}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  j["decoder"] = {{"type", "ByteLevel"}};
  const HfTokenizer tok(j.dump(), "nfkc");
  // NFKC: the "fi" ligature becomes "fi", full-width A becomes A; then lowercase.
  EXPECT_EQ(tok.decode(tok.encode("\xEF\xAC\x81X\xEF\xBC\xA1")), "fixa");
  EXPECT_EQ(tok.decode(tok.encode("ok\xff")), "ok\xff");  // invalid bytes pass through
}

TEST(HfTokenizer, ClearErrors) {
  const auto error_of = [](const std::string& text) -> std::string {
    try {
      HfTokenizer tok(text, "f.json");
      (void)tok.eod();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("{").find("f.json is not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("{}").find("'model' is missing"), std::string::npos);
  EXPECT_NE(error_of(R"({"model":{"type":"WordPiece","vocab":{}}})").find("expected BPE"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model":{"vocab":{"a":0,"b":1},"merges":["a b"]}})")
                .find("makes 'ab', which is not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model":{"vocab":{"a":0},"merges":["a"]}})").find("merge 1 is malformed"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model":{"vocab":{"a":"x"},"merges":[]}})").find("expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model":{"vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Bert"}})")
                .find("pre_tokenizer type 'Bert' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model":{"vocab":{"a":0},"merges":[]}})").find("no end-of-document"),
            std::string::npos);
  EXPECT_THROW(HfTokenizer("/no/such/tokenizer.json"), Error);
}

}  // namespace
}  // namespace tessera::data
