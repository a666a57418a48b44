#include "tessera/optim/optimizer.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/kernels/adamw.h"
#include "tessera/kernels/elementwise.h"

namespace tessera::optim {

Optimizer::Optimizer(model::ParameterSet& params, const OptimizerOptions& options, Ranges owned)
    : params_(params), options_(options), owned_(std::move(owned)), sharded_(!owned_.empty()) {
  if (owned_.empty()) owned_.push_back({0, params.numel()});
  for (const auto& [b, e] : owned_) {
    TESSERA_CHECK(b <= e && e <= params.numel());
    packed_start_.push_back(owned_numel_);
    owned_numel_ += e - b;
  }
  separate_master_ = params.compute_dtype() != DType::kF32;
  if (separate_master_) {
    // Master weights start from the exact fp32 initial values, not from their bf16 rounding.
    master_ = Tensor::zeros({owned_numel_}, DType::kF32, MemoryCategory::kOptimizer);
    for_each_owned_run([&](const model::Parameter& p, int64_t b, int64_t e, int64_t packed) {
      params.initial_values(p, master_.data<float>() + packed, b - p.offset, e - p.offset);
    });
  } else if (!sharded_) {
    master_ = params.flat_values();
  }
  exp_avg_ = Tensor::zeros({owned_numel_}, DType::kF32, MemoryCategory::kOptimizer);
  if (options_.kind != "sgd")
    exp_avg_sq_ = Tensor::zeros({owned_numel_}, DType::kF32, MemoryCategory::kOptimizer);
}

template <typename Fn>
void Optimizer::for_each_owned_run(Fn&& fn) const {
  params_.for_each_run(owned_, [&](const model::Parameter& p, int64_t b, int64_t e, size_t k) {
    fn(p, b, e, packed_start_[k] + (b - owned_[k].first));
  });
}

Tensor Optimizer::master(const model::Parameter& p) const {
  TESSERA_CHECK_MSG(!sharded_, "master(): the optimizer is sharded; use owned_master()");
  return master_.slice_rows(p.offset, p.offset + p.numel()).view(p.local_shape);
}

Tensor Optimizer::owned_master() const {
  Tensor out = Tensor::empty({owned_numel_}, DType::kF32, MemoryCategory::kOther);
  if (separate_master_) {
    std::copy(master_.data<float>(), master_.data<float>() + owned_numel_, out.data<float>());
    return out;
  }
  const float* values = params_.flat_values().data<float>();
  for (size_t k = 0; k < owned_.size(); ++k)
    std::copy(values + owned_[k].first, values + owned_[k].second,
              out.data<float>() + packed_start_[k]);
  return out;
}

const float* Optimizer::master_at(int64_t flat, int64_t packed) const {
  // With fp32 compute the master is the model's buffer itself.
  return separate_master_ ? master_.data<float>() + packed
                          : params_.flat_values().data<float>() + flat;
}

float* Optimizer::master_at(int64_t flat, int64_t packed) {
  return const_cast<float*>(std::as_const(*this).master_at(flat, packed));
}

double Optimizer::master_sum_squares(const Ranges& within) const {
  double sum = 0;
  size_t w = 0;
  for_each_owned_run([&](const model::Parameter&, int64_t b, int64_t e, int64_t packed) {
    const float* master = master_at(b, packed);
    while (w < within.size() && within[w].second <= b) ++w;
    for (size_t k = w; k < within.size() && within[k].first < e; ++k) {
      const int64_t lo = std::max(b, within[k].first), hi = std::min(e, within[k].second);
      if (lo < hi) sum += kernels::sum_squares(master + (lo - b), hi - lo);
    }
  });
  return sum;
}

std::vector<Optimizer::StateRun> Optimizer::state_runs() {
  std::vector<StateRun> out;
  for_each_owned_run([&](const model::Parameter& p, int64_t b, int64_t e, int64_t packed) {
    StateRun run{&p, b, e, master_at(b, packed), {exp_avg_.data<float>() + packed}};
    if (exp_avg_sq_.defined()) run.state.push_back(exp_avg_sq_.data<float>() + packed);
    out.push_back(std::move(run));
  });
  return out;
}

std::vector<std::string> Optimizer::state_names() const {
  if (options_.kind == "sgd") return {"momentum_buffer"};
  return {"exp_avg", "exp_avg_sq"};
}

void Optimizer::refresh_compute_values() {
  if (!separate_master_) return;  // fp32 compute: the master is the model's buffer
  for_each_owned_run([&](const model::Parameter&, int64_t b, int64_t e, int64_t packed) {
    const float* master = master_.data<float>() + packed;
    visit_float(params_.compute_dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::round_from_f32(params_.flat_values().data<T>() + b, master, e - b);
    });
  });
}

void Optimizer::set_betas(double beta1, double beta2) {
  TESSERA_CHECK(options_.kind != "sgd");
  options_.beta1 = beta1;
  options_.beta2 = beta2;
}

void Optimizer::step(double lr_all, float grad_scale, double decoupled_lr) {
  ++steps_;
  const float* grads = params_.flat_grads().data<float>();
  float* m = exp_avg_.data<float>();
  float* v = exp_avg_sq_.defined() ? exp_avg_sq_.data<float>() : nullptr;
  for_each_owned_run([&](const model::Parameter& p, int64_t b, int64_t e, int64_t packed) {
    const int64_t n = e - b;
    const float wd = p.weight_decay ? static_cast<float>(options_.weight_decay) : 0.0f;
    const double lr = decoupled_lr >= 0 && p.embedding_or_output ? decoupled_lr : lr_all;
    visit_float(params_.compute_dtype(), [&](auto tag) {
      using T = decltype(tag);
      // With fp32 compute the master is the model's buffer: nothing to copy back.
      T* out = separate_master_ ? params_.flat_values().data<T>() + b : nullptr;
      float* master = master_at(b, packed);
      if (options_.kind == "sgd") {
        kernels::sgd_step(master, m + packed, out, grads + b, n, static_cast<float>(lr),
                          static_cast<float>(options_.momentum), wd, steps_, grad_scale);
      } else {
        kernels::adamw_step(master, m + packed, v + packed, out, grads + b, n,
                            static_cast<float>(lr), static_cast<float>(options_.beta1),
                            static_cast<float>(options_.beta2), static_cast<float>(options_.eps),
                            wd, steps_, grad_scale);
      }
    });
  });
}

}  // namespace tessera::optim
