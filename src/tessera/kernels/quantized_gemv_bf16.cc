// Products of weight-only quantized matrices with bf16 inputs (contract in quantized_gemv.h),
// compiled once per CPU target. Where the CPU has AVX512-BF16 (words_avx512bf16.h) every
// format's codes decode to bf16 numbers exactly — an FP6 e3m2 value, a 4-bit code q as
// 1 + q / 16, an int8 code's high and low halves (16 h + l) — and are multiplied with the bf16
// inputs in pairs by vdpbf16ps, the scales applied to the sums: per 64 weights about 8
// instructions against the fp32 path's ~18 (widening each code to fp32, its lookup or
// conversion, the scale, a multiply-add per 16). Elsewhere, and for shapes the pair kernels do not
// take, the inputs are widened to fp32 for quantized_gemv.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <type_traits>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/gemm_clock.h"
#include "tessera/kernels/quantized_gemv.h"
#include "tessera/kernels/scratch.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

#include "tessera/kernels/quantized_rows.inc"

thread_local ScratchBuffer t_widened;

// The bf16 inputs widened (exactly) to fp32 and multiplied by quantized_gemv: the fp32 path's
// bits.
void widened_gemv(float* out, const bf16* inp, const QuantizedWeightsView& w, int64_t M) {
  float* x = t_widened.floats(M * w.cols);
  for_each_block(0, M * w.cols,
                 [&](int64_t i, int lanes) { store(x + i, load(inp + i, lanes), lanes); });
  ::tessera::kernels::quantized_gemv(out, x, w, M);
}

#if defined(TESSERA_BF16_DOT)

// Input rows whose products share one decoding of a weight row: 4 accumulators each, 16 of the
// 32 registers for 4 rows.
constexpr int kPairRows = 4;

thread_local ScratchBuffer t_prepared;

// bf16 bits of a value that bf16 holds exactly (every entry of the tables below).
constexpr uint16_t exact_bf16(float v) {
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
}

struct alignas(64) Words64 {
  uint16_t w[64];
};
// FP6 code c (sign included) -> its value in bf16: 2 mantissa bits fit bf16's 7.
constexpr Words64 fp6_words() {
  Words64 t{};
  for (int c = 0; c < 64; ++c) t.w[c] = exact_bf16(kFp6[c]);
  return t;
}
// Index i -> bf16(i & 15): an int8 code's low half in an index's bits 0-3 (bit 4, which vpermw
// also reads, may be anything).
constexpr Words64 low_nibble_words() {
  Words64 t{};
  for (int i = 0; i < 32; ++i) t.w[i] = exact_bf16(static_cast<float>(i & 15));
  return t;
}
// Index i -> bf16(16 h) for h the signed 5-bit value of i: an int8 code's high half, c >> 4 in
// -8 .. 7, whose two's complement bits 0-4 vpermw reads.
constexpr Words64 int8_high_words() {
  Words64 t{};
  for (int i = 0; i < 32; ++i) t.w[i] = exact_bf16(16.0f * static_cast<float>(i < 16 ? i : i - 32));
  return t;
}
constexpr Words64 kFp6Words = fp6_words();
constexpr Words64 kLowNibbleWords = low_nibble_words();
constexpr Words64 kInt8HighWords = int8_high_words();

// Four accumulators per input row, taken in turn by the chunks of a weight row (for_each_chunk),
// so no accumulator waits on the previous chunk's dot products. The total is
// ((a0 + a1) + (a2 + a3)) across lanes.
template <int kRows>
struct PairAccumulators {
  VecF acc[kRows][4];
  PairAccumulators() {
    for (auto& row : acc)
      for (VecF& a : row) a = zero();
  }
  VecF sum(int x) const { return (acc[x][0] + acc[x][1]) + (acc[x][2] + acc[x][3]); }
  float total(int x) const { return reduce_add(sum(x)); }
};

