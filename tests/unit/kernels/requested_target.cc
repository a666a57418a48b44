// ctest runs the kernel tests once per CPU target with TESSERA_CPU_TARGET set (see
// tests/CMakeLists.txt). On a CPU that cannot run the requested target the kernels fall back to
// a lower one; those runs would only repeat another target's, so the whole binary is skipped.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tessera/kernels/cpu_target.h"

namespace {

class RequestedTarget : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* requested = std::getenv("TESSERA_CPU_TARGET");
    if (requested == nullptr || *requested == '\0') return;
    const auto target = tessera::kernels::parse_cpu_target(requested);
    if (!target || !tessera::kernels::cpu_supports(*target))
      GTEST_SKIP() << "this CPU cannot run kernel target " << requested;
  }
};

const ::testing::Environment* const kRequestedTarget =
    ::testing::AddGlobalTestEnvironment(new RequestedTarget);

}  // namespace
