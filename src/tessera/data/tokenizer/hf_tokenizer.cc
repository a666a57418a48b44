#include "tessera/data/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "tessera/core/file_io.h"
#include "tessera/data/tokenizer/gpt2_tokenizer.h"
#include "tessera/data/tokenizer/unicode.h"

namespace tessera::data {
namespace {

using hf::Json;
constexpr const char* kEodCandidates[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>",
                                          "<|im_end|>"};

int32_t checked_id(const Json& v, const std::string& what, const std::string& where) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= BpeModel::kMaxVocabId)
    throw Error(where + ": " + what + " has id " + v.dump() + ": expected an integer in [0, " +
                std::to_string(BpeModel::kMaxVocabId) + ")");
  return static_cast<int32_t>(v.get<int64_t>());
}

}  // namespace

HfTokenizer::HfTokenizer(const std::string& path) : source_("--tokenizer-model '" + path + "'") {
  load(read_file(path, "--tokenizer-model"));
}

HfTokenizer::HfTokenizer(const std::string& json_text, const std::string& source)
    : source_(source) {
  load(json_text);
}

HfTokenizer::~HfTokenizer() = default;

void HfTokenizer::load(const std::string& text) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(source_ + " is not valid JSON (" + one_line(e.what()) +
                "): expected a Hugging Face tokenizer.json");
  }
  try {
    if (!j.is_object())
      throw Error(source_ + ": expected a JSON object (a Hugging Face tokenizer.json)");
    const std::string where = source_;
    const Json& model = hf::member(j, "model", where);
    const std::string mwhere = where + ": model";
    const std::string type = hf::opt_string(model, "type", mwhere, "BPE");
    if (type != "BPE") throw Error(mwhere + " type '" + type + "' is not supported: expected BPE");
    if (model.contains("dropout") && !model["dropout"].is_null() &&
        !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0))
      throw Error(mwhere + ": BPE dropout is not supported: expected null");
    if (!hf::opt_string(model, "continuing_subword_prefix", mwhere).empty() ||
        !hf::opt_string(model, "end_of_word_suffix", mwhere).empty())
      throw Error(mwhere +
                  ": continuing_subword_prefix / end_of_word_suffix are not supported: "
                  "expected null");

    const Json& vocab_json = hf::member(model, "vocab", mwhere);
    if (!vocab_json.is_object()) throw Error(mwhere + ": 'vocab' must be an object of token -> id");
    std::vector<std::pair<std::string, int32_t>> vocab;
    vocab.reserve(vocab_json.size());
    for (const auto& [tok, id] : vocab_json.items())
      vocab.emplace_back(tok, checked_id(id, "vocab token '" + tok + "'", mwhere));

    const Json& merges_json = hf::member(model, "merges", mwhere);
    if (!merges_json.is_array()) throw Error(mwhere + ": 'merges' must be an array");
    std::vector<MergePair> merges;
    merges.reserve(merges_json.size());
    for (size_t r = 0; r < merges_json.size(); ++r) {
      const Json& m = merges_json[r];
      const std::string bad = mwhere + ": merge " + std::to_string(r + 1) +
                              " is malformed: expected \"left right\" or [\"left\", \"right\"]";
      if (m.is_string()) {
        auto merge = parse_merge(m.get_ref<const std::string&>());
        if (!merge) throw Error(bad);
        merges.push_back(std::move(*merge));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        throw Error(bad);
      }
    }
    bpe_ = std::make_unique<BpeModel>(vocab, merges, mwhere);

    const std::string unk = hf::opt_string(model, "unk_token", mwhere);
    if (!unk.empty()) {
      unk_ = bpe_->id(unk);
      if (unk_ < 0) throw Error(mwhere + ": unk_token '" + unk + "' is not in the vocabulary");
    }
    fuse_unk_ = hf::opt_bool(model, "fuse_unk", mwhere, false);
    byte_fallback_ = hf::opt_bool(model, "byte_fallback", mwhere, false);
    ignore_merges_ = hf::opt_bool(model, "ignore_merges", mwhere, false);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_token_[b] = bpe_->id(name);
    }

    const auto component = [&](const char* key) -> const Json& {
      static const Json null_json;
      return j.contains(key) ? j[key] : null_json;
    };
    normalizer_ = hf::make_normalizer(component("normalizer"), where);
    pre_tokenizer_ = hf::make_pre_tokenizer(component("pre_tokenizer"), where);
    decoder_ = hf::make_decoder(component("decoder"), where);

    vocab_size_ = bpe_->size();
    const Json& added = component("added_tokens");
    if (!added.is_null() && !added.is_array())
      throw Error(where + ": 'added_tokens' must be an array");
    std::vector<AddedToken> all_added;
    for (size_t k = 0; !added.is_null() && k < added.size(); ++k) {
      const std::string awhere = where + ": added_tokens[" + std::to_string(k) + "]";
      AddedToken t;
      t.content = hf::get_string(added[k], "content", awhere);
      if (t.content.empty()) throw Error(awhere + ": 'content' is empty: expected a token string");
      t.id = checked_id(hf::member(added[k], "id", awhere), "token '" + t.content + "'", awhere);
      t.special = hf::opt_bool(added[k], "special", awhere, false);
      const std::string* in_vocab = bpe_->token(t.id);
      if (in_vocab != nullptr && *in_vocab != t.content)
        throw Error(awhere + ": id " + std::to_string(t.id) + " is '" + t.content + "' here but '" +
                    *in_vocab + "' in the model's vocab: expected the same token");
      vocab_size_ = std::max<int64_t>(vocab_size_, t.id + 1);
      added_by_id_[t.id] = t.content;
      all_added.push_back(t);
      if (!t.special) matchable_.push_back(t);
    }
    std::stable_sort(matchable_.begin(), matchable_.end(), [](const auto& a, const auto& b) {
      return a.content.size() > b.content.size();
    });
    for (const char* name : kEodCandidates) {
      for (const auto& t : all_added)
        if (t.content == name) eod_ = t.id;
      if (!eod_ && bpe_->id(name) >= 0) eod_ = bpe_->id(name);
      if (eod_) break;
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(source_ + ": " + one_line(e.what()) + ": expected a Hugging Face tokenizer.json");
  }
}

