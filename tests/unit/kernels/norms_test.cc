#include "tessera/kernels/norms.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "testing/numeric.h"

namespace tessera::kernels {
namespace {

using testing::dot;
using testing::finite_difference;
using testing::random_normal;
using testing::round_to_bf16;
using testing::to_bf16;
using testing::to_float;

using testing::max_scaled_error;

constexpr float kEps = 1e-5f;

using testing::kFdStep;
using testing::kFdTolerance;

// fp32 kernel against a double reference: rows are reduced in fp32 with 16 lane-wise partial
// sums, so the error is a few ulp times sqrt(C/16) -- far below 1e-5 for C <= 1000.
constexpr double kFp32Tolerance = 1e-5;

// bf16 kernel on bf16-rounded inputs against the fp32 kernel on the unrounded inputs: bf16
// keeps 8 significant bits, so each input carries a relative rounding error of up to 2^-8
// (~4e-3) and the output is rounded once more; the normalisation averages these into errors
// of a few 1e-3 of the output scale (1.4e-3 .. 4.2e-3 measured here). 2e-2 allows ~5x that
// while still catching a wrong conversion (an O(1) error).
constexpr double kBf16Tolerance = 2e-2;

// Inputs with a non-zero mean (offset) so LayerNorm's centring is exercised.
std::vector<float> make_input(int64_t n, uint64_t seed, float offset) {
  std::vector<float> x = random_normal(n, seed);
  for (float& v : x) v += offset;
  return x;
}
std::vector<float> make_weight(int64_t C, uint64_t seed) {
  std::vector<float> w = random_normal(C, seed, 0.5f);
  for (float& v : w) v += 1.0f;
  return w;
}

struct NormRef {
  std::vector<double> out, mean, rstd;
};

NormRef layer_norm_ref(const std::vector<float>& x, const std::vector<float>& w,
                       const std::vector<float>* b, int64_t N, int64_t C, double eps) {
  NormRef r{std::vector<double>(N * C), std::vector<double>(N), std::vector<double>(N)};
  for (int64_t n = 0; n < N; ++n) {
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < C; ++c) mean += x[n * C + c];
    mean /= C;
    for (int64_t c = 0; c < C; ++c) var += (x[n * C + c] - mean) * (x[n * C + c] - mean);
    const double rstd = 1.0 / std::sqrt(var / C + eps);
    for (int64_t c = 0; c < C; ++c)
      r.out[n * C + c] = (x[n * C + c] - mean) * rstd * w[c] + (b ? (*b)[c] : 0.0);
    r.mean[n] = mean;
    r.rstd[n] = rstd;
  }
  return r;
}

NormRef rms_norm_ref(const std::vector<float>& x, const std::vector<float>& w, int64_t N, int64_t C,
                     double eps) {
  NormRef r{std::vector<double>(N * C), {}, std::vector<double>(N)};
  for (int64_t n = 0; n < N; ++n) {
    double ms = 0.0;
    for (int64_t c = 0; c < C; ++c) ms += double(x[n * C + c]) * x[n * C + c];
    const double rstd = 1.0 / std::sqrt(ms / C + eps);
    for (int64_t c = 0; c < C; ++c) r.out[n * C + c] = x[n * C + c] * rstd * w[c];
    r.rstd[n] = rstd;
  }
  return r;
}

// Shapes including C = 1, C < 16, C a multiple of 16 and C with a vector tail.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 1},  {3, 5},   {4, 16},
                                                          {5, 77}, {2, 768}, {3, 1001}};

TEST(NormsLayerNorm, ForwardMatchesDoubleReference) {
  for (auto [N, C] : kShapes) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " bias=" << with_bias);
      const auto x = make_input(N * C, 1, 3.0f);
      const auto w = make_weight(C, 2);
      const auto b = random_normal(C, 3, 0.5f);
      std::vector<float> out(N * C), mean(N), rstd(N);
      layer_norm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                         with_bias ? b.data() : nullptr, N, C, kEps);
      const NormRef ref = layer_norm_ref(x, w, with_bias ? &b : nullptr, N, C, kEps);
      EXPECT_LT(max_scaled_error(out, ref.out), kFp32Tolerance);
      EXPECT_LT(max_scaled_error(mean, ref.mean), kFp32Tolerance);
      EXPECT_LT(max_scaled_error(rstd, ref.rstd), kFp32Tolerance);
    }
  }
}

TEST(NormsLayerNorm, BackwardMatchesFiniteDifferences) {
  const int64_t N = 3, C = 37;  // C not a multiple of 16: hits the masked tail
  auto x = make_input(N * C, 11, 0.5f);
  auto w = make_weight(C, 12);
  auto b = random_normal(C, 13, 0.5f);
  const auto probe = random_normal(N * C, 14);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layer_norm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                       kEps);
    return dot(out, probe);
  };
  loss();
  std::vector<float> dinp(N * C), dweight(C, 0.0f), dbias(C, 0.0f);
  layer_norm_backward(dinp.data(), dweight.data(), dbias.data(), probe.data(), x.data(), w.data(),
                      mean.data(), rstd.data(), N, C);
  EXPECT_LT(max_scaled_error(dinp, finite_difference(x, loss, kFdStep)), kFdTolerance);
  EXPECT_LT(max_scaled_error(dweight, finite_difference(w, loss, kFdStep)), kFdTolerance);
  EXPECT_LT(max_scaled_error(dbias, finite_difference(b, loss, kFdStep)), kFdTolerance);
}

