#include "tessera/kernels/dropout.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "testing/numeric.h"

namespace tessera::kernels {
namespace {

using testing::random_normal;
using testing::round_to_bf16;
using testing::to_bf16;
using testing::to_float;

const PhiloxKey kKey = philox_key(1234, RngPurpose::kHiddenDropout, 7);

// The definition in dropout.h / core/philox.h, one element at a time.
bool keep_ref(PhiloxKey key, int64_t global_row, int64_t col, float p) {
  const auto lanes = philox_block(key, static_cast<uint64_t>(global_row), col / 4);
  return uint_to_unit_float(lanes[col % 4]) >= p;
}

TEST(DropoutForward, MatchesScalarPhiloxDefinition) {
  // C = 1, a partial vector, exactly one 64-column Philox batch, and a ragged multiple of it.
  for (int64_t C : {1, 13, 64, 77, 200}) {
    SCOPED_TRACE(::testing::Message() << "C=" << C);
    const int64_t N = 6;
    const TokenCoords coords{.sample_offset = 5, .seq_offset = 2, .local_seq = 3, .global_seq = 8, .split = {}};
    const float p = 0.3f, scale = 1.0f / (1.0f - p);
    const auto x = random_normal(N * C, 1);
    std::vector<float> out(N * C);
    dropout_forward(out.data(), x.data(), kKey, coords, N, C, p);
    int64_t kept = 0;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = 0; c < C; ++c) {
        const bool keep = keep_ref(kKey, coords.global_row(n), c, p);
        kept += keep;
        EXPECT_EQ(out[n * C + c], keep ? x[n * C + c] * scale : 0.0f) << "n=" << n << " c=" << c;
      }
    }
    if (N * C >= 64) {
      EXPECT_GT(kept, 0);
    }
  }
}

// The number of dropped elements is Binomial(M, p): its fraction has standard deviation
// sqrt(p (1-p) / M) (1.0e-3 at p = 0.1, 1.7e-3 at p = 0.5 for M = 85248). A 5-sigma bound
// would fail for a correct generator with probability < 1e-6 (and the stream is fixed here, so
// it passes or fails deterministically); a wrong threshold or lane mix-up moves the fraction by
// far more.
TEST(DropoutForward, DropsFractionPAndScalesKeptValues) {
  const int64_t N = 256, C = 333, M = N * C;
  const TokenCoords coords{.sample_offset = 0, .seq_offset = 0, .local_seq = 64, .global_seq = 64, .split = {}};
  const std::vector<float> ones(M, 1.0f);
  for (float p : {0.1f, 0.5f, 0.9f}) {
    SCOPED_TRACE(::testing::Message() << "p=" << p);
    std::vector<float> out(M);
    dropout_forward(out.data(), ones.data(), kKey, coords, N, C, p);
    const float scale = 1.0f / (1.0f - p);
    int64_t dropped = 0;
    for (float v : out) {
      if (v == 0.0f) {
        ++dropped;
      } else {
        EXPECT_EQ(v, scale);
      }
    }
    const double sigma = std::sqrt(p * (1.0 - p) / M);
    EXPECT_NEAR(static_cast<double>(dropped) / M, p, 5.0 * sigma);
  }
}

// A shard holding samples [1, 3) and positions [4, 10) of a (4 samples x 12 tokens) batch must
// reproduce exactly those elements of the unsharded mask (data + sequence/context parallel).
TEST(DropoutSharding, SliceMaskEqualsFullMask) {
  const int64_t B = 4, T = 12, C = 37;
  const int64_t b0 = 1, b1 = 3, t0 = 4, t1 = 10, Bs = b1 - b0, Ts = t1 - t0;
  const float p = 0.25f;
  const auto x = random_normal(B * T * C, 2);
  std::vector<float> full(B * T * C);
  const TokenCoords full_coords{
      .sample_offset = 0, .seq_offset = 0, .local_seq = T, .global_seq = T, .split = {}};
  dropout_forward(full.data(), x.data(), kKey, full_coords, B * T, C, p);

  std::vector<float> xs(Bs * Ts * C), outs(Bs * Ts * C);
  for (int64_t b = 0; b < Bs; ++b)
    for (int64_t t = 0; t < Ts; ++t)
      for (int64_t c = 0; c < C; ++c) xs[(b * Ts + t) * C + c] = x[((b0 + b) * T + t0 + t) * C + c];
  const TokenCoords shard{
      .sample_offset = b0, .seq_offset = t0, .local_seq = Ts, .global_seq = T, .split = {}};
  dropout_forward(outs.data(), xs.data(), kKey, shard, Bs * Ts, C, p);
  for (int64_t b = 0; b < Bs; ++b)
    for (int64_t t = 0; t < Ts; ++t)
      for (int64_t c = 0; c < C; ++c)
        EXPECT_EQ(outs[(b * Ts + t) * C + c], full[((b0 + b) * T + t0 + t) * C + c]);
}