// Calls chunk(i, a) for the kChunk-weight chunks of a row of C weights (C a multiple of 64; a
// last chunk of 128 may be half), a the first of the chunk's two accumulators, as a constant:
// chunks take accumulators 0 and 1, then 2 and 3, in turn, so that no accumulator waits on the
// previous chunk's sums. (The 4-bit loop before the present one, one multiply-add a chunk of 64,
// ran at 7.6 cycles a chunk on an AMD EPYC (Zen 5) with two accumulators in turn and at 4.0
// with four: measured alone from L1 on 2026-12-04.)
template <int64_t kChunk, typename Chunk>
[[gnu::always_inline]] inline void for_each_chunk(int64_t C, Chunk chunk) {
  int64_t i = 0;
  for (; i + 2 * kChunk <= C; i += 2 * kChunk) {
    chunk(i, std::integral_constant<int, 0>{});
    chunk(i + kChunk, std::integral_constant<int, 2>{});
  }
  if (i < C) chunk(i, std::integral_constant<int, 0>{});
  if (i + kChunk < C) chunk(i + kChunk, std::integral_constant<int, 2>{});
}

// Chunk i (64 weights) of an FP6 row into accumulators k and k + 1 (fp6_rows). A function, not
// a lambda, so that it is compiled for VBMI as its caller is.
template <int k, int kRows, bool kExact>
TESSERA_VBMI [[gnu::always_inline]] inline void fp6_chunk(PairAccumulators<kRows>& s,
                                                          const bf16* inp, int64_t C, int64_t i,
                                                          const uint8_t* p, VecW lo, VecW hi) {
  prefetch_ahead(p, kPrefetchBytes);
  VecW q[2];
  if (kExact && i + 64 == C)
    unpack6x64_words<true>(p, q);
  else
    unpack6x64_words<false>(p, q);
  const VecW w0 = lookup64_words(lo, hi, q[0]), w1 = lookup64_words(lo, hi, q[1]);
  for (int x = 0; x < kRows; ++x) {
    s.acc[x][k] = dot_pairs(s.acc[x][k], w0, load_words(inp + x * C + i));
    s.acc[x][k + 1] = dot_pairs(s.acc[x][k + 1], w1, load_words(inp + x * C + i + 32));
  }
}

// FP6 (one scale a row, C a multiple of 64, AVX512_VBMI): each chunk's 64 codes unpacked to
// words and looked up in the 64 signed values; the row's scale multiplies the total. kExact:
// the matrix's last row, whose last chunk must not read past its 48 bytes. (The chunks as
// for_each_chunk orders them, written out: its lambda would not be compiled for VBMI.)
template <int kRows, bool kExact>
TESSERA_VBMI [[gnu::noinline]] void fp6_rows(float* out, const bf16* inp,
                                             const QuantizedWeightsView& w, int64_t o, float d) {
  const int64_t C = w.cols;
  const uint8_t* codes = w.codes + o * (C / 4 * 3);
  const VecW lo = load_words(kFp6Words.w), hi = load_words(kFp6Words.w + 32);
  PairAccumulators<kRows> s;
  int64_t i = 0;
  for (; i + 128 <= C; i += 128) {
    fp6_chunk<0, kRows, kExact>(s, inp, C, i, codes + i / 4 * 3, lo, hi);
    fp6_chunk<2, kRows, kExact>(s, inp, C, i + 64, codes + (i + 64) / 4 * 3, lo, hi);
  }
  if (i < C) fp6_chunk<0, kRows, kExact>(s, inp, C, i, codes + i / 4 * 3, lo, hi);
  for (int x = 0; x < kRows; ++x) out[x * w.rows + o] = s.total(x) * d;
}

