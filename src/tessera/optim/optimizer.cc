#include "tessera/optim/optimizer.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/kernels/adamw.h"
#include "tessera/kernels/elementwise.h"

namespace tessera::optim {

Optimizer::Optimizer(model::ParameterSet& params, const OptimizerOptions& options, Ranges owned,
                     std::unique_ptr<StateStorage> storage)
    : params_(params),
      options_(options),
      owned_(std::move(owned)),
      sharded_(!owned_.empty()),
      storage_(storage ? std::move(storage) : std::make_unique<InMemoryStateStorage>()) {
  if (owned_.empty()) owned_.push_back({0, params.numel()});
  std::vector<int64_t> packed_start;
  for (const auto& [b, e] : owned_) {
    TESSERA_CHECK(b <= e && e <= params.numel());
    packed_start.push_back(owned_numel_);
    owned_numel_ += e - b;
  }
  params.for_each_run(owned_, [&](const model::Parameter& p, int64_t b, int64_t e, size_t k) {
    runs_.push_back({&p, b, e});
    run_packed_.push_back(packed_start[k] + (b - owned_[k].first));
  });
  separate_master_ = options_.separate_master || params.compute_dtype() != DType::kF32;
  const int arrays = (separate_master_ ? 1 : 0) + (options_.kind == "sgd" ? 1 : 2);
  // The initial state: the master weights from the exact fp32 initial values (not from their
  // bf16 rounding), the moments zero. Padding elements (owned, in no parameter) stay zero.
  storage_->initialize(owned_numel_, arrays, [&](const StateStorage::Window& w) {
    for (float* a : w.arrays) std::fill(a, a + (w.end - w.begin), 0.0f);
    if (!separate_master_) return;
    auto it = std::upper_bound(run_packed_.begin(), run_packed_.end(), w.begin);
    for (size_t r = it == run_packed_.begin() ? 0 : (it - run_packed_.begin()) - 1;
         r < runs_.size() && run_packed_[r] < w.end; ++r) {
      const OwnedRun& run = runs_[r];
      const int64_t lo = std::max(run_packed_[r], w.begin);
      const int64_t hi = std::min(run_packed_[r] + (run.end - run.begin), w.end);
      if (lo >= hi) continue;
      const int64_t local = run.begin - run.param->offset + (lo - run_packed_[r]);
      params.initial_values(*run.param, w.arrays[0] + (lo - w.begin), local, local + (hi - lo));
    }
  });
}

void Optimizer::visit_pieces(StateAccess access,
                             const std::function<void(const StateRun&)>& fn) const {
  float* values = separate_master_ ? nullptr : params_.flat_values().data<float>();
  const int first_moment = separate_master_ ? 1 : 0;
  size_t r = 0;  // windows come in increasing order: one pass over the runs
  int64_t window = 0;
  storage_->for_each_window(access, [&](const StateStorage::Window& w) {
    while (r < runs_.size() && run_packed_[r] + (runs_[r].end - runs_[r].begin) <= w.begin) ++r;
    for (size_t k = r; k < runs_.size() && run_packed_[k] < w.end; ++k) {
      const OwnedRun& run = runs_[k];
      const int64_t lo = std::max(run_packed_[k], w.begin);
      const int64_t hi = std::min(run_packed_[k] + (run.end - run.begin), w.end);
      if (lo >= hi) continue;
      const int64_t flat = run.begin + (lo - run_packed_[k]);
      StateRun piece{run.param, flat, flat + (hi - lo), nullptr, {}, lo, window};
      if (w.grads) piece.grad = w.grads + (lo - w.begin);
      // Without a separate master (fp32 compute) it is the model's buffer itself.
      piece.master = separate_master_ ? w.arrays[0] + (lo - w.begin) : values + flat;
      for (size_t a = first_moment; a < w.arrays.size(); ++a)
        piece.state.push_back(w.arrays[a] + (lo - w.begin));
      fn(piece);
    }
    ++window;
  });
}

void Optimizer::visit_state_runs(StateAccess access,
                                 const std::function<void(const StateRun&)>& fn) {
  visit_pieces(access, fn);
}

Tensor Optimizer::master(const model::Parameter& p) const {
  TESSERA_CHECK_MSG(!sharded_, "master(): the optimizer is sharded; use owned_master()");
  return owned_master().slice_rows(p.offset, p.offset + p.numel()).view(p.local_shape);
}

Tensor Optimizer::owned_master() const {
  // Owned padding (elements of no parameter, where the owned ranges meet the end of a padded
  // group) is in no run: its master is zero, as it starts.
  Tensor out = Tensor::zeros({owned_numel_}, DType::kF32, MemoryCategory::kOther);
  float* dst = out.data<float>();
  visit_pieces(StateAccess::kRead, [&](const StateRun& run) {
    std::copy(run.master, run.master + (run.end - run.begin), dst + run.packed);
  });
  return out;
}

double Optimizer::master_sum_squares(const Ranges& within) const {
  double sum = 0;
  size_t w = 0;
  visit_pieces(StateAccess::kRead, [&](const StateRun& run) {
    const int64_t b = run.begin, e = run.end;
    while (w < within.size() && within[w].second <= b) ++w;
    for (size_t k = w; k < within.size() && within[k].first < e; ++k) {
      const int64_t lo = std::max(b, within[k].first), hi = std::min(e, within[k].second);
      if (lo < hi) sum += kernels::sum_squares(run.master + (lo - b), hi - lo);
    }
  });
  return sum;
}

std::vector<std::string> Optimizer::state_names() const {
  if (options_.kind == "sgd") return {"momentum_buffer"};
  return {"exp_avg", "exp_avg_sq"};
}

void Optimizer::refresh_compute_values() {
  if (!separate_master_) return;  // the master is the model's buffer
  visit_pieces(StateAccess::kRead, [&](const StateRun& run) {
    visit_float(params_.compute_dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::round_from_f32(params_.flat_values().data<T>() + run.begin, run.master,
                              run.end - run.begin);
    });
  });
}

