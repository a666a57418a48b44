#include "tessera/data/dataset_index.h"

#include <cfenv>
#include <cmath>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/core/philox.h"

namespace tessera::data {
namespace {

// Python's round(): to nearest, ties to even. nearbyint under the default rounding mode does
// exactly that; std::round would send x.5 away from zero and move a split boundary.
int64_t python_round(double x) {
  TESSERA_CHECK(std::fegetround() == FE_TONEAREST);
  return static_cast<int64_t>(std::nearbyint(x));
}

}  // namespace

std::array<std::optional<DocumentRange>, 3> split_document_ranges(
    const std::array<double, 3>& fractions, int64_t num_documents) {
  std::array<std::optional<DocumentRange>, 3> out;
  // The bookends accumulate in the same order as Megatron's itertools.accumulate, so the doubles
  // (and hence the rounding) are the same.
  double begin = 0.0;
  for (int i = 0; i < 3; ++i) {
    const double end = begin + fractions[i];
    if (end - begin > 0)
      out[i] = DocumentRange{python_round(begin * static_cast<double>(num_documents)),
                             python_round(end * static_cast<double>(num_documents))};
    begin = end;
  }
  return out;
}

IndexPlan plan_index(std::span<const int32_t> sequence_lengths, DocumentRange docs,
                     int64_t num_samples, int64_t seq_length, int add_extra_token) {
  TESSERA_CHECK(seq_length >= 1 && (add_extra_token == 0 || add_extra_token == 1));
  TESSERA_CHECK(docs.begin >= 0 && docs.begin <= docs.end &&
                docs.end <= static_cast<int64_t>(sequence_lengths.size()));
  IndexPlan p;
  for (int64_t d = docs.begin; d < docs.end; ++d) p.num_tokens_per_epoch += sequence_lengths[d];
  if (p.num_tokens_per_epoch < 1 + add_extra_token)
    throw Error("documents [" + std::to_string(docs.begin) + ", " + std::to_string(docs.end) +
                ") hold " + std::to_string(p.num_tokens_per_epoch) +
                " tokens: too few to make any sample (check --split and the data)");
  const int64_t tpe = p.num_tokens_per_epoch;
  if (num_samples >= 0) {
    const int64_t requested = num_samples * seq_length + add_extra_token;
    int64_t tokens = tpe;
    while (tokens < requested) {
      ++p.num_epochs;
      tokens += tpe;
    }
  }
  if (p.num_epochs > 1) {
    p.num_samples_sans_final_epoch = ((p.num_epochs - 1) * tpe - add_extra_token) / seq_length;
    const int64_t from_final = num_samples - p.num_samples_sans_final_epoch;
    const int64_t per_epoch = (tpe - add_extra_token) / seq_length;
    TESSERA_CHECK(from_final >= 0);  // E is the fewest epochs, so the final one is needed
    // Python's int(0.80 * per_epoch) truncates.
    p.separate_final_epoch =
        from_final < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  }
  return p;
}

void philox_shuffle(std::span<int64_t> v, uint64_t seed, uint64_t stream) {
  const PhiloxKey key = philox_key(seed, RngPurpose::kData, stream);
  for (size_t j = v.size(); j-- > 1;) {
    const auto r = philox_block(key, j, 0);
    const uint64_t x = (static_cast<uint64_t>(r[1]) << 32) | r[0];
    // Lemire's multiply-shift maps 64 random bits onto [0, j]; the bias, (j + 1) / 2^64, is far
    // below anything a data order could show.
    const auto k = static_cast<size_t>((static_cast<unsigned __int128>(x) * (j + 1)) >> 64);
    std::swap(v[j], v[k]);
  }
}

std::vector<int64_t> build_document_index(DocumentRange docs, const IndexPlan& plan,
                                          uint64_t seed) {
  const int64_t n = docs.size();
  std::vector<int64_t> index(static_cast<size_t>(plan.num_epochs * n));
  for (int64_t e = 0; e < plan.num_epochs; ++e)
    for (int64_t d = 0; d < n; ++d) index[e * n + d] = docs.begin + d;
  if (!plan.separate_final_epoch || plan.num_epochs == 1) {
    philox_shuffle(index, seed, 0);
  } else {
    const size_t head = static_cast<size_t>((plan.num_epochs - 1) * n);
    philox_shuffle(std::span(index).first(head), seed, 0);
    philox_shuffle(std::span(index).subspan(head), seed, 1);
  }
  return index;
}

std::vector<int64_t> build_sample_index(std::span<const int32_t> sequence_lengths,
                                        std::span<const int64_t> document_index, int64_t seq_length,
                                        const IndexPlan& plan, int add_extra_token) {
  const int64_t num_samples =
      (plan.num_epochs * plan.num_tokens_per_epoch - add_extra_token) / seq_length;
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(2 * (num_samples + 1)));
  const int64_t last = static_cast<int64_t>(document_index.size()) - 1;
  int64_t pos = 0, offset = 0;  // position in document_index, token offset in that document
  out.push_back(pos);
  out.push_back(offset);
  for (int64_t s = 1; s <= num_samples; ++s) {
    // Walk seq_length + extra tokens forward from (pos, offset). The sample ends `extra` tokens
    // before where the walk stops, so the next sample re-reads those tokens.
    int64_t remaining = seq_length + add_extra_token;
    while (remaining != 0) {
      const int64_t available = sequence_lengths[document_index[pos]] - offset;
      remaining -= available;
      if (remaining <= 0) {
        offset += remaining + available - add_extra_token;
        remaining = 0;
      } else if (pos == last) {
        // Only the last sample can run out of documents (the epochs were sized for it).
        TESSERA_CHECK(s == num_samples);
        offset = sequence_lengths[document_index[pos]] - add_extra_token;
        break;
      } else {
        ++pos;
        offset = 0;
      }
    }
    out.push_back(pos);
    out.push_back(offset);
  }
  return out;
}

