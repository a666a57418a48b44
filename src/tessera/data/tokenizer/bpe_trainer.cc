#include "tessera/data/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/data/tokenizer/gpt2_split.h"
#include "tessera/data/tokenizer/unicode.h"

namespace tessera::data {
namespace {

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

}  // namespace

void BpeTrainer::add_text(std::string_view text) {
  std::vector<std::string_view> pieces;
  gpt2_split(text, pieces);
  // Most pieces are words seen before: find them by view, build a string only for a new one.
  for (const auto p : pieces) {
    auto it = counts_.find(p);
    if (it == counts_.end()) it = counts_.emplace(std::string(p), 0).first;
    ++it->second;
  }
}

TrainedBpe BpeTrainer::train(int64_t vocab_size, const std::string& eod,
                             int64_t min_frequency) const {
  if (vocab_size < 257)
    throw Error("--vocab-size " + std::to_string(vocab_size) +
                " is too small: a byte-level BPE needs at least 257 (256 bytes and EOD)");
  // Words in byte order, so that nothing depends on the hash map's order.
  std::vector<std::pair<std::string_view, int64_t>> sorted(counts_.begin(), counts_.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [w, c] : sorted) {
    Word word{{}, c};
    for (const char ch : w) word.symbols.push_back(static_cast<uint8_t>(ch));
    words.push_back(std::move(word));
  }

  TrainedBpe out;
  std::vector<std::string> tokens(256);
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    tokens[b] = unicode::to_byte_level({&byte, 1});
  }

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;  // may hold stale entries
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w].symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t k = BpeModel::pair_key(s[i], s[i + 1]);
      pair_count[k] += words[w].count;
      auto& list = pair_words[k];
      if (list.empty() || list.back() != static_cast<int32_t>(w))
        list.push_back(static_cast<int32_t>(w));
    }
  }
  // Max-heap on count, ties to the smaller pair key; entries are re-checked when popped.
  using Entry = std::pair<int64_t, uint64_t>;
  const auto less = [](const Entry& a, const Entry& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(less)> heap(less);
  for (const auto& [k, c] : pair_count) heap.push({c, k});

  std::vector<int32_t> seen(words.size(), -1);
  std::vector<int32_t> next;  // a word's symbols after one merge; reused, swapped with the word's
  const int64_t max_tokens = vocab_size - 1;  // the last id is EOD
  while (static_cast<int64_t>(tokens.size()) < max_tokens && !heap.empty()) {
    const auto [count, key] = heap.top();
    heap.pop();
    const auto it = pair_count.find(key);
    const int64_t current = it == pair_count.end() ? 0 : it->second;
    if (current != count) {
      if (current > 0) heap.push({current, key});
      continue;
    }
    if (count < min_frequency) break;
    const int32_t a = static_cast<int32_t>(key >> 32), b = static_cast<int32_t>(key & 0xFFFFFFFFu);
    const int32_t merged = static_cast<int32_t>(tokens.size());
    tokens.push_back(tokens[a] + tokens[b]);
    out.merges.emplace_back(tokens[a], tokens[b]);

    std::vector<uint64_t> touched;
    auto add = [&](int32_t l, int32_t r, int64_t delta, int32_t w) {
      const uint64_t k = BpeModel::pair_key(l, r);
      pair_count[k] += delta;
      if (delta > 0) {
        auto& list = pair_words[k];
        if (list.empty() || list.back() != w) list.push_back(w);
        touched.push_back(k);
      }
    };
    const std::vector<int32_t> holders = std::move(pair_words[key]);
    pair_words.erase(key);
    for (const int32_t w : holders) {
      if (seen[w] == merged) continue;
      seen[w] = merged;
      auto& s = words[w].symbols;
      const int64_t c = words[w].count;
      next.clear();
      next.reserve(s.size());
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          if (!next.empty()) {
            add(next.back(), a, -c, w);
            add(next.back(), merged, c, w);
          }
          if (i + 2 < s.size()) {
            add(b, s[i + 2], -c, w);
            add(merged, s[i + 2], c, w);
          }
          add(a, b, -c, w);
          next.push_back(merged);
          i += 2;
        } else {
          next.push_back(s[i]);
          ++i;
        }
      }
      s.swap(next);
    }
    pair_count.erase(key);
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (const uint64_t k : touched) heap.push({pair_count[k], k});
  }
  for (size_t id = 0; id < tokens.size(); ++id)
    out.vocab.emplace_back(tokens[id], static_cast<int32_t>(id));
  out.vocab.emplace_back(eod, static_cast<int32_t>(tokens.size()));
  return out;
}

void write_byte_level_bpe_json(const std::string& path,
                               const std::vector<std::pair<std::string, int32_t>>& vocab,
                               const std::vector<MergePair>& merges, const std::string& eod) {
  using Ordered = nlohmann::ordered_json;
  std::vector<std::pair<std::string, int32_t>> by_id = vocab;
  std::sort(by_id.begin(), by_id.end(),
            [](const auto& x, const auto& y) { return x.second < y.second; });
  int32_t eod_id = -1;
  Ordered v = Ordered::object();
  for (const auto& [tok, id] : by_id) {
    v[tok] = id;
    if (tok == eod) eod_id = id;
  }
  if (eod_id < 0) throw Error(path + ": the vocabulary has no '" + eod + "' token to write");
  Ordered m = Ordered::array();
  for (const auto& [l, r] : merges) m.push_back(l + " " + r);
  const Ordered byte_level = {{"type", "ByteLevel"},
                              {"add_prefix_space", false},
                              {"trim_offsets", true},
                              {"use_regex", true}};
  Ordered j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = Ordered::array({Ordered{{"id", eod_id},
                                              {"content", eod},
                                              {"single_word", false},
                                              {"lstrip", false},
                                              {"rstrip", false},
                                              {"normalized", false},
                                              {"special", true}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = byte_level;
  j["post_processor"] = byte_level;
  j["decoder"] = byte_level;
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", std::move(v)},
                {"merges", std::move(m)}};
  // Atomic: an interrupted run leaves no half-written tokenizer.json that a later run would load.
  const std::string text = j.dump(1) + '\n';
  AtomicFile out(path);
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace tessera::data
