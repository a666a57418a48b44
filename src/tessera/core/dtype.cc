#include "tessera/core/dtype.h"

#include <omp.h>

#include "tessera/core/error.h"

namespace tessera {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU16: return 2;
  }
  TESSERA_CHECK(false);
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "fp32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kU16: return "uint16";
  }
  return "?";
}

// Conversions are memory-bound; split across threads only when there is enough work to pay for
// waking the team.
static constexpr int64_t kParallelConvertThreshold = 1 << 16;

void convert(float* dst, const bf16* src, int64_t n) {
#pragma omp parallel for simd if (n > kParallelConvertThreshold)
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}

void convert(bf16* dst, const float* src, int64_t n) {
#pragma omp parallel for simd if (n > kParallelConvertThreshold)
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16(src[i]);
}

void convert(float* dst, const fp16* src, int64_t n) {
#pragma omp parallel for simd if (n > kParallelConvertThreshold)
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}

void convert(fp16* dst, const float* src, int64_t n) {
#pragma omp parallel for simd if (n > kParallelConvertThreshold)
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16(src[i]);
}

}  // namespace tessera