void Optimizer::set_betas(double beta1, double beta2) {
  TESSERA_CHECK(options_.kind != "sgd");
  options_.beta1 = beta1;
  options_.beta2 = beta2;
}

void Optimizer::step(double lr_all, float grad_scale, double decoupled_lr,
                     const std::function<void(int64_t)>& updated_through) {
  ++steps_;
  const float* grads = params_.flat_grads().data<float>();
  // The gradients come with the state where the storage holds them (NVMe offload), else from
  // the model's flat buffer.
  visit_pieces(StateAccess::kStep, [&](const StateRun& run) {
    const model::Parameter& p = *run.param;
    const int64_t b = run.begin, n = run.end - run.begin;
    const float* g = run.grad ? run.grad : grads + b;
    const float wd = p.weight_decay ? static_cast<float>(options_.weight_decay) : 0.0f;
    const double lr = decoupled_lr >= 0 && p.embedding_or_output ? decoupled_lr : lr_all;
    visit_float(params_.compute_dtype(), [&](auto tag) {
      using T = decltype(tag);
      // Without a separate master the step updated the model's buffer: nothing to copy back.
      T* out = separate_master_ ? params_.flat_values().data<T>() + b : nullptr;
      if (options_.kind == "sgd") {
        kernels::sgd_step(run.master, run.state[0], out, g, n, static_cast<float>(lr),
                          static_cast<float>(options_.momentum), wd, steps_, grad_scale);
      } else {
        kernels::adamw_step(run.master, run.state[0], run.state[1], out, g, n,
                            static_cast<float>(lr), static_cast<float>(options_.beta1),
                            static_cast<float>(options_.beta2), static_cast<float>(options_.eps),
                            wd, steps_, grad_scale);
      }
    });
    if (updated_through) updated_through(run.end);
  });
}

}  // namespace tessera::optim