int32_t HfTokenizer::eod() const {
  if (!eod_)
    throw Error(source_ +
                " has no end-of-document token: expected one of <|endoftext|>, "
                "<|end_of_text|>, </s>, <eos>, <|im_end|>");
  return *eod_;
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  size_t seg = 0, pos = 0;
  while (!matchable_.empty() && pos < text.size()) {
    const AddedToken* hit = nullptr;
    for (const auto& t : matchable_)
      if (text.compare(pos, t.content.size(), t.content) == 0) {
        hit = &t;
        break;
      }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    encode_segment(text.substr(seg, pos - seg), seg == 0, ids);
    ids.push_back(hit->id);
    pos += hit->content.size();
    seg = pos;
  }
  encode_segment(text.substr(seg), seg == 0, ids);
  return ids;
}

void HfTokenizer::encode_segment(std::string_view text, bool first,
                                 std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  std::vector<std::string> pieces(1, std::string(text));
  if (normalizer_) normalizer_->apply(pieces[0]);
  if (pre_tokenizer_) pre_tokenizer_->apply(pieces, first);
  for (const auto& p : pieces) encode_word(p, ids);
}

void HfTokenizer::encode_word(const std::string& word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t id = bpe_->id(word);
    if (id >= 0) {
      ids.push_back(id);
      return;
    }
  }
  if (bpe_->append_cached(word, ids)) return;
  std::vector<int32_t> symbols;
  bool last_unk = false;
  for (size_t i = 0; i < word.size();) {
    uint32_t cp;
    const size_t len = unicode::next_char(word, i, &cp);
    const int32_t id = bpe_->id(std::string_view(word).substr(i, len));
    if (id >= 0) {
      symbols.push_back(id);
      last_unk = false;
    } else {
      bool bytes_ok = byte_fallback_;
      for (size_t k = 0; bytes_ok && k < len; ++k)
        bytes_ok = byte_token_[static_cast<uint8_t>(word[i + k])] >= 0;
      if (bytes_ok) {
        for (size_t k = 0; k < len; ++k)
          symbols.push_back(byte_token_[static_cast<uint8_t>(word[i + k])]);
        last_unk = false;
      } else if (unk_ >= 0) {
        if (!(fuse_unk_ && last_unk)) symbols.push_back(unk_);
        last_unk = true;
      }  // no unk token: the character is dropped, as Hugging Face does
    }
    i += len;
  }
  bpe_->merge(symbols);
  bpe_->store(word, symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
}

std::string HfTokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto added = added_by_id_.find(ids[i]);
    const std::string* tok = added != added_by_id_.end() ? &added->second : bpe_->token(ids[i]);
    if (tok == nullptr)
      throw Error("HuggingFaceTokenizer: cannot decode id " + std::to_string(ids[i]) +
                  " at position " + std::to_string(i) + ": it is not in " + source_);
    tokens.push_back(*tok);
  }
  if (decoder_) decoder_->apply(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

}  // namespace tessera::data
