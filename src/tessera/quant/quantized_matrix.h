// Weight-only quantization formats: a weight matrix of `rows` output rows and `cols` inputs
// (a Linear's (out, in) layout) stored as codes row by row plus fp16 scales (and minimums), each
// format with the exact semantics of the implementation it follows:
//
//   fp6   FP6-LLM's e3m2 (fp6.h): one scale per row, max|row| / 28 rounded to fp16; each weight
//         divided by that fp16 scale and encoded (ties away from zero, clamp to ±28); 4 codes in
//         3 bytes. cols must be a multiple of 4. 6 bits a weight (+ 16 a row).
//   int8  symmetric per output row: d = max|row| / 127, q = round(w / d) (half away from zero,
//         within ±127) with d in fp32, d stored as fp16 — llama.cpp's Q8_0 rule with the whole
//         row as its block. One int8 a weight.
//   q8_0  llama.cpp's Q8_0: the same rule per block of 32 weights of a row (8.5 bits a weight).
//         cols must be a multiple of 32.
//   q4    4 bits with a scale and a minimum per group of 32 (or 64) weights of a row, llama.cpp's
//         Q4_1 rule: d = (max - min) / 15, q = min(15, trunc((w - min) / d + 0.5)), d and min
//         stored as fp16; w ≈ d·q + min. Byte j of a group holds weight j in its low nibble and
//         weight j + group/2 in its high one (llama.cpp's order, which SIMD unpacks with one
//         mask and one shift). cols must be a multiple of the group.
//
// Decoding multiplies in fp32 by the stored fp16 scale; a 4-bit weight is d·q + min in one fused
// multiply-add (one rounding): what every kernel reproduces (on x86-64 baseline, which has no FMA,
// the kernels round the product and the sum apart: the last bit may differ there). A
// QuantizedMatrix owns plain host memory (codes and fp16 bits).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/kernels/quantized_gemv.h"

namespace tessera::quant {

enum class QuantFormat { kFp6, kInt8, kQ8_0, kQ4 };

// "fp6", "int8", "q8_0", "q4".
const char* quant_format_name(QuantFormat format);
// tessera::Error naming the accepted names for anything else.
QuantFormat parse_quant_format(const std::string& name);

// Weights per scale along a row: cols for fp6 and int8, 32 for q8_0, `q4_group` (32 or 64) for q4.
int64_t quant_group(QuantFormat format, int64_t cols, int64_t q4_group = 32);
// How the kernels read a format's codes (int8 and q8_0 share theirs).
kernels::WeightCodes codes_of(QuantFormat format);
// Bytes of codes in one row of `cols` weights.
int64_t quant_row_bytes(QuantFormat format, int64_t cols);
// Bytes of a whole (rows, cols) matrix: codes, fp16 scales (and minimums).
int64_t quant_matrix_bytes(QuantFormat format, int64_t rows, int64_t cols, int64_t group);
// "" when a (rows, cols) matrix can be stored in `format` with `group`, else why (what is
// expected), e.g. "fp6 packs 4 weights in 3 bytes: 30 columns is not a multiple of 4".
std::string quant_shape_problem(QuantFormat format, int64_t rows, int64_t cols, int64_t group);

struct QuantizedMatrix {
  QuantFormat format = QuantFormat::kInt8;
  int64_t rows = 0, cols = 0;
  int64_t group = 0;             // weights per scale along a row
  std::vector<uint8_t> codes;    // rows * quant_row_bytes(format, cols)
  std::vector<uint16_t> scales;  // fp16 bits, rows * (cols / group), row-major
  std::vector<uint16_t> mins;    // fp16 bits, as scales; q4 only (empty otherwise)

  int64_t groups_per_row() const { return cols / group; }
  // Bytes a matrix-vector product reads: codes, scales and minimums.
  int64_t bytes() const;
};

// tessera::Error when the shape does not suit the format (quant_shape_problem) or a weight is
// not finite (naming its row and column).
QuantizedMatrix quantize(const float* weights, int64_t rows, int64_t cols, QuantFormat format,
                         int64_t q4_group = 32);
// Row `row` decoded into cols floats.
void dequantize_row(const QuantizedMatrix& q, int64_t row, float* out);
// The whole matrix decoded (rows * cols floats).
std::vector<float> dequantize(const QuantizedMatrix& q);

}  // namespace tessera::quant
