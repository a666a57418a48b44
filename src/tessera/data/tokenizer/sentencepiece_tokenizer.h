// SentencePieceTokenizer: a SentencePiece .model through Debian's libsentencepiece, as Megatron's
//   --tokenizer-type SentencePieceTokenizer --tokenizer-model x.model
// Ids are the library's (EncodeAsIds / DecodeIds); EOD is the model's </s> (eos_id), as in
// Megatron. Control-symbol strings in the text are encoded as text, never as control ids.
#pragma once

#include <memory>

#include "tessera/data/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tessera::data {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Throws tessera::Error naming the file for a missing or unreadable model, or a model
  // without an end-of-sentence piece.
  explicit SentencePieceTokenizer(const std::string& model_file);
  ~SentencePieceTokenizer() override;

  std::string name() const override { return "SentencePieceTokenizer"; }
  int64_t vocab_size() const override { return vocab_size_; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eod() const override { return eod_; }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  int64_t vocab_size_ = 0;
  int32_t eod_ = -1;
};

}  // namespace tessera::data
