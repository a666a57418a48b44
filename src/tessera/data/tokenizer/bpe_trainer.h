// Trains a byte-level BPE (GPT-2 style: GPT-2's pre-tokenisation regex, the 256 bytes as the
// initial alphabet, so every byte string is encodable) and writes it as a Hugging Face
// tokenizer.json that HfTokenizer and Hugging Face's `tokenizers` read.
//
// Training is the classic greedy loop with incremental pair counts: words are counted once,
// each merge updates only the counts of the words that hold the merged pair, and a lazy
// max-heap finds the next pair. Deterministic: ties go to the pair of smaller (left, right) ids,
// and nothing depends on hash order or thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tessera/data/tokenizer/bpe.h"

namespace tessera::data {

struct TrainedBpe {
  std::vector<std::pair<std::string, int32_t>> vocab;  // byte-level token strings, ids dense
  std::vector<MergePair> merges;                       // in rank order
};

// Not thread-safe: one thread feeds and trains.
class BpeTrainer {
 public:
  // Counts the words (GPT-2 pieces) of one document.
  void add_text(std::string_view text);
  int64_t num_words() const { return static_cast<int64_t>(counts_.size()); }

  // Learns merges until the vocabulary (256 bytes + merges + `eod`) holds `vocab_size` tokens
  // or no pair occurs at least `min_frequency` times. `eod` gets the last id. Throws
  // tessera::Error if vocab_size < 257.
  TrainedBpe train(int64_t vocab_size, const std::string& eod = "<|endoftext|>",
                   int64_t min_frequency = 2) const;

 private:
  std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>> counts_;
};

// Writes a byte-level BPE as a Hugging Face tokenizer.json: model BPE with these vocab and
// merges, ByteLevel pre-tokenizer (GPT-2's regex, no prefix space) and decoder, and `eod` as a
// special added token (it must be in `vocab`). Written atomically (core/file_io.h AtomicFile):
// path + ".tmp", then renamed, so a failure leaves any previous file at `path` as it was.
// Throws tessera::Error naming the file if it cannot be written or `eod` is not in the
// vocabulary.
void write_byte_level_bpe_json(const std::string& path,
                               const std::vector<std::pair<std::string, int32_t>>& vocab,
                               const std::vector<MergePair>& merges, const std::string& eod);

}  // namespace tessera::data
