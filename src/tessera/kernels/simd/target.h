// The instruction-set target a kernel source is being compiled for.
//
// Every kernel source in kernels/ is compiled once per target (CMakeLists.txt defines one of
// TESSERA_TARGET_BASELINE, _AVX2, _AVX512, _AVX512BF16 on x86-64, _NEON on arm64). No -m flag
// is passed: the target's instructions are enabled only between TESSERA_TARGET_BEGIN and
// TESSERA_TARGET_END by a target pragma, and everything there lives in a namespace named after
// the target (tessera::kernels::avx2, ...). This keeps the build ODR-safe: inline functions and
// templates defined outside the region (the standard library, core/) are compiled for the
// baseline wherever they are instantiated, so the linker can never pick an AVX-512 copy of
// std::vector<float>::resize for a caller on an AVX2 machine. (Measured with GCC 12: a template
// defined outside the region and instantiated inside keeps baseline code; lambdas and OpenMP
// outlined bodies inside the region get the target.)
//
// Include this header after all other headers, open the region, include simd/vec.h inside it.
#pragma once

#define TESSERA_PRAGMA(x) _Pragma(#x)
// Expands macros in x (the ISA string) before it becomes the pragma.
#define TESSERA_PRAGMA_EXPANDED(x) TESSERA_PRAGMA(x)

#if defined(TESSERA_TARGET_AVX512BF16)
#define TESSERA_TARGET_NS avx512bf16
#define TESSERA_TARGET_ENUM kAvx512Bf16
#define TESSERA_TARGET_ISA "avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"
#elif defined(TESSERA_TARGET_AVX512)
#define TESSERA_TARGET_NS avx512
#define TESSERA_TARGET_ENUM kAvx512
#define TESSERA_TARGET_ISA "avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512vl,avx512dq"
#elif defined(TESSERA_TARGET_AVX2)
#define TESSERA_TARGET_NS avx2
#define TESSERA_TARGET_ENUM kAvx2
#define TESSERA_TARGET_ISA "avx2,fma,f16c,bmi,bmi2"
#elif defined(TESSERA_TARGET_NEON)
#define TESSERA_TARGET_NS neon
#define TESSERA_TARGET_ENUM kNeon
#elif defined(TESSERA_TARGET_BASELINE)
#define TESSERA_TARGET_NS baseline
#define TESSERA_TARGET_ENUM kBaseline
#else
#error "kernel sources are compiled per target: define TESSERA_TARGET_<NAME> (see CMakeLists.txt)"
#endif

#if defined(TESSERA_TARGET_ISA) && defined(__clang__)
#define TESSERA_TARGET_BEGIN                                                                  \
  TESSERA_PRAGMA_EXPANDED(clang attribute push(__attribute__((target(TESSERA_TARGET_ISA))),   \
                                               apply_to = function))                          \
  namespace tessera::kernels::TESSERA_TARGET_NS {
#define TESSERA_TARGET_END \
  }                        \
  TESSERA_PRAGMA(clang attribute pop)
#elif defined(TESSERA_TARGET_ISA)
#define TESSERA_TARGET_BEGIN                    \
  TESSERA_PRAGMA(GCC push_options)              \
  TESSERA_PRAGMA_EXPANDED(GCC target(TESSERA_TARGET_ISA)) \
  namespace tessera::kernels::TESSERA_TARGET_NS {
#define TESSERA_TARGET_END \
  }                        \
  TESSERA_PRAGMA(GCC pop_options)
#else
// The baseline of the architecture needs no pragma.
#define TESSERA_TARGET_BEGIN namespace tessera::kernels::TESSERA_TARGET_NS {
#define TESSERA_TARGET_END }
#endif
