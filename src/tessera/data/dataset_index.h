// The index arithmetic of Megatron-Core's GPTDataset and BlendedDataset, as pure functions (no
// files): how --split carves documents, how many epochs a split needs, the document index, the
// sample index, the shuffle index and the blending indices. gpt_dataset.h puts them together and
// caches them on disk.
//
// Definitions follow megatron/core/datasets (gpt_dataset.py, helpers.cpp, utils.py,
// blended_megatron_dataset_builder.py). One deliberate difference: the shuffles draw from Philox
// (core/philox.h) keyed by the seed, not from numpy's RandomState, so the indices have
// Megatron's structure (which documents, epochs, sample boundaries, where the shuffles apply) but
// not numpy's permutations.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tessera::data {

enum class Split { kTrain = 0, kValid = 1, kTest = 2 };
inline constexpr std::array<const char*, 3> kSplitNames = {"train", "valid", "test"};

// A half-open range [begin, end) of documents (sequence ids of the indexed dataset).
struct DocumentRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// The document range of each split for `num_documents` documents, given the normalised --split
// fractions (train::split_fractions, Megatron's parse_and_normalize_split): with the cumulative
// fractions
// c_0 = 0, c_1, c_2, c_3, split i is [round(c_i * n), round(c_{i+1} * n)), rounding half to even
// as Python's round() does. A split whose weight is 0 is std::nullopt (Megatron builds no
// dataset for it).
std::array<std::optional<DocumentRange>, 3> split_document_ranges(
    const std::array<double, 3>& fractions, int64_t num_documents);

// What the three indices of one split are built from.
struct IndexPlan {
  int64_t num_tokens_per_epoch = 0;  // tokens in the split's documents
  int64_t num_epochs = 1;            // fewest epochs giving num_samples * T + extra tokens
  bool separate_final_epoch = false;
  int64_t num_samples_sans_final_epoch = 0;  // samples wholly before the final epoch
};

// Megatron's _get_num_epochs and the separate_final_epoch rule: with
//   sans = ((E - 1) * tokens_per_epoch - extra) / T, per_epoch = (tokens_per_epoch - extra) / T,
// the final epoch is shuffled on its own when num_samples - sans < int(0.8 * per_epoch).
// num_samples < 0 means "one epoch" (Megatron's None). Throws tessera::Error when the split has
// fewer than 1 + extra tokens, so no sample can be made.
IndexPlan plan_index(std::span<const int32_t> sequence_lengths, DocumentRange docs,
                     int64_t num_samples, int64_t seq_length, int add_extra_token);

// A uniform permutation of v in place (Fisher-Yates) drawn from Philox keyed by (seed, stream).
// Depends only on (seed, stream, v.size()) and the input order.
void philox_shuffle(std::span<int64_t> v, uint64_t seed, uint64_t stream);

// The document index: the documents of `docs` tiled num_epochs times and shuffled as one array;
// with separate_final_epoch the first num_epochs - 1 epochs are shuffled together and the last
// epoch on its own (Megatron's _build_document_index). Streams: 0 (all or the first epochs), 1
// (the final epoch).
std::vector<int64_t> build_document_index(DocumentRange docs, const IndexPlan& plan, uint64_t seed);

// Megatron's build_sample_idx: (num_samples + 1) pairs (position in document_index, token
// offset) flattened as [2 * (num_samples + 1)], num_samples = (E * tokens_per_epoch - extra) / T.
// Sample i is the tokens from pair i up to and including `extra` tokens past pair i + 1, so
// consecutive samples share `extra` tokens; samples span document boundaries.
std::vector<int64_t> build_sample_index(std::span<const int32_t> sequence_lengths,
                                        std::span<const int64_t> document_index, int64_t seq_length,
                                        const IndexPlan& plan, int add_extra_token);

// The shuffle index over num_samples samples: a permutation of [0, first) (stream 2) followed,
// when first < num_samples, by one of [first, num_samples) (stream 3) — Megatron's
// _build_shuffle_index, first = num_samples_sans_final_epoch when the final epoch is separate.
std::vector<int64_t> build_shuffle_index(int64_t first, int64_t num_samples, uint64_t seed);

// Megatron's build_blending_indices: for sample i the dataset d maximising
// weights[d] * max(i, 1) - taken[d] (the first such d on ties); dataset_index[i] = d and
// dataset_sample_index[i] = taken[d] before incrementing it. weights are normalised.
struct BlendingIndices {
  std::vector<int16_t> dataset_index;
  std::vector<int64_t> dataset_sample_index;
};
BlendingIndices build_blending_indices(std::span<const double> weights, int64_t size);

// Megatron's _get_size_per_split_per_dataset for one split: for each normalised weight w,
// ceil(ceil(target * w) * (1 + surplus)). Megatron builds each dataset with surplus 0.005 and
// blends sum(sizes with surplus 0) samples.
std::vector<int64_t> blend_sizes(std::span<const double> weights, int64_t target, double surplus);

// Weights divided by their sum (Megatron's normalize). Throws tessera::Error (naming `what`) for
// a negative or non-finite weight or a non-positive sum.
std::vector<double> normalize_weights(std::span<const double> weights, const std::string& what);

}  // namespace tessera::data
