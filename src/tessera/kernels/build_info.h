// What this process runs: Tessera's version, the kernel target in use and oneDNN's ISA, for
// every tool's --version and the first log line of a training run.
#pragma once

#include <string>

namespace tessera::kernels {

// e.g. "tessera 0.4.0: kernels avx2 (cpu best: avx512bf16; capped by TESSERA_CPU_TARGET=avx2),
// oneDNN avx2, bf16 GEMM widened to fp32". Chooses the kernel target if not chosen yet, so it
// throws tessera::Error for an unknown TESSERA_CPU_TARGET.
std::string version_line();

}  // namespace tessera::kernels
