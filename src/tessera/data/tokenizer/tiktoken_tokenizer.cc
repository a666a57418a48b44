#include "tessera/data/tokenizer/tiktoken_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"

namespace tessera::data {

const char* const kTiktokenPatternV1 =
    R"([^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
const char* const kTiktokenPatternV2 =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|)"
    R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
    R"(\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

// Standard base64 with '=' padding; std::nullopt for anything else.
std::optional<std::string> base64_decode(std::string_view in) {
  const auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (in.empty() || in.size() % 4 != 0) return std::nullopt;
  size_t pad = 0;
  while (pad < 2 && in[in.size() - 1 - pad] == '=') ++pad;
  std::string out;
  uint32_t acc = 0;
  for (size_t i = 0; i < in.size() - pad; ++i) {
    const int v = value(in[i]);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    if (i % 4 == 3) {
      out.push_back(static_cast<char>(acc >> 16));
      out.push_back(static_cast<char>(acc >> 8));
      out.push_back(static_cast<char>(acc));
      acc = 0;
    }
  }
  if (pad == 1) {  // 3 symbols: 18 bits, 2 bytes
    out.push_back(static_cast<char>(acc >> 10));
    out.push_back(static_cast<char>(acc >> 2));
  } else if (pad == 2) {  // 2 symbols: 12 bits, 1 byte
    out.push_back(static_cast<char>(acc >> 4));
  }
  return out;
}

std::string hex_byte(int b) {
  static const char* digits = "0123456789abcdef";
  return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

std::vector<std::string> read_megatron_json(const std::string& path, const std::string& text,
                                            int64_t max_ranks) {
  const std::string where = "--tokenizer-model '" + path + "'";
  const std::string expected =
      ": expected Megatron's tiktoken JSON, a list of {\"rank\": i, \"token_bytes\": base64, "
      "\"token_str\": ...}";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + " is not valid JSON (" + e.what() + ")" + expected);
  }
  if (!j.is_array()) throw Error(where + " is not a JSON list" + expected);
  std::vector<std::string> ranks;
  for (size_t i = 0; i < j.size(); ++i) {
    if (max_ranks >= 0 && static_cast<int64_t>(i) >= max_ranks) break;
    const auto& e = j[i];
    const std::string entry = where + ": entry " + std::to_string(i);
    if (!e.is_object() || !e.contains("rank") || !e.contains("token_bytes") ||
        !e["rank"].is_number_integer() || !e["token_bytes"].is_string())
      throw Error(entry + " lacks an integer \"rank\" or a string \"token_bytes\"" + expected);
    if (e["rank"].get<int64_t>() != static_cast<int64_t>(i))
      throw Error(entry + " has rank " + std::to_string(e["rank"].get<int64_t>()) +
                  ": expected rank == position in the list");
    auto bytes = base64_decode(e["token_bytes"].get<std::string>());
    if (!bytes) throw Error(entry + ": \"token_bytes\" is not base64" + expected);
    if (i < 256 && *bytes != std::string(1, static_cast<char>(i)))
      throw Error(entry + " is not the single byte " + hex_byte(static_cast<int>(i)) +
                  ": expected ranks 0..255 to be the 256 bytes in order");
    ranks.push_back(std::move(*bytes));
  }
  return ranks;
}

std::vector<std::string> read_tiktoken_lines(const std::string& path, const std::string& text,
                                             int64_t max_ranks) {
  const std::string where = "--tokenizer-model '" + path + "'";
  std::vector<std::string> by_rank;
  std::vector<bool> seen;
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string at = where + ": line " + std::to_string(line_no);
    const size_t space = line.find(' ');
    const auto bad = [&](const std::string& why) {
      return Error(at + " " + why +
                   ": expected \"<base64 token> <rank>\" (a tiktoken BPE file), or a .json "
                   "file in Megatron's format");
    };
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
      throw bad("is not two fields");
    auto bytes = base64_decode(line.substr(0, space));
    if (!bytes) throw bad("has a token that is not base64");
    const std::string_view rank_text = line.substr(space + 1);
    int64_t rank = 0;
    if (rank_text.empty() || rank_text.size() > 9 ||
        !std::all_of(rank_text.begin(), rank_text.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
      throw bad("has a rank that is not a number below 10^9");
    for (char c : rank_text) rank = rank * 10 + (c - '0');
    if (rank >= BpeModel::kMaxVocabId)
      throw Error(at + " has rank " + std::to_string(rank) + ": expected ranks below " +
                  std::to_string(BpeModel::kMaxVocabId));
    if (rank >= static_cast<int64_t>(by_rank.size())) {
      by_rank.resize(static_cast<size_t>(rank) + 1);
      seen.resize(static_cast<size_t>(rank) + 1, false);
    }
    if (seen[rank])
      throw Error(at + " repeats rank " + std::to_string(rank) + ": expected each rank once");
    seen[rank] = true;
    by_rank[rank] = std::move(*bytes);
  }
  for (size_t r = 0; r < seen.size(); ++r)
    if (!seen[r])
      throw Error(where + " has no token of rank " + std::to_string(r) + " (the largest is " +
                  std::to_string(seen.size() - 1) + "): expected ranks 0..n-1, each once");
  if (max_ranks >= 0 && static_cast<int64_t>(by_rank.size()) > max_ranks)
    by_rank.resize(static_cast<size_t>(max_ranks));
  return by_rank;
}

}  // namespace

