#include "tessera/kernels/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/kernels/gemm_widened.h"
#include "testing/numeric.h"

namespace tessera::kernels {
namespace {

using testing::max_scaled_error;
using testing::random_normal;
using testing::round_to_bf16;
using testing::to_bf16;
using testing::to_float;

constexpr float kPad = 12288.0f;  // sentinel in C's padding (between N and ldc); exact in bf16

struct Problem {
  bool trans_a, trans_b;
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  std::string name() const {
    return "ta=" + std::to_string(trans_a) + " tb=" + std::to_string(trans_b) +
           " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
           " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta);
  }
};

// Padded leading dimensions (not multiples of anything) so strides are really honoured.
Problem make_problem(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta) {
  return {ta, tb, M, N, K, (ta ? M : K) + 3, (tb ? K : N) + 5, N + 7, alpha, beta};
}

// Inputs already rounded to bf16, so the same values feed the fp32 and bf16 paths and the
// double reference.
struct Operands {
  std::vector<float> a, b, c0;
  explicit Operands(const Problem& p, uint64_t seed)
      : a(round_to_bf16(random_normal((p.trans_a ? p.K : p.M) * p.lda, seed))),
        b(round_to_bf16(random_normal((p.trans_b ? p.N : p.K) * p.ldb, seed + 1))),
        c0(random_normal(p.M * p.ldc, seed + 2)) {
    for (int64_t m = 0; m < p.M; ++m)
      for (int64_t n = p.N; n < p.ldc; ++n) c0[m * p.ldc + n] = kPad;
    if (p.beta == 0.0f) {  // beta == 0 must not read C: NaNs there must not leak into the result
      for (int64_t m = 0; m < p.M; ++m)
        for (int64_t n = 0; n < p.N; ++n)
          c0[m * p.ldc + n] = std::numeric_limits<float>::quiet_NaN();
    }
  }
};

// Naive double-precision C = alpha op(A) op(B) + beta C over the M x N block.
std::vector<double> reference(const Problem& p, const Operands& x) {
  std::vector<double> c(p.M * p.N);
  for (int64_t m = 0; m < p.M; ++m) {
    for (int64_t n = 0; n < p.N; ++n) {
      double s = 0.0;
      for (int64_t k = 0; k < p.K; ++k) {
        const double av = p.trans_a ? x.a[k * p.lda + m] : x.a[m * p.lda + k];
        const double bv = p.trans_b ? x.b[n * p.ldb + k] : x.b[k * p.ldb + n];
        s += av * bv;
      }
      const double prior = p.beta == 0.0f ? 0.0 : p.beta * double(x.c0[m * p.ldc + n]);
      c[m * p.N + n] = p.alpha * s + prior;
    }
  }
  return c;
}

// The M x N block of a padded C, and a check that the padding was not written.
template <typename T>
std::vector<float> block(const Problem& p, const std::vector<T>& c) {
  std::vector<float> out(p.M * p.N);
  for (int64_t m = 0; m < p.M; ++m) {
    for (int64_t n = 0; n < p.N; ++n) out[m * p.N + n] = to_f32(c[m * p.ldc + n]);
    for (int64_t n = p.N; n < p.ldc; ++n) EXPECT_EQ(to_f32(c[m * p.ldc + n]), kPad) << p.name();
  }
  return out;
}

// kFp32A*: gemm_fp32_a, an fp32 A with a bf16 B (the operand a caller widened once itself).
enum class Path { kF32, kBf16ToF32, kBf16ToBf16, kFp32AToF32, kFp32AToBf16 };

// Runs one problem on one path and returns the scaled error against the double reference.
double run_error(const Problem& p, Path path) {
  const Operands x(p, 11 + p.M + 7 * p.K);
  const std::vector<double> ref = reference(p, x);
  std::vector<float> got;
  if (path == Path::kF32) {
    std::vector<float> c = x.c0;
    gemm(p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, x.a.data(), p.lda, x.b.data(), p.ldb, p.beta,
         c.data(), p.ldc);
    got = block(p, c);
  } else if (path == Path::kBf16ToF32) {
    std::vector<float> c = x.c0;
    gemm(p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, to_bf16(x.a).data(), p.lda,
         to_bf16(x.b).data(), p.ldb, p.beta, c.data(), p.ldc);
    got = block(p, c);
  } else if (path == Path::kBf16ToBf16) {
    std::vector<bf16> c = to_bf16(x.c0);
    gemm(p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, to_bf16(x.a).data(), p.lda,
         to_bf16(x.b).data(), p.ldb, 0.0f, c.data(), p.ldc);
    got = block(p, c);
  } else if (path == Path::kFp32AToF32) {
    std::vector<float> c = x.c0;
    gemm_fp32_a(p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, x.a.data(), p.lda,
                to_bf16(x.b).data(), p.ldb, p.beta, c.data(), p.ldc);
    got = block(p, c);
  } else {
    std::vector<bf16> c = to_bf16(x.c0);
    gemm_fp32_a(p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, x.a.data(), p.lda,
                to_bf16(x.b).data(), p.ldb, 0.0f, c.data(), p.ldc);
    got = block(p, c);
  }
  return max_scaled_error(got, ref);
}

// fp32 accumulation over K <= ~200 terms: error ~ sqrt(K) * 2^-24 of the output scale; 1e-5
// leaves a wide margin. The bf16 inputs are exactly representable and bf16*bf16 products are
// exact in fp32, so bf16 -> fp32 gets the same tolerance.
constexpr double kF32Tol = 1e-5;
// bf16 output: one final rounding to 8 significant bits, at most 2^-8 ~ 3.9e-3 relative.
constexpr double kBf16OutTol = 5e-3;

// The problem on every path against the double reference; the 16-bit outputs only with beta 0
// (they accumulate into nothing).
void expect_every_path(const Problem& p) {
  EXPECT_LT(run_error(p, Path::kF32), kF32Tol) << "fp32 " << p.name();
  EXPECT_LT(run_error(p, Path::kBf16ToF32), kF32Tol) << "bf16->fp32 " << p.name();
  EXPECT_LT(run_error(p, Path::kFp32AToF32), kF32Tol) << "fp32 A->fp32 " << p.name();
  if (p.beta == 0.0f) {
    EXPECT_LT(run_error(p, Path::kBf16ToBf16), kBf16OutTol) << "bf16->bf16 " << p.name();
    EXPECT_LT(run_error(p, Path::kFp32AToBf16), kBf16OutTol) << "fp32 A->bf16 " << p.name();
  }
}

TEST(Gemm, AllTransposesOddSizesPaddedLeadingDims) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float alpha : {1.0f, 0.75f})
        for (float beta : {0.0f, 1.0f}) {
          const Problem p = make_problem(ta, tb, 17, 33, 65, alpha, beta);
          expect_every_path(p);
        }
}

