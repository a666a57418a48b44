// The blocked GEMM (kernels/gemm_packed.h) on the target ctest caps it to (kernels.<target>.*):
// against a double-precision reference, bit for bit against a scalar emulation of its documented
// summation order, and bit for bit between thread counts and between a product and its slices.
#include "tessera/kernels/gemm_packed.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/threads.h"
#include "tessera/kernels/cpu_target.h"
#include "testing/numeric.h"

namespace tessera::kernels {
namespace {

using testing::max_scaled_error;
using testing::random_normal;

constexpr float kPad = 12288.0f;  // C's padding between N and ldc; exact in bf16 and fp16

struct Problem {
  bool trans_a, trans_b;
  int64_t M, N, K;
  float alpha, beta;
  // Padded leading dimensions (not multiples of anything), so strides are really honoured.
  int64_t lda() const { return (trans_a ? M : K) + 3; }
  int64_t ldb() const { return (trans_b ? K : N) + 5; }
  int64_t ldc() const { return N + 7; }
  std::string name() const {
    return "ta=" + std::to_string(trans_a) + " tb=" + std::to_string(trans_b) +
           " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
           " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta);
  }
};

// Operands of element type T (values of T, held as floats for the references) and an initial C
// of type TC: padding kPad, and NaN inside when beta == 0 (C must then not be read).
template <typename T, typename TC>
struct Operands {
  std::vector<float> a, b;
  std::vector<T> a_t, b_t;
  std::vector<TC> c0;
  Operands(const Problem& p, uint64_t seed) {
    a = random_normal((p.trans_a ? p.K : p.M) * p.lda(), seed);
    b = random_normal((p.trans_b ? p.N : p.K) * p.ldb(), seed + 1);
    for (float& x : a) x = to_f32(from_f32<T>(x));
    for (float& x : b) x = to_f32(from_f32<T>(x));
    for (float x : a) a_t.push_back(from_f32<T>(x));
    for (float x : b) b_t.push_back(from_f32<T>(x));
    const std::vector<float> c = random_normal(p.M * p.ldc(), seed + 2);
    for (int64_t m = 0; m < p.M; ++m)
      for (int64_t n = 0; n < p.ldc(); ++n) {
        const float v = n >= p.N ? kPad
                        : p.beta == 0.0f ? std::numeric_limits<float>::quiet_NaN()
                                         : c[m * p.ldc() + n];
        c0.push_back(from_f32<TC>(v));
      }
  }
  float A(const Problem& p, int64_t m, int64_t k) const {
    return p.trans_a ? a[k * p.lda() + m] : a[m * p.lda() + k];
  }
  float B(const Problem& p, int64_t k, int64_t n) const {
    return p.trans_b ? b[n * p.ldb() + k] : b[k * p.ldb() + n];
  }
};

template <typename T, typename TC>
std::vector<TC> run(const Problem& p, const Operands<T, TC>& x) {
  std::vector<TC> c = x.c0;
  packed_gemm(p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, x.a_t.data(), p.lda(), x.b_t.data(),
              p.ldb(), p.beta, c.data(), p.ldc());
  return c;
}

// The M x N block of a padded C as floats, checking the padding was not written.
template <typename TC>
std::vector<float> block(const Problem& p, const std::vector<TC>& c) {
  std::vector<float> out;
  for (int64_t m = 0; m < p.M; ++m) {
    for (int64_t n = 0; n < p.N; ++n) out.push_back(to_f32(c[m * p.ldc() + n]));
    for (int64_t n = p.N; n < p.ldc(); ++n)
      EXPECT_EQ(to_f32(c[m * p.ldc() + n]), kPad) << "padding written, " << p.name();
  }
  return out;
}

// alpha op(A) op(B) + beta C in double.
template <typename T, typename TC>
std::vector<double> reference(const Problem& p, const Operands<T, TC>& x) {
  std::vector<double> c;
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t n = 0; n < p.N; ++n) {
      double s = 0.0;
      for (int64_t k = 0; k < p.K; ++k) s += double(x.A(p, m, k)) * double(x.B(p, k, n));
      const double prior = p.beta == 0.0f ? 0.0 : p.beta * double(to_f32(x.c0[m * p.ldc() + n]));
      c.push_back(p.alpha * s + prior);
    }
  return c;
}

// The summation order gemm_packed.h documents, one element at a time in scalar fp32: fused
// multiply-adds where the target fuses them (every target but x86-64 baseline, simd/vec.h).
template <typename T, typename TC>
std::vector<float> emulation(const Problem& p, const Operands<T, TC>& x) {
  const bool fused = active_cpu_target() != CpuTarget::kBaseline;
  const auto fmadd = [fused](float a, float b, float c) {
    if (fused) return std::fma(a, b, c);
    const float product = a * b;
    return product + c;
  };
  std::vector<float> out;
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t n = 0; n < p.N; ++n) {
      float sum = 0.0f;
      for (int64_t k0 = 0; k0 < p.K; k0 += kPackedGemmDepth) {
        float acc = 0.0f;
        for (int64_t k = k0; k < std::min<int64_t>(p.K, k0 + kPackedGemmDepth); ++k)
          acc = fmadd(x.A(p, m, k), x.B(p, k, n), acc);
        const float scaled = p.alpha * acc;
        if (k0 > 0)
          sum = sum + scaled;
        else if (p.beta != 0.0f)
          sum = fmadd(p.beta, to_f32(x.c0[m * p.ldc() + n]), scaled);
        else
          sum = scaled;
      }
      out.push_back(to_f32(from_f32<TC>(sum)));
    }
  return out;
}

