#include "tessera/distributed/gradient_offload.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"
#include "tessera/core/memory.h"
#include "tessera/kernels/adamw.h"

namespace tessera::distributed {

double count_zeros(const float* x, int64_t n) {
  int64_t zeros = 0;
#pragma omp parallel for reduction(+ : zeros) schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) zeros += x[i] == 0.0f ? 1 : 0;
  return static_cast<double>(zeros);
}

GradientOffload::GradientOffload(model::ParameterSet& params, optim::StateStorage& storage,
                                 std::vector<FlatRange> owned, std::vector<FlatRange> counted,
                                 const std::vector<FlatRange>& late, bool count_zeros)
    : params_(params),
      storage_(storage),
      owned_(std::move(owned)),
      counted_(std::move(counted)),
      count_zeros_(count_zeros) {
  TESSERA_CHECK(storage_.holds_gradients());
  int64_t packed = 0;
  size_t c = 0;
  for (const FlatRange& part : owned_) {
    packed_.push_back(packed);
    packed += part.size();
    while (c < counted_.size() && counted_[c].end <= part.begin) ++c;
    first_counted_.push_back(c);
    const bool touches = std::any_of(late.begin(), late.end(), [&](const FlatRange& r) {
      return r.begin < part.end && part.begin < r.end;
    });
    late_.push_back(touches ? 1 : 0);
  }
  TESSERA_CHECK(packed == storage_.numel());
  first_counted_.push_back(counted_.size());
  for (const FlatRange& r : counted_) {
    const auto it = std::upper_bound(owned_.begin(), owned_.end(), r.begin,
                                     [](int64_t x, const FlatRange& o) { return x < o.begin; });
    TESSERA_CHECK_MSG(it != owned_.begin() && r.end <= std::prev(it)->end,
                      "a counted gradient range crosses an owned range");
  }
  stored_.assign(owned_.size(), 0);
  squares_.assign(counted_.size(), 0.0);
  zeros_.assign(counted_.size(), 0.0);
}

void GradientOffload::begin_iteration(bool plant_overflow) {
  std::fill(stored_.begin(), stored_.end(), 0);
  plant_overflow_ = plant_overflow;
  stored_early_ = 0;
}

void GradientOffload::part_final(const FlatRange& part) {
  const auto it = std::lower_bound(owned_.begin(), owned_.end(), part.begin,
                                   [](const FlatRange& o, int64_t x) { return o.begin < x; });
  TESSERA_CHECK_MSG(it != owned_.end() && it->begin == part.begin && it->end == part.end,
                    "internal: a final gradient part that is not an owned range");
  const size_t i = static_cast<size_t>(it - owned_.begin());
  if (late_[i] || stored_[i]) return;
  store(i);
  ++stored_early_;
}

void GradientOffload::store(size_t i) {
  float* grads = params_.flat_grads().data<float>();
  const FlatRange part = owned_[i];
  if (plant_overflow_ && part.begin == 0 && part.size() > 0) grads[0] = INFINITY;
  // The next owned range's first counted range is this one's end: the ranges are increasing.
  for (size_t c = first_counted_[i]; c < counted_.size() && counted_[c].begin < part.end; ++c) {
    const FlatRange& r = counted_[c];
    squares_[c] = kernels::sum_squares(grads + r.begin, r.size());
    if (count_zeros_) zeros_[c] = count_zeros(grads + r.begin, r.size());
  }
  storage_.store_gradients(packed_[i], grads + part.begin, part.size());
  // Zero, as the next iteration needs them, without holding the pages.
  release_pages(grads + part.begin, static_cast<size_t>(part.size()) * sizeof(float));
  stored_[i] = 1;
}

void GradientOffload::before_step() {
  for (size_t i = 0; i < owned_.size(); ++i)
    if (!stored_[i]) store(i);
  storage_.gradients_stored();
}

double GradientOffload::local_sum_squares() const {
  double sum = 0;
  for (double s : squares_) sum += s;
  return sum;
}

double GradientOffload::local_zeros() const {
  double sum = 0;
  for (double z : zeros_) sum += z;
  return sum;
}

}  // namespace tessera::distributed
