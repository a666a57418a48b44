#include "tessera/model/parameter.h"

#include <omp.h>

#include <algorithm>

#include "tessera/core/memory.h"
#include "tessera/core/philox.h"

namespace tessera::model {
namespace {
// The key of a parameter's initial values: the seed and its name (parameter.h, init_value).
PhiloxKey init_key(const Parameter& p, uint64_t seed) {
  return philox_key(seed, RngPurpose::kInit, fnv1a64(p.name));
}
}  // namespace

Parameter& ParameterSet::add(std::string name, Shape shape, InitKind init, float init_std,
                             bool weight_decay, ShardSpec shard) {
  TESSERA_CHECK_MSG(!index_.count(name), "duplicate parameter " + name);
  TESSERA_CHECK(!values_.defined());
  Parameter p;
  p.name = std::move(name);
  p.global_shape = std::move(shape);
  p.shard = std::move(shard);
  p.pieces = tp_pieces(p.global_shape, p.shard, tp_size_, tp_rank_);
  p.local_shape = tp_local_shape(p.global_shape, p.shard, tp_size_);
  p.init = init;
  p.init_std = init_std;
  p.weight_decay = weight_decay;
  p.offset = numel_;
  numel_ += p.numel();
  index_[p.name] = params_.size();
  params_.push_back(std::move(p));
  return params_.back();
}

void ParameterSet::pad_to(int64_t multiple) {
  TESSERA_CHECK(multiple >= 1 && !values_.defined());
  numel_ = (numel_ + multiple - 1) / multiple * multiple;
}

float ParameterSet::init_value(const Parameter& p, uint64_t seed, int64_t row, int64_t col) {
  switch (p.init) {
    case InitKind::kZeros:
      return 0.0f;
    case InitKind::kOnes:
      return 1.0f;
    case InitKind::kNormal: {
      return p.init_std * philox_normal(init_key(p, seed), row, col);
    }
  }
  return 0.0f;
}

int64_t Parameter::global_index(int64_t i) const {
  for (const ShardPiece& piece : pieces)
    if (i >= piece.local_begin && i < piece.local_begin + piece.length)
      return piece.global_begin + (i - piece.local_begin);
  return i;
}

void ParameterSet::initial_values(const Parameter& p, float* out, int64_t lo, int64_t hi) const {
  if (hi < 0) hi = p.numel();
  TESSERA_CHECK(0 <= lo && lo <= hi && hi <= p.numel());
  if (lo == hi) return;  // (a parameter of no elements may have no columns to step through)
  if (p.init != InitKind::kNormal) {
    std::fill(out, out + (hi - lo), init_value(p, seed_, 0, 0));
    return;
  }
  // The shard as (rows, cols), a vector being one row; map the split coordinate to global.
  const bool vector = p.local_shape.size() <= 1;
  const int64_t cols = p.local_shape.empty() ? 1 : p.local_shape.back();
  const bool split_rows = p.shard.tp_dim == 0 && !vector;
  const bool split_cols = p.shard.tp_dim >= 0 && !split_rows;
  std::vector<int64_t> global_row(split_rows ? p.local_shape[0] : 0);
  std::vector<int64_t> global_col(split_cols ? cols : 0);
  for (size_t i = 0; i < global_row.size(); ++i) global_row[i] = p.global_index(i);
  for (size_t i = 0; i < global_col.size(); ++i) global_col[i] = p.global_index(i);
  // init_value's numbers, with the key made once and each thread walking its contiguous share in
  // order (row and column stepped, not divided out per element), so neighbours share their
  // Philox block and Box-Muller pair (PhiloxNormals).
  const PhiloxKey key = init_key(p, seed_);
  const int64_t n = hi - lo;
#pragma omp parallel if (n >= 4096)
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = lo + n * t / threads, end = lo + n * (t + 1) / threads;
    PhiloxNormals normals(key);
    int64_t r = begin / cols, c = begin % cols;
    for (int64_t i = begin; i < end; ++i) {
      out[i - lo] =
          p.init_std * normals(split_rows ? global_row[r] : r, split_cols ? global_col[c] : c);
      if (++c == cols) c = 0, ++r;
    }
  }
}

