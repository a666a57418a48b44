// TextOutput with the byte-level tokenizer (one token a byte), against hand-worked cases: pieces
// never end inside a UTF-8 character, an ending that may become a stop string waits, a stop
// string cuts the text before it, and the pieces add up to the final text.
#include "tessera/inference/text_output.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::inference {
namespace {

std::vector<int32_t> bytes(const std::string& s) {
  std::vector<int32_t> out;
  for (unsigned char c : s) out.push_back(c);
  return out;
}

// Feeds `text` a byte at a time; returns the pieces taken (the last one final).
std::vector<std::string> pieces(TextOutput& out, const std::string& text, bool* stopped) {
  std::vector<std::string> got;
  *stopped = false;
  for (size_t n = 1; n <= text.size() && !*stopped; ++n) {
    *stopped = out.update(bytes(text.substr(0, n)));
    got.push_back(out.take(*stopped || n == text.size()));
  }
  return got;
}

TEST(TextOutput, PiecesNeverEndInsideAUtf8CharacterAndAddUpToTheText) {
  const auto tok = data::make_tokenizer("ByteLevel");
  TextOutput out(*tok, {});
  const std::string text = "a\xC3\xA9z\xE2\x82\xAC!";  // a, é (2 bytes), z, € (3 bytes), !
  bool stopped = false;
  const std::vector<std::string> got = pieces(out, text, &stopped);
  std::string joined;
  for (const std::string& p : got) {
    joined += p;
    EXPECT_EQ(complete_utf8(joined), joined.size()) << "a piece ended inside a character";
  }
  EXPECT_EQ(joined, text);
  EXPECT_FALSE(stopped);
  // After the first byte of é nothing new can be shown; after its second byte, é is.
  EXPECT_EQ(got[1], "");
  EXPECT_EQ(got[2], "\xC3\xA9");
}

TEST(TextOutput, AStopStringIsHeldBackThenCutsTheText) {
  const auto tok = data::make_tokenizer("ByteLevel");
  TextOutput out(*tok, {"END"});
  bool stopped = false;
  const std::vector<std::string> got = pieces(out, "abcENxyENDmore", &stopped);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out.text(), "abcENxy");
  std::string joined;
  for (const std::string& p : got) joined += p;
  EXPECT_EQ(joined, "abcENxy");
  // "abcE" shows "abc" only: E may begin END; "abcEN" still waits; "abcENx" releases "ENx".
  EXPECT_EQ(got[3], "");
  EXPECT_EQ(got[4], "");
  EXPECT_EQ(got[5], "ENx");
}

TEST(TextOutput, CompleteUtf8CountsWholeCharactersOnly) {
  EXPECT_EQ(complete_utf8("ab"), 2u);
  EXPECT_EQ(complete_utf8("a\xE2\x82"), 1u);  // € missing its last byte
  EXPECT_EQ(complete_utf8("a\xE2\x82\xAC"), 4u);
  EXPECT_EQ(complete_utf8("\xF0\x9F\x98"), 0u);  // a 4-byte emoji cut short
}

}  // namespace
}  // namespace tessera::inference
