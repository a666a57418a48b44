#include "tessera/data/sentence_splitter.h"

#include <unicode/uchar.h>

#include <algorithm>

#include "tessera/data/tokenizer/unicode.h"

namespace tessera::data {

const std::vector<std::string_view> kAbbreviations = {
    // titles and ranks
    "Mr", "Mrs", "Ms", "Dr", "Prof", "Sr", "Jr", "St", "Mt", "Rev", "Gen", "Gov", "Sen", "Rep",
    "Capt", "Col", "Lt", "Sgt", "Hon",
    // companies
    "Inc", "Ltd", "Co", "Corp", "Bros",
    // Latin and references
    "e.g", "i.e", "E.g", "I.e", "etc", "vs", "cf", "al", "approx", "Fig", "fig", "Vol", "vol", "pp",
    "Eq", "eq", "Sec",
    // months
    "Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep", "Sept", "Oct", "Nov", "Dec",
    // places
    "U.S", "U.K", "U.N"};

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_terminal(char c) { return c == '.' || c == '!' || c == '?'; }

// The code point at text[i] and its length.
uint32_t char_at(std::string_view text, size_t i, size_t* len) {
  uint32_t cp;
  *len = unicode::next_char(text, i, &cp);
  return cp;
}

bool is_closing(uint32_t cp) {
  return cp == '"' || cp == '\'' || cp == ')' || cp == ']' || cp == '}' || cp == 0x201D ||
         cp == 0x2019 || cp == 0xBB;
}
bool is_opening(uint32_t cp) {
  return cp == '"' || cp == '\'' || cp == '(' || cp == '[' || cp == '{' || cp == 0x201C ||
         cp == 0x2018 || cp == 0xAB;
}
bool starts_sentence(uint32_t cp) {
  if (cp == unicode::kInvalid) return false;
  if (cp >= '0' && cp <= '9') return true;
  if (is_opening(cp)) return true;
  return u_isupper(static_cast<UChar32>(cp)) || u_istitle(static_cast<UChar32>(cp));
}

// True if the '.' at text[dot] ends an abbreviation of the list or an initial (rules 3, 4).
bool after_abbreviation(std::string_view text, size_t dot) {
  size_t b = dot;
  while (b > 0 && !is_space(text[b - 1])) --b;
  std::string_view word = text.substr(b, dot - b);
  // Opening quotes and brackets before the word ("(e.g.") are not part of it.
  while (!word.empty()) {
    size_t len;
    const uint32_t cp = char_at(word, 0, &len);
    if (!is_opening(cp)) break;
    word.remove_prefix(len);
  }
  if (word.empty()) return false;
  if (std::find(kAbbreviations.begin(), kAbbreviations.end(), word) != kAbbreviations.end())
    return true;
  size_t len;
  const uint32_t cp = char_at(word, 0, &len);
  return len == word.size() && cp != unicode::kInvalid && u_isalpha(static_cast<UChar32>(cp));
}

}  // namespace

std::vector<std::string_view> split_sentences(std::string_view text, bool keep_newlines) {
  std::vector<std::string_view> out;
  size_t start = 0;  // of the current sentence
  size_t i = 0;
  while (i < text.size()) {
    if (!is_terminal(text[i])) {
      ++i;
      continue;
    }
    size_t end = i;  // one past the run of terminals and closing marks
    while (end < text.size() && is_terminal(text[end])) ++end;
    const bool single_dot = end - i == 1 && text[i] == '.';
    const size_t dot = i;
    while (end < text.size()) {
      size_t len;
      if (!is_closing(char_at(text, end, &len))) break;
      end += len;
    }
    size_t next = end;  // the next sentence's first character
    while (next < text.size() && is_space(text[next])) ++next;
    i = end;
    if (next == end || next == text.size()) continue;  // rule 1 (or the text ends here)
    size_t len;
    if (!starts_sentence(char_at(text, next, &len))) continue;  // rule 2
    if (single_dot && after_abbreviation(text, dot)) continue;  // rules 3, 4
    const size_t stop = keep_newlines ? next : end;
    out.push_back(text.substr(start, stop - start));
    start = next;
    i = next;
  }
  if (start < text.size()) out.push_back(text.substr(start));
  return out;
}

}  // namespace tessera::data
