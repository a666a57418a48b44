// GPT-2 pre-tokenisation: hand-derived splits, and the hand-written splitter against PCRE2
// running GPT-2's regex (an independent implementation) on random text.
#include "tessera/data/tokenizer/gpt2_split.h"

#include <gtest/gtest.h>

#include <random>

#include "tessera/data/tokenizer/regex.h"
#include "tessera/data/tokenizer/unicode.h"

namespace tessera::data {
namespace {

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string_view> views;
  gpt2_split(text, views);
  return {views.begin(), views.end()};
}

using V = std::vector<std::string>;

TEST(Gpt2Split, HandDerivedCases) {
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(split("x \n\ny"), (V{"x", " \n", "\n", "y"}));
  EXPECT_EQ(split("don't I'll they've"), (V{"don", "'t", " I", "'ll", " they", "'ve"}));
  EXPECT_EQ(split("a  "), (V{"a", "  "}));
  EXPECT_EQ(split("abc123 456!?"), (V{"abc", "123", " 456", "!?"}));
  EXPECT_EQ(split(" ' '"), (V{" '", " '"}));
  EXPECT_EQ(split("\t\tx"), (V{"\t", "\t", "x"}));
  EXPECT_EQ(split("日本語 テキスト"), (V{"日本語", " テキスト"}));
  // Invalid bytes are symbols: they join neighbouring symbols and a leading space.
  EXPECT_EQ(split("a\xff\xfe!b \x80"), (V{"a", "\xff\xfe!", "b", " \x80"}));
  EXPECT_TRUE(split("").empty());
}

TEST(Gpt2Split, MatchesPcre2OnRandomText) {
  const Regex re(
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", "test");
  // Characters of every class, from Unicode versions both ICU 72 and PCRE2 10.42 know.
  const std::vector<uint32_t> chars = {
      'a',    'Z',    's',    't',    'e',    'l',     'd',     'm',    'r',    'v',   '\'',
      ' ',    ' ',    ' ',    '\t',   '\n',   '\r',    '\v',    '\f',   '0',    '7',   '!',
      '.',    ',',    '-',    '_',    '$',    0x85,    0xA0,    0xE9,   0x301,  0x660, 0x2167,
      0x2003, 0x2028, 0x3000, 0x65E5, 0x672C, 0x1F600, 0x1F44D, 0x200D, 0xFE0F, 0x627, 0x644,
      0x5D0,  0x939,  0xBD,   0xB2,   0x1C,   0x1F,    0x2E80,  0xAC00};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int n = static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) unicode::append_utf8(text, chars[rng() % chars.size()]);
    std::vector<std::string> expected;
    size_t last = 0;
    for (const auto& [b, e] : re.find_all(text)) {
      ASSERT_EQ(b, last) << "the regex covers every character of valid text";
      expected.push_back(text.substr(b, e - b));
      last = e;
    }
    ASSERT_EQ(split(text), expected) << "text: " << text;
  }
}

TEST(Unicode, ClassesAndByteMap) {
  using unicode::CharClass;
  EXPECT_EQ(unicode::char_class('a'), CharClass::kLetter);
  EXPECT_EQ(unicode::char_class(0x65E5), CharClass::kLetter);
  EXPECT_EQ(unicode::char_class(0x660), CharClass::kNumber);   // Arabic-Indic zero
  EXPECT_EQ(unicode::char_class(0x2167), CharClass::kNumber);  // Roman numeral eight (Nl)
  EXPECT_EQ(unicode::char_class(0x85), CharClass::kSpace);
  EXPECT_EQ(unicode::char_class(0x3000), CharClass::kSpace);
  EXPECT_EQ(unicode::char_class(0x1C), CharClass::kOther);   // not White_Space
  EXPECT_EQ(unicode::char_class(0x301), CharClass::kOther);  // combining mark
  EXPECT_EQ(unicode::char_class(unicode::kInvalid), CharClass::kOther);
  // GPT-2's bytes_to_unicode: printable bytes are themselves, space is U+0120 ('Ġ').
  EXPECT_EQ(unicode::byte_to_char()['A'], uint32_t{'A'});
  EXPECT_EQ(unicode::byte_to_char()[' '], 0x120u);
  EXPECT_EQ(unicode::byte_to_char()['\n'], 0x10Au);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(unicode::char_to_byte(unicode::byte_to_char()[b]), b);
}

}  // namespace
}  // namespace tessera::data
