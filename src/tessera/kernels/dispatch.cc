#include "tessera/kernels/dispatch.h"

#include <string>

#include "tessera/core/error.h"

// Every kernel source compiled per target defines register_<file>() in its target's namespace;
// this list must name each of them (a missing one leaves its kernels unregistered, which the
// first call reports; a stale one fails to link).
#define TESSERA_KERNEL_FILES(X) \
  X(activations)                \
  X(adamw)                      \
  X(attention)                  \
  X(attention_block)            \
  X(attention_decode)           \
  X(cross_entropy)              \
  X(dropout)                    \
  X(elementwise)                \
  X(embedding)                  \
  X(gemm_packed)                \
  X(gemv)                       \
  X(linear)                     \
  X(norms)                      \
  X(quantized_gemv)             \
  X(quantized_gemv_bf16)        \
  X(rope)

#define TESSERA_DECLARE_REGISTER(file) void register_##file();
#define TESSERA_CALL_REGISTER(file) register_##file();

// The targets' namespaces, as compiled_cpu_targets() lists them for this architecture.
#if defined(__x86_64__)
#define TESSERA_FOR_EACH_TARGET(X) X(baseline) X(avx2) X(avx512) X(avx512bf16)
#elif defined(__aarch64__)
#define TESSERA_FOR_EACH_TARGET(X) X(neon)
#else
#define TESSERA_FOR_EACH_TARGET(X) X(baseline)
#endif

#define TESSERA_DECLARE_TARGET(target) \
  namespace target {                   \
  TESSERA_KERNEL_FILES(TESSERA_DECLARE_REGISTER)                     \
  }
#define TESSERA_REGISTER_TARGET(target) \
  {                                     \
    using namespace target;             \
    TESSERA_KERNEL_FILES(TESSERA_CALL_REGISTER)                       \
  }

namespace tessera::kernels {

TESSERA_FOR_EACH_TARGET(TESSERA_DECLARE_TARGET)

namespace dispatch_detail {
namespace {

bool register_all() {
  TESSERA_FOR_EACH_TARGET(TESSERA_REGISTER_TARGET)
  return true;
}

}  // namespace

int active_target_index() {
  static const bool registered = register_all();
  (void)registered;
  return static_cast<int>(active_cpu_target());
}

void missing_kernel(int target_index) {
  TESSERA_CHECK_MSG(false, std::string("no kernel registered for target ") +
                               cpu_target_name(static_cast<CpuTarget>(target_index)) +
                               " (a kernel file missing from TESSERA_KERNEL_FILES, or a storage "
                               "type it is not instantiated for)");
  std::abort();
}

}  // namespace dispatch_detail
}  // namespace tessera::kernels