// Error bound against the double reference: fp32 accumulation of K products of O(1) values, a
// few ulp of the output scale per sqrt(K) (measured worst 2.6e-7 at K = 900 on avx512: 1e-5 is
// 40x that), and for a 16-bit C one final rounding (2^-9 bf16, 2^-12 fp16 relative).
template <typename TC>
double tolerance() {
  if constexpr (std::is_same_v<TC, bf16>) return 4e-3;
  if constexpr (std::is_same_v<TC, fp16>) return 5e-4;
  return 1e-5;
}

template <typename T, typename TC>
void check(const Problem& p) {
  if (!std::is_same_v<TC, float> && p.beta != 0.0f) return;  // 16-bit C: beta 0 only
  const Operands<T, TC> x(p, 7 + p.M + 13 * p.K + 101 * p.N);
  const std::vector<float> got = block(p, run(p, x));
  EXPECT_LT(max_scaled_error(got, reference(p, x)), tolerance<TC>()) << p.name();
  const std::vector<float> order = emulation(p, x);
  int differing = 0;
  for (size_t i = 0; i < got.size(); ++i) differing += std::memcmp(&got[i], &order[i], 4) != 0;
  EXPECT_EQ(differing, 0) << "elements not in the documented summation order, " << p.name();
}

void check_all_types(const Problem& p) {
  check<float, float>(p);
  check<bf16, float>(p);
  check<bf16, bf16>(p);
  check<fp16, float>(p);
  check<fp16, fp16>(p);
}

TEST(PackedGemm, AllTransposesScalesAndTypes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float alpha : {1.0f, 0.75f})
        for (float beta : {0.0f, 1.0f, 0.5f}) check_all_types({ta, tb, 29, 45, 70, alpha, beta});
}

TEST(PackedGemm, EdgesOfRegisterTilesAndDepthBlocks) {
  // M around every target's micro-tile rows (2, 6, 12), N around its columns (16, 32), K around
  // the depth block (384): one block, exactly one, one more element, several (the 16-bit C then
  // keeps an fp32 running sum between blocks).
  const int64_t shapes[][3] = {{1, 1, 1},    {2, 16, 5},     {5, 17, 383}, {6, 31, 384},
                               {7, 32, 385}, {11, 33, 769},  {12, 47, 16}, {13, 64, 900},
                               {25, 1, 400}, {1, 100, 1000}};
  for (const auto& s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) check_all_types({ta, tb, s[0], s[1], s[2], 1.0f, 1.0f});
  for (const auto& s : shapes) check_all_types({true, false, s[0], s[1], s[2], 0.5f, 0.0f});
}

// `count` elements of T ending exactly where an inaccessible page begins: reading one element
// past them faults.
template <typename T>
class BeforeAGuardPage {
 public:
  explicit BeforeAGuardPage(size_t count) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = count * sizeof(T), room = (bytes + page - 1) / page * page;
    length_ = room + page;
    base_ = static_cast<char*>(
        mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base_, MAP_FAILED);
    EXPECT_EQ(mprotect(base_ + room, page, PROT_NONE), 0);
    data_ = reinterpret_cast<T*>(base_ + room - bytes);
  }
  ~BeforeAGuardPage() { munmap(base_, length_); }
  T* data() { return data_; }

 private:
  char* base_ = nullptr;
  size_t length_ = 0;
  T* data_ = nullptr;
};

TEST(PackedGemm, ABf16ReadInPlaceStopsAtItsLastElement) {
  // A bf16 A is read in place, each value broadcast from a 32-bit load of it and its successor,
  // bar a row's last depth: an A of exactly M x K elements (lda == K) right before an
  // inaccessible page (a read past its end faults) gives the bits of the same values in padded
  // rows.
  for (int64_t K : {1, 2, 3, 383, 384, 385, 769}) {
    const Problem p{false, false, 7, 33, K, 1.0f, 0.0f};
    const Operands<bf16, bf16> x(p, 5 + K);
    const std::vector<bf16> padded = run(p, x);
    BeforeAGuardPage<bf16> exact(static_cast<size_t>(p.M * K));
    for (int64_t m = 0; m < p.M; ++m)
      for (int64_t k = 0; k < K; ++k) exact.data()[m * K + k] = x.a_t[m * p.lda() + k];
    std::vector<bf16> c = x.c0;
    packed_gemm(false, false, p.M, p.N, K, 1.0f, exact.data(), K, x.b_t.data(), p.ldb(), 0.0f,
                c.data(), p.ldc());
    EXPECT_EQ(std::memcmp(c.data(), padded.data(), c.size() * sizeof(bf16)), 0) << p.name();
  }
}

