#include "tessera/kernels/embedding.h"

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

// Deterministic token ids in [lo, hi) (a small range gives many repeated tokens, which is what
// makes the backward's accumulation order matter).
std::vector<int32_t> make_tokens(int64_t N, int32_t lo, int32_t hi, uint64_t seed) {
  const PhiloxKey key = philox_key(seed, RngPurpose::kTest, 1);
  std::vector<int32_t> t(N);
  for (int64_t n = 0; n < N; ++n)
    t[n] = lo + static_cast<int32_t>(philox_block(key, 0, n)[0] % (hi - lo));
  return t;
}
std::vector<int32_t> make_positions(int64_t N, int32_t P) {
  std::vector<int32_t> p(N);
  for (int64_t n = 0; n < N; ++n) p[n] = static_cast<int32_t>(n % P);
  return p;
}

TEST(EmbeddingForward, MatchesDoubleReference) {
  for (int64_t C : {1, 16, 37, 100}) {
    SCOPED_TRACE(::testing::Message() << "C=" << C);
    const int64_t N = 13, V = 11, P = 8;
    const auto tokens = make_tokens(N, 0, V, 1);
    const auto positions = make_positions(N, P);
    const auto wte = random_normal(V * C, 2), wpe = random_normal(P * C, 3);
    std::vector<float> out(N * C), out_nopos(N * C);
    embedding_forward(out.data(), tokens.data(), positions.data(), wte.data(), wpe.data(), N, C, 0,
                      V);
    embedding_forward(out_nopos.data(), tokens.data(), nullptr, wte.data(),
                      static_cast<const float*>(nullptr), N, C, 0, V);
    std::vector<double> ref(N * C), ref_nopos(N * C);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = 0; c < C; ++c) {
        ref_nopos[n * C + c] = wte[tokens[n] * C + c];
        ref[n * C + c] = double(wte[tokens[n] * C + c]) + wpe[positions[n] * C + c];
      }
    }
    // One correctly rounded fp32 addition per element: at most 2^-24 relative.
    EXPECT_LT(max_scaled_error(out, ref), 1e-7);
    // Without a position table the row is copied exactly.
    EXPECT_EQ(std::vector<double>(out_nopos.begin(), out_nopos.end()), ref_nopos);
  }
}

TEST(EmbeddingBackward, MatchesDoubleReference) {
  const int64_t N = 50, C = 37, V = 7, P = 6;  // 50 tokens over 7 ids: many repeats
  const auto tokens = make_tokens(N, 0, V, 4);
  const auto positions = make_positions(N, P);
  const auto dout = random_normal(N * C, 5);
  std::vector<float> dwte(V * C, 0.0f), dwpe(P * C, 0.0f);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), positions.data(), N, C,
                     0, V);
  std::vector<double> ref_wte(V * C, 0.0), ref_wpe(P * C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      ref_wte[tokens[n] * C + c] += dout[n * C + c];
      ref_wpe[positions[n] * C + c] += dout[n * C + c];
    }
  }
  // Sums of <= 50 fp32 terms: a few ulp of the largest partial sum.
  EXPECT_LT(max_scaled_error(dwte, ref_wte), 1e-6);
  EXPECT_LT(max_scaled_error(dwpe, ref_wpe), 1e-6);
}

TEST(EmbeddingBackward, MatchesFiniteDifferences) {
  const int64_t N = 9, C = 19, V = 5, P = 4;
  const auto tokens = make_tokens(N, 0, V, 6);
  const auto positions = make_positions(N, P);
  auto wte = random_normal(V * C, 7), wpe = random_normal(P * C, 8);
  const auto probe = random_normal(N * C, 9);
  std::vector<float> out(N * C);
  auto loss = [&] {
    embedding_forward(out.data(), tokens.data(), positions.data(), wte.data(), wpe.data(), N, C, 0,
                      V);
    return dot(out, probe);
  };
  std::vector<float> dwte(V * C, 0.0f), dwpe(P * C, 0.0f);
  embedding_backward(dwte.data(), dwpe.data(), probe.data(), tokens.data(), positions.data(), N, C,
                     0, V);
  // The loss is linear in the tables, so central differences have no truncation error; only
  // fp32 rounding of the outputs (~eps_f32 |out| / h ~ 1e-5) remains. 1e-3 is ample.
  EXPECT_LT(max_scaled_error(dwte, finite_difference(wte, loss, 1e-2)), 1e-3);
  EXPECT_LT(max_scaled_error(dwpe, finite_difference(wpe, loss, 1e-2)), 1e-3);
}

