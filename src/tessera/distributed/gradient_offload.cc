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

namespace {

bool overlap(const FlatRange& a, const FlatRange& b) { return a.begin < b.end && b.begin < a.end; }

// The union of `ranges` (any order) as increasing, disjoint ranges.
std::vector<FlatRange> merged(std::vector<FlatRange> ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const FlatRange& x, const FlatRange& y) { return x.begin < y.begin; });
  std::vector<FlatRange> out;
  for (const FlatRange& r : ranges) {
    if (r.size() <= 0) continue;
    if (!out.empty() && r.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, r.end);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

}  // namespace

GradientOffload::GradientOffload(model::ParameterSet& params, optim::StateStorage& storage,
                                 std::vector<FlatRange> owned, std::vector<FlatRange> counted,
                                 const std::vector<FlatRange>& late, bool count_zeros)
    : params_(params),
      storage_(storage),
      owned_(std::move(owned)),
      counted_(std::move(counted)),
      count_zeros_(count_zeros) {
  TESSERA_CHECK(storage_.holds_gradients());
  for (const FlatRange& r : counted_) {
    const auto it = std::upper_bound(owned_.begin(), owned_.end(), r.begin,
                                     [](int64_t x, const FlatRange& o) { return x < o.begin; });
    TESSERA_CHECK_MSG(it != owned_.begin() && r.end <= std::prev(it)->end,
                      "a counted gradient range crosses an owned range");
    counted_held_.push_back(
        std::any_of(late.begin(), late.end(), [&](const FlatRange& l) { return overlap(l, r); })
            ? 1
            : 0);
  }
  int64_t packed = 0;
  size_t c = 0;
  for (const FlatRange& part : owned_) {
    packed_.push_back(packed);
    packed += part.size();
    while (c < counted_.size() && counted_[c].end <= part.begin) ++c;
    first_counted_.push_back(c);
    // Held: the late elements of the part and its counted ranges that touch them.
    std::vector<FlatRange> held;
    for (const FlatRange& l : late)
      if (overlap(l, part))
        held.push_back({std::max(l.begin, part.begin), std::min(l.end, part.end)});
    for (size_t k = c; k < counted_.size() && counted_[k].begin < part.end; ++k)
      if (counted_held_[k]) held.push_back(counted_[k]);
    held_.push_back(merged(std::move(held)));
  }
  TESSERA_CHECK(packed == storage_.numel());
  first_counted_.push_back(counted_.size());
  stored_.assign(owned_.size(), 0);
  squares_.assign(counted_.size(), 0.0);
  zeros_.assign(counted_.size(), 0.0);
}

int64_t GradientOffload::held_elements() const {
  int64_t n = 0;
  for (const auto& pieces : held_)
    for (const FlatRange& r : pieces) n += r.size();
  return n;
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
  if (stored_[i]) return;
  store_early(i);
  ++stored_early_;
}

void GradientOffload::take_terms(size_t i, bool held) {
  float* grads = params_.flat_grads().data<float>();
  // The test hook's +Inf, as the step plants it into gradients in memory before the norm: here
  // before element 0's term is taken (or it is stored, if uncounted).
  const FlatRange& part = owned_[i];
  if (plant_overflow_ && part.begin == 0 && part.size() > 0) {
    const bool zero_held = !held_[i].empty() && held_[i].front().begin == 0;
    if (zero_held == held) grads[0] = INFINITY;
  }
  for (size_t c = first_counted_[i]; c < counted_.size() && counted_[c].begin < part.end; ++c) {
    if ((counted_held_[c] != 0) != held) continue;
    const FlatRange& r = counted_[c];
    squares_[c] = kernels::sum_squares(grads + r.begin, r.size());
    if (count_zeros_) zeros_[c] = count_zeros(grads + r.begin, r.size());
  }
}

void GradientOffload::store_early(size_t i) {
  take_terms(i, false);
  float* grads = params_.flat_grads().data<float>();
  const FlatRange& part = owned_[i];
  const auto packed_of = [&](int64_t flat) { return packed_[i] + (flat - part.begin); };
  // The pieces between the held ones leave now (zeroed, as the next iteration needs them,
  // without holding their pages); the held ones are announced for later.
  int64_t at = part.begin;
  const auto leave = [&](int64_t end) {
    if (end <= at) return;
    storage_.store_gradients(packed_of(at), grads + at, end - at);
    release_pages(grads + at, static_cast<size_t>(end - at) * sizeof(float));
  };
  for (const FlatRange& h : held_[i]) {
    leave(h.begin);
    storage_.defer_gradients(packed_of(h.begin), h.size());
    at = h.end;
  }
  leave(part.end);
  stored_[i] = 1;
}

void GradientOffload::store_held(size_t i) {
  if (held_[i].empty()) return;
  take_terms(i, true);
  float* grads = params_.flat_grads().data<float>();
  const FlatRange& part = owned_[i];
  for (const FlatRange& h : held_[i]) {
    storage_.store_gradients(packed_[i] + (h.begin - part.begin), grads + h.begin, h.size());
    release_pages(grads + h.begin, static_cast<size_t>(h.size()) * sizeof(float));
  }
}

void GradientOffload::before_step() {
  for (size_t i = 0; i < owned_.size(); ++i)
    if (!stored_[i]) store_early(i);
  // Every other gradient is handed over: the held ones come now, after the late changes.
  for (size_t i = 0; i < owned_.size(); ++i) store_held(i);
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
