// ByteLevel tokenizer: every byte of the UTF-8 text is one token. Ids 0..255 are the bytes,
// then the special tokens: 256 = EOD "<|endoftext|>". vocab_size() = 257.
// Lossless for any byte string (decode(encode(s)) == s), needs no vocabulary file, and is what
// tests and small experiments use.
#pragma once

#include "tessera/data/tokenizer.h"

namespace tessera::data {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kEod = 256;
  static constexpr int64_t kVocabSize = 257;
  static constexpr std::string_view kEodText = "<|endoftext|>";

  std::string name() const override { return "ByteLevel"; }
  int64_t vocab_size() const override { return kVocabSize; }
  // One id per byte, in order.
  std::vector<int32_t> encode(std::string_view text) const override;
  // Byte ids become bytes, kEod becomes "<|endoftext|>". Throws tessera::Error naming the
  // position of an id outside [0, 257).
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eod() const override { return kEod; }
};

}  // namespace tessera::data