TEST(NormsLayerNorm, Bf16MatchesFp32) {
  const int64_t N = 6, C = 83;
  const auto x = make_input(N * C, 21, 0.0f), w = make_weight(C, 22);
  const auto b = random_normal(C, 23, 0.5f), dout = random_normal(N * C, 24);
  const auto xr = round_to_bf16(x), wr = round_to_bf16(w), br = round_to_bf16(b);
  const auto doutr = round_to_bf16(dout);

  // fp32 kernel: on the exact inputs, and on the bf16-rounded ones.
  std::vector<float> out(N * C), mean(N), rstd(N), out_r(N * C), mean_r(N), rstd_r(N);
  layer_norm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                     kEps);
  layer_norm_forward(out_r.data(), mean_r.data(), rstd_r.data(), xr.data(), wr.data(), br.data(), N,
                     C, kEps);
  std::vector<float> dinp(N * C), dw(C, 0.0f), db(C, 0.0f), dinp_r(N * C), dw_r(C, 0.0f),
      db_r(C, 0.0f);
  layer_norm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                      mean.data(), rstd.data(), N, C);
  layer_norm_backward(dinp_r.data(), dw_r.data(), db_r.data(), doutr.data(), xr.data(), wr.data(),
                      mean_r.data(), rstd_r.data(), N, C);

  const auto xb = to_bf16(x), wb = to_bf16(w), bb = to_bf16(b), doutb = to_bf16(dout);
  std::vector<bf16> outb(N * C), dinpb(N * C);
  std::vector<float> meanb(N), rstdb(N), dwb(C, 0.0f), dbb(C, 0.0f);
  layer_norm_forward(outb.data(), meanb.data(), rstdb.data(), xb.data(), wb.data(), bb.data(), N, C,
                     kEps);
  layer_norm_backward(dinpb.data(), dwb.data(), dbb.data(), doutb.data(), xb.data(), wb.data(),
                      meanb.data(), rstdb.data(), N, C);

  EXPECT_LT(max_scaled_error(to_float(outb), out), kBf16Tolerance);
  EXPECT_LT(max_scaled_error(to_float(dinpb), dinp), kBf16Tolerance);
  EXPECT_LT(max_scaled_error(dwb, dw), kBf16Tolerance);
  EXPECT_LT(max_scaled_error(dbb, db), kBf16Tolerance);
  // Arithmetic is fp32 whatever T: on identical (bf16-representable) inputs, statistics and
  // parameter gradients are bitwise those of the fp32 kernel, and bf16 outputs are exactly the
  // fp32 outputs rounded to nearest even.
  EXPECT_EQ(meanb, mean_r);
  EXPECT_EQ(rstdb, rstd_r);
  EXPECT_EQ(dwb, dw_r);
  EXPECT_EQ(dbb, db_r);
  EXPECT_EQ(to_float(outb), round_to_bf16(out_r));
  EXPECT_EQ(to_float(dinpb), round_to_bf16(dinp_r));
}

// Parameter gradients accumulate (+=) and are reduced over N in an order that does not depend
// on the thread count; activation gradients are overwritten.
TEST(NormsLayerNorm, BackwardAccumulatesDeterministically) {
  const int64_t N = 301, C = 67;  // several 64-row chunks, N * C above the parallel threshold
  const auto x = make_input(N * C, 31, 1.0f), w = make_weight(C, 32), b = random_normal(C, 33);
  const auto dout = random_normal(N * C, 34);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layer_norm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                     kEps);
  auto run = [&](int threads, int calls, std::vector<float>* dinp, std::vector<float>* dw,
                 std::vector<float>* db) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    dinp->assign(N * C, std::numeric_limits<float>::quiet_NaN());
    dw->assign(C, 0.0f);
    db->assign(C, 0.0f);
    for (int i = 0; i < calls; ++i)
      layer_norm_backward(dinp->data(), dw->data(), db->data(), dout.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
    omp_set_num_threads(saved);
  };
  std::vector<float> dinp1, dw1, db1, dinp2, dw2, db2, dinp3, dw3, db3;
  run(1, 1, &dinp1, &dw1, &db1);
  run(2, 1, &dinp2, &dw2, &db2);
  run(3, 2, &dinp3, &dw3, &db3);
  EXPECT_EQ(dinp1, dinp2);  // overwritten: no NaN left, same bits
  EXPECT_EQ(dw1, dw2);
  EXPECT_EQ(db1, db2);
  EXPECT_EQ(dinp3, dinp1);           // a second call overwrites dinp ...
  for (int64_t c = 0; c < C; ++c) {  // ... and doubles the parameter gradients (exact in fp32)
    EXPECT_EQ(dw3[c], 2.0f * dw1[c]);
    EXPECT_EQ(db3[c], 2.0f * db1[c]);
  }
}