// Context parallel: rank r of N holds chunks r and 2N-1-r of each sequence, and under SP a
// slice of those T/N tokens that straddles the two chunks; its mask is the full one's rows.
TEST(DropoutSharding, ContextParallelChunksMaskEqualsFullMask) {
  const int64_t B = 2, T = 16, C = 20;
  const float p = 0.3f;
  const auto x = random_normal(B * T * C, 4);
  std::vector<float> full(B * T * C);
  const TokenCoords full_coords{
      .sample_offset = 0, .seq_offset = 0, .local_seq = T, .global_seq = T, .split = {}};
  dropout_forward(full.data(), x.data(), kKey, full_coords, B * T, C, p);
  const SequenceSplit split{4, 1};  // chunks of 2: tokens 2,3 then 12,13
  const int64_t t0 = 1, Ts = 2;     // local tokens 1, 2 = global 3 and 12
  const int64_t global_of[2] = {3, 12};
  std::vector<float> xs(B * Ts * C), outs(B * Ts * C);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Ts; ++t)
      for (int64_t c = 0; c < C; ++c)
        xs[(b * Ts + t) * C + c] = x[(b * T + global_of[t]) * C + c];
  const TokenCoords shard{
      .sample_offset = 0, .seq_offset = t0, .local_seq = Ts, .global_seq = T, .split = split};
  dropout_forward(outs.data(), xs.data(), kKey, shard, B * Ts, C, p);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Ts; ++t)
      for (int64_t c = 0; c < C; ++c)
        EXPECT_EQ(outs[(b * Ts + t) * C + c], full[(b * T + global_of[t]) * C + c]);
}

TEST(DropoutBackward, AppliesTheForwardMask) {
  const int64_t N = 10, C = 53;
  const TokenCoords coords{.sample_offset = 3, .seq_offset = 0, .local_seq = 5, .global_seq = 5, .split = {}};
  const float p = 0.4f, scale = 1.0f / (1.0f - p);
  auto x = random_normal(N * C, 3);
  for (float& v : x) v = v == 0.0f ? 1.0f : v;  // a zero input would hide the mask
  const auto dout = random_normal(N * C, 4);
  std::vector<float> out(N * C), dinp(N * C);
  dropout_forward(out.data(), x.data(), kKey, coords, N, C, p);
  dropout_backward(dinp.data(), dout.data(), kKey, coords, N, C, p);
  for (int64_t i = 0; i < N * C; ++i) {
    const bool kept = out[i] != 0.0f;
    EXPECT_EQ(dinp[i], kept ? dout[i] * scale : 0.0f) << "i=" << i;
  }
  // In place (dinp aliasing dout) gives the same result.
  std::vector<float> inplace = dout;
  dropout_backward(inplace.data(), inplace.data(), kKey, coords, N, C, p);
  EXPECT_EQ(inplace, dinp);
}

TEST(DropoutForward, ZeroProbabilityCopies) {
  const int64_t N = 7, C = 19;
  const TokenCoords coords{};
  const auto x = random_normal(N * C, 5);
  std::vector<float> out(N * C, 123.0f);
  dropout_forward(out.data(), x.data(), kKey, coords, N, C, 0.0f);
  EXPECT_EQ(out, x);
  std::vector<float> inplace = x;
  dropout_forward(inplace.data(), inplace.data(), kKey, coords, N, C, 0.0f);
  EXPECT_EQ(inplace, x);
}

// Each element depends only on its global coordinates, so the thread count cannot matter.
TEST(DropoutForward, SameForAnyThreadCount) {
  const int64_t N = 128, C = 200;  // N * C above the parallel threshold
  const TokenCoords coords{.sample_offset = 0, .seq_offset = 0, .local_seq = 32, .global_seq = 32, .split = {}};
  const auto x = random_normal(N * C, 6);
  std::vector<float> out1(N * C), out3(N * C);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  dropout_forward(out1.data(), x.data(), kKey, coords, N, C, 0.2f);
  omp_set_num_threads(3);
  dropout_forward(out3.data(), x.data(), kKey, coords, N, C, 0.2f);
  omp_set_num_threads(saved);
  EXPECT_EQ(out1, out3);
}

TEST(DropoutBf16, MatchesFp32) {
  const int64_t N = 9, C = 75;
  const TokenCoords coords{.sample_offset = 2, .seq_offset = 1, .local_seq = 3, .global_seq = 4, .split = {}};
  const float p = 0.3f;
  const auto x = random_normal(N * C, 7);
  const auto xr = round_to_bf16(x);
  std::vector<float> out(N * C), out_r(N * C);
  dropout_forward(out.data(), x.data(), kKey, coords, N, C, p);
  dropout_forward(out_r.data(), xr.data(), kKey, coords, N, C, p);
  const auto xb = to_bf16(x);
  std::vector<bf16> outb(N * C), dinpb(N * C);
  dropout_forward(outb.data(), xb.data(), kKey, coords, N, C, p);
  dropout_backward(dinpb.data(), xb.data(), kKey, coords, N, C, p);
  const auto outf = to_float(outb);
  for (int64_t i = 0; i < N * C; ++i) {
    // Same mask; kept values carry the input's and the output's bf16 rounding (8 significant
    // bits: up to 2^-8 relative each), so they are within ~2^-7 of the fp32 result.
    EXPECT_EQ(outf[i] == 0.0f, out[i] == 0.0f) << "i=" << i;
    EXPECT_NEAR(outf[i], out[i], 1.01 * std::ldexp(std::fabs(out[i]), -7)) << "i=" << i;
  }
  // fp32 arithmetic whatever T: the bf16 result is the fp32 result on the same values, rounded.
  EXPECT_EQ(outf, round_to_bf16(out_r));
  EXPECT_EQ(to_float(dinpb), outf);  // backward is the same map
}

}  // namespace
}  // namespace tessera::kernels