// int8 codes, one scale a row (group == C) or one per 32 (Q8_0), C a multiple of 64: 32 codes
// widened to words, each c = 16 (c >> 4) + (c & 15) as two exact bf16 halves dotted with the
// same inputs. One scale a row multiplies the total; a group's scale its own sum.
template <int kRows, bool kPerRow>
[[gnu::noinline]] void int8_rows(float* out, const bf16* inp, const QuantizedWeightsView& w,
                                 int64_t o, const float* scales) {
  const int64_t C = w.cols;
  const int8_t* codes = reinterpret_cast<const int8_t*>(w.codes + o * C);
  const VecW low = load_words(kLowNibbleWords.w), high = load_words(kInt8HighWords.w);
  PairAccumulators<kRows> s;
  for_each_chunk<64>(
      C, [&](int64_t i, auto a) __attribute__((always_inline)) {
        constexpr int k = decltype(a)::value;
        prefetch_ahead(codes + i, kPrefetchBytes);
        const VecW c0 = widen_s8_words(codes + i), c1 = widen_s8_words(codes + i + 32);
        const VecW l0 = lookup32_words(low, c0),
                   h0 = lookup32_words(high, shift_right_arith_words(c0, 4));
        const VecW l1 = lookup32_words(low, c1),
                   h1 = lookup32_words(high, shift_right_arith_words(c1, 4));
        for (int x = 0; x < kRows; ++x) {
          const VecW x0 = load_words(inp + x * C + i), x1 = load_words(inp + x * C + i + 32);
          if constexpr (kPerRow) {
            s.acc[x][k] = dot_pairs(dot_pairs(s.acc[x][k], l0, x0), h0, x0);
            s.acc[x][k + 1] = dot_pairs(dot_pairs(s.acc[x][k + 1], l1, x1), h1, x1);
          } else {
            const float* d = scales + i / 32;
            s.acc[x][k] =
                fmadd(dot_pairs(dot_pairs(zero(), l0, x0), h0, x0), splat(d[0]), s.acc[x][k]);
            s.acc[x][k + 1] =
                fmadd(dot_pairs(dot_pairs(zero(), l1, x1), h1, x1), splat(d[1]), s.acc[x][k + 1]);
          }
        }
      });
  for (int x = 0; x < kRows; ++x)
    out[x * w.rows + o] = kPerRow ? s.total(x) * scales[0] : s.total(x);
}

// 4-bit codes are read 64 bytes (128 weights, a block) at a time as 32 words, and each word's
// four nibbles become four vectors with no shuffle: nibble k of every word shifted to bits 3-6
// and bf16 1.0's bits set, which is the bf16 number 1 + q / 16 exactly (q the code). Those four
// vectors hold the block's weights in the order kNibbleOrder gives; the inputs are reordered
// to it once a product (prepare_nibble_inputs) so the loop only loads them. (The way before,
// 32 bytes widened to words and each nibble looked up by vpermw, spent 3 shuffles a 64 weights
// where this spends none: on an AMD EPYC (Zen 5), measured alone from L1 on 2026-12-04, that
// loop took 4.0 cycles a 64 weights, this one 2.7.)
constexpr int64_t kNibbleBlock = 128;
constexpr uint16_t kBf16One = 0x3F80;

// Position in its block of the weight whose code is nibble k of word t (entry 32 k + t) for
// groups of G: word t holds bytes 2t and 2t + 1; nibble k is byte 2t + k / 2's low (k even) or
// high half; byte j of a group holds its weights j and j + G / 2.
struct alignas(64) NibbleOrder {
  uint16_t at[kNibbleBlock];
};
constexpr NibbleOrder nibble_order(int G) {
  NibbleOrder order{};
  for (int k = 0; k < 4; ++k)
    for (int t = 0; t < 32; ++t) {
      const int byte = 2 * t + k / 2, half = G / 2;
      order.at[32 * k + t] =
          static_cast<uint16_t>(G * (byte / half) + byte % half + (k % 2) * half);
    }
  return order;
}
constexpr NibbleOrder kNibbleOrder32 = nibble_order(32);
constexpr NibbleOrder kNibbleOrder64 = nibble_order(64);

