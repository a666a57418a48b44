#include "tessera/data/gpt_dataset.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera::data {
namespace {

// Bump when the index definitions or the RNG change: old caches then miss instead of being used.
constexpr const char* kFormat = "tessera-indices-v1 (Philox4x32-10 Fisher-Yates)";
// Megatron's add_extra_token_to_sequence: a sample reads seq_length + 1 tokens, so a split needs
// at least 1 + kAddExtraToken tokens for one.
constexpr int kAddExtraToken = 1;

std::string default_cache_dir(const std::string& prefix) {
  // Megatron's default: os.path.join(path_prefix, "cache", "GPTDataset_indices").
  return prefix + "/cache/GPTDataset_indices";
}

int64_t file_size_or_zero(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<int64_t>(n);
}

// Tokens in the documents `docs` of `ds`.
int64_t tokens_in(const IndexedDataset& ds, DocumentRange docs) {
  int64_t tokens = 0;
  for (int64_t d = docs.begin; d < docs.end; ++d) tokens += ds.sequence_length(d);
  return tokens;
}

std::string format_double(double x) {
  std::ostringstream s;
  s.precision(17);
  s << x;
  return s.str();
}

}  // namespace

GPTDataset::GPTDataset(std::shared_ptr<const IndexedDataset> data, DocumentRange docs, Split split,
                       int64_t num_samples, const GPTDatasetOptions& options)
    : data_(std::move(data)), seq_length_(options.seq_length), vocab_(options.vocab_size) {
  const IndexedDataset& ds = *data_;
  std::ostringstream d;
  d << "class: GPTDataset\nformat: " << kFormat << "\ndataset_path: " << ds.prefix()
    << "\nidx_bytes: " << file_size_or_zero(ds.idx_path())
    << "\nbin_bytes: " << file_size_or_zero(ds.bin_path())
    << "\nnum_sequences: " << ds.num_sequences() << "\nnum_tokens: " << ds.num_tokens()
    << "\nindex_split: " << kSplitNames[static_cast<int>(split)] << "\ndocuments: [" << docs.begin
    << ", " << docs.end << ")\nnum_samples: " << num_samples << "\nsequence_length: " << seq_length_
    << "\nadd_extra_token_to_sequence: " << kAddExtraToken << "\nrandom_seed: " << options.seed
    << "\n";
  description_ = d.str();
  const std::string dir =
      options.cache_dir.empty() ? default_cache_dir(ds.prefix()) : options.cache_dir;
  cache_prefix_ = dir + "/" + description_hash(description_) + "-GPTDataset-" +
                  kSplitNames[static_cast<int>(split)] + "-";
  const std::string desc_path = cache_prefix_ + "description.txt";
  const std::string doc_path = cache_prefix_ + "document_index.npy";
  const std::string sample_path = cache_prefix_ + "sample_index.npy";
  const std::string shuffle_path = cache_prefix_ + "shuffle_index.npy";

  std::vector<int32_t> lengths(static_cast<size_t>(ds.num_sequences()));
  for (int64_t s = 0; s < ds.num_sequences(); ++s)
    lengths[s] = static_cast<int32_t>(ds.sequence_length(s));
  // plan_index makes the same check; this one comes first for its message, which names the
  // prefix and the split.
  const int64_t tokens = tokens_in(ds, docs);
  if (tokens < 1 + kAddExtraToken)
    throw Error(ds.prefix() + ": the " + kSplitNames[static_cast<int>(split)] +
                " split (documents [" + std::to_string(docs.begin) + ", " +
                std::to_string(docs.end) + ")) holds " + std::to_string(tokens) +
                " tokens: too few for any sample (check --split and the data)");
  plan_ = plan_index(lengths, docs, num_samples, seq_length_, kAddExtraToken);

  bool exists = false;
  const bool hit = read_text_file(desc_path, &exists) == description_ && exists;
  if (!hit) {
    if (options.mode == CacheMode::kLoadOnly)
      throw Error(desc_path + ": the " + std::string(kSplitNames[static_cast<int>(split)]) +
                  " indices of " + ds.prefix() +
                  " are not in the cache after rank 0 built them (is --data-cache-path on a "
                  "file system every rank sees?)");
    const std::vector<int64_t> doc_index = build_document_index(docs, plan_, options.seed);
    const std::vector<int64_t> sample_index =
        build_sample_index(lengths, doc_index, seq_length_, plan_, kAddExtraToken);
    const int64_t total = static_cast<int64_t>(sample_index.size()) / 2 - 1;
    const std::vector<int64_t> shuffle_index =
        build_shuffle_index(plan_.separate_final_epoch ? plan_.num_samples_sans_final_epoch : total,
                            total, options.seed);
    write_npy(doc_path, doc_index);
    write_npy(sample_path, sample_index);
    write_npy(shuffle_path, shuffle_index);
    write_text_file(desc_path, description_);  // last: its presence marks a complete set
    built_anew_ = true;
  }
  doc_file_ = NpyArray(doc_path);
  sample_file_ = NpyArray(sample_path);
  shuffle_file_ = NpyArray(shuffle_path);
  document_index_ = doc_file_.i64();
  sample_index_ = sample_file_.i64();
  shuffle_index_ = shuffle_file_.i64();
  // A cached set must be consistent with itself before any read trusts it.
  const int64_t n = static_cast<int64_t>(shuffle_index_.size());
  bool ok = static_cast<int64_t>(sample_index_.size()) == 2 * (n + 1) &&
            static_cast<int64_t>(document_index_.size()) == plan_.num_epochs * docs.size();
  for (int64_t x : document_index_) ok = ok && x >= docs.begin && x < docs.end;
  for (int64_t x : shuffle_index_) ok = ok && x >= 0 && x < n;
  for (size_t i = 0; ok && i < sample_index_.size(); i += 2)
    ok = sample_index_[i] >= 0 && sample_index_[i] < static_cast<int64_t>(document_index_.size()) &&
         sample_index_[i + 1] >= 0;
  if (!ok)
    throw Error(cache_prefix_ + "*: cached indices are inconsistent; delete them to rebuild");
}