TEST(Gemm, VectorTailsAndBlockSizes) {
  // Sizes around the 16-wide vector and the kernels' register blocks, a beta that is not 0/1,
  // and shapes large enough for multi-block paths; the last is above the size gemm runs on one
  // thread, so it takes the OpenMP-parallel path.
  const int64_t shapes[][3] = {{1, 1, 1},    {1, 31, 17},    {16, 16, 16},   {15, 47, 2},
                               {63, 1, 129}, {100, 37, 200}, {150, 130, 129}};
  for (const auto& s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Problem p = make_problem(ta, tb, s[0], s[1], s[2], 1.0f, 0.5f);
        EXPECT_LT(run_error(p, Path::kF32), kF32Tol) << "fp32 " << p.name();
        EXPECT_LT(run_error(p, Path::kBf16ToF32), kF32Tol) << "bf16->fp32 " << p.name();
        const Problem p0 = make_problem(ta, tb, s[0], s[1], s[2], 1.0f, 0.0f);
        EXPECT_LT(run_error(p0, Path::kBf16ToBf16), kBf16OutTol) << "bf16->bf16 " << p0.name();
        EXPECT_LT(run_error(p, Path::kFp32AToF32), kF32Tol) << "fp32 A->fp32 " << p.name();
        EXPECT_LT(run_error(p0, Path::kFp32AToBf16), kBf16OutTol) << "fp32 A->bf16 " << p0.name();
      }
}

TEST(Gemm, AccumulatingTwiceDoublesTheProduct) {
  // The weight-gradient pattern: beta = 1 into an fp32 buffer, once per micro-batch.
  const Problem p = make_problem(true, false, 24, 40, 33, 1.0f, 1.0f);
  const Operands x(p, 5);
  const auto a16 = to_bf16(x.a), b16 = to_bf16(x.b);
  std::vector<float> c(p.M * p.ldc, 0.0f), once(p.M * p.ldc, 0.0f);
  for (int i = 0; i < 2; ++i)
    gemm(p.trans_a, p.trans_b, p.M, p.N, p.K, 1.0f, a16.data(), p.lda, b16.data(), p.ldb, 1.0f,
         c.data(), p.ldc);
  gemm(p.trans_a, p.trans_b, p.M, p.N, p.K, 1.0f, a16.data(), p.lda, b16.data(), p.ldb, 1.0f,
       once.data(), p.ldc);
  for (auto& v : once) v *= 2.0f;
  // x + x and 2x are the same float, and both runs accumulate identical fp32 partial sums.
  EXPECT_LT(max_scaled_error(c, once), 1e-6);
}

