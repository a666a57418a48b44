#include "tessera/data/tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "tessera/core/error.h"

namespace tessera::data {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_file, bool llama2)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  struct stat st {};
  if (::stat(model_file.c_str(), &st) != 0)
    throw Error("cannot read --tokenizer-model '" + model_file + "': " + std::strerror(errno));
  const auto status = sp_->Load(model_file);
  if (!status.ok())
    throw Error("--tokenizer-model '" + model_file + "' is not a SentencePiece model (" +
                status.ToString() + "): expected a .model file written by spm_train");
  vocab_size_ = sp_->GetPieceSize();
  eod_ = sp_->eos_id();
  if (eod_ < 0)
    throw Error("--tokenizer-model '" + model_file +
                "' has no end-of-sentence piece: expected a model trained with eos_id >= 0");
  if (llama2) {
    bos_ = sp_->bos_id();
    if (bos_ < 0)
      throw Error("--tokenizer-model '" + model_file +
                  "' has no beginning-of-sentence piece, which Llama2Tokenizer puts first: "
                  "expected a model trained with bos_id >= 0");
  }
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;  // Encode() clears it, so the BOS goes in afterwards
  const auto status = sp_->Encode(absl::string_view(text.data(), text.size()), &ids);
  if (!status.ok()) throw Error("SentencePieceTokenizer: cannot encode: " + status.ToString());
  std::vector<int32_t> out;
  out.reserve(ids.size() + 1);
  if (bos_ >= 0) out.push_back(bos_);
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size_)
      throw Error("SentencePieceTokenizer: cannot decode id " + std::to_string(ids[i]) +
                  " at position " + std::to_string(i) + ": expected an id in [0, " +
                  std::to_string(vocab_size_) + ")");
  std::string text;
  const auto status = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok()) throw Error("SentencePieceTokenizer: cannot decode: " + status.ToString());
  return text;
}

}  // namespace tessera::data