void GPTDataset::unshuffled_sample(int64_t index, int32_t* out) const {
  if (index < 0 || index >= num_samples())
    throw Error(data_->prefix() + ": sample " + std::to_string(index) + " out of range [0, " +
                std::to_string(num_samples()) + ")");
  const int64_t p0 = sample_index_[2 * index], o0 = sample_index_[2 * index + 1];
  const int64_t p1 = sample_index_[2 * index + 2], o1 = sample_index_[2 * index + 3];
  int64_t written = 0;
  const auto take = [&](int64_t pos, int64_t offset, int64_t length) {
    if (written + length > seq_length_ + 1)
      throw Error(cache_prefix_ + "*: sample " + std::to_string(index) +
                  " spans more tokens than seq_length + 1; delete the cached indices");
    data_->get(document_index_[pos], offset, length, out + written);
    for (int64_t t = 0; t < length; ++t)
      if (out[written + t] < 0 || out[written + t] >= vocab_)
        throw Error(data_->bin_path() + ": token " + std::to_string(out[written + t]) +
                    " at sequence " + std::to_string(document_index_[pos]) + ", offset " +
                    std::to_string(offset + t) + " is outside the vocabulary [0, " +
                    std::to_string(vocab_) + ") (--vocab-size or the tokenizer's)");
    written += length;
  };
  if (p0 == p1) {
    take(p0, o0, o1 - o0 + 1);
  } else {
    take(p0, o0, data_->sequence_length(document_index_[p0]) - o0);
    for (int64_t p = p0 + 1; p < p1; ++p) take(p, 0, data_->sequence_length(document_index_[p]));
    take(p1, 0, o1 + 1);
  }
  if (written != seq_length_ + 1)
    throw Error(cache_prefix_ + "*: sample " + std::to_string(index) + " has " +
                std::to_string(written) +
                " tokens, expected seq_length + 1; delete the cached "
                "indices");
}

void GPTDataset::sample(int64_t index, int32_t* out) const {
  if (index < 0 || index >= num_samples())
    throw Error(data_->prefix() + ": sample " + std::to_string(index) + " out of range [0, " +
                std::to_string(num_samples()) + ")");
  unshuffled_sample(shuffle_index_[index], out);
}

