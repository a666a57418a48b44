// Products with weight-only quantized matrices (contract in quantized_gemv.h), compiled once per
// CPU target: the decoding loops below are plain code over 16 weights that the compiler
// vectorises with each target's instructions.
#include "tessera/kernels/quantized_gemv.h"

#include <algorithm>
#include <array>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/gemm_clock.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

// Below this many weights a fork/join of the OpenMP team costs about what the second core saves
// (as gemv.cc).
constexpr int64_t kParallelWeights = int64_t{1} << 16;

// The 64 FP6 e3m2 values (quant/fp6.h): subnormal m/16 for exponent 0, else (1 + m/4) 2^(e-3).
constexpr std::array<float, 64> fp6_values() {
  std::array<float, 64> v{};
  for (int code = 0; code < 64; ++code) {
    const int e = (code >> 2) & 7, m = code & 3;
    float x = e == 0 ? static_cast<float>(m) / 16 : 1.0f + static_cast<float>(m) / 4;
    for (int k = 3; k > e && e != 0; --k) x /= 2;  // 2^(e-3) for e in 1..3
    for (int k = 3; k < e; ++k) x *= 2;            // for e in 4..7
    v[code] = (code & 0x20) ? -x : x;
  }
  return v;
}
constexpr std::array<float, 64> kFp6 = fp6_values();

float half_to_float(uint16_t bits) {
  fp16 h;
  h.bits = bits;
  return to_f32(h);
}

int64_t row_bytes(const QuantizedWeightsView& w) {
  switch (w.codes_type) {
    case WeightCodes::kFp6:
      return w.cols / 4 * 3;
    case WeightCodes::kInt8:
      return w.cols;
    case WeightCodes::kNibble:
      return w.cols / 2;
  }
  return 0;
}

// Weights [i, i + lanes) of one row decoded into buf: `row` the row's codes, k = i's offset in
// its group (the 16 weights lie in one group: groups are whole rows or multiples of 32), d and lo
// the group's scale and minimum. Templated on the format so each loop compiles to straight
// vector code, no per-block branch or division.
template <WeightCodes kType>
[[gnu::always_inline]] inline void decode_block(const uint8_t* row, int64_t i, int64_t k, int64_t G,
                                                int lanes, float d, float lo, float* buf) {
  if constexpr (kType == WeightCodes::kInt8) {
    const auto* q = reinterpret_cast<const int8_t*>(row + i);
    for (int j = 0; j < lanes; ++j) buf[j] = static_cast<float>(q[j]) * d;
  } else if constexpr (kType == WeightCodes::kNibble) {
    // Within the group: weight k sits in byte k % (G/2), low nibble below G/2, high above.
    const int64_t half = G / 2;
    const uint8_t* b = row + (i - k) / 2 + k % half;
    const int shift = k >= half ? 4 : 0;
    for (int j = 0; j < lanes; ++j) buf[j] = static_cast<float>((b[j] >> shift) & 15) * d + lo;
  } else {
    const uint8_t* b = row + i / 4 * 3;
    for (int j = 0; j < lanes; j += 4, b += 3) {
      buf[j] = kFp6[b[0] >> 2] * d;
      buf[j + 1] = kFp6[(b[0] & 3) << 4 | b[1] >> 4] * d;
      buf[j + 2] = kFp6[(b[1] & 15) << 2 | b[2] >> 6] * d;
      buf[j + 3] = kFp6[b[2] & 63] * d;
    }
  }
}

// The scale and minimum of group g of row r.
[[gnu::always_inline]] inline void group_scale(const QuantizedWeightsView& w, int64_t r, int64_t g,
                                               float& d, float& lo) {
  const int64_t at = r * (w.cols / w.group) + g;
  d = half_to_float(w.scales[at]);
  lo = w.mins != nullptr ? half_to_float(w.mins[at]) : 0.0f;
}

// out[x * rows + o + c] for input rows x < kRows and weight rows c < kCols: group by group, the
// weight rows' blocks of 16 decoded and dotted with every input row.
template <WeightCodes kType, int kRows, int kCols>
[[gnu::always_inline]] inline void tile(float* out, const float* inp, const QuantizedWeightsView& w,
                                        int64_t o) {
  const int64_t C = w.cols, G = w.group, groups = C / G, bytes = row_bytes(w);
  VecF acc[kRows][kCols];
  for (int x = 0; x < kRows; ++x)
    for (int c = 0; c < kCols; ++c) acc[x][c] = zero();
  alignas(64) float buf[kCols][16];
  for (int64_t g = 0; g < groups; ++g) {
    float d[kCols], lo[kCols];
    for (int c = 0; c < kCols; ++c) group_scale(w, o + c, g, d[c], lo[c]);
    for_each_block(g * G, (g + 1) * G, [&](int64_t i, int lanes) {
      VecF wv[kCols];
      for (int c = 0; c < kCols; ++c) {
        decode_block<kType>(w.codes + (o + c) * bytes, i, i - g * G, G, lanes, d[c], lo[c], buf[c]);
        wv[c] = load(buf[c], lanes);
      }
      for (int x = 0; x < kRows; ++x) {
        const VecF v = load(inp + x * C + i, lanes);
        for (int c = 0; c < kCols; ++c) acc[x][c] = fmadd(v, wv[c], acc[x][c]);
      }
    });
  }
  for (int x = 0; x < kRows; ++x)
    for (int c = 0; c < kCols; ++c) out[x * w.rows + o + c] = reduce_add(acc[x][c]);
}