std::vector<int64_t> build_shuffle_index(int64_t first, int64_t num_samples, uint64_t seed) {
  TESSERA_CHECK(first >= 0 && first <= num_samples);
  std::vector<int64_t> index(static_cast<size_t>(num_samples));
  for (int64_t i = 0; i < num_samples; ++i) index[i] = i;
  philox_shuffle(std::span(index).first(static_cast<size_t>(first)), seed, 2);
  if (first < num_samples) philox_shuffle(std::span(index).subspan(first), seed, 3);
  return index;
}

BlendingIndices build_blending_indices(std::span<const double> weights, int64_t size) {
  TESSERA_CHECK(!weights.empty() && weights.size() <= 32767 && size >= 0);
  BlendingIndices out;
  out.dataset_index.resize(static_cast<size_t>(size));
  out.dataset_sample_index.resize(static_cast<size_t>(size));
  std::vector<int64_t> taken(weights.size(), 0);
  for (int64_t i = 0; i < size; ++i) {
    const double at = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_error = weights[0] * at - static_cast<double>(taken[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      const double error = weights[d] * at - static_cast<double>(taken[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    out.dataset_index[i] = static_cast<int16_t>(best);
    out.dataset_sample_index[i] = taken[best]++;
  }
  return out;
}

std::vector<int64_t> blend_sizes(std::span<const double> weights, int64_t target, double surplus) {
  std::vector<int64_t> sizes;
  for (double w : weights)
    sizes.push_back(static_cast<int64_t>(
        std::ceil(std::ceil(static_cast<double>(target) * w) * (1.0 + surplus))));
  return sizes;
}

std::vector<double> normalize_weights(std::span<const double> weights, const std::string& what) {
  double sum = 0;
  for (double w : weights) {
    if (!std::isfinite(w) || w < 0)
      throw Error(what + ": weight " + std::to_string(w) + " is not a finite number >= 0");
    sum += w;
  }
  if (!(sum > 0)) throw Error(what + ": the weights sum to zero (expected a positive sum)");
  std::vector<double> out;
  for (double w : weights) out.push_back(w / sum);
  return out;
}

}  // namespace tessera::data
