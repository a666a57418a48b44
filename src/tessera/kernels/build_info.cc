#include "tessera/kernels/build_info.h"

#include "tessera/kernels/cpu_target.h"
#include "tessera/kernels/gemm.h"

namespace tessera::kernels {

std::string version_line() {
  return std::string("tessera ") + TESSERA_VERSION + ": " + describe_cpu_target() +
         ", bf16 GEMM " + bf16_gemm_path_name(bf16_gemm_path());
}

}  // namespace tessera::kernels
