// tokenizer.json pre-tokenizers: ByteLevel (GPT-2's regex and byte-to-character map),
// Split (string or regex; behaviours Isolated, Removed, MergedWithPrevious, MergedWithNext,
// Contiguous; invert), Metaspace (replacement, prepend_scheme always/first/never or the older
// add_prefix_space, split), Digits, Whitespace, WhitespaceSplit, Punctuation, Sequence.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/data/tokenizer/hf_json.h"

namespace tessera::data::hf {

// Immutable; apply() is safe from several threads.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits (and for ByteLevel and Metaspace, rewrites) each piece in place. `first_segment`:
  // the pieces come from the start of the text (before any added token), which Metaspace's
  // prepend_scheme "first" needs.
  virtual void apply(std::vector<std::string>& pieces, bool first_segment) const = 0;
};

// The pre-tokenizer a "pre_tokenizer" object describes; nullptr for null. Throws
// tessera::Error naming `where` for an unknown type or a malformed field.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const std::string& where);

}  // namespace tessera::data::hf
