// SentencePieceTokenizer: a SentencePiece .model through Debian's libsentencepiece, as Megatron's
//   --tokenizer-type SentencePieceTokenizer --tokenizer-model x.model
// Ids are the library's (EncodeAsIds / DecodeIds); EOD is the model's </s> (eos_id), as in
// Megatron. Control-symbol strings in the text are encoded as text, never as control ids.
//
// Llama2Tokenizer is the same model with Megatron's _Llama2Tokenizer conventions: every
// encode() starts with the model's BOS (bos_id; Megatron's tokenize(bos=True) default, so with
// --split-sentences each sentence does), EOD is eos_id, and the vocabulary is the model's pieces
// (no <CLS>/<SEP>/<EOD>/<MASK> extras). DecodeIds drops the BOS again.
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
  // without an end-of-sentence piece (or, for Llama2Tokenizer, a beginning-of-sentence piece).
  explicit SentencePieceTokenizer(const std::string& model_file, bool llama2 = false);
  ~SentencePieceTokenizer() override;

  std::string name() const override {
    return bos_ >= 0 ? "Llama2Tokenizer" : "SentencePieceTokenizer";
  }
  int64_t vocab_size() const override { return vocab_size_; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eod() const override { return eod_; }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  int64_t vocab_size_ = 0;
  int32_t eod_ = -1;
  int32_t bos_ = -1;  // prepended to every encode() (Llama2Tokenizer) unless -1
};

}  // namespace tessera::data
