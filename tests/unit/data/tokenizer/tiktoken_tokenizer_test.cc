#include "tessera/data/tokenizer/tiktoken_tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/data/tokenizer.h"
#include "tessera/data/tokenizer/null_tokenizer.h"
#include "testing/temp_dir.h"

namespace tessera::data {
namespace {

std::string base64(const std::string& bytes) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v =
        (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    out += {a[v >> 18], a[(v >> 12) & 63], a[(v >> 6) & 63], a[v & 63]};
  }
  if (bytes.size() - i == 1) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += {a[v >> 18], a[(v >> 12) & 63], '=', '='};
  } else if (bytes.size() - i == 2) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += {a[v >> 18], a[(v >> 12) & 63], a[(v >> 6) & 63], '='};
  }
  return out;
}

// Ranks 0..255: the bytes; 256 "ab", 257 " a", 258 "aba".
std::vector<std::string> small_ranks() {
  std::vector<std::string> r;
  for (int b = 0; b < 256; ++b) r.emplace_back(1, static_cast<char>(b));
  r.insert(r.end(), {"ab", " a", "aba"});
  return r;
}

void write_tiktoken(const std::string& path, const std::vector<std::string>& ranks) {
  std::ofstream f(path);
  for (size_t i = 0; i < ranks.size(); ++i) f << base64(ranks[i]) << ' ' << i << '\n';
}

void write_megatron_json(const std::string& path, const std::vector<std::string>& ranks) {
  std::ofstream f(path);
  f << '[';
  for (size_t i = 0; i < ranks.size(); ++i)
    f << (i ? "," : "") << "{\"rank\": " << i << ", \"token_bytes\": \"" << base64(ranks[i])
      << "\", \"token_str\": \"\"}";
  f << ']';
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TikTokenizer, MegatronIdsHandWorked) {
  testing::TempDir dir;
  write_tiktoken(dir.file("r.tiktoken"), small_ranks());
  write_megatron_json(dir.file("r.json"), small_ranks());
  for (const char* file : {"r.tiktoken", "r.json"}) {
    TokenizerOptions o;
    o.type = "TikTokenizer";
    o.tokenizer_model = dir.file(file);
    o.tiktoken_pattern = "v1";
    o.tiktoken_num_special_tokens = 3;  // <unk> <s> </s>: ranks start at id 3
    o.vocab_size = 262;                 // 3 + 259 ranks
    const auto tok = make_tokenizer(o);
    EXPECT_EQ(tok->vocab_size(), 262);
    EXPECT_EQ(tok->eod(), 2);  // </s>
    // v1 pieces "aba", " ab". "aba" is a token (rank 258). " ab" is not: its pairs " a" (257)
    // and "ab" (256) compete, "ab" ranks lower, then " " + "ab" is no token: [32, 256].
    // Every rank + 3.
    EXPECT_EQ(tok->encode("aba ab"), (std::vector<int32_t>{261, 35, 259})) << file;
    EXPECT_EQ(tok->decode(std::vector<int32_t>{261, 35, 259, 2}), "aba ab</s>");
    // Invalid UTF-8 (no regex match covers it) is still encoded and round-trips.
    const std::string raw = "a\xff\xfe b";
    EXPECT_EQ(tok->decode(tok->encode(raw)), raw);
  }
}

TEST(TikTokenizer, SpecialTokenFillersAndErrors) {
  testing::TempDir dir;
  write_tiktoken(dir.file("r.tiktoken"), small_ranks());
  TokenizerOptions o;
  o.type = "TikTokenizer";
  o.tokenizer_model = dir.file("r.tiktoken");
  o.tiktoken_pattern = "v2";
  o.tiktoken_num_special_tokens = 5;
  o.tiktoken_special_tokens = {"</s>", "<unk>", "<s>"};
  o.vocab_size = 264;
  const auto tok = make_tokenizer(o);
  EXPECT_EQ(tok->eod(), 0);
  // Fillers <SPECIAL_i> up to --tiktoken-num-special-tokens; id 5 is rank 0, the byte 0x00.
  EXPECT_EQ(tok->decode(std::vector<int32_t>{3, 4, 5}),
            std::string("<SPECIAL_3><SPECIAL_4>") + std::string(1, '\0'));
  o.vocab_size = 1000;
  EXPECT_NE(error_of([&] { make_tokenizer(o); }).find("holds 259 tokens"), std::string::npos);
  o.vocab_size = 264;
  o.tiktoken_pattern = "";
  EXPECT_NE(error_of([&] { make_tokenizer(o); }).find("needs --tiktoken-pattern v1 or v2"),
            std::string::npos);
  o.tiktoken_pattern = "v1";
  o.tiktoken_special_tokens = {"<s>", "</s>"};
  EXPECT_NE(error_of([&] { make_tokenizer(o); }).find("lacks '<unk>'"), std::string::npos);
  std::ofstream(dir.file("bad.tiktoken")) << "YQ== 0\nnot-a-line\n";
  o.tiktoken_special_tokens = {};
  o.tokenizer_model = dir.file("bad.tiktoken");
  EXPECT_NE(error_of([&] { make_tokenizer(o); }).find("line 2 is not two fields"),
            std::string::npos);
  auto ranks = small_ranks();
  std::swap(ranks[65], ranks[66]);
  write_megatron_json(dir.file("swapped.json"), ranks);
  o.tokenizer_model = dir.file("swapped.json");
  EXPECT_NE(error_of([&] { make_tokenizer(o); }).find("entry 65 is not the single byte 0x41"),
            std::string::npos);
}

TEST(Llama3Tokenizer, BosRanksAndSpecialTokens) {
  testing::TempDir dir;
  write_tiktoken(dir.file("tokenizer.model"), small_ranks());
  TokenizerOptions o;
  o.type = "Llama3Tokenizer";
  o.tokenizer_model = dir.file("tokenizer.model");
  const auto tok = make_tokenizer(o);
  EXPECT_EQ(tok->vocab_size(), 259 + 256);
  EXPECT_EQ(tok->eod(), 260);  // <|end_of_text|>
  // BOS <|begin_of_text|> (259) first; Llama 3's pattern gives the pieces "aba", " ab".
  EXPECT_EQ(tok->encode("aba ab"), (std::vector<int32_t>{259, 258, 32, 256}));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{259, 258, 268}), "<|begin_of_text|>aba<|eot_id|>");
  // A special token's text is ordinary text.
  EXPECT_EQ(tok->encode("<|eot_id|>").size(), 1u + 10u);
}

TEST(NullTokenizer, IdsAsText) {
  NullTokenizer tok(100);
  EXPECT_EQ(tok.vocab_size(), 101);
  EXPECT_EQ(tok.eod(), 100);
  EXPECT_EQ(tok.encode("5 17 0 99"), (std::vector<int32_t>{5, 17, 0, 99}));
  // Fields are split at single spaces, as Python's split(' '); each may carry whitespace, as
  // int() allows, but an empty field (a leading or double space) is an error.
  EXPECT_EQ(tok.encode("7\n"), (std::vector<int32_t>{7}));
  EXPECT_NE(error_of([&] { tok.encode(" 7"); }).find("field 1 ('') is not an integer"),
            std::string::npos);
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode(std::vector<int32_t>{5, 17, 100}), "5 17 100");
  EXPECT_NE(error_of([&] { tok.encode("5  3"); }).find("field 2 ('') is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tok.encode("1 100"); }).find("field 2 ('100') is too large"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tok.encode("-1"); }).find("is negative"), std::string::npos);
  EXPECT_THROW(NullTokenizer(0), Error);
}

}  // namespace
}  // namespace tessera::data