// A vocab-parallel rank owns rows [vocab_start, vocab_start + V): tokens outside give zero rows
// and no gradient, so the ranks' outputs sum to the single-process output and their gradients
// are the matching rows of the single-process gradient.
TEST(EmbeddingVocabRange, HalvesSumToFull) {
  const int64_t N = 40, C = 21, V = 20, half = 10;
  const auto tokens = make_tokens(N, 0, V, 10);
  const auto wte = random_normal(V * C, 11);
  const auto dout = random_normal(N * C, 12);
  const float* no_wpe = nullptr;
  std::vector<float> full(N * C), lo(N * C), hi(N * C);
  embedding_forward(full.data(), tokens.data(), nullptr, wte.data(), no_wpe, N, C, 0, V);
  embedding_forward(lo.data(), tokens.data(), nullptr, wte.data(), no_wpe, N, C, 0, half);
  embedding_forward(hi.data(), tokens.data(), nullptr, wte.data() + half * C, no_wpe, N, C, half,
                    V - half);
  for (int64_t n = 0; n < N; ++n) {
    const bool in_lo = tokens[n] < half;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = n * C + c;
      EXPECT_EQ(in_lo ? hi[i] : lo[i], 0.0f);  // the other rank's token: zero row
      EXPECT_EQ(lo[i] + hi[i], full[i]);
    }
  }

  std::vector<float> dfull(V * C, 0.0f), dlo(half * C, 0.0f), dhi((V - half) * C, 0.0f);
  embedding_backward(dfull.data(), nullptr, dout.data(), tokens.data(), nullptr, N, C, 0, V);
  embedding_backward(dlo.data(), nullptr, dout.data(), tokens.data(), nullptr, N, C, 0, half);
  embedding_backward(dhi.data(), nullptr, dout.data(), tokens.data(), nullptr, N, C, half,
                     V - half);
  EXPECT_EQ(dlo, std::vector<float>(dfull.begin(), dfull.begin() + half * C));
  EXPECT_EQ(dhi, std::vector<float>(dfull.begin() + half * C, dfull.end()));
}

// dwte/dwpe accumulate (+=), and every element is summed in token order whatever the thread
// count, so the result is bitwise the same for 1, 2 or 3 threads.
TEST(EmbeddingBackward, AccumulatesDeterministically) {
  const int64_t N = 256, C = 100, V = 9, P = 16;  // N * C above the parallel threshold
  const auto tokens = make_tokens(N, 0, V, 13);
  const auto positions = make_positions(N, P);
  const auto dout = random_normal(N * C, 14);
  auto run = [&](int threads, int calls, std::vector<float>* dwte, std::vector<float>* dwpe) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    dwte->assign(V * C, 0.0f);
    dwpe->assign(P * C, 0.0f);
    for (int i = 0; i < calls; ++i)
      embedding_backward(dwte->data(), dwpe->data(), dout.data(), tokens.data(), positions.data(),
                         N, C, 0, V);
    omp_set_num_threads(saved);
  };
  std::vector<float> dwte1, dwpe1, dwte2, dwpe2, dwte3, dwpe3;
  run(1, 1, &dwte1, &dwpe1);
  run(2, 1, &dwte2, &dwpe2);
  run(3, 2, &dwte3, &dwpe3);
  EXPECT_EQ(dwte1, dwte2);
  EXPECT_EQ(dwpe1, dwpe2);
  // Each token's row is added straight into dwte, so the second call continues the running
  // sums: 2x up to fp32 rounding of ~N/V additions (not bitwise, unlike the norms' weights).
  std::vector<float> twice_wte(dwte1), twice_wpe(dwpe1);
  for (float& v : twice_wte) v *= 2.0f;
  for (float& v : twice_wpe) v *= 2.0f;
  EXPECT_LT(max_scaled_error(dwte3, twice_wte), 1e-6);
  EXPECT_LT(max_scaled_error(dwpe3, twice_wpe), 1e-6);
}

TEST(EmbeddingBf16, MatchesFp32) {
  const int64_t N = 30, C = 45, V = 6, P = 5;
  const auto tokens = make_tokens(N, 0, V, 15);
  const auto positions = make_positions(N, P);
  const auto wte = random_normal(V * C, 16), wpe = random_normal(P * C, 17);
  const auto dout = random_normal(N * C, 18);
  const auto wter = round_to_bf16(wte), wper = round_to_bf16(wpe), doutr = round_to_bf16(dout);

  std::vector<float> out(N * C), out_r(N * C);
  embedding_forward(out.data(), tokens.data(), positions.data(), wte.data(), wpe.data(), N, C, 0,
                    V);
  embedding_forward(out_r.data(), tokens.data(), positions.data(), wter.data(), wper.data(), N, C,
                    0, V);
  std::vector<float> dwte(V * C, 0.0f), dwpe(P * C, 0.0f), dwte_r(V * C, 0.0f), dwpe_r(P * C, 0.0f);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), positions.data(), N, C,
                     0, V);
  embedding_backward(dwte_r.data(), dwpe_r.data(), doutr.data(), tokens.data(), positions.data(), N,
                     C, 0, V);

  const auto wteb = to_bf16(wte), wpeb = to_bf16(wpe), doutb = to_bf16(dout);
  std::vector<bf16> outb(N * C);
  std::vector<float> dwteb(V * C, 0.0f), dwpeb(P * C, 0.0f);
  embedding_forward(outb.data(), tokens.data(), positions.data(), wteb.data(), wpeb.data(), N, C, 0,
                    V);
  embedding_backward(dwteb.data(), dwpeb.data(), doutb.data(), tokens.data(), positions.data(), N,
                     C, 0, V);
  // Each table entry and dout value is rounded to bf16 (8 significant bits: up to 2^-8 ~ 4e-3
  // relative), and the output once more (measured 1.7e-3 .. 3.8e-3 of the fp32 scale). 2e-2
  // leaves a ~5x margin and still catches a wrong conversion.
  EXPECT_LT(max_scaled_error(to_float(outb), out), 2e-2);
  EXPECT_LT(max_scaled_error(dwteb, dwte), 2e-2);
  EXPECT_LT(max_scaled_error(dwpeb, dwpe), 2e-2);
  // fp32 arithmetic whatever T: exactly the fp32 kernel on the same (rounded) values.
  EXPECT_EQ(to_float(outb), round_to_bf16(out_r));
  EXPECT_EQ(dwteb, dwte_r);
  EXPECT_EQ(dwpeb, dwpe_r);
}

}  // namespace
}  // namespace tessera::kernels
