// tiktoken-style byte-level BPE: Megatron's TikTokenizer and Meta's Llama 3 tokenizer.
//
// A tiktoken BPE is a list of byte strings by rank (no merge list): text is split by a regex,
// a piece that is itself a token is that token, and any other piece starts as its bytes and
// repeatedly merges the adjacent pair whose concatenation has the lowest rank (the leftmost
// among equals) — BpeModel with MergeRank::kResultId, since ids here are ranks plus a constant.
// Special tokens are never matched in the text (see Tokenizer::encode); they decode to their
// strings.
//
// Rank files (--tokenizer-model), told apart by extension:
//   *.json      Megatron's format (megatron/training/tokenizer/tokenizer.py,
//               reload_mergeable_ranks): a JSON list of {"rank": i, "token_bytes": base64,
//               "token_str": ...} with rank == index and entry i < 256 the single byte i.
//   otherwise   tiktoken's own (tiktoken/load.py, Llama 3's original/tokenizer.model): lines
//               "<base64 token> <rank>", ranks 0..n-1 each once.
// Every single byte must be a token (a piece is encoded from its bytes).
//
// Regex pieces are the text between consecutive matches as well as the matches, so bytes that
// no match covers (invalid UTF-8, which Python's tiktoken never sees) are still encoded and
// decode(encode(x)) == x for any bytes.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "tessera/data/tokenizer.h"
#include "tessera/data/tokenizer/bpe.h"
#include "tessera/data/tokenizer/regex.h"

namespace tessera::data {

// The pre-tokenizer regexes of Megatron's _TikTokenizer (PATTERN_TIKTOKEN, PATTERN_TIKTOKEN_V2)
// and of Meta's Llama 3 tokenizer.
extern const char* const kTiktokenPatternV1;
extern const char* const kTiktokenPatternV2;
extern const char* const kLlama3Pattern;

// Token byte strings by rank, from either file format above; at most `max_ranks` (the first
// ranks; -1 for all). Throws tessera::Error naming the file, the line or entry, and what is
// expected for an unreadable file, bad base64, a rank out of order, missing or repeated, or a
// missing single byte.
std::vector<std::string> read_tiktoken_ranks(const std::string& path, int64_t max_ranks);

class TiktokenTokenizer final : public Tokenizer {
 public:
  struct Config {
    std::string name;                         // for name(): "TikTokenizer" or "Llama3Tokenizer"
    std::string pattern;                      // pre-tokenizer regex
    int32_t rank_offset = 0;                  // id of rank 0
    std::vector<std::string> special_tokens;  // ids special_offset, special_offset + 1, ...
    int32_t special_offset = 0;
    int64_t vocab_size = 0;  // ids are [0, vocab_size); ranks and specials must fill them
    int32_t bos = -1;        // prepended by encode() unless -1
    int32_t eod = -1;
  };
  // `ranks` as read_tiktoken_ranks returns; `source` names the file in errors. Throws
  // tessera::Error for a special token that is also a rank's bytes or ids that overlap or leave
  // holes in [0, vocab_size).
  TiktokenTokenizer(const std::vector<std::string>& ranks, Config config,
                    const std::string& source);

  std::string name() const override { return config_.name; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eod() const override { return config_.eod; }

 private:
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids) const;

  Config config_;
  std::unique_ptr<BpeModel> bpe_;
  std::unique_ptr<Regex> regex_;
  std::array<int32_t, 256> byte_id_{};
};

// Megatron's --tokenizer-type TikTokenizer: ids [0, num_special) are the special tokens
// (`special_tokens`, by default <unk> <s> </s>, then <SPECIAL_i> fillers), the first
// vocab_size - num_special ranks follow; EOD is </s>, no BOS is added. `pattern` is "v1" or "v2";
// vocab_size 0 means Megatron's default 131072. Throws tessera::Error for the conditions
// Megatron asserts (unknown pattern, repeated special tokens, special tokens missing one of
// <unk> <s> </s>, num_special outside [len(special_tokens), vocab_size), too few ranks).
std::unique_ptr<Tokenizer> make_megatron_tiktokenizer(
    const std::string& path, const std::string& pattern, int64_t vocab_size, int64_t num_special,
    const std::vector<std::string>& special_tokens);

// Meta's Llama 3 tokenizer (llama3/tokenizer.py): all ranks of a tiktoken file, Llama 3's
// pattern, 256 special tokens after them (<|begin_of_text|>, <|end_of_text|>, ...,
// <|eot_id|>, reserved ones); BOS <|begin_of_text|> is prepended to every text, as Meta's
// encode(bos=True) and Hugging Face's tokenizer do; EOD is <|end_of_text|>.
std::unique_ptr<Tokenizer> make_llama3_tokenizer(const std::string& path);

}  // namespace tessera::data
