#include "tessera/model/parameter.h"

#include "tessera/core/philox.h"

namespace tessera::model {

Parameter& ParameterSet::add(std::string name, Shape shape, InitKind init, float init_std,
                             bool weight_decay, ShardSpec shard) {
  TESSERA_CHECK_MSG(!index_.count(name), "duplicate parameter " + name);
  TESSERA_CHECK(!values_.defined());
  Parameter p;
  p.name = std::move(name);
  p.global_shape = std::move(shape);
  p.shard = shard;
  p.init = init;
  p.init_std = init_std;
  p.weight_decay = weight_decay;
  p.offset = numel_;
  numel_ += p.numel();
  index_[p.name] = params_.size();
  params_.push_back(std::move(p));
  return params_.back();
}

float ParameterSet::init_value(const Parameter& p, uint64_t seed, int64_t row, int64_t col) {
  switch (p.init) {
    case InitKind::kZeros: return 0.0f;
    case InitKind::kOnes: return 1.0f;
    case InitKind::kNormal: {
      const PhiloxKey key = philox_key(seed, RngPurpose::kInit, fnv1a64(p.name));
      return p.init_std * philox_normal(key, row, col);
    }
  }
  return 0.0f;
}

void ParameterSet::initial_values(const Parameter& p, float* out) const {
  const int64_t n = p.numel();
  const int64_t cols = p.global_shape.empty() ? 1 : p.global_shape.back();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) out[i] = init_value(p, seed_, i / cols, i % cols);
}

void ParameterSet::allocate(DType compute_dtype, uint64_t seed) {
  seed_ = seed;
  values_ = Tensor::empty({numel_}, compute_dtype, MemoryCategory::kParams);
  grads_ = Tensor::zeros({numel_}, DType::kF32, MemoryCategory::kGrads);
  for (Parameter& p : params_) {
    const int64_t n = p.numel();
    p.value = values_.slice_rows(p.offset, p.offset + n).view(p.global_shape);
    p.grad = grads_.slice_rows(p.offset, p.offset + n).view(p.global_shape);
    Tensor init = Tensor::empty({n}, DType::kF32, MemoryCategory::kOther);
    initial_values(p, init.data<float>());
    p.value.copy_from(init);
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
  const bool vectors = first.global_shape.size() == 1;
  const int64_t cols = vectors ? 1 : first.global_shape.back();
  int64_t rows = 0, next_offset = first.offset;
  for (const auto& name : names) {
    const Parameter& p = get(name);
    TESSERA_CHECK_MSG(p.offset == next_offset && (p.global_shape.size() == 1) == vectors &&
                          (vectors || p.global_shape.back() == cols),
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
