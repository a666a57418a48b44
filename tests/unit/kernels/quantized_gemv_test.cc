// Weight-only quantized products (kernels/quantized_gemv.h) against a double-precision reference
// that decodes the codes by the formats' definitions written out here (FP6 e3m2 by its formula,
// int8 times its scale, 4-bit nibbles in llama.cpp's order plus the minimum): random codes and
// fp16 scales, odd row counts and column counts with tails, 1-8 input rows, per-row and per-group
// scales. ctest runs it once per CPU target.
#include "tessera/kernels/quantized_gemv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "tessera/core/dtype.h"

namespace tessera::kernels {
namespace {

double fp6_value(int code) {
  const int e = (code >> 2) & 7, m = code & 3;
  const double v = e == 0 ? m / 16.0 : (1 + m / 4.0) * std::ldexp(1.0, e - 3);
  return (code & 0x20) ? -v : v;
}

double half(uint16_t bits) {
  fp16 h;
  h.bits = bits;
  return static_cast<double>(to_f32(h));
}

struct Case {
  WeightCodes type;
  int64_t rows, cols, group;
};

// Random codes and scales for a case, and the matrix they decode to (double, by definition).
struct Matrix {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales, mins;
  std::vector<double> dense;  // rows x cols
  QuantizedWeightsView view;
};

Matrix make(const Case& c, unsigned seed) {
  std::mt19937 rng(seed);
  Matrix m;
  const int64_t bytes = c.type == WeightCodes::kFp6    ? c.cols / 4 * 3
                        : c.type == WeightCodes::kInt8 ? c.cols
                                                       : c.cols / 2;
  const int64_t groups = c.cols / c.group;
  m.codes.resize(c.rows * bytes);
  for (uint8_t& b : m.codes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.001f, 0.05f), lo(-0.4f, 0.0f);
  for (int64_t i = 0; i < c.rows * groups; ++i) {
    m.scales.push_back(fp16(scale(rng)).bits);
    if (c.type == WeightCodes::kNibble) m.mins.push_back(fp16(lo(rng)).bits);
  }
  m.dense.resize(c.rows * c.cols);
  for (int64_t r = 0; r < c.rows; ++r) {
    const uint8_t* row = m.codes.data() + r * bytes;
    for (int64_t k = 0; k < c.cols; ++k) {
      const int64_t g = r * groups + k / c.group;
      double v = 0;
      if (c.type == WeightCodes::kInt8) {
        v = static_cast<int8_t>(row[k]) * half(m.scales[g]);
      } else if (c.type == WeightCodes::kNibble) {
        const int64_t j = k % c.group, base = k - j, h = c.group / 2;
        const uint8_t b = row[(base + (j % h) * 2) / 2];  // byte j % h of the group
        const int q = j < h ? (b & 15) : (b >> 4);
        v = q * half(m.scales[g]) + half(m.mins[g]);
      } else {
        // Code k of the row: bits [6k, 6k + 6) of the row's bytes, most significant first.
        int code = 0;
        for (int bit = 0; bit < 6; ++bit) {
          const int64_t at = 6 * k + bit;
          code = code << 1 | ((row[at / 8] >> (7 - at % 8)) & 1);
        }
        v = fp6_value(code) * half(m.scales[g]);
      }
      m.dense[r * c.cols + k] = v;
    }
  }
  m.view = {c.type, m.codes.data(), m.scales.data(), m.mins.empty() ? nullptr : m.mins.data(),
            c.rows, c.cols,         c.group};
  return m;
}

const Case kCases[] = {
    {WeightCodes::kFp6, 37, 100, 100},  // tail of 4 weights after six blocks of 16
    {WeightCodes::kFp6, 64, 1024, 1024},
    {WeightCodes::kFp6, 5, 64, 64},    // whole 64-code chunks
    {WeightCodes::kFp6, 7, 80, 80},    // whole blocks of 16, not of 64: decoded block by block
    {WeightCodes::kInt8, 33, 77, 77},  // per row, an odd tail
    {WeightCodes::kInt8, 50, 96, 32},  // Q8_0 blocks
    {WeightCodes::kNibble, 31, 96, 32},
    {WeightCodes::kNibble, 20, 192, 64},
    {WeightCodes::kNibble, 300, 512, 32},  // enough weights for the team
    // bf16 pairs take 4-bit codes 128 weights at a time, two blocks a turn: rows ending in half a
    // block after whole turns, in the second block of a turn, in a whole block alone
    {WeightCodes::kNibble, 13, 320, 32},
    {WeightCodes::kNibble, 6, 64, 64},
    {WeightCodes::kNibble, 5, 448, 32},
    {WeightCodes::kNibble, 7, 384, 64},
    {WeightCodes::kNibble, 3, 640, 64},
    {WeightCodes::kInt8, 70, 1024, 1024},  // per row, whole blocks (decoded in registers)
    {WeightCodes::kInt8, 9, 192, 32},      // Q8_0 blocks in whole chunks of 64 (bf16 pairs)
};

TEST(QuantizedGemv, EqualsTheDecodedMatrixProductInDouble) {
  for (const Case& c : kCases) {
    const Matrix m = make(c, static_cast<unsigned>(c.rows * 7 + c.cols));
    for (int64_t M : {1, 2, 3, 4, 5, 8}) {
      std::mt19937 rng(static_cast<unsigned>(M));
      std::normal_distribution<float> normal;
      std::vector<float> x(M * c.cols), out(M * c.rows, -1.0f);
      for (float& v : x) v = normal(rng);
      quantized_gemv(out.data(), x.data(), m.view, M);
      double worst = 0;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t r = 0; r < c.rows; ++r) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < c.cols; ++k) {
            ref += x[i * c.cols + k] * m.dense[r * c.cols + k];
            mag += std::fabs(x[i * c.cols + k] * m.dense[r * c.cols + k]);
          }
          // fp32 rounding of the decoded weight and of a sum of cols products.
          worst = std::max(worst, std::fabs(out[i * c.rows + r] - ref) /
                                      (mag * 1e-6 * std::sqrt(double(c.cols)) + 1e-30));
        }
      EXPECT_LE(worst, 1.0) << "type " << static_cast<int>(c.type) << " " << c.rows << "x" << c.cols
                            << " group " << c.group << " M " << M;
    }
  }
}

