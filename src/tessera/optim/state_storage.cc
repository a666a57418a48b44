#include "tessera/optim/state_storage.h"

#include "tessera/core/error.h"

namespace tessera::optim {

void StateStorage::store_gradients(int64_t, const float*, int64_t) {
  throw Error("internal: this optimizer state storage does not hold gradients");
}

void StateStorage::defer_gradients(int64_t, int64_t) {
  throw Error("internal: this optimizer state storage does not hold gradients");
}

void InMemoryStateStorage::initialize(int64_t numel, int arrays, const Initializer& init) {
  numel_ = numel;
  arrays_.clear();
  for (int k = 0; k < arrays; ++k)
    arrays_.push_back(Tensor::zeros({numel}, DType::kF32, MemoryCategory::kOptimizer));
  for_each_window(StateAccess::kReadWrite, init);
}

void InMemoryStateStorage::for_each_window(StateAccess,
                                           const std::function<void(const Window&)>& fn) {
  Window w{0, numel_, {}};
  for (Tensor& a : arrays_) w.arrays.push_back(a.data<float>());
  fn(w);
}

}  // namespace tessera::optim
