// tokenizer.json normalizers: NFC, NFD, NFKC, NFKD, Lowercase (through ICU), Prepend, Replace
// (string or regex), Strip, Sequence. Unicode normalisation and lowercasing apply to the valid
// UTF-8 runs of the text; invalid bytes pass through unchanged.
#pragma once

#include <memory>
#include <string>

#include "tessera/data/tokenizer/hf_json.h"

namespace tessera::data::hf {

// Immutable; apply() is safe from several threads.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(std::string& text) const = 0;
};

// The normalizer a "normalizer" object describes; nullptr for null. Throws tessera::Error
// naming `where` for an unknown type or a malformed field.
std::unique_ptr<Normalizer> make_normalizer(const Json& j, const std::string& where);

}  // namespace tessera::data::hf
