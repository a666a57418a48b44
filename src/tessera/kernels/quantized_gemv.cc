// Products with weight-only quantized matrices (contract in quantized_gemv.h), compiled once per
// CPU target: the decoding loops below are plain code over 16 weights that the compiler
// vectorises with each target's instructions.
#include "tessera/kernels/quantized_gemv.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/gemm_clock.h"
#include "tessera/kernels/scratch.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

#include "tessera/kernels/quantized_rows.inc"

thread_local ScratchBuffer t_row;

// 4-bit weights from their codes q (one per lane, widened to fp32): q * d + min in one fused
// multiply-add (one rounding where the target has FMA; vec_generic.h). Every path decodes a
// 4-bit weight through here, or looks it up in a table made here, so all give the same bits: one
// operation where a product and a sum were two (measured: 4-bit decode bound by the vector ports,
// docs/quantization.md).
[[gnu::always_inline]] inline VecF nibble_value(VecF q, float d, float min) {
  return fmadd(q, splat(d), splat(min));
}

// One group of 4-bit codes (2 * kHalf weights, kHalf 16 or 32): byte j holds weight j in its low
// nibble and weight j + kHalf in its high one.
template <int kHalf>
[[gnu::always_inline]] inline void decode_nibbles(const uint8_t* b, float d, float lo, float* out) {
  for (int j = 0; j < kHalf; j += kLanes) {
    const VecI bytes = load_u8(b + j);
    store(out + j, nibble_value(to_float(bytes & splat_i(15)), d, lo));
    store(out + kHalf + j, nibble_value(to_float(shift_right(bytes, 4)), d, lo));
  }
}