TEST(PackedGemm, LargeProductsOnTheThreadTeam) {
  // Above the size that runs on one thread: rows split between threads (packed A, M > N) and
  // columns split (A in place, or N > M); tails in both.
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_all_types({ta, tb, 301, 133, 450, 1.0f, 0.0f});
      check<float, float>({ta, tb, 97, 290, 400, 1.0f, 1.0f});
      check<bf16, bf16>({ta, tb, 97, 290, 400, 1.0f, 0.0f});
    }
}

// Bits of one product at 1 and at 2 threads, and of its row and column slices.
template <typename T, typename TC>
void check_invariance(bool ta, bool tb) {
  const Problem p{ta, tb, 203, 171, 500, 1.0f, 0.0f};
  const Operands<T, TC> x(p, 99);
  const int saved = set_num_threads(1);
  const std::vector<TC> one = run(p, x);
  set_num_threads(2);
  const std::vector<TC> two = run(p, x);
  set_num_threads(saved);
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(TC)), 0) << p.name();

  // Rows [m0, m1) and columns [n0, n1) as products of their own: offsets and sizes that are not
  // multiples of any tile.
  const int64_t m0 = 37, m1 = 150, n0 = 21, n1 = 98;
  const T* a = x.a_t.data() + (ta ? m0 : m0 * p.lda());
  const T* b = x.b_t.data() + (tb ? n0 * p.ldb() : n0);
  std::vector<TC> part((m1 - m0) * (n1 - n0));
  packed_gemm(ta, tb, m1 - m0, n1 - n0, p.K, 1.0f, a, p.lda(), b, p.ldb(), 0.0f, part.data(),
              n1 - n0);
  int differing = 0;
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t n = n0; n < n1; ++n)
      differing += std::memcmp(&part[(m - m0) * (n1 - n0) + n - n0], &one[m * p.ldc() + n],
                               sizeof(TC)) != 0;
  EXPECT_EQ(differing, 0) << "slice differs from the whole product, " << p.name();
}

TEST(PackedGemm, ThreadCountAndSlicesGiveTheSameBits) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_invariance<float, float>(ta, tb);
      check_invariance<bf16, bf16>(ta, tb);
      check_invariance<bf16, float>(ta, tb);
    }
}

TEST(PackedGemmDeathTest, EmptyDimensionsAndBadArguments) {
  // The default ("fast", fork without exec) death test style: the child aborts in the argument
  // checks before any OpenMP region, and under qemu-user (scripts/test-arm64.sh) the
  // "threadsafe" style's re-exec of the binary fails.
  std::vector<float> c(6, 3.0f);
  std::vector<bf16> c16(6, bf16(std::numeric_limits<float>::quiet_NaN()));
  // M or N == 0: nothing read or written (null operands are fine).
  packed_gemm(false, false, 0, 3, 4, 1.0f, static_cast<const float*>(nullptr), 4,
              static_cast<const float*>(nullptr), 3, 0.0f, c.data(), 3);
  for (float v : c) EXPECT_EQ(v, 3.0f);
  // K == 0: C = beta C, and beta == 0 overwrites even NaN.
  packed_gemm(false, false, 2, 3, 0, 1.0f, static_cast<const float*>(nullptr), 1,
              static_cast<const float*>(nullptr), 3, 0.5f, c.data(), 3);
  for (float v : c) EXPECT_EQ(v, 1.5f);
  packed_gemm(false, false, 2, 3, 0, 1.0f, static_cast<const bf16*>(nullptr), 1,
              static_cast<const bf16*>(nullptr), 3, 0.0f, c16.data(), 3);
  for (bf16 v : c16) EXPECT_EQ(to_f32(v), 0.0f);
  // A 16-bit C with beta != 0, and leading dimensions shorter than a row, are bugs: they abort.
  const std::vector<bf16> a(4), b(4);
  EXPECT_DEATH(packed_gemm(false, false, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 1.0f,
                           c16.data(), 2),
               "beta 0 only");
  EXPECT_DEATH(packed_gemm(false, false, 2, 2, 2, 1.0f, a.data(), 1, b.data(), 2, 0.0f,
                           c.data(), 2),
               "lda");
}

}  // namespace
}  // namespace tessera::kernels
