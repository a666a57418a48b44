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
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::optim {

enum class StateAccess { kRead, kReadWrite };

class StateStorage {
 public:
  struct Window {
    int64_t begin = 0, end = 0;  // packed indices [begin, end)
    std::vector<float*> arrays;  // one per array, each pointing at element `begin`
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