std::vector<std::string> read_tiktoken_ranks(const std::string& path, int64_t max_ranks) {
  const std::string text = read_file(path, "--tokenizer-model");
  const bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  std::vector<std::string> ranks =
      json ? read_megatron_json(path, text, max_ranks) : read_tiktoken_lines(path, text, max_ranks);
  if (ranks.empty())
    throw Error("--tokenizer-model '" + path + "' holds no tokens: expected a tiktoken BPE file");
  return ranks;
}

TiktokenTokenizer::TiktokenTokenizer(const std::vector<std::string>& ranks, Config config,
                                     const std::string& source)
    : config_(std::move(config)) {
  const int64_t n_ranks = static_cast<int64_t>(ranks.size());
  const int64_t n_special = static_cast<int64_t>(config_.special_tokens.size());
  // Ranks and special tokens must tile [0, vocab_size) exactly, as Megatron asserts: a hole
  // would be an id that decodes to nothing.
  const bool specials_first = config_.special_offset < config_.rank_offset;
  const bool tiled = specials_first
                         ? config_.special_offset == 0 && config_.rank_offset == n_special &&
                               n_special + n_ranks == config_.vocab_size
                         : config_.rank_offset == 0 && config_.special_offset == n_ranks &&
                               n_special + n_ranks == config_.vocab_size;
  if (!tiled)
    throw Error(source + ": " + std::to_string(n_ranks) + " ranks and " +
                std::to_string(n_special) + " special tokens do not make a vocabulary of " +
                std::to_string(config_.vocab_size) + ": expected ranks + special tokens == size");
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(ranks.size());
  for (int64_t r = 0; r < n_ranks; ++r)
    vocab.emplace_back(ranks[r], static_cast<int32_t>(r + config_.rank_offset));
  std::unordered_map<std::string_view, int32_t> index;
  index.reserve(ranks.size());
  for (int64_t r = 0; r < n_ranks; ++r) index.emplace(ranks[r], static_cast<int32_t>(r));
  for (const auto& s : config_.special_tokens)
    if (index.count(s))
      throw Error(source + ": special token '" + s +
                  "' is also a mergeable token: expected special tokens outside the ranks");
  // tiktoken has no merge list: every split of a token into two tokens is a merge, ranked by
  // the token it makes (MergeRank::kResultId).
  std::vector<MergePair> merges;
  for (int64_t r = 0; r < n_ranks; ++r) {
    const std::string_view t = ranks[r];
    for (size_t k = 1; k < t.size(); ++k)
      if (index.count(t.substr(0, k)) && index.count(t.substr(k)))
        merges.emplace_back(std::string(t.substr(0, k)), std::string(t.substr(k)));
  }
  bpe_ = std::make_unique<BpeModel>(vocab, merges, source, BpeModel::MergeRank::kResultId);
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    byte_id_[b] = bpe_->id(std::string_view(&byte, 1));
    if (byte_id_[b] < 0)
      throw Error(source + " has no token for the single byte " + hex_byte(b) +
                  ": expected every byte among the ranks");
  }
  regex_ = std::make_unique<Regex>(config_.pattern, source);
}

void TiktokenTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  // A piece that is a token is that token, even where merging its bytes would not reach it.
  const int32_t whole = bpe_->id(piece);
  if (whole >= 0) {
    ids.push_back(whole);
    return;
  }
  if (bpe_->append_cached(piece, ids)) return;
  std::vector<int32_t> symbols(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) symbols[i] = byte_id_[static_cast<uint8_t>(piece[i])];
  bpe_->merge(symbols);
  bpe_->store(piece, symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
}

std::vector<int32_t> TiktokenTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  if (config_.bos >= 0) ids.push_back(config_.bos);
  size_t last = 0;
  for (const auto& [b, e] : regex_->find_all(text)) {
    if (b > last) encode_piece(text.substr(last, b - last), ids);
    encode_piece(text.substr(b, e - b), ids);
    last = e;
  }
  if (last < text.size()) encode_piece(text.substr(last), ids);
  return ids;
}

