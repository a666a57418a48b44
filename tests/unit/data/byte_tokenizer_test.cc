#include "tessera/data/byte_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/data/tokenizer.h"

namespace tessera::data {
namespace {

TEST(ByteTokenizer, EncodesUtf8BytesInOrder) {
  ByteTokenizer tok;
  // "hé!" is 68 C3 A9 21 in UTF-8: the accented letter is two byte tokens.
  EXPECT_EQ(tok.encode("h\xc3\xa9!"), (std::vector<int32_t>{0x68, 0xc3, 0xa9, 0x21}));
  EXPECT_TRUE(tok.encode("").empty());
  // A NUL inside the text is a byte like any other.
  EXPECT_EQ(tok.encode(std::string("a\0b", 3)), (std::vector<int32_t>{97, 0, 98}));
}

TEST(ByteTokenizer, RoundTripsEveryByte) {
  ByteTokenizer tok;
  std::string all;
  for (int b = 255; b >= 0; --b) all.push_back(static_cast<char>(b));
  const auto ids = tok.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(ids[i], 255 - i);
  EXPECT_EQ(tok.decode(ids), all);
}

TEST(ByteTokenizer, SpecialTokens) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 257);
  EXPECT_EQ(tok.eod(), 256);
  EXPECT_EQ(tok.decode(std::vector<int32_t>{104, 105, 256}), "hi<|endoftext|>");
  // The EOD string in text stays 13 ordinary bytes: a document cannot forge an EOD.
  const auto ids = tok.encode("<|endoftext|>");
  EXPECT_EQ(ids.size(), 13u);
  for (int32_t id : ids) EXPECT_LT(id, 256);
}

TEST(ByteTokenizer, DecodeRejectsOutOfRangeIds) {
  ByteTokenizer tok;
  for (int32_t bad : {257, -1, 1 << 20}) {
    try {
      tok.decode(std::vector<int32_t>{65, bad});
      ADD_FAILURE() << "no error for id " << bad;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("id " + std::to_string(bad) + " at position 1"), std::string::npos) << msg;
    }
  }
}

TEST(Tokenizer, FactoryKnowsByteLevelAndNamesUnknownTypes) {
  const auto tok = make_tokenizer("ByteLevel");
  EXPECT_EQ(tok->name(), "ByteLevel");
  EXPECT_EQ(tok->vocab_size(), 257);
  EXPECT_EQ(tok->decode(tok->encode("abc")), "abc");
  try {
    make_tokenizer("GPT9Tokenizer");
    ADD_FAILURE() << "no error for an unknown tokenizer";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("GPT9Tokenizer"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ByteLevel"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace tessera::data
