// GPT-2's pre-tokenisation: splits text into the pieces matched by the regular expression
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (\s is the White_Space property, as in Python's `regex` module), hand-written for speed and
// exactness. Invalid UTF-8 bytes are symbols (the [^\s\p{L}\p{N}] class), as with Python's
// surrogateescape decoding. The pieces cover the text exactly, in order.
#pragma once

#include <string_view>
#include <vector>

namespace tessera::data {

// Appends the pieces of `text` to `pieces` (views into `text`).
void gpt2_split(std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace tessera::data
