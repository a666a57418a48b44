#include "tessera/data/tokenizer/bpe.h"

#include <atomic>
#include <queue>

#include "tessera/core/error.h"

namespace tessera::data {
namespace {

// Far above any real vocabulary (the largest are ~256k); keeps a corrupt id from allocating
// gigabytes for the id -> token table.
constexpr int32_t kMaxVocabId = 1 << 21;
constexpr size_t kMaxCachedBytes = 48;        // longer words are rare: not worth the memory
constexpr size_t kMaxCacheEntries = 1 << 18;  // per thread; the cache restarts when full

struct Hash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct ThreadCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> words;
};

ThreadCache& thread_cache(uint64_t owner) {
  thread_local ThreadCache cache;
  if (cache.owner != owner) {
    cache.words.clear();
    cache.owner = owner;
  }
  return cache;
}

std::atomic<uint64_t> next_uid{1};

}  // namespace

BpeModel::BpeModel(const std::vector<std::pair<std::string, int32_t>>& vocab,
                   std::span<const MergePair> merges, const std::string& source)
    : uid_(next_uid.fetch_add(1)) {
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab) {
    if (id < 0 || id >= kMaxVocabId)
      throw Error(source + ": token '" + tok + "' has id " + std::to_string(id) +
                  ": expected an id in [0, " + std::to_string(kMaxVocabId) + ")");
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(static_cast<size_t>(max_id + 1));
  has_id_.assign(static_cast<size_t>(max_id + 1), false);
  token_to_id_.reserve(vocab.size());
  for (const auto& [tok, id] : vocab) {
    if (has_id_[id])
      throw Error(source + ": id " + std::to_string(id) + " is given to both '" + id_to_token_[id] +
                  "' and '" + tok + "': expected distinct ids");
    if (!token_to_id_.emplace(tok, id).second)
      throw Error(source + ": token '" + tok + "' appears twice: expected distinct tokens");
    id_to_token_[id] = tok;
    has_id_[id] = true;
  }
  merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const int32_t ia = id(a), ib = id(b), ir = id(a + b);
    const std::string what =
        source + ": merge " + std::to_string(r + 1) + " ('" + a + "' '" + b + "')";
    if (ia < 0)
      throw Error(what + " names '" + a +
                  "', which is not in the vocabulary: expected a known token");
    if (ib < 0)
      throw Error(what + " names '" + b +
                  "', which is not in the vocabulary: expected a known token");
    if (ir < 0)
      throw Error(what + " makes '" + a + b +
                  "', which is not in the vocabulary: expected a known token");
    // A repeated merge keeps its first (lowest) rank, as GPT-2's dict(zip(merges, range)) would
    // not but Hugging Face does; real files have none.
    merges_.emplace(pair_key(ia, ib), Merge{static_cast<int32_t>(r), ir});
  }
}

void BpeModel::merge(std::vector<int32_t>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  if (n < 2) return;
  if (n == 2) {  // the common case of short words, without the queue
    const auto it = merges_.find(pair_key(symbols[0], symbols[1]));
    if (it != merges_.end()) symbols = {it->second.result};
    return;
  }
  // Symbols form a linked list; the queue holds candidate merges (rank, left position), checked
  // against the current symbols when popped because earlier merges may have consumed them.
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1;
  struct Cand {
    int32_t rank;
    int pos;
    int32_t left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> queue;
  auto push = [&](int i) {
    if (i < 0 || next[i] >= n) return;
    const int j = next[i];
    const auto it = merges_.find(pair_key(symbols[i], symbols[j]));
    if (it != merges_.end()) queue.push({it->second.rank, i, symbols[i], symbols[j]});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> dead(n, false);
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    const int j = next[c.pos];
    if (dead[c.pos] || j >= n || symbols[c.pos] != c.left || symbols[j] != c.right) continue;
    symbols[c.pos] = merges_.find(pair_key(c.left, c.right))->second.result;
    dead[j] = true;
    next[c.pos] = next[j];
    if (next[j] < n) prev[next[j]] = c.pos;
    if (prev[c.pos] >= 0) push(prev[c.pos]);
    push(c.pos);
  }
  int w = 0;
  for (int i = 0; i < n; i = next[i]) symbols[w++] = symbols[i];
  symbols.resize(w);
}

const std::vector<int32_t>* BpeModel::cached(std::string_view key) const {
  if (key.size() > kMaxCachedBytes) return nullptr;
  auto& cache = thread_cache(uid_);
  const auto it = cache.words.find(key);
  return it == cache.words.end() ? nullptr : &it->second;
}

void BpeModel::store(std::string_view key, const std::vector<int32_t>& ids) const {
  if (key.size() > kMaxCachedBytes) return;
  auto& cache = thread_cache(uid_);
  if (cache.words.size() >= kMaxCacheEntries) cache.words.clear();
  cache.words.emplace(std::string(key), ids);
}

}  // namespace tessera::data
