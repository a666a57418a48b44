// How a public kernel reaches the implementation of the active CPU target.
//
// Each kernel is declared once, in its public header, as an inline function that forwards to
// dispatch<&itself>(args...). Every target's compile of the kernel's source registers its own
// implementation for that public function (register_kernel, called from the target's
// register_<file>() in dispatch.cc), and dispatch() calls the one of the active target
// (cpu_target.h). The slot is keyed by the public function's address, so the compiler checks
// that each target's implementation has exactly the public signature. The cost per call is
// one indirect call and a load: kernels work on whole tensors.
#pragma once

#include <utility>

#include "tessera/core/dtype.h"
#include "tessera/kernels/cpu_target.h"

namespace tessera::kernels {
namespace dispatch_detail {

// The implementations of public kernel kPublic, one per target (null where none registered).
template <auto kPublic>
struct Slot {
  static inline decltype(kPublic) impl[kNumCpuTargets] = {};
};

// Index of the active target; the first call registers every target's kernels and chooses.
int active_target_index();
[[noreturn]] void missing_kernel(int target_index);

}  // namespace dispatch_detail

template <auto kPublic>
void register_kernel(CpuTarget target, decltype(kPublic) impl) {
  dispatch_detail::Slot<kPublic>::impl[static_cast<int>(target)] = impl;
}

template <auto kPublic, typename... Args>
inline decltype(auto) dispatch(Args&&... args) {
  const int target = dispatch_detail::active_target_index();
  const auto impl = dispatch_detail::Slot<kPublic>::impl[target];
  if (impl == nullptr) dispatch_detail::missing_kernel(target);
  return impl(std::forward<Args>(args)...);
}

// Calls f.template operator()<T>() for each storage type kernels are instantiated for.
template <typename F>
void for_each_storage_type(F&& f) {
  f.template operator()<float>();
  f.template operator()<bf16>();
  f.template operator()<fp16>();
}

}  // namespace tessera::kernels