// Row r decoded into dst (cols floats), group by group with each group's scale (and minimum)
// read once. The loops run over whole groups so the compiler vectorises them with the target's
// instructions (widening int8 or nibbles to fp32); decoding 16 weights at a time into a small
// buffer instead was scalar code, and each vector load of that buffer stalled on the scalar
// stores just made to it (store-to-load forwarding: 69 % of the kernel's time in perf).
// `scratch` holds 2 * groups floats (widen_scales); 4-bit groups decode in the vector layer
// (decode_nibbles).
template <WeightCodes kType>
void decode_row(const QuantizedWeightsView& w, int64_t r, float* dst, float* scratch) {
  const int64_t C = w.cols, G = w.group, groups = C / G;
  const uint8_t* row = w.codes + r * quantized_row_bytes(w.codes_type, w.cols);
  float* scales = scratch;
  float* mins = scratch + groups;
  widen_scales(w, groups, r, scratch);
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

// Each output's dot product runs on four accumulators of 16 lanes: block k (weights 16k ..
// 16k + 15 of the row) goes into accumulator k % 4, and the result is the lanes of
// (a0 + a1) + (a2 + a3) summed. One chain of fused multiply-adds made decoding in registers wait
// on the adds' latency (FP6 and 4-bit codes ran at half the read rate); both ways of decoding
// keep this order, so they give the same bits.
constexpr int kAccumulators = 4;

// Input rows handled together: each holds kAccumulators vectors, which for 4 rows is 16 of
// AVX-512's 32 registers; on AVX2 a vector takes two of its 16 and on baseline four, so 2 rows.
constexpr int kRowsAtOnce =
    kThisTarget == CpuTarget::kAvx512 || kThisTarget == CpuTarget::kAvx512Bf16 ? 4 : 2;

template <int kRows>
struct Accumulators {
  VecF acc[kRows][kAccumulators];
  Accumulators() {
    for (auto& row : acc)
      for (VecF& a : row) a = zero();
  }
  // acc[x][a] += w * the input rows' block at column i (lanes of it).
  template <int a>
  [[gnu::always_inline]] void add(const float* inp, int64_t C, int64_t i, VecF wv, int lanes) {
    for (int x = 0; x < kRows; ++x) acc[x][a] = fmadd(load(inp + x * C + i, lanes), wv, acc[x][a]);
  }
  template <int a>
  [[gnu::always_inline]] void add(const float* inp, int64_t C, int64_t i, VecF wv) {
    for (int x = 0; x < kRows; ++x) acc[x][a] = fmadd(load(inp + x * C + i), wv, acc[x][a]);
  }
  void store_to(float* out, int64_t rows, int64_t o) const {
    for (int x = 0; x < kRows; ++x)
      out[x * rows + o] = reduce_add((acc[x][0] + acc[x][1]) + (acc[x][2] + acc[x][3]));
  }
};

// out[x * rows + o] for input rows x < kRows: the decoded row dotted with each.
template <int kRows>
[[gnu::always_inline]] inline void dot_rows(float* out, const float* inp, const float* row,
                                            int64_t C, int64_t rows, int64_t o) {
  Accumulators<kRows> s;
  int64_t i = 0;
  for (; i + 4 * kLanes <= C; i += 4 * kLanes) {
    s.template add<0>(inp, C, i, load(row + i));
    s.template add<1>(inp, C, i + kLanes, load(row + i + kLanes));
    s.template add<2>(inp, C, i + 2 * kLanes, load(row + i + 2 * kLanes));
    s.template add<3>(inp, C, i + 3 * kLanes, load(row + i + 3 * kLanes));
  }
  // The last (up to 3, the last maybe partial) blocks, into accumulators 0, 1, 2 in turn.
  if (i < C) s.template add<0>(inp, C, i, load(row + i, lanes_left(i, C)), lanes_left(i, C));
  if ((i += kLanes) < C)
    s.template add<1>(inp, C, i, load(row + i, lanes_left(i, C)), lanes_left(i, C));
  if ((i += kLanes) < C)
    s.template add<2>(inp, C, i, load(row + i, lanes_left(i, C)), lanes_left(i, C));
  s.store_to(out, rows, o);
}

// The magnitudes of the 32 non-negative FP6 codes (the sign is bit 5 of the code).
constexpr std::array<float, 32> fp6_magnitudes() {
  std::array<float, 32> v{};
  for (int code = 0; code < 32; ++code) v[code] = kFp6[code];
  return v;
}
alignas(64) constexpr std::array<float, 32> kFp6Magnitude = fp6_magnitudes();

// The 32 FP6 magnitudes times a group's scale d (a lookup of one gives a weight's magnitude).
[[gnu::always_inline]] inline void fp6_table(float* table, float d) {
  store(table, load(kFp6Magnitude.data()) * splat(d));
  store(table + 16, load(kFp6Magnitude.data() + 16) * splat(d));
}

// 16 FP6 weights from their codes: `index` (bits 0-4 of each lane: the magnitude's place in
// `fp6_times_d`, fp6_table) and `sign_from` (bit 31: the code's sign). -(m d) is (-m) d exactly.
[[gnu::always_inline]] inline VecF fp6_weight(const float* fp6_times_d, VecI index,
                                              VecI sign_from) {
  return xor_bits(lookup32(fp6_times_d, index),
                  sign_from & splat_i(static_cast<int32_t>(0x80000000u)));
}
// The same for lanes as unpack6x64 leaves them: the magnitude's index in bits 0-4 (lookup32 reads
// only those), the sign in bit 31.
[[gnu::always_inline]] inline VecF fp6_weight(const float* fp6_times_d, VecI codes) {
  return fp6_weight(fp6_times_d, codes, codes);
}

// Block j (16 weights) of an int8 or FP6 group whose codes start at `codes`, decoded in
// registers exactly as decode_row writes it: code times the group's scale d. For FP6,
// `fp6_times_d` holds the 32 magnitudes times d, so a weight is one lookup and its sign: -(m d)
// is (-m) d exactly. kExact: read no byte past the block's own (the matrix's last block).
template <WeightCodes kType, bool kExact>
[[gnu::always_inline]] inline VecF decode_block(const uint8_t* codes, int64_t j, float d,
                                                const float* fp6_times_d) {
  if constexpr (kType == WeightCodes::kInt8) {
    return load(reinterpret_cast<const int8_t*>(codes) + 16 * j) * splat(d);
  } else {
    static_assert(kType == WeightCodes::kFp6, "4-bit codes decode in fused_nibble_rows");
    // Each code in its lane's top 6 bits: the magnitude's index below the sign bit, and the
    // sign bit in the fp32 sign's place.
    const VecI top = kExact ? unpack6_top_exact(codes + 12 * j) : unpack6_top(codes + 12 * j);
    return fp6_weight(fp6_times_d, shift_right(top, 26), top);
  }
}

// The 64 codes of the chunk at `codes` (unpack6x64); only the matrix's last chunk (kExact, and
// `last` of its row) must not read the 16 bytes after its 48. A template on the codes' pointer
// type for the reason fused_fp6_rows_x64 is.
template <bool kExact, typename Bytes>
TESSERA_VBMI [[gnu::always_inline]] inline void unpack6x64_chunk(Bytes codes, bool last,
                                                                 VecI q[4]) {
  if (kExact && last)
    unpack6x64_exact(codes, q);
  else
    unpack6x64(codes, q);
}

// fused_rows for an FP6 row of whole 64-code chunks where the CPU unpacks 64 codes at once
// (kUnpack6x64 and cpu_has_avx512_vbmi(): AVX512_VBMI's byte permutes, about 5 instructions a
// block of 16 against decode_block's 7): the same blocks into the same accumulators, the same
// decoded values (the magnitude looked up in the row's table, the sign xored in), so the same
// bits. Compiled for VBMI (TESSERA_VBMI) and not inlined into callers compiled without it. A
// template on the codes' pointer type so that the call of unpack6x64, which the other targets
// do not have, is looked up only where it is instantiated. kExact: the row is the matrix's last.
template <int kRows, bool kExact, typename Bytes>
TESSERA_VBMI [[gnu::noinline]] void fused_fp6_rows_x64(float* out, const float* inp,
                                                      const QuantizedWeightsView& w, int64_t o,
                                                      Bytes codes, float d) {
  const int64_t C = w.cols;
  Accumulators<kRows> s;
  alignas(64) float table[32];
  fp6_table(table, d);
  auto weight = [&](VecI q) __attribute__((always_inline)) { return fp6_weight(table, q); };
  for (int64_t i = 0; i < C; i += 64, codes += 48) {
    VecI q[4];
    prefetch_ahead(codes, kPrefetchBytes);
    // Only the last chunk of the last row may not read 16 bytes past its own.
    unpack6x64_chunk<kExact>(codes, i + 64 == C, q);
    s.template add<0>(inp, C, i, weight(q[0]));
    s.template add<1>(inp, C, i + 16, weight(q[1]));
    s.template add<2>(inp, C, i + 32, weight(q[2]));
    s.template add<3>(inp, C, i + 48, weight(q[3]));
  }
  s.store_to(out, w.rows, o);
}

// Whether every row is made of whole blocks of 16 weights (cols and the group multiples of 16):
// what decoding in registers needs.
bool whole_blocks(const QuantizedWeightsView& w) { return w.cols % 16 == 0 && w.group % 16 == 0; }

// decode_fp6_row for a row of whole 64-code chunks with one scale d, where the CPU unpacks 64
// codes at once (as fused_fp6_rows_x64, whose decoded values these are).
template <bool kExact, typename Bytes>
TESSERA_VBMI [[gnu::noinline]] void decode_fp6_row_x64(float* dst, Bytes codes, int64_t C,
                                                       float d) {
  alignas(64) float table[32];
  fp6_table(table, d);
  for (int64_t i = 0; i < C; i += 64, codes += 48) {
    VecI q[4];
    unpack6x64_chunk<kExact>(codes, i + 64 == C, q);
    for (int k = 0; k < 4; ++k) store(dst + i + 16 * k, fp6_weight(table, q[k]));
  }
}

// Row r of an FP6 matrix made of whole blocks of 16 (cols and group multiples of 16) decoded in
// registers and stored: decode_row's values (the same lookup and sign as the fused kernels) for
// dequantize_rows. decode_row's scalar unpacking ran at ~3 G weights/s on a core, a quarter of
// int8's, and was a third of an FP6 prefill (AMD EPYC, 2026-12-02). `scales` from widen_scales;
// kExact for the matrix's last row (decode_block).
template <bool kExact>
void decode_fp6_row(const QuantizedWeightsView& w, int64_t r, float* dst, const float* scales) {
  const int64_t C = w.cols, G = w.group, blocks = G / 16, groups = C / G;
  const int64_t group_bytes = quantized_row_bytes(w.codes_type, G);
  const uint8_t* codes = w.codes + r * quantized_row_bytes(w.codes_type, C);
  if constexpr (kUnpack6x64) {
    if (C % 64 == 0 && G == C && cpu_has_avx512_vbmi())
      return decode_fp6_row_x64<kExact>(dst, codes, C, scales[0]);
  }
  alignas(64) float table[32];
  for (int64_t g = 0; g < groups; ++g, codes += group_bytes) {
    fp6_table(table, scales[g]);
    for (int64_t j = 0; j < blocks; ++j)
      store(dst + g * G + 16 * j,
            decode_block<WeightCodes::kFp6, kExact>(codes, j, scales[g], table));
  }
}

// out[x * rows + o] for input rows x < kRows, decoding each block of 16 weights in registers and
// dotting it with every input row at once: the codes are read once and nothing is stored between
// decoding and the products. Same blocks, same accumulators and the same decoded values as
// decode_row + dot_rows, so the same bits. kExact for the matrix's last row (decode_block).
template <WeightCodes kType, int kRows, bool kExact>
[[gnu::always_inline]] inline void fused_rows(float* out, const float* inp,
                                              const QuantizedWeightsView& w, int64_t o,
                                              int64_t groups, const float* scales) {
  const int64_t C = w.cols, blocks = w.group / 16, all_blocks = C / 16;
  const int64_t group_bytes = quantized_row_bytes(w.codes_type, w.group);
  const uint8_t* codes = w.codes + o * quantized_row_bytes(w.codes_type, C);
  if constexpr (kType == WeightCodes::kFp6 && kUnpack6x64) {
    // One scale for the row (FP6's group is the row; fused_fp6_rows_x64 takes the first).
    if (C % 64 == 0 && w.group == C && cpu_has_avx512_vbmi())
      return fused_fp6_rows_x64<kRows, kExact>(out, inp, w, o, codes, scales[0]);
  }
  Accumulators<kRows> s;
  // The group of block k and the block's place j in it, advanced block by block (no division).
  int64_t g = 0, j = 0;
  float d = 0;
  alignas(64) float fp6_times_d[32];
  auto enter_group = [&]() __attribute__((always_inline)) {
    d = scales[g];
    if constexpr (kType == WeightCodes::kFp6) {
      fp6_table(fp6_times_d, d);
    }
  };
  enter_group();
  auto next = [&]() __attribute__((always_inline)) {
    if (++j < blocks) return;
    j = 0;
    codes += group_bytes;
    if (++g < groups) enter_group();
  };
  // (Lambdas GCC would not inline otherwise: one call per block halved the 4-bit kernel.)
  auto block = [&]() __attribute__((always_inline)) {
    return decode_block<kType, kExact>(codes, j, d, fp6_times_d);
  };
  const uint8_t* row = codes;
  const int64_t block_bytes = quantized_row_bytes(w.codes_type, 16);
  int64_t k = 0;
  for (; k + 4 <= all_blocks; k += 4) {
    prefetch_ahead(row, k * block_bytes + kPrefetchBytes);
    s.template add<0>(inp, C, 16 * k, block());
    next();
    s.template add<1>(inp, C, 16 * (k + 1), block());
    next();
    s.template add<2>(inp, C, 16 * (k + 2), block());
    next();
    s.template add<3>(inp, C, 16 * (k + 3), block());
    next();
  }
  if (k < all_blocks) {
    s.template add<0>(inp, C, 16 * k, block());
    next();
  }
  if (++k < all_blocks) {
    s.template add<1>(inp, C, 16 * k, block());
    next();
  }
  if (++k < all_blocks) s.template add<2>(inp, C, 16 * k, block());
  s.store_to(out, w.rows, o);
}

// The 16 values of a group of 4-bit codes, q * d + min for q = 0 .. 15 in lane q, rounded as
// every path rounds each weight (nibble_value), so a lookup gives its bits.
[[gnu::always_inline]] inline VecF nibble_values(float d, float min) {
  return nibble_value(to_float(iota_i()), d, min);
}

// A group's weights from their 4-bit codes q (one per lane), decoded as decode_row does.
// `values` is the group's nibble_values. (A template so that the lookup16 call, dependent on I,
// is looked up only where kFastLookup16 keeps it: the other targets do not have lookup16.)
template <typename I>
[[gnu::always_inline]] inline VecF nibble_weights(I q, VecF values, float d, float min) {
  if constexpr (kFastLookup16) return lookup16(values, q);
  return nibble_value(to_float(q), d, min);
}

// The codes in the low nibbles of a group's bytes (widened to lanes): masked, except where they
// are looked up (lookup16 reads only the low 4 bits of an index).
[[gnu::always_inline]] inline VecI low_nibbles(VecI bytes) {
  if constexpr (kFastLookup16) return bytes;
  return bytes & splat_i(15);
}

// fused_rows for 4-bit codes in groups of 32 or 64, a group's bytes loaded once for both of its
// halves (its low nibbles, then its high ones): the same blocks into the same accumulators.
// Where a 16-entry lookup is one instruction (AVX-512) a weight is a lookup in the group's 16
// values (computed once a group), instead of a conversion, a product and a sum per weight.
template <int kRows>
[[gnu::always_inline]] inline void fused_nibble_rows(float* out, const float* inp,
                                                     const QuantizedWeightsView& w, int64_t o,
                                                     int64_t groups, const float* scales,
                                                     const float* mins) {
  const int64_t C = w.cols, G = w.group;
  const uint8_t* codes = w.codes + o * (C / 2);
  Accumulators<kRows> s;
  // The group's 16 values, only where they are looked up.
  auto values = [&](int64_t g) __attribute__((always_inline)) {
    return kFastLookup16 ? nibble_values(scales[g], mins[g]) : zero();
  };
  auto weights = [&](VecI q, VecF v, int64_t g) __attribute__((always_inline)) {
    return nibble_weights(q, v, scales[g], mins[g]);
  };
  if (G == 64) {
    for (int64_t g = 0; g < groups; ++g, codes += 32) {
      prefetch_ahead(codes, kPrefetchBytes);
      const VecI b0 = load_u8(codes), b1 = load_u8(codes + 16);
      const VecF v = values(g);
      const float* in = inp + 64 * g;
      s.template add<0>(in, C, 0, weights(low_nibbles(b0), v, g));
      s.template add<1>(in, C, 16, weights(low_nibbles(b1), v, g));
      s.template add<2>(in, C, 32, weights(shift_right(b0, 4), v, g));
      s.template add<3>(in, C, 48, weights(shift_right(b1, 4), v, g));
    }
  } else {  // 32: two groups make the four blocks of an unrolled step
    int64_t g = 0;
    for (; g + 2 <= groups; g += 2, codes += 32) {
      prefetch_ahead(codes, kPrefetchBytes);
      const VecI b0 = load_u8(codes), b1 = load_u8(codes + 16);
      const VecF v0 = values(g), v1 = values(g + 1);
      const float* in = inp + 32 * g;
      s.template add<0>(in, C, 0, weights(low_nibbles(b0), v0, g));
      s.template add<1>(in, C, 16, weights(shift_right(b0, 4), v0, g));
      s.template add<2>(in, C, 32, weights(low_nibbles(b1), v1, g + 1));
      s.template add<3>(in, C, 48, weights(shift_right(b1, 4), v1, g + 1));
    }
    if (g < groups) {
      const VecI b0 = load_u8(codes);
      const VecF v0 = values(g);
      s.template add<0>(inp + 32 * g, C, 0, weights(low_nibbles(b0), v0, g));
      s.template add<1>(inp + 32 * g, C, 16, weights(shift_right(b0, 4), v0, g));
    }
  }
  s.store_to(out, w.rows, o);
}

// kRows input rows decoded in registers: fused_nibble_rows for 4-bit codes (with their
// minimums), fused_rows else.
template <WeightCodes kType, int kRows, bool kExact>
[[gnu::always_inline]] inline void fused_rows_of(float* out, const float* inp,
                                                 const QuantizedWeightsView& w, int64_t o,
                                                 int64_t groups, const float* scales,
                                                 const float* mins) {
  if constexpr (kType == WeightCodes::kNibble)
    fused_nibble_rows<kRows>(out, inp, w, o, groups, scales, mins);
  else
    fused_rows<kType, kRows, kExact>(out, inp, w, o, groups, scales);
}

// Output row o for M input rows (M <= kRowsAtOnce). `groups` = cols / group, divided once per
// product by the caller: a 64-bit division per row (twice, here and in widen_scales) is tens of
// cycles of a row that decodes in a few hundred.
template <WeightCodes kType, bool kExact>
void fused_row(float* out, const float* inp, const QuantizedWeightsView& w, int64_t M, int64_t o,
               int64_t groups, const float* scales, const float* mins) {
  switch (M) {
    case 1:
      return fused_rows_of<kType, 1, kExact>(out, inp, w, o, groups, scales, mins);
    case 2:
      return fused_rows_of<kType, 2, kExact>(out, inp, w, o, groups, scales, mins);
    case 3:
      if constexpr (kRowsAtOnce >= 3)
        fused_rows_of<kType, 3, kExact>(out, inp, w, o, groups, scales, mins);
      return;
    default:
      if constexpr (kRowsAtOnce >= 4)
        fused_rows_of<kType, 4, kExact>(out, inp, w, o, groups, scales, mins);
  }
}

// Whether fused_rows applies: at most kRowsAtOnce input rows, and whole blocks (cols and the
// group multiples of 16; 4-bit groups are 32 or 64, quantized_gemv checks).
bool fused_fits(const QuantizedWeightsView& w, int64_t M) {
  return M <= kRowsAtOnce && whole_blocks(w);
}

// Decode in registers for up to kRowsAtOnce input rows (the decoded block is reused by each);
// more rows, or rows not made of whole blocks, decode each weight row into L1 once for all.
template <WeightCodes kType>
void fused_gemv(float* out, const float* inp, const QuantizedWeightsView& w, int64_t M) {
  const int64_t groups = w.cols / w.group;
#pragma omp parallel if (w.rows * w.cols >= kParallelWeights)
  {
    float* scales = t_scales.floats(2 * groups);
    const float* mins = w.mins != nullptr ? scales + groups : nullptr;
#pragma omp for schedule(static)
    for (int64_t o = 0; o < w.rows; ++o) {
      widen_scales(w, groups, o, scales);
      // Only FP6 blocks read past their bytes (16 for 12), so only its last row needs care.
      if constexpr (kType == WeightCodes::kFp6) {
        if (o + 1 == w.rows) {
          fused_row<kType, true>(out, inp, w, M, o, groups, scales, mins);
          continue;
        }
      }
      fused_row<kType, false>(out, inp, w, M, o, groups, scales, mins);
    }
  }
}

template <WeightCodes kType>
void gemv(float* out, const float* inp, const QuantizedWeightsView& w, int64_t M) {
  if (fused_fits(w, M)) return fused_gemv<kType>(out, inp, w, M);
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
      for (int64_t x = 0; x < M; x += kRowsAtOnce) {
        float* y = out + x * w.rows;
        const float* in = inp + x * C;
        switch (std::min<int64_t>(kRowsAtOnce, M - x)) {
          case 1:
            dot_rows<1>(y, in, row, C, w.rows, o);
            break;
          case 2:
            dot_rows<2>(y, in, row, C, w.rows, o);
            break;
          case 3:
            if constexpr (kRowsAtOnce >= 3) dot_rows<3>(y, in, row, C, w.rows, o);
            break;
          default:
            if constexpr (kRowsAtOnce >= 4) dot_rows<4>(y, in, row, C, w.rows, o);
        }
      }
    }
  }
}

