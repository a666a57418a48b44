// HuggingFaceTokenizer: a Hugging Face tokenizer.json with a BPE model, as Megatron's
//   --tokenizer-type HuggingFaceTokenizer --tokenizer-model tokenizer.json
//
// Covered: model "BPE" (vocab, merges as "a b" strings or [a, b] pairs, unk_token, fuse_unk,
// byte_fallback, ignore_merges), the normalizers of hf_normalizer.h, the pre-tokenizers of
// hf_pretokenizer.h, the decoders of hf_decoder.h, and added_tokens. That reads GPT-2,
// LLaMA-2 (metaspace + byte_fallback), LLaMA-3 and Qwen style files.
// Not covered (a clear error at load): other models (WordPiece, Unigram, WordLevel), BPE
// dropout, continuing_subword_prefix / end_of_word_suffix, other component types.
// Differences from Hugging Face, by design: special added tokens ("special": true) are not
// matched in the text (so a document cannot forge an EOD; see Tokenizer::encode) and the
// post_processor (BOS/EOS templates) is not applied: encode() returns the text's ids only.
// Non-special added tokens are matched (leftmost, longest first) before normalisation.
// EOD is the first of "<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>"
// present; eod() throws tessera::Error if none is.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <unordered_map>

#include "tessera/data/tokenizer.h"
#include "tessera/data/tokenizer/bpe.h"
#include "tessera/data/tokenizer/hf_decoder.h"
#include "tessera/data/tokenizer/hf_normalizer.h"
#include "tessera/data/tokenizer/hf_pretokenizer.h"

namespace tessera::data {

class HfTokenizer final : public Tokenizer {
 public:
  // Reads and checks the file. Throws tessera::Error naming the file and what was expected for
  // an unreadable file, bad JSON, a missing or mistyped field, an unsupported component, or
  // merges naming tokens that are not in the vocabulary.
  explicit HfTokenizer(const std::string& path);
  // The same from the file's text; `source` names it in errors.
  HfTokenizer(const std::string& json_text, const std::string& source);
  ~HfTokenizer() override;

  std::string name() const override { return "HuggingFaceTokenizer"; }
  int64_t vocab_size() const override { return vocab_size_; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eod() const override;

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool special;
  };
  void load(const std::string& json_text);
  void encode_segment(std::string_view text, bool first, std::vector<int32_t>& ids) const;
  void encode_word(const std::string& word, std::vector<int32_t>& ids) const;

  std::string source_;
  std::unique_ptr<BpeModel> bpe_;
  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<hf::Decoder> decoder_;
  std::vector<AddedToken> matchable_;  // non-special added tokens, longest first
  std::unordered_map<int32_t, std::string> added_by_id_;
  int32_t unk_ = -1;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<int32_t, 256> byte_token_{};  // ids of "<0xXX>" (byte_fallback), -1 if absent
  int64_t vocab_size_ = 0;
  std::optional<int32_t> eod_;
};

}  // namespace tessera::data
