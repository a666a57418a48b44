#include "tessera/data/tokenizer/bpe.h"

#include <atomic>
#include <cstring>
#include <queue>

#include "tessera/core/error.h"

namespace tessera::data {
namespace {

constexpr size_t kMaxCachedBytes = 48;     // longer words are rare: not worth the memory
constexpr size_t kInitialSlots = 1 << 12;  // per thread; doubles when half full...
constexpr size_t kMaxSlots = 1 << 19;      // ...up to this, then the cache starts over

// Per-thread word -> ids memo: open addressing with linear probing over one slot array, keys
// and ids in two arenas, so a hit costs one hash and about one cache miss (std::unordered_map
// with a vector per entry cost three, and a third of the encoding time).
struct ThreadCache {
  struct Slot {
    uint64_t hash = 0;  // 0: empty
    uint32_t key_off = 0, ids_off = 0;
    uint16_t key_len = 0, n_ids = 0;
  };
  uint64_t owner = 0;
  std::vector<Slot> slots;
  std::string keys;
  std::vector<int32_t> ids;
  size_t used = 0;

  void reset(uint64_t new_owner) {
    owner = new_owner;
    slots.assign(kInitialSlots, Slot{});
    keys.clear();
    ids.clear();
    used = 0;
  }
  static uint64_t hash_of(std::string_view key) {
    const uint64_t h = std::hash<std::string_view>{}(key);
    return h == 0 ? 1 : h;
  }
  // The slot holding `key`, or the empty slot where it would go.
  Slot& find(std::string_view key, uint64_t h) {
    const size_t mask = slots.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots[i];
      if (s.hash == 0) return s;
      if (s.hash == h && s.key_len == key.size() &&
          std::memcmp(keys.data() + s.key_off, key.data(), key.size()) == 0)
        return s;
    }
  }
  void grow() {
    std::vector<Slot> old(slots.size() * 2);
    old.swap(slots);
    const size_t mask = slots.size() - 1;
    for (const Slot& s : old) {
      if (s.hash == 0) continue;
      size_t i = s.hash & mask;
      while (slots[i].hash != 0) i = (i + 1) & mask;
      slots[i] = s;
    }
  }
};

ThreadCache& thread_cache(uint64_t owner) {
  thread_local ThreadCache cache;
  if (cache.owner != owner) cache.reset(owner);
  return cache;
}

std::atomic<uint64_t> next_uid{1};

}  // namespace

std::optional<MergePair> parse_merge(std::string_view text) {
  const size_t space = text.find(' ');
  if (space == 0 || space == std::string_view::npos || space + 1 == text.size() ||
      text.find(' ', space + 1) != std::string_view::npos)
    return std::nullopt;
  return MergePair(text.substr(0, space), text.substr(space + 1));
}

BpeModel::BpeModel(const std::vector<std::pair<std::string, int32_t>>& vocab,
                   std::span<const MergePair> merges, const std::string& source, MergeRank rank)
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
  size_t slots = 16;
  int bits = 4;
  while (slots < 2 * merges.size()) slots *= 2, ++bits;
  merge_slots_.assign(slots, MergeSlot{});
  merge_mask_ = slots - 1;
  merge_shift_ = 64 - bits;
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
    const uint64_t key = pair_key(ia, ib);
    size_t i = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;
    while (merge_slots_[i].key != kNoPair && merge_slots_[i].key != key) i = (i + 1) & merge_mask_;
    const int32_t merge_rank = rank == MergeRank::kResultId ? ir : static_cast<int32_t>(r);
    if (merge_slots_[i].key == kNoPair) merge_slots_[i] = {key, Merge{merge_rank, ir}};
  }
}

void BpeModel::merge(std::vector<int32_t>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  if (n < 2) return;
  if (n == 2) {  // the common case of short words, without the queue
    if (const Merge* m = find_merge(symbols[0], symbols[1])) symbols = {m->result};
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
    if (const Merge* m = find_merge(symbols[i], symbols[j]))
      queue.push({m->rank, i, symbols[i], symbols[j]});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> dead(n, false);
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    const int j = next[c.pos];
    if (dead[c.pos] || j >= n || symbols[c.pos] != c.left || symbols[j] != c.right) continue;
    symbols[c.pos] = find_merge(c.left, c.right)->result;
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

bool BpeModel::append_cached(std::string_view key, std::vector<int32_t>& out) const {
  if (key.size() > kMaxCachedBytes) return false;
  auto& cache = thread_cache(uid_);
  const auto& slot = cache.find(key, ThreadCache::hash_of(key));
  if (slot.hash == 0) return false;
  const int32_t* ids = cache.ids.data() + slot.ids_off;
  out.insert(out.end(), ids, ids + slot.n_ids);
  return true;
}

void BpeModel::store(std::string_view key, std::span<const int32_t> ids) const {
  if (key.size() > kMaxCachedBytes || ids.size() > UINT16_MAX) return;
  auto& cache = thread_cache(uid_);
  if (2 * (cache.used + 1) > cache.slots.size()) {
    if (cache.slots.size() < kMaxSlots) {
      cache.grow();
    } else {
      cache.reset(uid_);
    }
  }
  const uint64_t h = ThreadCache::hash_of(key);
  auto& slot = cache.find(key, h);
  if (slot.hash != 0) return;  // already there
  slot.hash = h;
  slot.key_off = static_cast<uint32_t>(cache.keys.size());
  slot.key_len = static_cast<uint16_t>(key.size());
  slot.ids_off = static_cast<uint32_t>(cache.ids.size());
  slot.n_ids = static_cast<uint16_t>(ids.size());
  cache.keys.append(key);
  cache.ids.insert(cache.ids.end(), ids.begin(), ids.end());
  ++cache.used;
}

}  // namespace tessera::data
