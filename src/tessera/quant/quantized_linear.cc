#include "tessera/quant/quantized_linear.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/kernels/gemm.h"

namespace tessera::quant {
namespace {

// Weight rows decoded per GEMM in prefill: a tile of about 4 MiB of fp32 weights (512 rows of
// 2048 inputs), which stays in the caches while the product reads it. Measured on a 5632 x 2048
// and a 2048 x 5632 matrix with 128 and 16 input rows (AMD EPYC, 2 threads, 2026-12-02): 128-row
// tiles were 5-20% slower, tiles of the whole matrix about level but as large as the matrix.
constexpr int64_t kTileBytes = int64_t{4} << 20;

int64_t tile_rows(int64_t cols) {
  return std::max<int64_t>(16, kTileBytes / (4 * std::max<int64_t>(cols, 1)) / 16 * 16);
}

// dst (cols x rows, leading dimension ld_dst) = src (rows x cols)^T, in square blocks so that
// both sides are read and written a cache line at a time.
void transpose_into(float* dst, int64_t ld_dst, const float* src, int64_t rows, int64_t cols) {
  constexpr int64_t kBlock = 32;
#pragma omp parallel for collapse(2) if (rows * cols >= (int64_t{1} << 16))
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock)
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock)
      for (int64_t c = c0; c < std::min(c0 + kBlock, cols); ++c)
        for (int64_t r = r0; r < std::min(r0 + kBlock, rows); ++r)
          dst[c * ld_dst + r] = src[r * cols + c];
}

}  // namespace

kernels::QuantizedWeightsView weights_view(const QuantizedMatrix& q) {
  kernels::QuantizedWeightsView v;
  v.codes_type = codes_of(q.format);
  v.codes = q.codes.data();
  v.scales = q.scales.data();
  v.mins = q.mins.empty() ? nullptr : q.mins.data();
  v.rows = q.rows;
  v.cols = q.cols;
  v.group = q.group;
  return v;
}

Tensor quantized_linear_forward(const Tensor& x, const QuantizedMatrix& w, const Tensor& bias) {
  TESSERA_CHECK_MSG(x.ndim() == 2 && x.dim(1) == w.cols,
                    "quantized linear: input of " + std::to_string(x.dim(1)) + " columns for a " +
                        std::to_string(w.rows) + " x " + std::to_string(w.cols) + " weight");
  const int64_t N = x.dim(0), OC = w.rows, C = w.cols;
  auto as_f32 = [&] {
    return x.dtype() == DType::kF32 ? x : x.to(DType::kF32, MemoryCategory::kActivations);
  };
  Tensor out32 = Tensor::empty({N, OC}, DType::kF32, MemoryCategory::kActivations);
  const kernels::QuantizedWeightsView view = weights_view(w);
  if (N == 0 || OC == 0) {
  } else if (N <= kernels::kQuantizedGemvMaxRows && x.dtype() == DType::kBF16) {
    // bf16 activations as they are: where the CPU multiplies bf16 pairs the decoded codes meet
    // them without widening (kernels/quantized_gemv.h).
    kernels::quantized_gemv_bf16(out32.data<float>(), x.data<bf16>(), view, N);
  } else if (N <= kernels::kQuantizedGemvMaxRows) {
    const Tensor x32 = as_f32();
    kernels::quantized_gemv(out32.data<float>(), x32.data<float>(), view, N);
  } else {
    const Tensor x32 = as_f32();
    // Each decoded tile is the GEMM's A (tile rows x C) against x^T: its product, the tile's
    // columns of out transposed, is contiguous, and is turned into out while it is in the caches.
    // Writing the product straight into its columns of out (leading dimension OC) instead ran
    // oneDNN's fp32 GEMM at a third to a tenth of its rate (100-150 GFLOP/s against ~300-350 for
    // 128 input rows, 26 against ~240 for 16; AMD EPYC, 2 threads, 2026-12-02), which was most
    // of the prefill time.
    const int64_t tr = std::min(tile_rows(C), OC);
    Tensor tile = Tensor::empty({tr, C}, DType::kF32, MemoryCategory::kOther);
    Tensor product = Tensor::empty({tr, N}, DType::kF32, MemoryCategory::kOther);
    for (int64_t o = 0; o < OC; o += tr) {
      const int64_t rows = std::min(tr, OC - o);
      kernels::dequantize_rows(tile.data<float>(), view, o, o + rows);
      kernels::gemm(false, true, rows, N, C, 1.0f, tile.data<float>(), C, x32.data<float>(), C,
                    0.0f, product.data<float>(), N);
      transpose_into(out32.data<float>() + o, OC, product.data<float>(), rows, N);
    }
  }
  if (bias.defined()) {
    const Tensor b32 =
        bias.dtype() == DType::kF32 ? bias : bias.to(DType::kF32, MemoryCategory::kOther);
    float* y = out32.data<float>();
    const float* b = b32.data<float>();
    for (int64_t i = 0; i < N; ++i)
      for (int64_t o = 0; o < OC; ++o) y[i * OC + o] += b[o];
  }
  return x.dtype() == DType::kF32 ? out32 : out32.to(x.dtype(), MemoryCategory::kActivations);
}

}  // namespace tessera::quant
