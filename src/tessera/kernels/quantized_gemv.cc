// Products with weight-only quantized matrices (contract in quantized_gemv.h), compiled once per
// CPU target: the decoding loops below are plain code over 16 weights that the compiler
// vectorises with each target's instructions.
#include "tessera/kernels/quantized_gemv.h"

#include <algorithm>
#include <array>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/gemm_clock.h"
#include "tessera/kernels/scratch.h"
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

thread_local ScratchBuffer t_row, t_scales;

// Row r decoded into dst (cols floats), group by group with each group's scale (and minimum)
// read once. The loops run over whole groups so the compiler vectorises them with the target's
// instructions (widening int8 or nibbles to fp32); decoding 16 weights at a time into a small
// buffer instead was scalar code, and each vector load of that buffer stalled on the scalar
// stores just made to it (store-to-load forwarding: 69 % of the kernel's time in perf).
// One group of 4-bit codes (2 * kHalf weights): byte j holds weight j in its low nibble and
// weight j + kHalf in its high one. A compile-time length, so the loops vectorise (with the
// group size known only at run time GCC left them scalar: q4 decoded at a quarter of int8's
// speed).
template <int kHalf>
[[gnu::always_inline]] inline void decode_nibbles(const uint8_t* __restrict b, float d, float lo,
                                                  float* __restrict out) {
  int32_t q[2 * kHalf];
  for (int j = 0; j < kHalf; ++j) {
    q[j] = b[j] & 15;
    q[j + kHalf] = b[j] >> 4;
  }
  for (int j = 0; j < 2 * kHalf; ++j) out[j] = static_cast<float>(q[j]) * d + lo;
}

// `scratch` holds 2 * groups floats: the row's scales and minimums widened from fp16 with the
// vector layer (a scalar fp16 conversion per group of 32 cost more than the group's decoding).
template <WeightCodes kType>
void decode_row(const QuantizedWeightsView& w, int64_t r, float* dst, float* scratch) {
  const int64_t C = w.cols, G = w.group, groups = C / G;
  const uint8_t* row = w.codes + r * quantized_row_bytes(w.codes_type, w.cols);
  float* scales = scratch;
  float* mins = scratch + groups;
  const auto* s16 = reinterpret_cast<const fp16*>(w.scales + r * groups);
  for_each_block(0, groups,
                 [&](int64_t i, int lanes) { store(scales + i, load(s16 + i, lanes), lanes); });
  if (w.mins != nullptr) {
    const auto* m16 = reinterpret_cast<const fp16*>(w.mins + r * groups);
    for_each_block(0, groups,
                   [&](int64_t i, int lanes) { store(mins + i, load(m16 + i, lanes), lanes); });
  }
  for (int64_t g = 0; g < groups; ++g) {
    const float d = scales[g];
    // __restrict: codes are bytes, which may alias anything, and without it GCC left these loops
    // scalar (measured: q4 decode at a quarter of int8's speed).
    float* __restrict out = dst + g * G;
    if constexpr (kType == WeightCodes::kInt8) {
      const int8_t* __restrict q = reinterpret_cast<const int8_t*>(row + g * G);
      for (int64_t j = 0; j < G; ++j) out[j] = static_cast<float>(q[j]) * d;
    } else if constexpr (kType == WeightCodes::kNibble) {
      // Byte j of the group: weight j in its low nibble, weight j + G/2 in its high one.
      const uint8_t* __restrict b = row + g * G / 2;
      if (G == 32)
        decode_nibbles<16>(b, d, mins[g], out);
      else
        decode_nibbles<32>(b, d, mins[g], out);
    } else {
      // In blocks of 64 codes: unpacked to int32 first, then looked up and scaled in a loop the
      // compiler vectorises (a gather where the target has one).
      const uint8_t* __restrict b = row + g * G / 4 * 3;
      int32_t q[64];
      for (int64_t j0 = 0; j0 < G; j0 += 64) {
        const int n = static_cast<int>(std::min<int64_t>(64, G - j0));
        for (int j = 0; j < n; j += 4, b += 3) {
          q[j] = b[0] >> 2;
          q[j + 1] = (b[0] & 3) << 4 | b[1] >> 4;
          q[j + 2] = (b[1] & 15) << 2 | b[2] >> 6;
          q[j + 3] = b[2] & 63;
        }
        for (int j = 0; j < n; ++j) out[j0 + j] = kFp6[q[j]] * d;
      }
    }
  }
}

// out[x * rows + o] for input rows x < kRows: the decoded row dotted with each (fp32 lanes,
// blocks of 16 in order, fused multiply-adds where the target has them).
template <int kRows>
[[gnu::always_inline]] inline void dot_rows(float* out, const float* inp, const float* row,
                                            int64_t C, int64_t rows, int64_t o) {
  VecF acc[kRows];
  for (int x = 0; x < kRows; ++x) acc[x] = zero();
  for_each_block(0, C, [&](int64_t i, int lanes) {
    const VecF wv = load(row + i, lanes);
    for (int x = 0; x < kRows; ++x) acc[x] = fmadd(load(inp + x * C + i, lanes), wv, acc[x]);
  });
  for (int x = 0; x < kRows; ++x) out[x * rows + o] = reduce_add(acc[x]);
}

template <WeightCodes kType>
void gemv(float* out, const float* inp, const QuantizedWeightsView& w, int64_t M) {
  const int64_t C = w.cols;
  // One weight row at a time, so each thread's reads of the codes are one linear stream (rows
  // interleaved two or more at a time make the hardware prefetcher restart at every row:
  // measured on the bf16 gemv, kernels/gemv.cc). The decoded row stays in L1 for the products.
#pragma omp parallel if (w.rows * C >= kParallelWeights)
  {
    // The decoded row and the row's widened scales: per-thread buffers kept between calls.
    float* row = t_row.floats(C);
    float* scales = t_scales.floats(2 * C / w.group);
#pragma omp for schedule(static)
    for (int64_t o = 0; o < w.rows; ++o) {
      decode_row<kType>(w, o, row, scales);
      for (int64_t x = 0; x < M; x += 4) {
        float* y = out + x * w.rows;
        const float* in = inp + x * C;
        switch (std::min<int64_t>(4, M - x)) {
          case 1:
            dot_rows<1>(y, in, row, C, w.rows, o);
            break;
          case 2:
            dot_rows<2>(y, in, row, C, w.rows, o);
            break;
          case 3:
            dot_rows<3>(y, in, row, C, w.rows, o);
            break;
          default:
            dot_rows<4>(y, in, row, C, w.rows, o);
        }
      }
    }
  }
}

template <WeightCodes kType>
void decode_rows(float* out, const QuantizedWeightsView& w, int64_t r0, int64_t r1) {
#pragma omp parallel if ((r1 - r0) * w.cols >= kParallelWeights)
  {
    float* scales = t_scales.floats(2 * w.cols / w.group);
#pragma omp for schedule(static)
    for (int64_t r = r0; r < r1; ++r) decode_row<kType>(w, r, out + (r - r0) * w.cols, scales);
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
