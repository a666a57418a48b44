#include "tessera/data/tokenizer/gpt2_split.h"

#include "tessera/data/tokenizer/unicode.h"

namespace tessera::data {

using unicode::CharClass;

void gpt2_split(std::string_view text, std::vector<std::string_view>& pieces) {
  const size_t n = text.size();
  size_t i = 0;
  uint32_t cp;
  while (i < n) {
    const size_t len = unicode::next_char(text, i, &cp);
    if (cp == '\'' && i + 1 < n) {  // the contractions come first in the alternation
      const char a = text[i + 1];
      size_t m = 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        m = 2;
      } else if (i + 2 < n) {
        const char b = text[i + 2];
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) m = 3;
      }
      if (m > 0) {
        pieces.push_back(text.substr(i, m));
        i += m;
        continue;
      }
    }
    CharClass k = unicode::char_class(cp);
    size_t body = i;               // where the run of letters / numbers / symbols starts
    if (cp == ' ' && i + 1 < n) {  // " ?" prefix of the next three alternatives
      uint32_t next;
      unicode::next_char(text, i + 1, &next);
      const CharClass k2 = unicode::char_class(next);
      if (k2 != CharClass::kSpace) {
        k = k2;
        body = i + 1;
      }
    }
    if (k != CharClass::kSpace) {
      size_t e = body;
      while (e < n) {
        const size_t l = unicode::next_char(text, e, &cp);
        if (unicode::char_class(cp) != k) break;
        e += l;
      }
      pieces.push_back(text.substr(i, e - i));
      i = e;
      continue;
    }
    // A run of whitespace: \s+(?!\S) takes all of it before the end of the text or all but its
    // last character before a non-space; a single space character before a non-space is \s+.
    size_t e = i + len, last = i;
    while (e < n) {
      const size_t l = unicode::next_char(text, e, &cp);
      if (unicode::char_class(cp) != CharClass::kSpace) break;
      last = e;
      e += l;
    }
    if (e < n && last > i) e = last;
    pieces.push_back(text.substr(i, e - i));
    i = e;
  }
}

}  // namespace tessera::data
