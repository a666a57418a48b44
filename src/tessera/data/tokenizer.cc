#include "tessera/data/tokenizer.h"

#include "tessera/core/error.h"
#include "tessera/data/byte_tokenizer.h"
#include "tessera/data/tokenizer/gpt2_tokenizer.h"
#include "tessera/data/tokenizer/hf_tokenizer.h"
#include "tessera/data/tokenizer/null_tokenizer.h"
#include "tessera/data/tokenizer/sentencepiece_tokenizer.h"
#include "tessera/data/tokenizer/tiktoken_tokenizer.h"

namespace tessera::data {

const std::vector<std::string>& tokenizer_types() {
  static const std::vector<std::string> types{
      "ByteLevel",       "GPT2BPETokenizer", "HuggingFaceTokenizer", "SentencePieceTokenizer",
      "Llama2Tokenizer", "TikTokenizer",     "Llama3Tokenizer",      "NullTokenizer"};
  return types;
}

bool tokenizer_takes_vocab_size(const std::string& type) {
  return type == "NullTokenizer" || type == "TikTokenizer";
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& o) {
  const auto need = [&](const std::string& value, const char* flag, const char* what) {
    if (value.empty()) throw Error("--tokenizer-type " + o.type + " needs " + flag + " " + what);
  };
  if (o.type == "ByteLevel") return std::make_unique<ByteTokenizer>();
  if (o.type == "GPT2BPETokenizer") {
    need(o.vocab_file, "--vocab-file", "(GPT-2's encoder.json)");
    need(o.merge_file, "--merge-file", "(GPT-2's vocab.bpe)");
    return std::make_unique<Gpt2BpeTokenizer>(o.vocab_file, o.merge_file);
  }
  if (o.type == "HuggingFaceTokenizer") {
    need(o.tokenizer_model, "--tokenizer-model", "(a Hugging Face tokenizer.json)");
    return std::make_unique<HfTokenizer>(o.tokenizer_model);
  }
  if (o.type == "SentencePieceTokenizer") {
    need(o.tokenizer_model, "--tokenizer-model", "(a SentencePiece .model file)");
    return std::make_unique<SentencePieceTokenizer>(o.tokenizer_model);
  }
  if (o.type == "Llama2Tokenizer") {
    need(o.tokenizer_model, "--tokenizer-model", "(Llama 2's SentencePiece tokenizer.model)");
    return std::make_unique<SentencePieceTokenizer>(o.tokenizer_model, /*llama2=*/true);
  }
  if (o.type == "TikTokenizer") {
    need(o.tokenizer_model, "--tokenizer-model",
         "(tiktoken ranks: Megatron's .json or base64 lines)");
    return make_megatron_tiktokenizer(o.tokenizer_model, o.tiktoken_pattern, o.vocab_size,
                                      o.tiktoken_num_special_tokens, o.tiktoken_special_tokens);
  }
  if (o.type == "Llama3Tokenizer") {
    need(o.tokenizer_model, "--tokenizer-model", "(Llama 3's tiktoken tokenizer.model)");
    return make_llama3_tokenizer(o.tokenizer_model);
  }
  if (o.type == "NullTokenizer") {
    if (o.vocab_size <= 0)
      throw Error(
          "--tokenizer-type NullTokenizer needs --vocab-size V (ids of the text are below V)");
    return std::make_unique<NullTokenizer>(o.vocab_size);
  }
  std::string known;
  for (const auto& t : tokenizer_types()) known += (known.empty() ? "" : ", ") + t;
  throw Error("unknown tokenizer type '" + o.type + "': expected one of: " + known);
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& type) {
  TokenizerOptions o;
  o.type = type;
  return make_tokenizer(o);
}

}  // namespace tessera::data