// The inputs as the 4-bit kernels read them: each row's blocks reordered by the nibble order
// (rows `stride` apart, a last half block's other half zero), and each row's group sums (sum of
// x over the group), which the minimums multiply.
struct NibbleInputs {
  const bf16* words = nullptr;        // M x stride
  const float* group_sums = nullptr;  // M x groups
  int64_t stride = 0;
};

NibbleInputs prepare_nibble_inputs(const bf16* inp, const QuantizedWeightsView& w, int64_t M) {
  const int64_t C = w.cols, G = w.group, groups = C / G;
  const int64_t stride = (C + kNibbleBlock - 1) / kNibbleBlock * kNibbleBlock;
  auto* room = static_cast<char*>(
      t_prepared.get(static_cast<size_t>(M * stride) * sizeof(bf16) + M * groups * sizeof(float)));
  auto* sums = reinterpret_cast<float*>(room);
  auto* words = reinterpret_cast<bf16*>(room + M * groups * sizeof(float));
  const uint16_t* order = (G == 64 ? kNibbleOrder64 : kNibbleOrder32).at;
  for (int64_t x = 0; x < M; ++x) {
    const bf16* in = inp + x * C;
    // In vectors: this runs on one thread before the team decodes (one 16 x 2048 product on one
    // core, 2026-12-04: 7.8 G weights/s with a scalar loop here, 10.2 in vectors).
    for (int64_t g = 0; g < groups; ++g) {
      VecF sum = load(in + g * G);
      for (int64_t j = kLanes; j < G; j += kLanes) sum = sum + load(in + g * G + j);
      sums[x * groups + g] = reduce_add(sum);
    }
    bf16* to = words + x * stride;
    int64_t i = 0;
    for (; i + kNibbleBlock <= C; i += kNibbleBlock)
      permute128_words(&in[i].bits, order, &to[i].bits);
    if (i < C) {  // a half block, its other half zero
      bf16 last[kNibbleBlock] = {};
      std::copy(in + i, in + C, last);
      permute128_words(&last[0].bits, order, &to[i].bits);
    }
  }
  return {words, sums, stride};
}

