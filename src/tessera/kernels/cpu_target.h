// Which instruction-set target the kernels run on.
//
// Tessera is one build for every CPU of an architecture: each kernel is compiled once per
// target (simd/target.h) and the best target the CPU supports is chosen once per process, at the
// first kernel call, from cpuid. The environment variable TESSERA_CPU_TARGET caps it (for tests,
// and for identical numerics across a cluster of different CPUs):
//   x86-64: baseline (SSE2), avx2 (AVX2 + FMA + F16C), avx512 (F/BW/VL/DQ), avx512bf16
//   arm64:  neon
// A known value the CPU cannot run (or this architecture has no kernels for, e.g. sve) falls
// back to the best target at or below it, with one warning on stderr; an unknown value is a
// tessera::Error (one line, exit 2 in the tools). The cap also caps oneDNN's ISA (its
// ONEDNN_MAX_CPU_ISA), so GEMMs and kernels agree on the instruction set.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::kernels {

// In increasing order of capability within an architecture.
enum class CpuTarget { kBaseline, kAvx2, kAvx512, kAvx512Bf16, kNeon };
constexpr int kNumCpuTargets = 5;

// "baseline", "avx2", "avx512", "avx512bf16", "neon".
const char* cpu_target_name(CpuTarget target);
// The target named `name` (the names above), or nullopt.
std::optional<CpuTarget> parse_cpu_target(std::string_view name);

// The targets this build has kernels for, in increasing order (x86-64: baseline, avx2, avx512,
// avx512bf16; arm64: neon; other architectures: baseline).
const std::vector<CpuTarget>& compiled_cpu_targets();
// True when this CPU (and its OS) can run target's instructions and the build has them.
bool cpu_supports(CpuTarget target);
// The best compiled target the CPU supports, ignoring TESSERA_CPU_TARGET.
CpuTarget best_cpu_target();
// Whether the CPU has AVX512_VBMI (byte permutes): the AVX-512 targets use it in a few functions
// compiled for it alone (the FP6 unpacking of kernels/quantized_gemv.cc), chosen at run time, so
// a CPU without it (Cooper Lake, Skylake-X) runs the same targets. Same results either way.
bool cpu_has_avx512_vbmi();

// The target the kernels run on now. The first call chooses it (best_cpu_target(), capped by
// TESSERA_CPU_TARGET) and throws tessera::Error for an unknown value. Thread-safe.
CpuTarget active_cpu_target();

// Runs the kernels on `target` from now on (tests and benchmarks compare targets in one
// process); throws tessera::Error when the CPU cannot run it. oneDNN keeps the ISA it chose at
// its first use. Not to be called while kernels run on other threads.
void set_cpu_target(CpuTarget target);

// Sets a target for its lifetime and restores the previous one.
class ScopedCpuTarget {
 public:
  explicit ScopedCpuTarget(CpuTarget target) : saved_(active_cpu_target()) { set_cpu_target(target); }
  ~ScopedCpuTarget() { set_cpu_target(saved_); }
  ScopedCpuTarget(const ScopedCpuTarget&) = delete;
  ScopedCpuTarget& operator=(const ScopedCpuTarget&) = delete;

 private:
  CpuTarget saved_;
};

// The size of one core's L2 cache in bytes (glibc's sysconf), or 512 KiB where the system does
// not say: the blocked GEMM (gemm_packed.cc) sizes its packed B block from it.
int64_t l2_cache_bytes();

// One line for logs and --version: the kernel target in use, what the CPU supports, and
// oneDNN's effective ISA, e.g. "kernels avx2 (cpu: avx2; capped by TESSERA_CPU_TARGET=avx2),
// oneDNN avx2".
std::string describe_cpu_target();

}  // namespace tessera::kernels