BlendedDataset::BlendedDataset(std::vector<std::unique_ptr<TokenSampler>> datasets,
                               std::vector<double> weights, int64_t size, Split split,
                               const std::string& description, const std::string& cache_dir,
                               CacheMode mode)
    : datasets_(std::move(datasets)), size_(size) {
  TESSERA_CHECK(!datasets_.empty() && datasets_.size() == weights.size());
  std::ostringstream d;
  d << "class: BlendedDataset\nformat: " << kFormat
    << "\nindex_split: " << kSplitNames[static_cast<int>(split)] << "\nsize: " << size
    << "\nweights:";
  for (double w : weights) d << " " << format_double(w);
  d << "\n" << description;
  const std::string text = d.str();
  std::vector<int64_t> counts(datasets_.size(), 0);
  if (cache_dir.empty()) {
    built_ = build_blending_indices(weights, size);
    dataset_index_ = built_.dataset_index;
    dataset_sample_index_ = built_.dataset_sample_index;
    built_anew_ = true;
  } else {
    const std::string prefix = cache_dir + "/" + description_hash(text) + "-BlendedDataset-" +
                               kSplitNames[static_cast<int>(split)] + "-";
    bool exists = false;
    if (read_text_file(prefix + "description.txt", &exists) != text || !exists) {
      if (mode == CacheMode::kLoadOnly)
        throw Error(prefix +
                    "description.txt: the blend's indices are not in the cache after "
                    "rank 0 built them (is --data-cache-path on a file system every rank sees?)");
      const BlendingIndices b = build_blending_indices(weights, size);
      write_npy(prefix + "dataset_index.npy", b.dataset_index);
      write_npy(prefix + "dataset_sample_index.npy", b.dataset_sample_index);
      write_text_file(prefix + "description.txt", text);
      built_anew_ = true;
    }
    index_file_ = NpyArray(prefix + "dataset_index.npy");
    sample_file_ = NpyArray(prefix + "dataset_sample_index.npy");
    dataset_index_ = index_file_.i16();
    dataset_sample_index_ = sample_file_.i64();
  }
  bool ok = static_cast<int64_t>(dataset_index_.size()) == size &&
            dataset_sample_index_.size() == dataset_index_.size();
  for (size_t i = 0; ok && i < dataset_index_.size(); ++i) {
    const int16_t k = dataset_index_[i];
    ok = k >= 0 && static_cast<size_t>(k) < datasets_.size() && dataset_sample_index_[i] >= 0;
    if (ok) counts[k] = std::max(counts[k], dataset_sample_index_[i] + 1);
  }
  if (!ok) throw Error("cached blending indices are inconsistent; delete them to rebuild");
  for (size_t k = 0; k < datasets_.size(); ++k)
    if (counts[k] > datasets_[k]->num_samples())
      throw Error("blend: dataset " + std::to_string(k) + " has " +
                  std::to_string(datasets_[k]->num_samples()) + " samples, the blend takes " +
                  std::to_string(counts[k]));
}

void BlendedDataset::sample(int64_t index, int32_t* out) const {
  if (index < 0 || index >= size_)
    throw Error("blended dataset: sample " + std::to_string(index) + " out of range [0, " +
                std::to_string(size_) + ")");
  datasets_[dataset_index_[index]]->sample(dataset_sample_index_[index], out);
}

Blend parse_blend(const std::vector<std::string>& words, const std::string& flag) {
  if (words.empty()) throw Error(flag + ": no dataset prefix given");
  const auto number = [](const std::string& s, double* out) {
    size_t used = 0;
    try {
      *out = std::stod(s, &used);
    } catch (const std::exception&) {
      return false;
    }
    return used == s.size();
  };
  Blend b;
  double w = 0;
  // Megatron's get_blend_from_list: an even-length list whose even entries are all numbers is
  // weighted; otherwise every entry is a prefix. A list that mixes the forms is refused rather
  // than read as prefixes named like numbers.
  size_t numeric = 0;
  for (size_t i = 0; i < words.size(); i += 2) numeric += number(words[i], &w) ? 1 : 0;
  if (words.size() % 2 == 0 && numeric == words.size() / 2) {
    for (size_t i = 0; i < words.size(); i += 2) {
      number(words[i], &w);
      if (!std::isfinite(w) || w < 0)
        throw Error(flag + ": weight '" + words[i] + "' of " + words[i + 1] +
                    " must be a number >= 0");
      b.weights.push_back(w);
      b.prefixes.push_back(words[i + 1]);
    }
    normalize_weights(b.weights, flag);  // throws for a zero sum
    return b;
  }
  if (numeric > 0)
    throw Error(flag +
                ": expected either prefixes (A B ...) or weight-prefix pairs "
                "(0.3 A 0.7 B ...), got '" +
                words[0] + (words.size() > 1 ? " ..." : "") +
                "' with a weight missing or malformed");
  b.prefixes = words;
  return b;
}