TEST(NormsRmsNorm, ForwardMatchesDoubleReference) {
  for (auto [N, C] : kShapes) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C);
    const auto x = make_input(N * C, 41, 0.5f);
    const auto w = make_weight(C, 42);
    std::vector<float> out(N * C), rstd(N);
    rms_norm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
    const NormRef ref = rms_norm_ref(x, w, N, C, kEps);
    EXPECT_LT(max_scaled_error(out, ref.out), kFp32Tolerance);
    EXPECT_LT(max_scaled_error(rstd, ref.rstd), kFp32Tolerance);
  }
}

TEST(NormsRmsNorm, BackwardMatchesFiniteDifferences) {
  const int64_t N = 3, C = 37;
  auto x = make_input(N * C, 51, 0.5f);
  auto w = make_weight(C, 52);
  const auto probe = random_normal(N * C, 53);
  std::vector<float> out(N * C), rstd(N);
  auto loss = [&] {
    rms_norm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
    return dot(out, probe);
  };
  loss();
  std::vector<float> dinp(N * C), dweight(C, 0.0f);
  rms_norm_backward(dinp.data(), dweight.data(), probe.data(), x.data(), w.data(), rstd.data(), N,
                    C);
  EXPECT_LT(max_scaled_error(dinp, finite_difference(x, loss, kFdStep)), kFdTolerance);
  EXPECT_LT(max_scaled_error(dweight, finite_difference(w, loss, kFdStep)), kFdTolerance);
}

TEST(NormsRmsNorm, Bf16MatchesFp32) {
  const int64_t N = 6, C = 83;
  const auto x = make_input(N * C, 61, 0.0f), w = make_weight(C, 62);
  const auto dout = random_normal(N * C, 63);
  const auto xr = round_to_bf16(x), wr = round_to_bf16(w), doutr = round_to_bf16(dout);
  std::vector<float> out(N * C), rstd(N), out_r(N * C), rstd_r(N);
  rms_norm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  rms_norm_forward(out_r.data(), rstd_r.data(), xr.data(), wr.data(), N, C, kEps);
  std::vector<float> dinp(N * C), dw(C, 0.0f), dinp_r(N * C), dw_r(C, 0.0f);
  rms_norm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  rms_norm_backward(dinp_r.data(), dw_r.data(), doutr.data(), xr.data(), wr.data(), rstd_r.data(),
                    N, C);

  const auto xb = to_bf16(x), wb = to_bf16(w), doutb = to_bf16(dout);
  std::vector<bf16> outb(N * C), dinpb(N * C);
  std::vector<float> rstdb(N), dwb(C, 0.0f);
  rms_norm_forward(outb.data(), rstdb.data(), xb.data(), wb.data(), N, C, kEps);
  rms_norm_backward(dinpb.data(), dwb.data(), doutb.data(), xb.data(), wb.data(), rstdb.data(), N,
                    C);

  EXPECT_LT(max_scaled_error(to_float(outb), out), kBf16Tolerance);
  EXPECT_LT(max_scaled_error(to_float(dinpb), dinp), kBf16Tolerance);
  EXPECT_LT(max_scaled_error(dwb, dw), kBf16Tolerance);
  // fp32 arithmetic whatever T (see NormsLayerNorm.Bf16MatchesFp32).
  EXPECT_EQ(rstdb, rstd_r);
  EXPECT_EQ(dwb, dw_r);
  EXPECT_EQ(to_float(outb), round_to_bf16(out_r));
  EXPECT_EQ(to_float(dinpb), round_to_bf16(dinp_r));
}

TEST(NormsRmsNorm, BackwardAccumulatesDeterministically) {
  const int64_t N = 301, C = 67;
  const auto x = make_input(N * C, 71, 0.0f), w = make_weight(C, 72);
  const auto dout = random_normal(N * C, 73);
  std::vector<float> out(N * C), rstd(N);
  rms_norm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  auto run = [&](int threads, int calls, std::vector<float>* dinp, std::vector<float>* dw) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    dinp->assign(N * C, std::numeric_limits<float>::quiet_NaN());
    dw->assign(C, 0.0f);
    for (int i = 0; i < calls; ++i)
      rms_norm_backward(dinp->data(), dw->data(), dout.data(), x.data(), w.data(), rstd.data(), N,
                        C);
    omp_set_num_threads(saved);
  };
  std::vector<float> dinp1, dw1, dinp2, dw2, dinp3, dw3;
  run(1, 1, &dinp1, &dw1);
  run(2, 1, &dinp2, &dw2);
  run(3, 2, &dinp3, &dw3);
  EXPECT_EQ(dinp1, dinp2);
  EXPECT_EQ(dw1, dw2);
  EXPECT_EQ(dinp3, dinp1);
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(dw3[c], 2.0f * dw1[c]);
}

}  // namespace
}  // namespace tessera::kernels
