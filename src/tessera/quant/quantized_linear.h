// A linear layer's forward with weight-only quantized weights: out = x @ W^T + b, W a
// QuantizedMatrix (quantized_matrix.h) of the layer's (out, in) weight. Inference only: there is
// no backward (training keeps full-precision weights).
//
// A few rows (a decode step: at most kernels::kQuantizedGemvMaxRows) go through
// kernels::quantized_gemv, which decodes the codes in vector registers as it streams; more rows
// (prefill) decode tiles of about 4 MiB of weight rows into an fp32 scratch and multiply each,
// as the GEMM's A against x^T, with the fp32 GEMM (gemm.h), so the whole matrix is never
// dequantized at once; each tile's transposed product is turned into its columns of the output.
// Activations are fp32 inside (a bf16 or fp16 x is widened once), the output is rounded to x's
// dtype after the bias is added.
#pragma once

#include "tessera/core/tensor.h"
#include "tessera/kernels/quantized_gemv.h"
#include "tessera/quant/quantized_matrix.h"

namespace tessera::quant {

// The kernels' view of a matrix (its storage must outlive the view).
kernels::QuantizedWeightsView weights_view(const QuantizedMatrix& q);

// x (N, cols) -> (N, rows) in x's dtype; bias (rows) or an undefined Tensor.
Tensor quantized_linear_forward(const Tensor& x, const QuantizedMatrix& w, const Tensor& bias);

}  // namespace tessera::quant
