#include "tessera/data/tokenizer/unicode.h"

#include <algorithm>

namespace tessera::data::unicode {
namespace {

constexpr uint32_t kRuns[] = {
#include "tessera/data/tokenizer/unicode_table.inc"
};

struct Tables {
  std::array<uint8_t, 128> ascii{};
  std::array<uint32_t, 256> byte_char{};
  std::array<int16_t, 512> char_byte{};  // code points < 512 only: all byte chars are below 324
  Tables() {
    for (uint32_t c = 0; c < 128; ++c) ascii[c] = static_cast<uint8_t>(lookup(c));
    char_byte.fill(-1);
    uint32_t extra = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_char[b] = printable ? b : extra++;
      char_byte[byte_char[b]] = static_cast<int16_t>(b);
    }
  }
  static CharClass lookup(uint32_t cp) {
    const uint32_t key = (cp << 2) | 3u;
    const uint32_t* it = std::upper_bound(std::begin(kRuns), std::end(kRuns), key);
    return static_cast<CharClass>(*(it - 1) & 3u);
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

CharClass char_class(uint32_t cp) {
  if (cp < 128) return static_cast<CharClass>(tables().ascii[cp]);
  if (cp > 0x10FFFF) return CharClass::kOther;
  return Tables::lookup(cp);
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

const std::array<uint32_t, 256>& byte_to_char() { return tables().byte_char; }

int char_to_byte(uint32_t cp) { return cp < 512 ? tables().char_byte[cp] : -1; }

std::string to_byte_level(std::string_view text) {
  std::string out;
  out.reserve(text.size() * 2);
  const auto& map = byte_to_char();
  for (const char c : text) append_utf8(out, map[static_cast<uint8_t>(c)]);
  return out;
}

}  // namespace tessera::data::unicode
