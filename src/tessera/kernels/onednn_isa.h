// The bridge between the kernel target (cpu_target.h) and oneDNN's own ISA dispatch: a cap on
// the kernels caps oneDNN too, so both run the same instruction set.
#pragma once

#include <string>

#include "tessera/kernels/cpu_target.h"

namespace tessera::kernels {

// Caps oneDNN at the ISA matching `target` (ONEDNN_MAX_CPU_ISA's meaning). Takes effect only
// before oneDNN's first primitive; returns false when oneDNN had already fixed its ISA.
bool cap_onednn_isa(CpuTarget target);
// oneDNN's effective ISA, e.g. "avx512_core_bf16", or "none" in a build without oneDNN.
std::string onednn_isa_name();
// True when oneDNN runs bf16 matmuls natively on this CPU at its current ISA (it refuses them
// below AVX-512); otherwise bf16 GEMMs are widened to fp32 (gemm.h).
bool onednn_has_bf16_matmul();

}  // namespace tessera::kernels
