#include "tessera/kernels/adamw.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "testing/numeric.h"

namespace tessera::kernels {
namespace {

using testing::max_scaled_error;
using testing::random_normal;

struct AdamWHyper {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
};

// Double-precision AdamW exactly as the header writes it.
void adamw_reference(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
                     const std::vector<float>& grad, const AdamWHyper& h, int64_t step) {
  const double b1 = h.beta1, b2 = h.beta2;
  for (size_t i = 0; i < p.size(); ++i) {
    const double g = double(grad[i]) * h.grad_scale;
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    const double mhat = m[i] / (1 - std::pow(b1, double(step)));
    const double vhat = v[i] / (1 - std::pow(b2, double(step)));
    p[i] -= double(h.lr) * (h.weight_decay * p[i] + mhat / (std::sqrt(vhat) + h.eps));
  }
}

TEST(AdamW, HandComputedConstantGradient) {
  // p0 = 1, g = 0.5 every step, lr = 0.1, betas (0.9, 0.999), eps = 1e-8, weight_decay = 0.01.
  // Step 1 by hand: m = 0.1 * 0.5 = 0.05, v = 0.001 * 0.25 = 0.00025,
  //   mhat = 0.05 / (1 - 0.9) = 0.5, vhat = 0.00025 / (1 - 0.999) = 0.25, sqrt(vhat) = 0.5,
  //   p1 = 1 - 0.1 * (0.01 * 1 + 0.5 / (0.5 + 1e-8)) = 1 - 0.1 * 1.00999998 = 0.899000002.
  // A constant gradient keeps mhat = 0.5 and vhat = 0.25 at every step, so
  //   p2 = p1 - 0.1 * (0.01 * p1 + 0.99999998) = 0.798101004,
  //   p3 = p2 - 0.1 * (0.01 * p2 + 0.99999998) = 0.697302905.
  // 21 elements: one full vector and a tail, all with the same values.
  const int64_t n = 21;
  std::vector<float> p(n, 1.0f), m(n, 0.0f), v(n, 0.0f), g(n, 0.5f);
  const double expected[3] = {0.899000002, 0.798101004, 0.697302905};
  for (int64_t step = 1; step <= 3; ++step) {
    adamw_step<float>(p.data(), m.data(), v.data(), static_cast<float*>(nullptr), g.data(), n, 0.1f,
                      0.9f, 0.999f, 1e-8f, 0.01f, step, 1.0f);
    // A few fp32 roundings of values below 1: within 3e-7.
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(p[i], expected[step - 1], 3e-7) << step;
  }
}

TEST(AdamW, MatchesDoubleReferenceOverThreeSteps) {
  const int64_t n = 1037;  // not a multiple of 16
  const AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f};
  std::vector<float> p = random_normal(n, 101), m(n, 0.0f), v(n, 0.0f);
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> g = random_normal(n, 200 + step, 3.0f);
    adamw_step<float>(p.data(), m.data(), v.data(), static_cast<float*>(nullptr), g.data(), n, h.lr,
                      h.beta1, h.beta2, h.eps, h.weight_decay, step, h.grad_scale);
    adamw_reference(rp, rm, rv, g, h, step);
  }
  // fp32 state after three steps: a few ulp. The updates are ~1e-2 against |p| ~ 3, so an update
  // off by 1e-4 relative would already exceed this bound.
  EXPECT_LT(max_scaled_error(p, rp), 2e-7);
  EXPECT_LT(max_scaled_error(m, rm), 1e-6);
  EXPECT_LT(max_scaled_error(v, rv), 1e-6);
}

TEST(AdamW, ParamOutIsTheUpdatedMasterInEachDtype) {
  const int64_t n = 333;
  const std::vector<float> p0 = random_normal(n, 111), g = random_normal(n, 112);
  std::vector<float> p32 = p0, m32(n, 0.0f), v32(n, 0.0f), out32(n);
  std::vector<float> p16 = p0, m16(n, 0.0f), v16(n, 0.0f);
  std::vector<bf16> out16(n);
  adamw_step<float>(p32.data(), m32.data(), v32.data(), out32.data(), g.data(), n, 1e-3f, 0.9f,
                    0.999f, 1e-8f, 0.1f, 1, 1.0f);
  adamw_step<bf16>(p16.data(), m16.data(), v16.data(), out16.data(), g.data(), n, 1e-3f, 0.9f,
                   0.999f, 1e-8f, 0.1f, 1, 1.0f);
  EXPECT_EQ(p32, out32);
  EXPECT_EQ(p32, p16);  // the master update does not depend on the compute dtype
  EXPECT_EQ(m32, m16);
  EXPECT_EQ(v32, v16);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out16[i].bits, bf16(p32[i]).bits) << i;
}

