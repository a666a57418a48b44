// Byte-pair-encoding model: a vocabulary (token string <-> id) and ranked merges, applied to the
// symbols of one pre-tokenised word the way GPT-2 and Hugging Face's BPE do (repeatedly merge
// the adjacent pair of lowest rank, the leftmost first among equals).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::data {

using MergePair = std::pair<std::string, std::string>;

// Hash of a std::unordered_map<std::string, ..., StringHash, std::equal_to<>>, which then finds
// a std::string_view key without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// A merge written as "left right" (a line of GPT-2's vocab.bpe, a string in tokenizer.json's
// merges): its two tokens, or std::nullopt unless `text` is exactly two non-empty tokens
// separated by one space. The caller reports the error, naming its file and line.
std::optional<MergePair> parse_merge(std::string_view text);

// Immutable after construction; every const method is safe from several threads.
class BpeModel {
 public:
  // Ids must be below this. Far above any real vocabulary (the largest are ~256k); keeps a
  // corrupt id from allocating gigabytes for the id -> token table.
  static constexpr int32_t kMaxVocabId = 1 << 21;

  // A pair of ids (a, b) as one 64-bit key: a in the high half, b in the low half, so keys of
  // ids >= 0 order as the pairs do.
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  // How merges are ranked. kListOrder: a merge's rank is its index in `merges` (GPT-2's
  // vocab.bpe, tokenizer.json). kResultId: its rank is the id of the token it makes, so several
  // merges making one token share a rank and the leftmost applies first: tiktoken's rule (merge
  // the adjacent pair whose concatenation has the lowest rank), when ids are the ranks.
  enum class MergeRank { kListOrder, kResultId };

  // `vocab`: (token, id) pairs; ids need not be dense (holes decode as errors) but must be
  // in [0, kMaxVocabId) and distinct, tokens distinct. `merges` in rank order (rank = index),
  // or in any order with MergeRank::kResultId.
  // `source` names the file for error messages. Throws tessera::Error for a duplicate id or token,
  // a merge naming a token that is not in the vocabulary, or a merge whose result is not in it.
  BpeModel(const std::vector<std::pair<std::string, int32_t>>& vocab,
           std::span<const MergePair> merges, const std::string& source,
           MergeRank rank = MergeRank::kListOrder);

  // Id of a token string, or -1.
  int32_t id(std::string_view token) const {
    const auto it = token_to_id_.find(token);
    return it == token_to_id_.end() ? -1 : it->second;
  }
  // Token string of an id; nullptr for an id outside the vocabulary.
  const std::string* token(int32_t id) const {
    if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size()) || !has_id_[id]) return nullptr;
    return &id_to_token_[id];
  }
  // One more than the largest id.
  int64_t size() const { return static_cast<int64_t>(id_to_token_.size()); }

  // Merges `symbols` (the initial ids of one word) in place until no merge applies.
  void merge(std::vector<int32_t>& symbols) const;

  // Per-thread memo for words: append_cached() appends the cached ids of `key` to `out` and
  // returns true, or returns false; store() adds an entry. Keys are the caller's (e.g. the
  // word's raw bytes); each thread's cache belongs to the last model that used it.
  bool append_cached(std::string_view key, std::vector<int32_t>& out) const;
  void store(std::string_view key, std::span<const int32_t> ids) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_to_id_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  // The merges as an open-addressing table keyed by pair_key (kNoPair: empty slot): the
  // lookup is the inner loop of merging a new word.
  static constexpr uint64_t kNoPair = ~uint64_t{0};
  struct MergeSlot {
    uint64_t key = kNoPair;
    Merge merge{};
  };
  const Merge* find_merge(int32_t a, int32_t b) const {
    const uint64_t key = pair_key(a, b);
    for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;; i = (i + 1) & merge_mask_) {
      const MergeSlot& s = merge_slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kNoPair) return nullptr;
    }
  }
  std::vector<MergeSlot> merge_slots_;
  size_t merge_mask_ = 0;
  int merge_shift_ = 64;
  uint64_t uid_;  // identifies this model's entries in the per-thread caches
};

}  // namespace tessera::data
