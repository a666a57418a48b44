#include "tessera/quant/quantized_matrix.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/quant/fp6.h"

namespace tessera::quant {
namespace {

// A scale or minimum in fp16; tessera::Error when it does not fit (fp16's largest is 65504).
uint16_t to_half_bits(float x) {
  const fp16 h(x);
  if (std::isinf(to_f32(h)))
    throw Error("quantization: a scale or minimum of " + std::to_string(x) +
                " does not fit in fp16 (weights this large cannot be quantized)");
  return h.bits;
}
float from_half_bits(uint16_t bits) {
  fp16 h;
  h.bits = bits;
  return to_f32(h);
}

// llama.cpp's symmetric 8-bit rule on n weights: codes into q, the scale returned.
float quantize_int8(const float* w, int64_t n, int8_t* q) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(w[i]));
  const float d = amax / 127.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int64_t i = 0; i < n; ++i)
    q[i] = static_cast<int8_t>(std::clamp(std::round(w[i] * id), -127.0f, 127.0f));
  return d;
}

// llama.cpp's Q4_1 rule on one group of n weights: nibbles into bytes (n / 2 of them).
void quantize_q4(const float* w, int64_t n, uint8_t* bytes, float& d, float& lo) {
  lo = w[0];
  float hi = w[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, w[i]);
    hi = std::max(hi, w[i]);
  }
  d = (hi - lo) / 15.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  const auto code = [&](float x) {
    return static_cast<uint8_t>(std::min(15, static_cast<int>((x - lo) * id + 0.5f)));
  };
  const int64_t half = n / 2;
  for (int64_t j = 0; j < half; ++j)
    bytes[j] = static_cast<uint8_t>(code(w[j]) | code(w[j + half]) << 4);
}

}  // namespace

kernels::WeightCodes codes_of(QuantFormat format) {
  return format == QuantFormat::kFp6  ? kernels::WeightCodes::kFp6
         : format == QuantFormat::kQ4 ? kernels::WeightCodes::kNibble
                                      : kernels::WeightCodes::kInt8;
}

const char* quant_format_name(QuantFormat format) {
  switch (format) {
    case QuantFormat::kFp6:
      return "fp6";
    case QuantFormat::kInt8:
      return "int8";
    case QuantFormat::kQ8_0:
      return "q8_0";
    case QuantFormat::kQ4:
      return "q4";
  }
  return "?";
}

QuantFormat parse_quant_format(const std::string& name) {
  for (QuantFormat f :
       {QuantFormat::kFp6, QuantFormat::kInt8, QuantFormat::kQ8_0, QuantFormat::kQ4})
    if (name == quant_format_name(f)) return f;
  throw Error("quantization format \"" + name + "\": expected one of fp6, int8, q8_0, q4");
}

int64_t quant_group(QuantFormat format, int64_t cols, int64_t q4_group) {
  switch (format) {
    case QuantFormat::kFp6:
    case QuantFormat::kInt8:
      return cols;
    case QuantFormat::kQ8_0:
      return 32;
    case QuantFormat::kQ4:
      return q4_group;
  }
  return cols;
}

int64_t quant_row_bytes(QuantFormat format, int64_t cols) {
  return kernels::quantized_row_bytes(codes_of(format), cols);
}

std::string quant_shape_problem(QuantFormat format, int64_t rows, int64_t cols, int64_t group) {
  const std::string name = quant_format_name(format);
  if (rows < 1 || cols < 1)
    return name + ": a " + std::to_string(rows) + " x " + std::to_string(cols) +
           " matrix has no weights";
  if (format == QuantFormat::kFp6 && cols % 4 != 0)
    return "fp6 packs 4 weights in 3 bytes: " + std::to_string(cols) +
           " columns is not a multiple of 4";
  if (format == QuantFormat::kQ4 && group != 32 && group != 64)
    return "q4: the group size must be 32 or 64, got " + std::to_string(group);
  if ((format == QuantFormat::kQ8_0 || format == QuantFormat::kQ4) && cols % group != 0)
    return name + " quantizes blocks of " + std::to_string(group) +
           " weights: " + std::to_string(cols) + " columns is not a multiple of " +
           std::to_string(group);
  return "";
}

int64_t quant_matrix_bytes(QuantFormat format, int64_t rows, int64_t cols, int64_t group) {
  const int64_t per_scale = format == QuantFormat::kQ4 ? 4 : 2;  // fp16 scale (and minimum)
  return rows * quant_row_bytes(format, cols) + rows * (cols / group) * per_scale;
}