// 4-bit codes with a scale and minimum per group of 32 or 64 (C a multiple of 64), a block of
// 128 at a time (the last may be half): a group's weights are q d + min, and the block's four
// vectors hold 1 + q / 16, so its contribution is 16 d (sum of (1 + q / 16) x) + (min - 16 d)
// (sum of x). The first from the pair products scaled per group (lanes 4g to 4g + 3 of a
// block's sums are group g's for groups of 32, lanes 8g to 8g + 7 for 64), the 16 applied to
// the row's total (exact); the second from the inputs' group sums once per row. Each block's
// two halves (nibbles 0 and 1, 2 and 3) go to two accumulators. The fp16 scales and minimums
// are read where they are used (widening a row's into scratch first waited on their lines).
template <int kRows, int G>
[[gnu::noinline]] void nibble_rows(float* out, const NibbleInputs& in,
                                   const QuantizedWeightsView& w, int64_t o) {
  const int64_t C = w.cols, groups = C / G;
  const uint8_t* codes = w.codes + o * (C / 2);
  const auto* scales = reinterpret_cast<const fp16*>(w.scales + o * groups);
  const auto* mins = reinterpret_cast<const fp16*>(w.mins + o * groups);
  const VecW keep = splat_words(0x78), one = splat_words(kBf16One);
  PairAccumulators<kRows> s;
  for_each_chunk<kNibbleBlock>(
      C, [&](int64_t i, auto a) __attribute__((always_inline)) {
        constexpr int k = decltype(a)::value;
        prefetch_ahead(codes + i / 2, kPrefetchBytes);
        // A last half block: its other 16 words zero, their inputs zero (prepare_nibble_inputs).
        const bool whole = i + kNibbleBlock <= C;
        const VecW b = whole ? load_words(codes + i / 2) : load_half_words(codes + i / 2);
        const VecW n0 = keep_and_set_words(shift_left_words(b, 3), keep, one),
                   n1 = keep_and_set_words(shift_right_words(b, 1), keep, one),
                   n2 = keep_and_set_words(shift_right_words(b, 5), keep, one),
                   n3 = keep_and_set_words(shift_right_words(b, 9), keep, one);
        VecF d;
        if constexpr (G == 64)
          d = splat_groups<8>(scales + i / 64, whole ? 2 : 1);
        else
          d = splat_groups<4>(scales + i / 32, whole ? 4 : 2);
        for (int x = 0; x < kRows; ++x) {
          const bf16* xw = in.words + x * in.stride + i;
          const VecF low =
              dot_pairs(dot_pairs(zero(), n0, load_words(xw)), n1, load_words(xw + 32));
          const VecF high =
              dot_pairs(dot_pairs(zero(), n2, load_words(xw + 64)), n3, load_words(xw + 96));
          s.acc[x][k] = fmadd(low, d, s.acc[x][k]);
          s.acc[x][k + 1] = fmadd(high, d, s.acc[x][k + 1]);
        }
      });
  // The minimums' terms: each group's min - 16 d once, for every input row.
  const VecF minus16 = splat(-16.0f), sixteen = splat(16.0f);
  VecF m[kRows];
  for (VecF& v : m) v = zero();
  for_each_block(0, groups, [&](int64_t g, int lanes) {
    const VecF shifted_min = fmadd(minus16, load(scales + g, lanes), load(mins + g, lanes));
    for (int x = 0; x < kRows; ++x)
      m[x] = fmadd(shifted_min, load(in.group_sums + x * groups + g, lanes), m[x]);
  });
  for (int x = 0; x < kRows; ++x) out[x * w.rows + o] = reduce_add(fmadd(sixteen, s.sum(x), m[x]));
}

// Whether the pair kernels take this matrix: whole chunks of 64, FP6 with its one scale a row
// (and the byte permutes of AVX512_VBMI), int8 a row or Q8_0's 32, 4-bit groups of 32 or 64.
bool pairs_fit(const QuantizedWeightsView& w) {
  if (w.cols % 64 != 0) return false;
  switch (w.codes_type) {
    case WeightCodes::kFp6:
      return w.group == w.cols && cpu_has_avx512_vbmi();
    case WeightCodes::kInt8:
      return w.group == w.cols || w.group == 32;
    case WeightCodes::kNibble:
      return w.group == 32 || w.group == 64;
  }
  return false;
}

// Output row o for input rows [0, M) in blocks of up to kPairRows: every output has the same
// bits whatever M is (each block re-decodes the row from L1).
template <int kRows>
void pair_rows_of(float* out, const bf16* inp, const NibbleInputs& nibbles,
                  const QuantizedWeightsView& w, int64_t o, const float* scales) {
  const int64_t groups = w.cols / w.group;
  switch (w.codes_type) {
    case WeightCodes::kFp6:
      if (o + 1 == w.rows) return fp6_rows<kRows, true>(out, inp, w, o, scales[0]);
      return fp6_rows<kRows, false>(out, inp, w, o, scales[0]);
    case WeightCodes::kInt8:
      if (groups == 1) return int8_rows<kRows, true>(out, inp, w, o, scales);
      return int8_rows<kRows, false>(out, inp, w, o, scales);
    case WeightCodes::kNibble:
      // The group size as a constant: no test of it per chunk.
      if (w.group == 64) return nibble_rows<kRows, 64>(out, nibbles, w, o);
      return nibble_rows<kRows, 32>(out, nibbles, w, o);
  }
}

