// Dropout with global-coordinate Philox masks (contract in dropout.h), compiled once per CPU
// target.
#include "tessera/kernels/dropout.h"

#include <cstring>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

constexpr int64_t kParallelThreshold = 1 << 14;

// Philox4x32-10 key schedule: (k0, k1) for each of the 10 rounds.
struct KeySchedule {
  uint32_t k[10][2];
  explicit KeySchedule(PhiloxKey key) {
    uint32_t k0 = key.k0, k1 = key.k1;
    for (int round = 0; round < 10; ++round) {
      k[round][0] = k0;
      k[round][1] = k1;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
  }
};

inline VecI splat_u(uint32_t x) { return splat_i(static_cast<int32_t>(x)); }

// philox_block(key, row, col4 + 16 b + l) for blocks b < kBlocks and lanes l = 0..15 (col4 a
// multiple of 16), returned in element order: out[b][k] lane j is the value of column
// 4 col4 + 64 b + 16 k + j. Same rounds as philox4x32 in core/philox.h (the tests check it
// against that): lane l of block b carries counter col4 + 16 b + l, whose four words come out in
// words[0..3] lane l; interleave4 puts them in column order. The blocks are independent chains,
// interleaved round by round so that the multiplies of one overlap the latency of the others.
template <int kBlocks>
inline void philox(const KeySchedule& ks, uint64_t row, uint64_t col4, VecI (*out)[4]) {
  const VecI mul0 = splat_u(0xD2511F53u), mul1 = splat_u(0xCD9E8D57u);
  VecI c0[kBlocks], c1[kBlocks], c2[kBlocks], c3[kBlocks];
  for (int b = 0; b < kBlocks; ++b) {
    c0[b] = splat_u(static_cast<uint32_t>(row));
    c1[b] = splat_u(static_cast<uint32_t>(row >> 32));
    // col4 + 16 b is a multiple of 16, so adding l never carries into the high word.
    c2[b] = splat_u(static_cast<uint32_t>(col4 + 16 * b)) + iota_i();
    c3[b] = splat_u(static_cast<uint32_t>((col4 + 16 * b) >> 32));
  }
  for (int round = 0; round < 10; ++round) {
    const VecI k0 = splat_u(ks.k[round][0]), k1 = splat_u(ks.k[round][1]);
    for (int b = 0; b < kBlocks; ++b) {
      VecI hi0, lo0, hi1, lo1;
      mul_wide_u32(c0[b], mul0, &hi0, &lo0);
      mul_wide_u32(c2[b], mul1, &hi1, &lo1);
      c0[b] = hi1 ^ c1[b] ^ k0;
      c1[b] = lo1;
      c2[b] = hi0 ^ c3[b] ^ k1;
      c3[b] = lo0;
    }
  }
  for (int b = 0; b < kBlocks; ++b) {
    const VecI words[4] = {c0[b], c1[b], c2[b], c3[b]};
    interleave4(words, out[b]);
  }
}

// o[c + j] = keep ? x[c + j] * scale : 0 for the lanes j < lanes, whose Philox words are bits.
template <typename T>
inline void keep_and_scale(T* o, const T* x, int64_t c, int lanes, VecI bits, VecF threshold,
                           VecF scale) {
  // uint_to_unit_float(x) = (x >> 8) * 2^-24 exactly, so "uniform >= p" is the exact float
  // comparison (x >> 8) >= p * 2^24 (both sides exact in fp32).
  const Mask keep = cmp_ge(to_float(shift_right(bits, 8)), threshold);
  store(o + c, zero_unless(keep, load(x + c, lanes) * scale), lanes);
}

// Forward and backward are the same map: keep-and-scale or zero, by the global mask.
template <typename T>
void apply_dropout(T* out, const T* inp, PhiloxKey key, const TokenCoords& coords, int64_t N,
                   int64_t C, float p) {
  TESSERA_CHECK(N >= 0 && C > 0);
  TESSERA_CHECK_MSG(p >= 0.0f && p < 1.0f, "dropout probability must be in [0, 1)");
  TESSERA_CHECK(coords.local_seq > 0 && coords.global_seq > 0);
  if (p == 0.0f) {
    if (out != inp) std::memmove(out, inp, static_cast<size_t>(N * C) * sizeof(T));
    return;
  }
  const VecF scale = splat(1.0f / (1.0f - p));
  const VecF threshold = splat(p * 16777216.0f);
  const KeySchedule ks(key);
#pragma omp parallel for schedule(static) if (N * C > kParallelThreshold)
  for (int64_t n = 0; n < N; ++n) {
    const uint64_t row = static_cast<uint64_t>(coords.global_row(n));
    const T* x = inp + n * C;
    T* o = out + n * C;
    int64_t c0 = 0;
    // 256 columns (four Philox blocks of 16 counters, whole vectors) at a time, then 64.
    for (; c0 + 16 * kLanes <= C; c0 += 16 * kLanes) {
      VecI bits[4][4];
      philox<4>(ks, row, static_cast<uint64_t>(c0 / 4), bits);
      for (int k = 0; k < 16; ++k)
        keep_and_scale(o, x, c0 + kLanes * k, kLanes, bits[k / 4][k % 4], threshold, scale);
    }
    for (; c0 < C; c0 += 4 * kLanes) {
      VecI bits[1][4];
      philox<1>(ks, row, static_cast<uint64_t>(c0 / 4), bits);
      for (int k = 0; k < 4 && c0 + kLanes * k < C; ++k) {
        const int64_t c = c0 + kLanes * k;
        keep_and_scale(o, x, c, lanes_left(c, C), bits[0][k], threshold, scale);
      }
    }
  }
}

}  // namespace

template <typename T>
void dropout_forward(T* out, const T* inp, PhiloxKey key, TokenCoords coords, int64_t N, int64_t C,
                     float p) {
  apply_dropout(out, inp, key, coords, N, C, p);
}

template <typename T>
void dropout_backward(T* dinp, const T* dout, PhiloxKey key, TokenCoords coords, int64_t N,
                      int64_t C, float p) {
  apply_dropout(dinp, dout, key, coords, N, C, p);
}

void register_dropout() {
  for_each_storage_type([]<typename T>() {
    register_kernel<&kernels::dropout_forward<T>>(kThisTarget, &dropout_forward<T>);
    register_kernel<&kernels::dropout_backward<T>>(kThisTarget, &dropout_backward<T>);
  });
}

TESSERA_TARGET_END
