#include "tessera/optim/optimizer.h"

#include "tessera/kernels/adamw.h"

namespace tessera::optim {

Optimizer::Optimizer(model::ParameterSet& params, const OptimizerOptions& options)
    : params_(params), options_(options) {
  const int64_t n = params.numel();
  separate_master_ = params.compute_dtype() != DType::kF32;
  if (separate_master_) {
    // Master weights start from the exact fp32 initial values, not from their bf16 rounding.
    master_ = Tensor::empty({n}, DType::kF32, MemoryCategory::kOptimizer);
    for (const model::Parameter& p : params.all())
      params.initial_values(p, master_.data<float>() + p.offset);
  } else {
    master_ = params.flat_values();
  }
  exp_avg_ = Tensor::zeros({n}, DType::kF32, MemoryCategory::kOptimizer);
  if (options_.kind != "sgd")
    exp_avg_sq_ = Tensor::zeros({n}, DType::kF32, MemoryCategory::kOptimizer);
}

Tensor Optimizer::master(const model::Parameter& p) const {
  return master_.slice_rows(p.offset, p.offset + p.numel()).view(p.local_shape);
}

void Optimizer::step(double lr, float grad_scale) {
  ++steps_;
  const float* grads = params_.flat_grads().data<float>();
  float* master = master_.data<float>();
  float* m = exp_avg_.data<float>();
  for (const model::Parameter& p : params_.all()) {
    const int64_t o = p.offset, n = p.numel();
    const float wd = p.weight_decay ? static_cast<float>(options_.weight_decay) : 0.0f;
    visit_float(params_.compute_dtype(), [&](auto tag) {
      using T = decltype(tag);
      // With fp32 compute the master is the model's buffer: nothing to copy back.
      T* out = separate_master_ ? params_.flat_values().data<T>() + o : nullptr;
      if (options_.kind == "sgd") {
        kernels::sgd_step(master + o, m + o, out, grads + o, n, static_cast<float>(lr),
                          static_cast<float>(options_.momentum), wd, steps_, grad_scale);
      } else {
        kernels::adamw_step(master + o, m + o, exp_avg_sq_.data<float>() + o, out, grads + o, n,
                            static_cast<float>(lr), static_cast<float>(options_.beta1),
                            static_cast<float>(options_.beta2), static_cast<float>(options_.eps),
                            wd, steps_, grad_scale);
      }
    });
  }
}

}  // namespace tessera::optim