// Up to 4 input rows decode in registers, more decode each weight row into a buffer first
// (quantized_gemv.h): the same decoded values in the same order, so the same bits. Row 0 of a
// 5-row product (the buffer's way) against the 1- to 4-row products of the same rows.
TEST(QuantizedGemv, DecodingInRegistersHasTheBitsOfDecodingIntoABuffer) {
  for (const Case& c : kCases) {
    const Matrix m = make(c, 7);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    std::vector<float> x(5 * c.cols), buffered(5 * c.rows);
    for (float& v : x) v = normal(rng);
    quantized_gemv(buffered.data(), x.data(), m.view, 5);
    for (int64_t M = 1; M <= 4; ++M) {
      std::vector<float> out(M * c.rows);
      quantized_gemv(out.data(), x.data(), m.view, M);
      for (int64_t i = 0; i < M * c.rows; ++i)
        ASSERT_EQ(out[i], buffered[i])
            << "type " << static_cast<int>(c.type) << " " << c.rows << "x" << c.cols << " group "
            << c.group << " M " << M << " output " << i;
    }
  }
}

// bf16 inputs (quantized_gemv_bf16): bf16 pairs where the CPU has them and the shape is made of
// chunks of 64, the widened fp32 path elsewhere; either way within fp32 rounding of the exact
// product, and each output's bits the same whatever the number of input rows.
TEST(QuantizedGemv, Bf16InputsEqualTheDecodedMatrixProductInDouble) {
  for (const Case& c : kCases) {
    const Matrix m = make(c, static_cast<unsigned>(c.rows * 5 + c.cols));
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    std::vector<bf16> x(8 * c.cols);
    for (bf16& v : x) v = bf16(normal(rng));
    std::vector<float> one(8 * c.rows);
    for (int64_t i = 0; i < 8; ++i)
      quantized_gemv_bf16(one.data() + i * c.rows, x.data() + i * c.cols, m.view, 1);
    double worst = 0;
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t r = 0; r < c.rows; ++r) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < c.cols; ++k) {
          const double p =
              static_cast<double>(static_cast<float>(x[i * c.cols + k])) * m.dense[r * c.cols + k];
          ref += p;
          mag += std::fabs(p);
        }
        worst = std::max(worst, std::fabs(one[i * c.rows + r] - ref) /
                                    (mag * 1e-6 * std::sqrt(double(c.cols)) + 1e-30));
      }
    EXPECT_LE(worst, 1.0) << "type " << static_cast<int>(c.type) << " " << c.rows << "x" << c.cols
                          << " group " << c.group;
    for (int64_t M : {2, 3, 4, 5, 8}) {
      std::vector<float> out(M * c.rows);
      quantized_gemv_bf16(out.data(), x.data(), m.view, M);
      for (int64_t i = 0; i < M * c.rows; ++i)
        ASSERT_EQ(out[i], one[i]) << "type " << static_cast<int>(c.type) << " " << c.rows << "x"
                                  << c.cols << " group " << c.group << " M " << M << " output "
                                  << i;
    }
  }
}

TEST(QuantizedGemv, DequantizedRowsAreTheDefinitionsValues) {
  for (const Case& c : kCases) {
    const Matrix m = make(c, 99);
    // A middle range, and one that ends with the matrix's last row (whose codes are the last
    // bytes: FP6 decoded in registers must not read past them).
    for (const auto& [r0, r1] :
         {std::pair{c.rows / 3, c.rows - 1}, std::pair{int64_t{0}, c.rows}}) {
      std::vector<float> out((r1 - r0) * c.cols);
      dequantize_rows(out.data(), m.view, r0, r1);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t k = 0; k < c.cols; ++k) {
          const double ref = m.dense[r * c.cols + k];
          // One fp32 multiply (and add for 4-bit) of exact fp16 values: within 2 ulp of fp32.
          ASSERT_NEAR(out[(r - r0) * c.cols + k], ref, std::fabs(ref) * 2.5e-7 + 1e-7)
              << "type " << static_cast<int>(c.type) << " row " << r << " col " << k;
        }
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