// The fp16 scales (and minimums) of the row kScaleRowsAhead after o asked for, a row's worth (2
// bytes a group) at a time: they are streams of their own beside the codes, which the codes'
// prefetching does not cover. q4 from memory (llama-1b's MLP shape, one input row, 2 threads,
// AMD EPYC Zen 5, 2026-12-05, `build/bin/quantized --threads 2 --kernels memory`, eleven
// interleaved runs each): median 97.1 G weights/s without, 105.2 with 4 rows ahead (8 rows:
// no better).
constexpr int64_t kScaleRowsAhead = 4;
[[gnu::always_inline]] inline void prefetch_scales_ahead(const QuantizedWeightsView& w, int64_t o,
                                                         int64_t groups) {
  if (o + kScaleRowsAhead >= w.rows) return;
  // Every 64-byte line the row's 2 * groups bytes touch.
  const auto lines = [&](const uint16_t* values) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(values + (o + kScaleRowsAhead) * groups);
    const uintptr_t end = first + 2 * static_cast<uintptr_t>(groups);
    for (uintptr_t line = first & ~uintptr_t{63}; line < end; line += 64)
      prefetch(reinterpret_cast<const void*>(line));
  };
  lines(w.scales);
  if (w.mins != nullptr) lines(w.mins);
}

void pair_gemv(float* out, const bf16* inp, const QuantizedWeightsView& w, int64_t M) {
  const int64_t C = w.cols, groups = C / w.group;
  NibbleInputs nibbles;
  if (w.codes_type == WeightCodes::kNibble) nibbles = prepare_nibble_inputs(inp, w, M);
#pragma omp parallel if (w.rows * C >= kParallelWeights)
  {
    // FP6's and int8's scales widened a row at a time (4-bit kernels read their fp16 scales and
    // minimums; the other formats have no minimums, so groups floats are room enough).
    float* scales = t_scales.floats(groups);
#pragma omp for schedule(static)
    for (int64_t o = 0; o < w.rows; ++o) {
      prefetch_scales_ahead(w, o, groups);
      if (w.codes_type != WeightCodes::kNibble) widen_scales(w, groups, o, scales);
      for (int64_t x = 0; x < M; x += kPairRows) {
        float* y = out + x * w.rows;
        const bf16* xs = inp + x * C;
        // (Offsets only into prepared inputs: 4-bit codes' alone exist.)
        const NibbleInputs part =
            nibbles.words == nullptr
                ? nibbles
                : NibbleInputs{nibbles.words + x * nibbles.stride, nibbles.group_sums + x * groups,
                               nibbles.stride};
        switch (std::min<int64_t>(kPairRows, M - x)) {
          case 1:
            pair_rows_of<1>(y, xs, part, w, o, scales);
            break;
          case 2:
            pair_rows_of<2>(y, xs, part, w, o, scales);
            break;
          case 3:
            pair_rows_of<3>(y, xs, part, w, o, scales);
            break;
          default:
            pair_rows_of<4>(y, xs, part, w, o, scales);
        }
      }
    }
  }
}

#endif  // TESSERA_BF16_DOT

}  // namespace

void quantized_gemv_bf16(float* out, const bf16* inp, const QuantizedWeightsView& w, int64_t M) {
  TESSERA_CHECK(M >= 1 && M <= kQuantizedGemvMaxRows && w.rows >= 0 && w.cols >= 0);
  TESSERA_CHECK(w.group > 0 && w.cols % w.group == 0);
  TESSERA_CHECK(w.codes_type != WeightCodes::kNibble || w.group == 32 || w.group == 64);
#if defined(TESSERA_BF16_DOT)
  if (pairs_fit(w)) {
    const detail::GemmClock clock;  // counted with the GEMMs (gemm.h's gemm_seconds)
    return pair_gemv(out, inp, w, M);
  }
#endif
  widened_gemv(out, inp, w, M);
}

void register_quantized_gemv_bf16() {
  register_kernel<&kernels::quantized_gemv_bf16>(kThisTarget, &quantized_gemv_bf16);
}

TESSERA_TARGET_END
