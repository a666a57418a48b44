// NullTokenizer: text that is already token ids, as Megatron's _NullTokenizer
// (megatron/training/tokenizer/tokenizer.py):
//   --tokenizer-type NullTokenizer --vocab-size V
// A text is ids separated by single spaces ("5 17 3"); each must be an integer in [0, V).
// The EOD is V itself, so the vocabulary is V + 1 ids, as Megatron's vocab_size property says.
// decode() writes ids back separated by single spaces. Differences from Megatron, which calls
// int() on each field: an empty (or all-whitespace) text is no ids rather than an error, and an
// id outside [0, V) is an error rather than an id the model's embedding cannot hold.
#pragma once

#include "tessera/data/tokenizer.h"

namespace tessera::data {

class NullTokenizer final : public Tokenizer {
 public:
  // Throws tessera::Error unless vocab_size (--vocab-size) is in [1, 2^31 - 1).
  explicit NullTokenizer(int64_t vocab_size);

  std::string name() const override { return "NullTokenizer"; }
  int64_t vocab_size() const override { return ids_ + 1; }
  // Throws tessera::Error naming the field and its position for a field that is not an integer
  // (surrounding whitespace allowed, as int() allows) or is outside [0, V).
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eod() const override { return static_cast<int32_t>(ids_); }

 private:
  int64_t ids_;  // V: ids [0, V) come from text, V is the EOD
};

}  // namespace tessera::data
