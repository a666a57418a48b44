// tessera-tokenize: encodes or decodes lines with any tokenizer, for checks against other
// implementations and for looking at what a tokenizer does.
//
//   tessera-tokenize --tokenizer-type GPT2BPETokenizer --vocab-file encoder.json
//       --merge-file vocab.bpe < text        (one command line)
// prints, for each input line (without its newline), the ids separated by spaces.
//   --hex      input lines are hex-encoded bytes (any bytes, invalid UTF-8 included)
//   --decode   input lines are ids; prints the decoded text of each line (hex with --hex)
//   --save-tokenizer-json PATH   writes a GPT2BPETokenizer's files as a Hugging Face
//                                tokenizer.json (BPE, ByteLevel) and exits
// Errors: one line on stderr, exit code 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "tessera/core/error.h"
#include "tessera/core/tool_main.h"
#include "tessera/kernels/build_info.h"
#include "tessera/data/tokenizer.h"
#include "tessera/data/tokenizer/bpe_trainer.h"
#include "tessera/data/tokenizer/gpt2_tokenizer.h"

namespace {

using tessera::Error;

std::string from_hex(const std::string& hex, int64_t line) {
  if (hex.size() % 2 != 0)
    throw Error("line " + std::to_string(line) + ": odd number of hex digits");
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    const auto digit = [&](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      throw Error("line " + std::to_string(line) + ": '" + std::string(1, c) +
                  "' is not a hex digit");
    };
    out.push_back(static_cast<char>(digit(hex[i]) * 16 + digit(hex[i + 1])));
  }
  return out;
}

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::data::TokenizerOptions topt;
  bool hex = false, decode = false;
  std::string save_json;
  CLI::App app{"Encode (or decode) lines of stdin with a tokenizer."};
  app.set_version_flag("--version", tessera::kernels::version_line);
  app.add_option("--tokenizer-type", topt.type,
                 "ByteLevel, GPT2BPETokenizer, HuggingFaceTokenizer, SentencePieceTokenizer, "
                 "Llama2Tokenizer, TikTokenizer, Llama3Tokenizer or NullTokenizer")
      ->capture_default_str();
  app.add_option("--vocab-file", topt.vocab_file, "GPT2BPETokenizer: encoder.json");
  app.add_option("--merge-file", topt.merge_file, "GPT2BPETokenizer: vocab.bpe");
  app.add_option("--tokenizer-model", topt.tokenizer_model,
                 "HuggingFaceTokenizer: tokenizer.json; SentencePieceTokenizer, Llama2Tokenizer: "
                 ".model; TikTokenizer, Llama3Tokenizer: tiktoken ranks (.json: Megatron's)");
  app.add_option("--vocab-size", topt.vocab_size,
                 "NullTokenizer: ids are below it; TikTokenizer: the whole vocabulary");
  app.add_option("--tiktoken-pattern", topt.tiktoken_pattern, "TikTokenizer: v1 or v2")
      ->check(CLI::IsMember({"v1", "v2"}));
  app.add_option("--tiktoken-num-special-tokens", topt.tiktoken_num_special_tokens,
                 "TikTokenizer: ids below this are special tokens")
      ->capture_default_str();
  app.add_option("--tiktoken-special-tokens", topt.tiktoken_special_tokens,
                 "TikTokenizer: the special tokens (must hold <unk> <s> </s>)");
  app.add_flag("--hex", hex, "text lines are hex-encoded bytes");
  app.add_flag("--decode", decode, "input lines are ids: print the decoded text");
  app.add_option("--save-tokenizer-json", save_json,
                 "write a GPT2BPETokenizer as a Hugging Face tokenizer.json and exit");
  return tessera::run_tool(app, argc, argv, "tessera-tokenize", [&] {
    const auto tok = tessera::data::make_tokenizer(topt);
    if (!save_json.empty()) {
      const auto* gpt2 = dynamic_cast<const tessera::data::Gpt2BpeTokenizer*>(tok.get());
      if (gpt2 == nullptr)
        throw Error("--save-tokenizer-json needs --tokenizer-type GPT2BPETokenizer");
      tessera::data::write_byte_level_bpe_json(save_json, gpt2->vocab(), gpt2->merges(),
                                               "<|endoftext|>");
      return 0;
    }
    std::string line;
    int64_t n = 0;
    while (std::getline(std::cin, line)) {
      ++n;
      if (!line.empty() && line.back() == '\r' && !hex) line.pop_back();
      if (decode) {
        std::vector<int32_t> ids;
        std::istringstream in(line);
        long long v;
        while (in >> v) ids.push_back(static_cast<int32_t>(v));
        if (!in.eof())
          throw Error("line " + std::to_string(n) + ": expected ids separated by spaces");
        const std::string text = tok->decode(ids);
        std::cout << (hex ? to_hex(text) : text) << '\n';
      } else {
        const auto ids = tok->encode(hex ? from_hex(line, n) : line);
        for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
        std::cout << '\n';
      }
    }
    return 0;
  });
}
