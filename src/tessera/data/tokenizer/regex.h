// Regular expressions for tokenizer.json patterns (Split, Replace), through PCRE2 with UTF and
// Unicode properties (\p{L}, \s as White_Space, (?i:...), lookahead). Invalid UTF-8 in the
// subject is allowed: no match covers an invalid byte.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::data {

// Compiled once (JIT when available); immutable, and find_all and replace_all are safe from
// several threads.
class Regex {
 public:
  // Throws tessera::Error "<source>: bad regular expression '<pattern>': <reason>".
  Regex(const std::string& pattern, const std::string& source);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping, non-empty match, left to right, as [begin, end) byte offsets.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  // Replaces each match of find_all(text) by `content`, taken literally (no $1 references), in
  // place. A text without a match is left as it is.
  void replace_all(std::string& text, std::string_view content) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
  std::string pattern_;
};

// Escapes a literal string for use as a pattern.
std::string regex_escape(std::string_view literal);

}  // namespace tessera::data
