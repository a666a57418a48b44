// GPT2BPETokenizer: GPT-2's byte-level BPE from its two files, as Megatron's
//   --tokenizer-type GPT2BPETokenizer --vocab-file encoder.json --merge-file vocab.bpe
// encoder.json is a JSON object token -> id; vocab.bpe a "#version" line then one merge
// "left right" per line, in rank order. Text is split by GPT-2's regex (gpt2_split.h), each
// piece's bytes become byte-level symbols (unicode::byte_to_char) and are merged by rank.
// Ids equal GPT-2's own on valid UTF-8; invalid bytes are encoded as their raw byte symbols, so
// decode(encode(x)) == x for any bytes. EOD is "<|endoftext|>" (50256 in GPT-2's files).
#pragma once

#include <array>
#include <memory>

#include "tessera/data/tokenizer.h"
#include "tessera/data/tokenizer/bpe.h"

namespace tessera::data {

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // Throws tessera::Error naming the file and what was expected for a missing or unreadable
  // file, bad JSON, a malformed merge line, a merge naming an unknown token, a vocabulary
  // without "<|endoftext|>" or one that lacks a symbol for some byte.
  Gpt2BpeTokenizer(const std::string& vocab_file, const std::string& merge_file);

  std::string name() const override { return "GPT2BPETokenizer"; }
  int64_t vocab_size() const override { return bpe_->size(); }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eod() const override { return eod_; }

  // The vocabulary and merges as read, for writing them out as a tokenizer.json.
  const std::vector<std::pair<std::string, int32_t>>& vocab() const { return vocab_; }
  const std::vector<MergePair>& merges() const { return merges_; }

 private:
  std::vector<std::pair<std::string, int32_t>> vocab_;
  std::vector<MergePair> merges_;
  std::unique_ptr<BpeModel> bpe_;
  std::array<int32_t, 256> byte_id_{};
  int32_t eod_ = -1;
};

// Decodes a byte-level token string (unicode::byte_to_char characters) to its bytes, appending
// to `out`; characters that stand for no byte are appended as UTF-8 unchanged.
void append_byte_level(std::string& out, std::string_view token);

}  // namespace tessera::data
