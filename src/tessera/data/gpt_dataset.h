// Megatron-Core's GPTDataset and BlendedDataset over MMIDIDX files, and the builder that makes
// the train/valid/test datasets from --data-path (or --train/valid/test-data-path) and --split.
//
// GPTDataset (one prefix, one split): the documents of the split's range, tiled over as many
// epochs as the requested sample count needs, shuffled (document index), cut into samples of
// seq_length + 1 tokens that overlap by one and span documents (sample index), and the samples
// shuffled (shuffle index). Sample i is sample shuffle_index[i] of the sample index. Definitions
// and rules are Megatron's (dataset_index.h); the permutations come from Philox, not numpy.
//
// BlendedDataset: sample i is sample dataset_sample_index[i] of dataset dataset_index[i], the
// greedy weighted choice of build_blending_indices.
//
// Caching: the indices of each dataset are written once as .npy files under the cache directory
// (--data-cache-path; by default PREFIX/cache/GPTDataset_indices, next to the data, as Megatron
// does) named "<hash>-GPTDataset-<split>-{description.txt,document_index.npy,sample_index.npy,
// shuffle_index.npy}", the hash taken over a description of everything they depend on (data
// files' sizes, documents, sample count, seq_length, seed, format version). Later
// constructions memory-map them. A blend's indices are cached likewise
// ("<hash>-BlendedDataset-<split>-...") when --data-cache-path is given and rebuilt in memory
// otherwise (cheap, and what Megatron does).
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/data/dataset_index.h"
#include "tessera/data/index_cache.h"
#include "tessera/data/indexed_dataset.h"
#include "tessera/data/sampler.h"

namespace tessera::data {

// Whether a construction may build and write missing indices (the one builder: rank 0) or must
// find them in the cache (every other rank, after rank 0 is done).
enum class CacheMode { kBuildIfMissing, kLoadOnly };

struct GPTDatasetOptions {
  int64_t seq_length = 0;
  int64_t vocab_size = 0;  // every token read is checked to be in [0, vocab_size)
  uint64_t seed = 1234;    // --seed
  std::string cache_dir;   // --data-cache-path ("" for the default next to the data)
  CacheMode mode = CacheMode::kBuildIfMissing;
};

class GPTDataset final : public TokenSampler {
 public:
  // Builds or loads the indices of `docs` of `data` for at least `num_samples` samples (-1: one
  // epoch). Keeps `data` alive. Throws tessera::Error if the documents hold too few tokens for a
  // sample, the cache cannot be written (kBuildIfMissing) or holds no valid copy (kLoadOnly).
  GPTDataset(std::shared_ptr<const IndexedDataset> data, DocumentRange docs, Split split,
             int64_t num_samples, const GPTDatasetOptions& options);

  // Samples in the index (>= the number asked for; whole epochs' worth).
  int64_t num_samples() const override { return static_cast<int64_t>(shuffle_index_.size()); }
  int64_t seq_length() const override { return seq_length_; }
  int64_t vocab_size() const override { return vocab_; }
  // Tokens of sample shuffle_index[index]. Throws tessera::Error for an index out of range or a
  // token outside [0, vocab_size()), naming the .bin file, sequence and offset.
  void sample(int64_t index, int32_t* out) const override;
  // Sample `index` of the sample index, unshuffled (for tests and inspection).
  void unshuffled_sample(int64_t index, int32_t* out) const;

  std::span<const int64_t> document_index() const { return document_index_; }
  // 2 * (num_samples() + 1) values: (document_index position, offset) of each sample boundary.
  std::span<const int64_t> sample_index() const { return sample_index_; }
  std::span<const int64_t> shuffle_index() const { return shuffle_index_; }
  const IndexPlan& plan() const { return plan_; }
  // True when this construction built the indices (a cache miss), false when it mapped them.
  bool built_anew() const { return built_anew_; }
  // The description the cache key is the hash of, and the cache file prefix used.
  const std::string& description() const { return description_; }
  const std::string& cache_prefix() const { return cache_prefix_; }

 private:
  std::shared_ptr<const IndexedDataset> data_;
  int64_t seq_length_, vocab_;
  IndexPlan plan_;
  std::string description_, cache_prefix_;
  bool built_anew_ = false;
  NpyArray doc_file_, sample_file_, shuffle_file_;
  std::span<const int64_t> document_index_, sample_index_, shuffle_index_;
};

class BlendedDataset final : public TokenSampler {
 public:
  // Blends `datasets` (same seq_length and vocab) with normalised `weights` into `size`
  // samples. Each dataset must have at least as many samples as the blend takes from it.
  // cache_dir "" builds in memory; otherwise as GPTDataset (`description` names the parts).
  BlendedDataset(std::vector<std::unique_ptr<TokenSampler>> datasets, std::vector<double> weights,
                 int64_t size, Split split, const std::string& description,
                 const std::string& cache_dir, CacheMode mode);

  int64_t num_samples() const override { return size_; }
  int64_t seq_length() const override { return datasets_[0]->seq_length(); }
  int64_t vocab_size() const override { return datasets_[0]->vocab_size(); }
  void sample(int64_t index, int32_t* out) const override;

  std::span<const int16_t> dataset_index() const { return dataset_index_; }
  std::span<const int64_t> dataset_sample_index() const { return dataset_sample_index_; }
  bool built_anew() const { return built_anew_; }

 private:
  std::vector<std::unique_ptr<TokenSampler>> datasets_;
  int64_t size_;
  bool built_anew_ = false;
  BlendingIndices built_;  // when not mapped
  NpyArray index_file_, sample_file_;
  std::span<const int16_t> dataset_index_;
  std::span<const int64_t> dataset_sample_index_;
};

// Megatron's blend list: "PREFIX [PREFIX ...]" (unweighted) or "W1 PREFIX1 W2 PREFIX2 ..."
// (weighted; weights need not sum to 1). Throws tessera::Error naming `flag` for a mix of the
// two forms, a negative or malformed weight, or an empty list.
struct Blend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // empty: unweighted
};
Blend parse_blend(const std::vector<std::string>& words, const std::string& flag);

// What build_gpt_datasets makes the three splits from: either one blend carved by `split`
// fractions, or one blend per split (--train-data-path etc.; a split without one is absent).
struct DataSpec {
  std::optional<Blend> blend;                     // --data-path
  std::array<std::optional<Blend>, 3> per_split;  // --train/valid/test-data-path
  std::array<double, 3> split = {1, 0, 0};        // normalised --split
};

// The datasets of the three splits, each of at least sizes[i] samples (Megatron's
// BlendedMegatronDatasetBuilder): one prefix gives a GPTDataset; weighted prefixes give a
// BlendedDataset of sum(ceil(size * w)) samples over GPTDatasets of ceil(ceil(size * w) * 1.005)
// samples; unweighted prefixes give a BlendedDataset over one-epoch GPTDatasets, weighted by
// their sample counts, of min(size, their total) samples. A split with weight 0, without a
// blend, or of size 0 is nullptr, and so is a one-prefix validation or test split with fewer
// than 2 tokens. Throws tessera::Error on a missing or bad file or a training split too small
// for a sample.
std::array<std::unique_ptr<TokenSampler>, 3> build_gpt_datasets(const DataSpec& spec,
                                                                const std::array<int64_t, 3>& sizes,
                                                                const GPTDatasetOptions& options);

}  // namespace tessera::data
