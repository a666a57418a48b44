#include "tessera/quant/quantized_linear.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/kernels/gemm.h"

namespace tessera::quant {
namespace {

// Weight rows decoded per GEMM in prefill: 128 rows of 4096 fp32 inputs are 2 MiB, about what
// stays in the last-level cache beside the activations.
constexpr int64_t kTileRows = 128;

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
  const Tensor x32 = x.dtype() == DType::kF32 ? x : x.to(DType::kF32, MemoryCategory::kActivations);
  Tensor out32 = Tensor::empty({N, OC}, DType::kF32, MemoryCategory::kActivations);
  const kernels::QuantizedWeightsView view = weights_view(w);
  if (N == 0 || OC == 0) {
  } else if (N <= kernels::kQuantizedGemvMaxRows) {
    kernels::quantized_gemv(out32.data<float>(), x32.data<float>(), view, N);
  } else {
    Tensor tile = Tensor::empty({std::min(kTileRows, OC), C}, DType::kF32, MemoryCategory::kOther);
    for (int64_t o = 0; o < OC; o += kTileRows) {
      const int64_t rows = std::min(kTileRows, OC - o);
      kernels::dequantize_rows(tile.data<float>(), view, o, o + rows);
      kernels::gemm(false, true, N, rows, C, 1.0f, x32.data<float>(), C, tile.data<float>(), C,
                    0.0f, out32.data<float>() + o, OC);
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
