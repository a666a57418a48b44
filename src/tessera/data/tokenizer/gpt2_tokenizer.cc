#include "tessera/data/tokenizer/gpt2_tokenizer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/data/tokenizer/gpt2_split.h"
#include "tessera/data/tokenizer/unicode.h"

namespace tessera::data {

void append_byte_level(std::string& out, std::string_view token) {
  size_t i = 0;
  while (i < token.size()) {
    uint32_t cp;
    const size_t len = unicode::next_char(token, i, &cp);
    const int b = cp == unicode::kInvalid ? -1 : unicode::char_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(token.substr(i, len));
    }
    i += len;
  }
}

Gpt2BpeTokenizer::Gpt2BpeTokenizer(const std::string& vocab_file, const std::string& merge_file) {
  const std::string vocab_text = read_file(vocab_file, "--vocab-file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(vocab_text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("--vocab-file '" + vocab_file + "' is not valid JSON (" + e.what() +
                "): expected GPT-2's encoder.json, an object of token -> id");
  }
  if (!j.is_object() || j.empty())
    throw Error("--vocab-file '" + vocab_file +
                "' is not a JSON object of token -> id: expected GPT-2's encoder.json");
  for (const auto& [tok, id] : j.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      throw Error("--vocab-file '" + vocab_file + "': token '" + tok +
                  "' has no valid id: expected a non-negative integer");
    vocab_.emplace_back(tok, static_cast<int32_t>(id.get<int64_t>()));
  }

  const std::string merge_text = read_file(merge_file, "--merge-file");
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < merge_text.size()) {
    size_t end = merge_text.find('\n', pos);
    if (end == std::string::npos) end = merge_text.size();
    std::string_view line(merge_text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    auto merge = parse_merge(line);
    if (!merge)
      throw Error("--merge-file '" + merge_file + "': line " + std::to_string(line_no) +
                  " is not a merge: expected two tokens separated by one space (GPT-2's "
                  "vocab.bpe)");
    merges_.push_back(std::move(*merge));
  }
  bpe_ = std::make_unique<BpeModel>(
      vocab_, merges_, "--vocab-file '" + vocab_file + "' / --merge-file '" + merge_file + "'");
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    byte_id_[b] = bpe_->id(unicode::to_byte_level({&byte, 1}));
    if (byte_id_[b] < 0)
      throw Error("--vocab-file '" + vocab_file + "' has no token for byte " + std::to_string(b) +
                  ": expected a byte-level vocabulary (GPT-2's encoder.json)");
  }
  eod_ = bpe_->id("<|endoftext|>");
  if (eod_ < 0)
    throw Error("--vocab-file '" + vocab_file +
                "' has no '<|endoftext|>' token: expected GPT-2's encoder.json");
}

std::vector<int32_t> Gpt2BpeTokenizer::encode(std::string_view text) const {
  std::vector<std::string_view> pieces;
  gpt2_split(text, pieces);
  std::vector<int32_t> ids, symbols;
  ids.reserve(text.size() / 3);
  for (const std::string_view piece : pieces) {
    if (bpe_->append_cached(piece, ids)) continue;
    symbols.resize(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) symbols[i] = byte_id_[static_cast<uint8_t>(piece[i])];
    bpe_->merge(symbols);
    bpe_->store(piece, symbols);
    ids.insert(ids.end(), symbols.begin(), symbols.end());
  }
  return ids;
}

std::string Gpt2BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string* tok = bpe_->token(ids[i]);
    if (tok == nullptr)
      throw Error("GPT2BPETokenizer: cannot decode id " + std::to_string(ids[i]) + " at position " +
                  std::to_string(i) + ": expected an id in [0, " + std::to_string(vocab_size()) +
                  ")");
    append_byte_level(out, *tok);
  }
  return out;
}

}  // namespace tessera::data
