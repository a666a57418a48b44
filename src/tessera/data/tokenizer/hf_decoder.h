// tokenizer.json decoders: ByteLevel, ByteFallback (<0xXX> tokens become their raw byte),
// Fuse, Replace, Strip, Metaspace, Sequence. They act on the token strings of a run of
// ordinary (not added) tokens, in order, as Hugging Face's decode chain does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/data/tokenizer/hf_json.h"

namespace tessera::data::hf {

// Immutable; apply() is safe from several threads.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void apply(std::vector<std::string>& tokens) const = 0;
};

// The decoder a "decoder" object describes; nullptr for null (tokens are concatenated).
// Throws tessera::Error naming `where` for an unknown type or a malformed field.
std::unique_ptr<Decoder> make_decoder(const Json& j, const std::string& where);

// The byte a "<0xXX>" token stands for, or -1.
int byte_fallback_value(std::string_view token);

}  // namespace tessera::data::hf
