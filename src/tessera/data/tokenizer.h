// Tokenizer interface: text <-> token ids, selected with Megatron's flags. Implementations:
// ByteLevel (byte_tokenizer.h), GPT2BPETokenizer (tokenizer/gpt2_tokenizer.h),
// HuggingFaceTokenizer (tokenizer/hf_tokenizer.h), SentencePieceTokenizer and Llama2Tokenizer
// (tokenizer/sentencepiece_tokenizer.h), TikTokenizer and Llama3Tokenizer
// (tokenizer/tiktoken_tokenizer.h), NullTokenizer (tokenizer/null_tokenizer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::data {

// Ids are in [0, vocab_size()). vocab_size() is the tokenizer's own vocabulary; padding it to a
// multiple for the model's embedding is the model's business. Implementations are immutable
// after construction, so every method is safe to call from several threads.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Name as given to --tokenizer-type, e.g. "ByteLevel".
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  // Text to ids. Special-token strings in the text (e.g. "<|endoftext|>") are NOT turned into
  // special ids: they are encoded as ordinary text, so a document cannot forge an EOD.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Ids to text; special ids decode to their string form. Throws tessera::Error for an id
  // outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The end-of-document id appended by --append-eod. Throws tessera::Error if the tokenizer
  // has none (a tokenizer.json without any of the usual end-of-text tokens).
  virtual int32_t eod() const = 0;
};

// Megatron's tokenizer flags.
struct TokenizerOptions {
  std::string type = "ByteLevel";  // --tokenizer-type
  std::string vocab_file;          // --vocab-file (GPT2BPETokenizer: encoder.json)
  std::string merge_file;          // --merge-file (GPT2BPETokenizer: vocab.bpe)
  std::string tokenizer_model;     // --tokenizer-model (tokenizer.json, SentencePiece .model or
                                   // tiktoken ranks)
  // --vocab-size: NullTokenizer's V (ids below it, EOD = V) and TikTokenizer's whole vocabulary
  // (0: Megatron's default 131072). The other types take their size from their file.
  int64_t vocab_size = 0;
  std::string tiktoken_pattern;                      // --tiktoken-pattern v1 | v2 (TikTokenizer)
  int64_t tiktoken_num_special_tokens = 1000;        // --tiktoken-num-special-tokens
  std::vector<std::string> tiktoken_special_tokens;  // --tiktoken-special-tokens (default
                                                     // <unk> <s> </s>)
};

// True for the types that read --vocab-size (NullTokenizer, TikTokenizer).
bool tokenizer_takes_vocab_size(const std::string& type);

// The names --tokenizer-type accepts.
const std::vector<std::string>& tokenizer_types();

// The tokenizer the options describe. Throws tessera::Error naming the known types for an
// unknown type, naming the missing flag when a type's file is not given, and naming the file
// and what is expected when a file cannot be read or is malformed.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options);
// Shorthand for a type that needs no file (ByteLevel).
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& type);

}  // namespace tessera::data
