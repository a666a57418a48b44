// UTF-8 and code-point classes for the tokenizers.
//
// Invalid UTF-8 is never an error here: each byte that does not start a well-formed sequence
// (overlong forms, surrogates, code points above U+10FFFF, truncated sequences and stray
// continuation bytes included) is one "character" of its own, of class kOther — what Python's
// surrogateescape decoding makes of it — so text round-trips byte for byte.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::data::unicode {

// Classes of the GPT-2 pre-tokeniser: \p{L}, \p{N}, \s (the White_Space property), the rest.
enum class CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

constexpr uint32_t kInvalid = 0xFFFFFFFFu;  // code point reported for an invalid byte

// Decodes the character at text[i] (i < text.size()): sets *cp to its code point (kInvalid for
// an invalid byte) and returns its length in bytes (1 for an invalid byte).
inline size_t next_char(std::string_view text, size_t i, uint32_t* cp);

// Class of a code point (kInvalid is kOther). Table generated from ICU (unicode_table.inc).
CharClass char_class(uint32_t cp);

// Appends the UTF-8 encoding of a valid code point.
void append_utf8(std::string& out, uint32_t cp);

// GPT-2's bytes_to_unicode(): byte b -> the printable character standing for it in byte-level
// BPE vocabularies (printable Latin-1 bytes stand for themselves, the others map to U+0100..).
// byte_to_char()[b] is that character's code point.
const std::array<uint32_t, 256>& byte_to_char();
// The inverse: the byte a code point stands for, or -1 if it stands for none.
int char_to_byte(uint32_t cp);
// `text` with each byte replaced by the UTF-8 of its byte_to_char() character: the byte-level
// form that GPT-2 style vocabularies spell tokens in (" hi" -> "Ġhi").
std::string to_byte_level(std::string_view text);

// ------------------------------------------------------------------------------------------
inline size_t next_char(std::string_view text, size_t i, uint32_t* cp) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  const unsigned b = s[i];
  if (b < 0x80) {
    *cp = b;
    return 1;
  }
  size_t len;
  uint32_t c, min;
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2, c = b & 0x1F, min = 0x80;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3, c = b & 0x0F, min = 0x800;
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4, c = b & 0x07, min = 0x10000;
  } else {
    *cp = kInvalid;
    return 1;
  }
  if (i + len > n) {
    *cp = kInvalid;
    return 1;
  }
  for (size_t k = 1; k < len; ++k) {
    const unsigned t = s[i + k];
    if ((t & 0xC0) != 0x80) {
      *cp = kInvalid;
      return 1;
    }
    c = (c << 6) | (t & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
    *cp = kInvalid;
    return 1;
  }
  *cp = c;
  return len;
}

}  // namespace tessera::data::unicode