void ParameterSet::allocate(DType compute_dtype, uint64_t seed, int64_t multiple,
                            const std::vector<std::pair<int64_t, int64_t>>* materialize) {
  TESSERA_CHECK(multiple >= 1);
  seed_ = seed;
  numel_ = (numel_ + multiple - 1) / multiple * multiple;
  // Zeroed by giving the pages back rather than writing them: untouched pages cost nothing.
  values_ = Tensor::empty({numel_}, compute_dtype, MemoryCategory::kParams);
  grads_ = Tensor::empty({numel_}, DType::kF32, MemoryCategory::kGrads);
  if (numel_ > 0) {
    release_pages(values_.raw(), values_.nbytes());
    release_pages(grads_.raw(), grads_.nbytes());
  }
  for (Parameter& p : params_) {
    const int64_t n = p.numel();
    p.value = values_.slice_rows(p.offset, p.offset + n).view(p.local_shape);
    p.grad = grads_.slice_rows(p.offset, p.offset + n).view(p.local_shape);
    // The parts of p to initialise: all of it, or its overlap with `materialize`.
    std::vector<std::pair<int64_t, int64_t>> parts;
    if (!materialize) {
      parts.push_back({0, n});
    } else {
      for (const auto& [b, e] : *materialize) {
        const int64_t lo = std::max(b, p.offset) - p.offset;
        const int64_t hi = std::min(e, p.offset + n) - p.offset;
        if (lo < hi) parts.push_back({lo, hi});
      }
    }
    Tensor flat = values_.slice_rows(p.offset, p.offset + n);
    for (const auto& [lo, hi] : parts) {
      if (compute_dtype == DType::kF32) {  // in place: no copy of the parameter's size
        initial_values(p, flat.data<float>() + lo, lo, hi);
        continue;
      }
      Tensor init = Tensor::empty({hi - lo}, DType::kF32, MemoryCategory::kOther);
      initial_values(p, init.data<float>(), lo, hi);
      flat.slice_rows(lo, hi).copy_from(init);
    }
  }
}

Parameter& ParameterSet::get(const std::string& name) {
  auto it = index_.find(name);
  TESSERA_CHECK_MSG(it != index_.end(), "no parameter " + name);
  return params_[it->second];
}

const Parameter& ParameterSet::get(const std::string& name) const {
  auto it = index_.find(name);
  TESSERA_CHECK_MSG(it != index_.end(), "no parameter " + name);
  return params_[it->second];
}

Tensor ParameterSet::fused(const Tensor& flat, const std::vector<std::string>& names) const {
  TESSERA_CHECK(!names.empty());
  const Parameter& first = get(names.front());
  // Vectors (biases) fuse into one longer vector; matrices stack their rows.
  const bool vectors = first.local_shape.size() == 1;
  const int64_t cols = vectors ? 1 : first.local_shape.back();
  int64_t rows = 0, next_offset = first.offset;
  for (const auto& name : names) {
    const Parameter& p = get(name);
    TESSERA_CHECK_MSG(p.offset == next_offset && (p.local_shape.size() == 1) == vectors &&
                          (vectors || p.local_shape.back() == cols),
                      name + " is not contiguous with the previous fused parameter");
    rows += p.numel() / cols;
    next_offset = p.offset + p.numel();
  }
  Tensor span = flat.slice_rows(first.offset, next_offset);
  return vectors ? span : span.view({rows, cols});
}

Tensor ParameterSet::fused_value(const std::vector<std::string>& names) const {
  return fused(values_, names);
}
Tensor ParameterSet::fused_grad(const std::vector<std::string>& names) const {
  return fused(grads_, names);
}

}  // namespace tessera::model