std::string TiktokenTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  const int64_t n_special = static_cast<int64_t>(config_.special_tokens.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t s = static_cast<int64_t>(ids[i]) - config_.special_offset;
    if (s >= 0 && s < n_special) {
      out += config_.special_tokens[s];
      continue;
    }
    const std::string* tok = bpe_->token(ids[i]);
    if (tok == nullptr)
      throw Error(config_.name + ": cannot decode id " + std::to_string(ids[i]) + " at position " +
                  std::to_string(i) + ": expected an id in [0, " +
                  std::to_string(config_.vocab_size) + ")");
    out += *tok;
  }
  return out;
}

std::unique_ptr<Tokenizer> make_megatron_tiktokenizer(
    const std::string& path, const std::string& pattern, int64_t vocab_size, int64_t num_special,
    const std::vector<std::string>& special_tokens) {
  TiktokenTokenizer::Config c;
  c.name = "TikTokenizer";
  if (pattern == "v1") {
    c.pattern = kTiktokenPatternV1;
  } else if (pattern == "v2") {
    c.pattern = kTiktokenPatternV2;
  } else {
    throw Error("--tokenizer-type TikTokenizer needs --tiktoken-pattern v1 or v2" +
                (pattern.empty() ? std::string() : ", not '" + pattern + "'"));
  }
  c.vocab_size = vocab_size > 0 ? vocab_size : int64_t{1} << 17;  // Megatron's fallback
  std::vector<std::string> specials = special_tokens;
  if (specials.empty()) specials = {"<unk>", "<s>", "</s>"};
  const std::set<std::string> unique(specials.begin(), specials.end());
  if (unique.size() != specials.size())
    throw Error("--tiktoken-special-tokens lists a token twice: expected distinct tokens");
  for (const char* required : {"<unk>", "<s>", "</s>"})
    if (!unique.count(required))
      throw Error(std::string("--tiktoken-special-tokens lacks '") + required +
                  "': expected a list holding <unk>, <s> and </s>");
  if (num_special < static_cast<int64_t>(specials.size()) || num_special >= c.vocab_size)
    throw Error("--tiktoken-num-special-tokens " + std::to_string(num_special) +
                ": expected at least the " + std::to_string(specials.size()) +
                " special tokens and below the vocabulary size " + std::to_string(c.vocab_size));
  for (int64_t i = static_cast<int64_t>(specials.size()); i < num_special; ++i)
    specials.push_back("<SPECIAL_" + std::to_string(i) + ">");
  const int64_t inner = c.vocab_size - num_special;
  const std::vector<std::string> ranks = read_tiktoken_ranks(path, inner);
  if (static_cast<int64_t>(ranks.size()) < inner)
    throw Error("--tokenizer-model '" + path + "' holds " + std::to_string(ranks.size()) +
                " tokens: --vocab-size " + std::to_string(c.vocab_size) + " with " +
                std::to_string(num_special) + " special tokens needs " + std::to_string(inner) +
                " (give --vocab-size " + std::to_string(ranks.size() + num_special) + ")");
  const auto id_of = [&](const std::string& s) {
    return static_cast<int32_t>(std::find(specials.begin(), specials.end(), s) - specials.begin());
  };
  c.eod = id_of("</s>");
  c.special_tokens = std::move(specials);
  c.special_offset = 0;
  c.rank_offset = static_cast<int32_t>(num_special);
  return std::make_unique<TiktokenTokenizer>(ranks, std::move(c),
                                             "--tokenizer-model '" + path + "'");
}

std::unique_ptr<Tokenizer> make_llama3_tokenizer(const std::string& path) {
  const std::vector<std::string> ranks = read_tiktoken_ranks(path, -1);
  TiktokenTokenizer::Config c;
  c.name = "Llama3Tokenizer";
  c.pattern = kLlama3Pattern;
  c.special_tokens = {"<|begin_of_text|>",
                      "<|end_of_text|>",
                      "<|reserved_special_token_0|>",
                      "<|reserved_special_token_1|>",
                      "<|reserved_special_token_2|>",
                      "<|reserved_special_token_3|>",
                      "<|start_header_id|>",
                      "<|end_header_id|>",
                      "<|reserved_special_token_4|>",
                      "<|eot_id|>"};
  constexpr int kReserved = 256;  // Llama 3's special tokens, reserved ones included
  for (int i = 5; i < kReserved - 5; ++i)
    c.special_tokens.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  c.rank_offset = 0;
  c.special_offset = static_cast<int32_t>(ranks.size());
  c.vocab_size = static_cast<int64_t>(ranks.size()) + kReserved;
  c.bos = c.special_offset;
  c.eod = c.special_offset + 1;
  return std::make_unique<TiktokenTokenizer>(ranks, std::move(c),
                                             "--tokenizer-model '" + path + "'");
}

}  // namespace tessera::data
