// Where an optimizer's per-element fp32 state lives: `arrays` arrays of `numel` floats each,
// indexed by the packed position of an owned element (optim/optimizer.h): the master weights when
// they are a separate copy, then the moments. In memory (InMemoryStateStorage, below) the arrays
// are plain tensors and one window covers them all; on NVMe (offload/nvme_state_storage.h) they
// live in files and are visited one sub-group at a time through a few I/O buffers.
//
// The contract a visit gives: for_each_window() calls `fn` for consecutive windows covering
// [0, numel) in increasing order, each with every array's values of the window resident at
// Window::arrays[k][0 .. end - begin). With Access::kRead the values must not be changed; with
// kReadWrite changes are kept. A window's pointers are valid only inside its call. Not
// thread-safe: one visit at a time.
//
// A storage may also hold a step's input gradients (holds_gradients(): the NVMe storage, whose
// point is that the fp32 gradients of the partition need not stay in memory either, as
// DeepSpeed's swapper moves them at the accumulation boundary). Before a step every packed
// element's gradient is handed over once by store_gradients(), in any order (or first announced
// by defer_gradients() and handed over after all others), then gradients_stored(); the step's visit
// (kStep) gives each window its gradients in Window::grads, indexed like the arrays. Storages that
// do not hold them leave grads null.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::optim {

// kStep: kReadWrite, and the windows carry the stored gradients (holds_gradients()).
enum class StateAccess { kRead, kReadWrite, kStep };

class StateStorage {
 public:
  struct Window {
    int64_t begin = 0, end = 0;  // packed indices [begin, end)
    std::vector<float*> arrays;  // one per array, each pointing at element `begin`
    const float* grads = nullptr;  // kStep on a storage that holds gradients: element `begin`'s
  };
  // Fills a window with the state a new optimizer starts from (called once per element before
  // any visit reads it).
  using Initializer = std::function<void(const Window&)>;

  virtual ~StateStorage() = default;
  // Sets the state to its initial values, once, before the first visit. Storages may apply
  // `init` lazily (the first time a window is visited).
  virtual void initialize(int64_t numel, int arrays, const Initializer& init) = 0;
  virtual void for_each_window(StateAccess access,
                               const std::function<void(const Window&)>& fn) = 0;
  virtual int64_t numel() const = 0;
  // Whether the arrays are in this process's memory for the optimizer's life (whole-buffer
  // pointers stay valid): true for the in-memory storage.
  virtual bool resident() const = 0;

  // Gradients held for the next step (see above). The defaults hold none.
  virtual bool holds_gradients() const { return false; }
  // Hands over `count` gradients of packed elements [packed_begin, packed_begin + count); the
  // values are copied before it returns.
  virtual void store_gradients(int64_t packed_begin, const float* grads, int64_t count);
  // Announces that [packed_begin, packed_begin + count) comes later: after every other element
  // was handed over or announced (gradients that still change before the step; the storage
  // writes around them meanwhile).
  virtual void defer_gradients(int64_t packed_begin, int64_t count);
  // Every packed element's gradient of this step was handed over: waits until they are stored.
  virtual void gradients_stored() {}
};

// The state as tensors in memory (MemoryCategory::kOptimizer): one window over everything.
class InMemoryStateStorage final : public StateStorage {
 public:
  void initialize(int64_t numel, int arrays, const Initializer& init) override;
  void for_each_window(StateAccess access, const std::function<void(const Window&)>& fn) override;
  int64_t numel() const override { return numel_; }
  bool resident() const override { return true; }

 private:
  int64_t numel_ = 0;
  std::vector<Tensor> arrays_;
};

}  // namespace tessera::optim