int64_t QuantizedMatrix::bytes() const { return quant_matrix_bytes(format, rows, cols, group); }

QuantizedMatrix quantize(const float* weights, int64_t rows, int64_t cols, QuantFormat format,
                         int64_t q4_group) {
  const int64_t group = quant_group(format, cols, q4_group);
  if (const std::string why = quant_shape_problem(format, rows, cols, group); !why.empty())
    throw Error(why);
  for (int64_t i = 0; i < rows * cols; ++i)
    if (!std::isfinite(weights[i]))
      throw Error(std::string(quant_format_name(format)) + ": the weight at row " +
                  std::to_string(i / cols) + ", column " + std::to_string(i % cols) +
                  " is not finite");
  QuantizedMatrix q;
  q.format = format;
  q.rows = rows;
  q.cols = cols;
  q.group = group;
  const int64_t row_bytes = quant_row_bytes(format, cols), groups = cols / group;
  q.codes.resize(static_cast<size_t>(rows * row_bytes));
  q.scales.resize(static_cast<size_t>(rows * groups));
  if (format == QuantFormat::kQ4) q.mins.resize(q.scales.size());
  std::vector<uint8_t> fp6_codes(format == QuantFormat::kFp6 ? cols : 0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* w = weights + r * cols;
    uint8_t* out = q.codes.data() + r * row_bytes;
    switch (format) {
      case QuantFormat::kFp6: {
        float amax = 0;
        for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(w[c]));
        // The row's scale in fp16, as FP6-LLM keeps it; weights are divided by that stored
        // value, so decoding reproduces the nearest code's value times the scale.
        const uint16_t s = to_half_bits(amax / kFp6Max);
        q.scales[r] = s;
        const float scale = from_half_bits(s);
        for (int64_t c = 0; c < cols; ++c) fp6_codes[c] = fp6_encode(scale != 0 ? w[c] / scale : 0);
        fp6_pack(fp6_codes.data(), cols, out);
        break;
      }
      case QuantFormat::kInt8:
      case QuantFormat::kQ8_0:
        for (int64_t g = 0; g < groups; ++g)
          q.scales[r * groups + g] = to_half_bits(
              quantize_int8(w + g * group, group, reinterpret_cast<int8_t*>(out + g * group)));
        break;
      case QuantFormat::kQ4:
        for (int64_t g = 0; g < groups; ++g) {
          float d = 0, lo = 0;
          quantize_q4(w + g * group, group, out + g * group / 2, d, lo);
          q.scales[r * groups + g] = to_half_bits(d);
          q.mins[r * groups + g] = to_half_bits(lo);
        }
        break;
    }
  }
  return q;
}

void dequantize_row(const QuantizedMatrix& q, int64_t row, float* out) {
  const int64_t groups = q.groups_per_row(), G = q.group;
  const uint8_t* in = q.codes.data() + row * quant_row_bytes(q.format, q.cols);
  switch (q.format) {
    case QuantFormat::kFp6: {
      std::vector<uint8_t> codes(static_cast<size_t>(q.cols));
      fp6_unpack(in, q.cols, codes.data());
      const float scale = from_half_bits(q.scales[row]);
      for (int64_t c = 0; c < q.cols; ++c) out[c] = fp6_decode(codes[c]) * scale;
      break;
    }
    case QuantFormat::kInt8:
    case QuantFormat::kQ8_0:
      for (int64_t g = 0; g < groups; ++g) {
        const float d = from_half_bits(q.scales[row * groups + g]);
        for (int64_t j = 0; j < G; ++j)
          out[g * G + j] = static_cast<float>(static_cast<int8_t>(in[g * G + j])) * d;
      }
      break;
    case QuantFormat::kQ4:
      for (int64_t g = 0; g < groups; ++g) {
        const float d = from_half_bits(q.scales[row * groups + g]);
        const float lo = from_half_bits(q.mins[row * groups + g]);
        const uint8_t* b = in + g * G / 2;
        for (int64_t j = 0; j < G / 2; ++j) {
          out[g * G + j] = std::fma(d, static_cast<float>(b[j] & 15), lo);
          out[g * G + j + G / 2] = std::fma(d, static_cast<float>(b[j] >> 4), lo);
        }
      }
      break;
  }
}

std::vector<float> dequantize(const QuantizedMatrix& q) {
  std::vector<float> out(static_cast<size_t>(q.rows * q.cols));
  for (int64_t r = 0; r < q.rows; ++r) dequantize_row(q, r, out.data() + r * q.cols);
  return out;
}

}  // namespace tessera::quant