template <WeightCodes kType>
void decode_rows(float* out, const QuantizedWeightsView& w, int64_t r0, int64_t r1) {
  // FP6 rows of whole blocks decode in registers (decode_fp6_row); the rest as decode_row,
  // which the compiler vectorises for int8 and 4-bit codes.
  const bool fp6_blocks = kType == WeightCodes::kFp6 && whole_blocks(w);
  const int64_t groups = w.cols / w.group;
#pragma omp parallel if ((r1 - r0) * w.cols >= kParallelWeights)
  {
    float* scales = t_scales.floats(2 * groups);
#pragma omp for schedule(static)
    for (int64_t r = r0; r < r1; ++r) {
      float* dst = out + (r - r0) * w.cols;
      if (!fp6_blocks) {
        decode_row<kType>(w, r, dst, scales);
      } else {
        widen_scales(w, groups, r, scales);
        if (r + 1 == w.rows)  // only the matrix's last row must not read past its bytes
          decode_fp6_row<true>(w, r, dst, scales);
        else
          decode_fp6_row<false>(w, r, dst, scales);
      }
    }
  }
}

}  // namespace

void quantized_gemv(float* out, const float* inp, const QuantizedWeightsView& w, int64_t M) {
  TESSERA_CHECK(M >= 1 && M <= kQuantizedGemvMaxRows && w.rows >= 0 && w.cols >= 0);
  TESSERA_CHECK(w.group > 0 && w.cols % w.group == 0);
  TESSERA_CHECK(w.codes_type != WeightCodes::kNibble || w.group == 32 || w.group == 64);
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
  TESSERA_CHECK(w.codes_type != WeightCodes::kNibble || w.group == 32 || w.group == 64);
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