TEST(Gemm, EmptyDimensions) {
  std::vector<float> c(6, 3.0f);
  std::vector<bf16> c16(6, bf16(3.0f));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // M or N == 0: nothing is read or written (null operands are fine).
  gemm(false, false, 0, 3, 4, 1.0f, static_cast<const float*>(nullptr), 4, nullptr, 3, 0.0f,
       c.data(), 3);
  gemm(false, false, 2, 0, 4, 1.0f, static_cast<const bf16*>(nullptr), 4, nullptr, 1, 0.0f,
       c.data(), 3);
  gemm(true, true, 0, 0, 0, 1.0f, static_cast<const bf16*>(nullptr), 1, nullptr, 1, 0.0f,
       c16.data(), 1);
  for (float v : c) EXPECT_EQ(v, 3.0f);
  for (bf16 v : c16) EXPECT_EQ(to_f32(v), 3.0f);
  // K == 0: C = beta * C, an empty sum; beta == 0 overwrites even NaN.
  gemm(false, false, 2, 3, 0, 1.0f, static_cast<const float*>(nullptr), 1, nullptr, 3, 1.0f,
       c.data(), 3);
  for (float v : c) EXPECT_EQ(v, 3.0f);
  gemm(false, false, 2, 3, 0, 1.0f, static_cast<const bf16*>(nullptr), 1, nullptr, 3, 0.5f,
       c.data(), 3);
  for (float v : c) EXPECT_EQ(v, 1.5f);
  std::fill(c.begin(), c.end(), nan);
  gemm(false, false, 2, 3, 0, 1.0f, static_cast<const float*>(nullptr), 1, nullptr, 3, 0.0f,
       c.data(), 3);
  for (float v : c) EXPECT_EQ(v, 0.0f);
  std::fill(c16.begin(), c16.end(), bf16(nan));
  gemm(false, false, 2, 3, 0, 1.0f, static_cast<const bf16*>(nullptr), 1, nullptr, 3, 0.0f,
       c16.data(), 3);
  for (bf16 v : c16) EXPECT_EQ(to_f32(v), 0.0f);
}

// Two threads run the same cached primitive at once; each must get its own answer.
void concurrent_check(const Problem& p) {
  const Operands x1(p, 21), x2(p, 31);
  const std::vector<double> ref1 = reference(p, x1), ref2 = reference(p, x2);
  double err1 = 1.0, err2 = 1.0;
  auto worker = [&p](const Operands& x, const std::vector<double>& ref, double* err) {
    const auto a16 = to_bf16(x.a), b16 = to_bf16(x.b);
    double worst = 0.0;
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<float> c = x.c0;
      gemm(p.trans_a, p.trans_b, p.M, p.N, p.K, 1.0f, a16.data(), p.lda, b16.data(), p.ldb, 0.0f,
           c.data(), p.ldc);
      std::vector<float> got(p.M * p.N);
      for (int64_t m = 0; m < p.M; ++m)
        for (int64_t n = 0; n < p.N; ++n) got[m * p.N + n] = c[m * p.ldc + n];
      worst = std::max(worst, max_scaled_error(got, ref));
    }
    *err = worst;
  };
  std::thread t1(worker, std::cref(x1), std::cref(ref1), &err1);
  std::thread t2(worker, std::cref(x2), std::cref(ref2), &err2);
  t1.join();
  t2.join();
  EXPECT_LT(err1, kF32Tol) << p.name();
  EXPECT_LT(err2, kF32Tol) << p.name();
}

TEST(Gemm, ConcurrentCallersShareCachedPrimitives) {
  // One small (single-threaded) and one large (OpenMP team) bf16 problem.
  for (const Problem& p : {make_problem(false, true, 33, 47, 80, 1.0f, 0.0f),
                           make_problem(false, true, 130, 140, 150, 1.0f, 0.0f)})
    concurrent_check(p);
}

