#include "tessera/kernels/cpu_target.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <unistd.h>

#include "tessera/core/error.h"
#include "tessera/kernels/onednn_isa.h"

namespace tessera::kernels {
namespace {

constexpr const char* kNames[kNumCpuTargets] = {"baseline", "avx2", "avx512", "avx512bf16",
                                                "neon"};
constexpr const char* kEnvVar = "TESSERA_CPU_TARGET";

// What the CPU and OS can run (libgcc's cpuid check includes the OS saving the AVX / AVX-512
// register state). Independent of what was compiled.
bool hardware_runs(CpuTarget target) {
#if defined(__x86_64__)
  switch (target) {
    case CpuTarget::kBaseline:
      return true;
    case CpuTarget::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
    case CpuTarget::kAvx512:
      return hardware_runs(CpuTarget::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
    case CpuTarget::kAvx512Bf16:
      return hardware_runs(CpuTarget::kAvx512) && __builtin_cpu_supports("avx512bf16");
    default:
      return false;
  }
#elif defined(__aarch64__)
  return target == CpuTarget::kNeon;  // Advanced SIMD is part of the arm64 baseline
#else
  return target == CpuTarget::kBaseline;
#endif
}

bool compiled(CpuTarget target) {
  for (CpuTarget t : compiled_cpu_targets())
    if (t == target) return true;
  return false;
}

// The choice made at the first call, and the line describing it.
struct Choice {
  CpuTarget target = CpuTarget::kBaseline;
  std::string cap_note;  // empty, or how TESSERA_CPU_TARGET changed the choice
};

// The best supported target not above `cap` (targets of another architecture: the best).
CpuTarget best_at_or_below(CpuTarget cap) {
  CpuTarget best = compiled_cpu_targets().front();
  for (CpuTarget t : compiled_cpu_targets())
    if (cpu_supports(t) && (!compiled(cap) || t <= cap)) best = t;
  return best;
}

Choice choose() {
  Choice choice;
  choice.target = best_cpu_target();
  const char* env = std::getenv(kEnvVar);
  if (env == nullptr || *env == '\0') return choice;
  const std::string value = env;
  std::optional<CpuTarget> cap = parse_cpu_target(value);
  if (!cap && value != "sve")
    throw Error(std::string(kEnvVar) + "=" + value +
                ": unknown kernel target; expected one of baseline, avx2, avx512, avx512bf16 "
                "(x86-64) or neon, sve (arm64)");
  if (cap && cpu_supports(*cap)) {
    choice.target = *cap;
    choice.cap_note = std::string("capped by ") + kEnvVar + "=" + value;
  } else {
    choice.target = cap ? best_at_or_below(*cap) : best_cpu_target();
    const char* why = value == "sve"   ? "this build has no SVE kernels"
                      : compiled(*cap) ? "this CPU cannot run it"
                                       : "this build is for another architecture";
    choice.cap_note = std::string(kEnvVar) + "=" + value + " not available (" + why +
                      "), using " + cpu_target_name(choice.target);
    std::fprintf(stderr, "tessera: warning: %s\n", choice.cap_note.c_str());
  }
  cap_onednn_isa(choice.target);
  return choice;
}

std::once_flag g_once;
Choice g_choice;
std::atomic<int> g_active{0};

void ensure_chosen() {
  std::call_once(g_once, [] {
    g_choice = choose();
    g_active.store(static_cast<int>(g_choice.target), std::memory_order_release);
  });
}

}  // namespace

const char* cpu_target_name(CpuTarget target) { return kNames[static_cast<int>(target)]; }

std::optional<CpuTarget> parse_cpu_target(std::string_view name) {
  for (int i = 0; i < kNumCpuTargets; ++i)
    if (name == kNames[i]) return static_cast<CpuTarget>(i);
  return std::nullopt;
}

const std::vector<CpuTarget>& compiled_cpu_targets() {
  // Must match the target list in CMakeLists.txt (a mismatch fails to link in dispatch.cc).
#if defined(__x86_64__)
  static const std::vector<CpuTarget> targets = {CpuTarget::kBaseline, CpuTarget::kAvx2,
                                                 CpuTarget::kAvx512, CpuTarget::kAvx512Bf16};
#elif defined(__aarch64__)
  static const std::vector<CpuTarget> targets = {CpuTarget::kNeon};
#else
  static const std::vector<CpuTarget> targets = {CpuTarget::kBaseline};
#endif
  return targets;
}

bool cpu_supports(CpuTarget target) { return compiled(target) && hardware_runs(target); }

CpuTarget best_cpu_target() { return best_at_or_below(compiled_cpu_targets().back()); }

CpuTarget active_cpu_target() {
  ensure_chosen();
  return static_cast<CpuTarget>(g_active.load(std::memory_order_acquire));
}

void set_cpu_target(CpuTarget target) {
  ensure_chosen();
  if (!cpu_supports(target))
    throw Error(std::string("kernel target ") + cpu_target_name(target) +
                " cannot run on this CPU (best: " + cpu_target_name(best_cpu_target()) + ")");
  g_active.store(static_cast<int>(target), std::memory_order_release);
}

int64_t l2_cache_bytes() {
  static const int64_t bytes = [] {
    int64_t reported = 0;
#if defined(_SC_LEVEL2_CACHE_SIZE)
    reported = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    // Ignore what no CPU has: unknown (0 or -1) or implausible values.
    return reported >= (int64_t{64} << 10) && reported <= (int64_t{64} << 20) ? reported
                                                                              : int64_t{512} << 10;
  }();
  return bytes;
}

bool cpu_has_avx512_vbmi() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx512vbmi");
  return has;
#else
  return false;
#endif
}

std::string describe_cpu_target() {
  const CpuTarget active = active_cpu_target();
  std::string line = std::string("kernels ") + cpu_target_name(active) + " (cpu best: " +
                     cpu_target_name(best_cpu_target());
  if (!g_choice.cap_note.empty()) line += "; " + g_choice.cap_note;
  if (active != g_choice.target) line += "; set in-process";
  return line + "), oneDNN " + onednn_isa_name();
}

}  // namespace tessera::kernels