TEST(Sgd, MomentumMatchesReferenceOverThreeSteps) {
  const int64_t n = 77;
  const float lr = 0.1f, momentum = 0.9f, wd = 0.01f, gs = 0.25f;
  std::vector<float> p = random_normal(n, 121), buf(n, 0.0f);
  std::vector<double> rp(p.begin(), p.end()), rbuf(n, 0.0);
  std::vector<bf16> out(n);
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> grad = random_normal(n, 130 + step);
    sgd_step<bf16>(p.data(), buf.data(), out.data(), grad.data(), n, lr, momentum, wd, step, gs);
    for (int64_t i = 0; i < n; ++i) {
      const double g = double(grad[i]) * gs + double(wd) * rp[i];
      rbuf[i] = step == 1 ? g : double(momentum) * rbuf[i] + g;
      rp[i] -= double(lr) * rbuf[i];
    }
  }
  // Three steps of fp32 arithmetic on values of order 1.
  EXPECT_LT(max_scaled_error(p, rp), 3e-7);
  EXPECT_LT(max_scaled_error(buf, rbuf), 3e-7);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[i].bits, bf16(p[i]).bits);
}

TEST(Sgd, NoMomentumNeedsNoBuffer) {
  const int64_t n = 19;
  std::vector<float> p = random_normal(n, 141);
  const std::vector<float> p0 = p, grad = random_normal(n, 142);
  sgd_step<float>(p.data(), nullptr, static_cast<float*>(nullptr), grad.data(), n, 0.5f, 0.0f, 0.0f,
                  1, 1.0f);
  for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(p[i], p0[i] - 0.5f * grad[i]);
}

TEST(GradUtils, SumSquaresMatchesDouble) {
  for (int64_t n : {0, 1, 15, 17, 1000003}) {  // 1000003 spans 16 chunks and a tail
    const std::vector<float> x = random_normal(n, 151 + n, 2.0f);
    double ref = 0.0;
    for (float e : x) ref += double(e) * e;
    // Squares of floats are exact in double; only the summation order differs (~n * 1e-16).
    EXPECT_NEAR(sum_squares(x.data(), n), ref, 1e-10 * std::max(ref, 1.0)) << n;
  }
}

TEST(GradUtils, SumSquaresIsIndependentOfThreadCount) {
  const int64_t n = 700001;
  const std::vector<float> x = random_normal(n, 161, 5.0f);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = sum_squares(x.data(), n);
  omp_set_num_threads(2);
  const double two = sum_squares(x.data(), n);
  omp_set_num_threads(3);
  const double three = sum_squares(x.data(), n);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);  // bitwise: the chunking is fixed
  EXPECT_EQ(one, three);
}

TEST(GradUtils, ScaleInplace) {
  const int64_t n = 100003;
  std::vector<float> x = random_normal(n, 171);
  const std::vector<float> x0 = x;
  scale_inplace(x.data(), n, 0.125f);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], x0[i] * 0.125f);
}

TEST(GradUtils, HasNonFiniteFindsNaNAndInfAnywhere) {
  const int64_t n = 200003;
  std::vector<float> x = random_normal(n, 181);
  x[7] = std::numeric_limits<float>::max();  // large but finite
  EXPECT_FALSE(has_non_finite(x.data(), n));
  EXPECT_FALSE(has_non_finite(x.data(), 0));
  const float bad[3] = {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
  for (int64_t pos : {int64_t(0), int64_t(70000), n - 1}) {  // first, a later chunk, the tail
    for (float b : bad) {
      std::vector<float> y = x;
      y[pos] = b;
      EXPECT_TRUE(has_non_finite(y.data(), n)) << pos;
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