TEST(Gemm, BoundedSizeKeepsFourSignificantBits) {
  // Hand-worked: 1213 = 0b10010111101 -> 0b10010000000; then 61 = 0b111101 -> 0b111100.
  const int64_t cases[][2] = {{1, 1},       {15, 15},     {16, 16},    {17, 16},
                              {31, 30},     {61, 60},     {255, 240},  {1024, 1024},
                              {1025, 1024}, {1213, 1152}, {4095, 3840}};
  for (const auto& c : cases) EXPECT_EQ(detail::bounded_size(c[0]), c[1]) << c[0];
}

TEST(Gemm, VaryingTokenCountsGivesTheProductOnEveryPath) {
  // Rows and depths that split into several pieces (37 = 36 + 1, 83 = 80 + 3, 150 = 144 + 6),
  // every transpose, a beta of 0 (C not read) and of 0.5: the pieces make the whole product.
  const VaryingTokenCounts varying;
  const int64_t shapes[][3] = {{37, 19, 83}, {150, 33, 37}, {1, 5, 150}};
  for (const auto& s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 0.5f}) {
          const Problem p = make_problem(ta, tb, s[0], s[1], s[2], 0.75f, beta);
          expect_every_path(p);
        }
}

TEST(Gemm, VaryingTokenCountsBoundsThePrimitivesCreated) {
#if defined(TESSERA_WITHOUT_ONEDNN)
  GTEST_SKIP() << "the build without oneDNN keeps no primitives";
#endif
  // A forward product's rows and a weight gradient's depth taking every count from 1 to 200, as
  // an expert's rows do. Sizes up to 200 with at most four significant bits: 1-16 (16), 18-30
  // (7), 32-60 and 64-120 (8 each), 128-192 (5): 44.
  const int64_t N = 24, K = 8, counts = 200;
  std::vector<float> a(counts * K, 0.5f), b(counts * N, 0.25f), c(counts * N), w(K * N);
  const auto sweep = [&](int64_t n_offset) {
    const size_t before = detail::onednn_primitives_cached();
    for (int64_t m = 1; m <= counts; ++m) {
      // Each sweep its own N, so that neither reuses the other's primitives.
      gemm(false, false, m, N - n_offset, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
      gemm(true, false, K, N - n_offset, m, 1.0f, a.data(), K, b.data(), N, 1.0f, w.data(), N);
    }
    return detail::onednn_primitives_cached() - before;
  };
  {
    const VaryingTokenCounts varying;
    EXPECT_LE(sweep(0), 2 * 44u);
    // Values after the last count: every forward row holds K * 0.5 * 0.25; the weight gradient
    // summed every depth from 1 to 200 (beta 1) from zero, 0.125 * 200 * 201 / 2.
    for (int64_t m = 0; m < counts; ++m) ASSERT_EQ(c[m * N + N - 1], 1.0f) << m;
    EXPECT_EQ(w[N - 1], 0.125f * counts * (counts + 1) / 2);
  }
  EXPECT_GT(sweep(1), 4 * 44u);  // outside the scope, one a shape (400 unless kept before)
}

TEST(Gemm, KeptPrimitivesAreBoundedAndMadeAgainGiveTheSameBits) {
#if defined(TESSERA_WITHOUT_ONEDNN)
  GTEST_SKIP() << "the build without oneDNN keeps no primitives";
#endif
  const Problem p = make_problem(true, false, 45, 29, 77, 0.75f, 0.5f);
  const Operands x(p, 5);
  const auto product = [&] {
    std::vector<float> c = x.c0;
    gemm(p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, x.a.data(), p.lda, x.b.data(), p.ldb, p.beta,
         c.data(), p.ldc);
    return c;
  };
  detail::set_kept_primitives(8);
  const std::vector<float> first = product();
  // 40 other shapes push it out; then it is made again.
  std::vector<float> a(64 * 64, 1.0f), c(64 * 64);
  for (int64_t m = 1; m <= 40; ++m)
    gemm(false, false, m, 3, 5, 1.0f, a.data(), 5, a.data(), 3, 0.0f, c.data(), 3);
  EXPECT_LE(detail::onednn_primitives_cached(), 8u);
  const std::vector<float> again = product();
  detail::set_kept_primitives(detail::kKeptPrimitives);
  for (size_t i = 0; i < first.size(); ++i) ASSERT_EQ(first[i], again[i]) << i;  // bit for bit
}

TEST(Gemm, MeasurePeakRejectsDtypesWithoutGemm) {
  EXPECT_THROW(measure_peak_gflops(DType::kF16, 16), Error);
  EXPECT_THROW(measure_peak_gflops(DType::kF32, 0), Error);
}

}  // namespace
}  // namespace tessera::kernels