template <WeightCodes kType, int kRows>
void rows_tile(float* out, const float* inp, const QuantizedWeightsView& w, int64_t o,
               int64_t cols) {
  if (cols == 2) return tile<kType, kRows, 2>(out, inp, w, o);
  for (int64_t c = 0; c < cols; ++c) tile<kType, kRows, 1>(out, inp, w, o + c);
}

template <WeightCodes kType>
void gemv(float* out, const float* inp, const QuantizedWeightsView& w, int64_t M) {
  // One weight row at a time, so each thread's reads of the codes are one linear stream (rows
  // interleaved two or more at a time make the hardware prefetcher restart at every row: measured
  // on the bf16 gemv, kernels/gemv.cc).
  constexpr int64_t kRowsAtOnce = 1;
  const int64_t steps = (w.rows + kRowsAtOnce - 1) / kRowsAtOnce;
#pragma omp parallel for schedule(static) if (w.rows * w.cols >= kParallelWeights)
  for (int64_t p = 0; p < steps; ++p) {
    const int64_t o = p * kRowsAtOnce, cols = std::min<int64_t>(kRowsAtOnce, w.rows - o);
    for (int64_t x = 0; x < M; x += 4) {
      float* y = out + x * w.rows;
      const float* in = inp + x * w.cols;
      switch (std::min<int64_t>(4, M - x)) {
        case 1:
          rows_tile<kType, 1>(y, in, w, o, cols);
          break;
        case 2:
          rows_tile<kType, 2>(y, in, w, o, cols);
          break;
        case 3:
          rows_tile<kType, 3>(y, in, w, o, cols);
          break;
        default:
          rows_tile<kType, 4>(y, in, w, o, cols);
      }
    }
  }
}

template <WeightCodes kType>
void decode_rows(float* out, const QuantizedWeightsView& w, int64_t r0, int64_t r1) {
  const int64_t C = w.cols, G = w.group, groups = C / G, bytes = row_bytes(w);
#pragma omp parallel for schedule(static) if ((r1 - r0) * C >= kParallelWeights)
  for (int64_t r = r0; r < r1; ++r) {
    float* dst = out + (r - r0) * C;
    for (int64_t g = 0; g < groups; ++g) {
      float d, lo;
      group_scale(w, r, g, d, lo);
      for_each_block(g * G, (g + 1) * G, [&](int64_t i, int lanes) {
        decode_block<kType>(w.codes + r * bytes, i, i - g * G, G, lanes, d, lo, dst + i);
      });
    }
  }
}

}  // namespace

void quantized_gemv(float* out, const float* inp, const QuantizedWeightsView& w, int64_t M) {
  TESSERA_CHECK(M >= 1 && M <= kQuantizedGemvMaxRows && w.rows >= 0 && w.cols >= 0);
  TESSERA_CHECK(w.group > 0 && w.cols % w.group == 0);
  const detail::GemmClock clock;  // counted with the GEMMs (gemm.h's gemm_seconds)
  switch (w.codes_type) {
    case WeightCodes::kFp6:
      return gemv<WeightCodes::kFp6>(out, inp, w, M);
    case WeightCodes::kInt8:
      return gemv<WeightCodes::kInt8>(out, inp, w, M);
    case WeightCodes::kNibble:
      return gemv<WeightCodes::kNibble>(out, inp, w, M);
  }
}

void dequantize_rows(float* out, const QuantizedWeightsView& w, int64_t r0, int64_t r1) {
  TESSERA_CHECK(0 <= r0 && r0 <= r1 && r1 <= w.rows);
  TESSERA_CHECK(w.group > 0 && w.cols % w.group == 0);
  switch (w.codes_type) {
    case WeightCodes::kFp6:
      return decode_rows<WeightCodes::kFp6>(out, w, r0, r1);
    case WeightCodes::kInt8:
      return decode_rows<WeightCodes::kInt8>(out, w, r0, r1);
    case WeightCodes::kNibble:
      return decode_rows<WeightCodes::kNibble>(out, w, r0, r1);
  }
}

void register_quantized_gemv() {
  register_kernel<&kernels::quantized_gemv>(kThisTarget, &quantized_gemv);
  register_kernel<&kernels::dequantize_rows>(kThisTarget, &dequantize_rows);
}

TESSERA_TARGET_END
