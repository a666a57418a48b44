// The vector layer the kernels are written against: 16 fp32 lanes (VecF), 16 int32 lanes
// (VecI), 16 fp64 lanes (VecD) and a lane mask (Mask), with the same functions on every target,
// so each kernel's arithmetic is written once (kernels/*.cc) and compiled per target.
//
// The semantics are those of vec_generic.h, the portable reference; vec_avx2.h and
// vec_avx512.h are the intrinsic versions. This folder is the only place with ISA-specific
// code. Two functions exist only where they are one or a few instructions, each announced by a
// constant every target defines: lookup16 (kFastLookup16, AVX-512) and unpack6x64 (kUnpack6x64,
// AVX-512, compiled for AVX512_VBMI and callable only where cpu_has_avx512_vbmi()); kernels use
// them under `if constexpr`. On the avx512bf16 target words_avx512bf16.h adds 32-lane bf16
// words and their pairwise dot products (TESSERA_BF16_DOT, for kernels under `#if`).
// Sixteen lanes on every target (two ymm registers on AVX2, four 128-bit registers on
// baseline) keep a kernel's blocking, summation order and masks the same everywhere: a target
// changes speed, and only the last bits of results where it fuses a multiply-add or rounds an
// exp differently (docs/performance.md, "Kernel targets").
//
// Tails: load(p, n) reads lanes [0, n) and zeroes the others; store(p, v, n) writes lanes
// [0, n). Neither touches memory outside those lanes, and the lanes they do handle go through
// the same arithmetic as a full vector, so a tensor-parallel shard of a row gives the bits of
// the whole row.
#pragma once

#include "tessera/kernels/cpu_target.h"
#include "tessera/kernels/dispatch.h"
#include "tessera/kernels/simd/target.h"

#if defined(TESSERA_TARGET_AVX512) || defined(TESSERA_TARGET_AVX512BF16)
#include "tessera/kernels/simd/vec_avx512.h"
#elif defined(TESSERA_TARGET_AVX2)
#include "tessera/kernels/simd/vec_avx2.h"
#else
#include "tessera/kernels/simd/vec_generic.h"
#endif
#include "tessera/kernels/simd/vec_fp8.h"
#if defined(TESSERA_TARGET_AVX512BF16)
#include "tessera/kernels/simd/words_avx512bf16.h"  // defines TESSERA_BF16_DOT
#endif

TESSERA_TARGET_BEGIN
// The target this compile is for (register_kernel's first argument).
constexpr CpuTarget kThisTarget = CpuTarget::TESSERA_TARGET_ENUM;

// Calls body(i, lanes) for the 16-lane blocks of [begin, end) (begin a multiple of 16 from the
// start of the row): the full blocks with the constant kLanes, so they compile to plain loads and
// stores, then the partial last block with its lane count through the same arithmetic. (With a
// lane count computed per block GCC 12 merges the stores into masked ones with an extra branch:
// +16-21 % on the norms.)
template <typename Body>
[[gnu::always_inline]] inline void for_each_block(int64_t begin, int64_t end, Body body) {
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) body(i, kLanes);
  if (i < end) body(i, static_cast<int>(end - i));
}

// Lanes of the block at i in a row of n: min(n - i, 16), for the counted load/store forms.
inline int lanes_left(int64_t i, int64_t n) {
  return n - i >= kLanes ? kLanes : static_cast<int>(n - i);
}

// Asks for the cache line holding p[i], for a stream the kernel reads a little later. i may lie
// past p's buffer (a prefetch never faults), so the address is formed as an integer, not by
// pointer arithmetic outside the array.
template <typename T>
inline void prefetch_ahead(const T* p, int64_t i) {
  prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) +
                                         static_cast<uintptr_t>(i) * sizeof(T)));
}
TESSERA_TARGET_END