namespace {

class Builder {
 public:
  explicit Builder(const GPTDatasetOptions& o) : options_(o) {}

  std::shared_ptr<const IndexedDataset> open(const std::string& prefix) {
    auto& slot = opened_[prefix];
    if (!slot) slot = std::make_shared<const IndexedDataset>(prefix);
    return slot;
  }

  // The dataset of split `s` from `blend`, the documents of each prefix chosen by `fraction`
  // (begin, end) or the split's range of --split.
  std::unique_ptr<TokenSampler> build(const Blend& blend, const std::array<double, 3>& split,
                                      Split s, int64_t size) {
    const auto part = [&](const std::string& prefix, int64_t n) -> std::unique_ptr<GPTDataset> {
      auto data = open(prefix);
      const auto ranges = split_document_ranges(split, data->num_sequences());
      const auto& range = ranges[static_cast<int>(s)];
      TESSERA_CHECK(range.has_value());
      return std::make_unique<GPTDataset>(data, *range, s, n, options_);
    };
    // A validation or test split too small for one sample in any prefix of the blend is
    // absent (the trainer then skips that evaluation and says so); a training split that small
    // is an error (GPTDataset's).
    if (s != Split::kTrain) {
      for (const std::string& prefix : blend.prefixes) {
        auto data = open(prefix);
        const auto range =
            split_document_ranges(split, data->num_sequences())[static_cast<int>(s)];
        if (tokens_in(*data, *range) < 1 + kAddExtraToken) return nullptr;
      }
    }
    if (blend.prefixes.size() == 1 && blend.weights.empty()) return part(blend.prefixes[0], size);
    std::vector<std::unique_ptr<TokenSampler>> parts;
    std::vector<double> weights;
    int64_t total = 0;
    std::string description;
    if (!blend.weights.empty()) {
      weights = normalize_weights(blend.weights, "blend");
      const std::vector<int64_t> target = blend_sizes(weights, size, 0.0);
      const std::vector<int64_t> buffer = blend_sizes(weights, size, 0.005);
      for (size_t k = 0; k < weights.size(); ++k) {
        auto p = part(blend.prefixes[k], buffer[k]);
        description += "part: " + p->description() + "\n";
        parts.push_back(std::move(p));
        total += target[k];
      }
    } else {
      int64_t sum = 0;
      for (const std::string& prefix : blend.prefixes) {
        auto p = part(prefix, -1);
        weights.push_back(static_cast<double>(p->num_samples()));
        sum += p->num_samples();
        description += "part: " + p->description() + "\n";
        parts.push_back(std::move(p));
      }
      weights =
          normalize_weights(weights, "blend of " + std::to_string(parts.size()) + " prefixes");
      total = std::min(size, sum);
    }
    return std::make_unique<BlendedDataset>(std::move(parts), std::move(weights), total, s,
                                            description, options_.cache_dir, options_.mode);
  }

 private:
  GPTDatasetOptions options_;
  std::map<std::string, std::shared_ptr<const IndexedDataset>> opened_;
};

}  // namespace

std::array<std::unique_ptr<TokenSampler>, 3> build_gpt_datasets(const DataSpec& spec,
                                                                const std::array<int64_t, 3>& sizes,
                                                                const GPTDatasetOptions& options) {
  Builder builder(options);
  std::array<std::unique_ptr<TokenSampler>, 3> out;
  for (int i = 0; i < 3; ++i) {
    if (sizes[i] <= 0) continue;
    const Split s = static_cast<Split>(i);
    if (spec.blend) {
      if (spec.split[i] > 0) out[i] = builder.build(*spec.blend, spec.split, s, sizes[i]);
    } else if (spec.per_split[i]) {
      // The whole of each prefix belongs to this split (Megatron's split_spoof).
      std::array<double, 3> whole = {0, 0, 0};
      whole[i] = 1.0;
      out[i] = builder.build(*spec.per_split[i], whole, s, sizes[i]);
    }
  }
  return out;
}

}  // namespace tessera::data
