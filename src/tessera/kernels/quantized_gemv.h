// Products with weight-only quantized matrices (the formats of quant/quantized_matrix.h, seen
// here through a plain view so kernels/ does not depend on quant/): a weight matrix of `rows`
// output rows of `cols` inputs, codes row by row, an fp16 scale per `group` weights of a row
// (and an fp16 minimum for 4-bit codes).
//
//   quantized_gemv      out (M, rows) = inp (M, cols) @ W^T for the few rows of a decode step
//                       (1 <= M <= kQuantizedGemvMaxRows): each weight row is read once and
//                       never dequantized as a whole — up to 4 input rows (2 on AVX2 and
//                       baseline, whose vectors take 2 and 4 registers), each block of 16
//                       codes is decoded in vector registers (the vector layer's widening loads,
//                       6-bit unpacking and table lookup) and dotted with every input row; for
//                       more rows (or rows not made of whole blocks) a row is decoded into a
//                       one-row fp32 buffer that stays in L1, then dotted. Parallel over output
//                       rows (each thread streams its own contiguous part of the codes).
//   quantized_gemv_bf16 the same for bf16 inputs (a bf16 model's activations). Where the CPU
//                       has AVX512-BF16 and the matrix is made of whole chunks of 64 weights
//                       (FP6 also needing AVX512_VBMI), the codes decode to bf16 numbers exactly
//                       and vdpbf16ps multiplies them with the inputs in pairs, the scales
//                       applied to the sums (quantized_gemv_bf16.cc); elsewhere the inputs are
//                       widened to fp32 for quantized_gemv, whose bits it then has.
//   dequantize_rows     rows [r0, r1) decoded into fp32 (r1 - r0, cols): prefill decodes tiles
//                       of rows and multiplies them with a GEMM (quant/quantized_linear.h).
//
// Numerics: a weight decodes exactly as quant::dequantize_row does (code times the fp16 scale in
// fp32; for 4-bit codes q * d + min in one fused multiply-add, two roundings on x86-64 baseline,
// which has no FMA); each output is a dot product over cols on four
// 16-lane fp32 accumulators (block k of 16 weights into accumulator k mod 4, fused multiply-adds
// where the target has FMA), summed (a0 + a1) + (a2 + a3) and then across lanes, so it equals
// decode-then-fp32-GEMM to fp32 rounding; both ways of decoding give the same bits. The bf16
// pair kernels multiply exactly and sum in a different order (products in pairs into four
// accumulators, a row's or group's scale times its sum; 4-bit codes decoded as 1 + q/16, so a
// group adds 16 d (its sum) + (min - 16 d) (the inputs' group sum), which cancel in part: the
// rounding error grows with (16 + q) d |x| rather than with the weights), also within fp32
// rounding of the exact product, and each output's bits do not depend on M.
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/kernels/dispatch.h"

namespace tessera::kernels {

enum class WeightCodes : int {
  kFp6,    // FP6 e3m2, 4 codes in 3 bytes (quant/fp6.h); group = cols
  kInt8,   // int8 codes; group = cols (per row) or 32 (Q8_0)
  kNibble  // 4-bit codes with a minimum, groups of 32 or 64; byte j of a group: weight j low,
           // j + group/2 high
};

struct QuantizedWeightsView {
  WeightCodes codes_type = WeightCodes::kInt8;
  const uint8_t* codes = nullptr;    // rows * bytes per row
  const uint16_t* scales = nullptr;  // fp16 bits, rows * (cols / group)
  const uint16_t* mins = nullptr;    // fp16 bits, as scales (kNibble only)
  int64_t rows = 0, cols = 0, group = 0;
};

constexpr int64_t kQuantizedGemvMaxRows = 8;

// Bytes of codes in one row of `cols` weights: 3/4 for FP6, 1 for int8, 1/2 for 4-bit.
inline int64_t quantized_row_bytes(WeightCodes codes_type, int64_t cols) {
  switch (codes_type) {
    case WeightCodes::kFp6:
      return cols / 4 * 3;
    case WeightCodes::kInt8:
      return cols;
    case WeightCodes::kNibble:
      return cols / 2;
  }
  return 0;
}

inline void quantized_gemv(float* out, const float* inp, const QuantizedWeightsView& w, int64_t M) {
  dispatch<&quantized_gemv>(out, inp, w, M);
}

inline void quantized_gemv_bf16(float* out, const bf16* inp, const QuantizedWeightsView& w,
                                int64_t M) {
  dispatch<&quantized_gemv_bf16>(out, inp, w, M);
}

inline void dequantize_rows(float* out, const QuantizedWeightsView& w, int64_t r0, int64_t r1) {
  dispatch<&dequantize_rows>(out, w, r0, r1);
}

}  // namespace tessera::kernels
