// The text of a generation as it grows, for tools that show it: the generated tokens decoded,
// cut before the first stop string, and the part that can be shown now — never ending inside a
// UTF-8 character, and holding back an ending that could still become a stop string — so a
// stream of pieces adds up to exactly the final text.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tessera/data/tokenizer.h"

namespace tessera::inference {

class TextOutput {
 public:
  TextOutput(const data::Tokenizer& tokenizer, std::vector<std::string> stops)
      : tokenizer_(&tokenizer), stops_(std::move(stops)) {}

  // Decodes `tokens` (all generated so far; a final stop token already left out by the caller).
  // True when a stop string appeared: text() ends before it and the generation should end.
  bool update(std::span<const int32_t> tokens);
  const std::string& text() const { return text_; }
  // The text not taken yet that can no longer change (`final`: all of it).
  std::string take(bool final);

 private:
  const data::Tokenizer* tokenizer_;
  std::vector<std::string> stops_;
  std::string text_;
  size_t taken_ = 0;
  bool stopped_ = false;
};

// The length of the longest prefix of `text` that does not end inside a UTF-8 character.
size_t complete_utf8(const std::string& text);

}  // namespace tessera::inference
