#include "tessera/kernels/attention_decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/kernels/cpu_target.h"
#include "testing/numeric.h"

namespace tessera::kernels {
namespace {

using testing::max_scaled_error;
using testing::random_normal;

// A sequence's keys and values in cache blocks of `bs` token rows, each row [k (KV HD) | v
// (KV HD)] as model/kv_cache_view.h lays them out, with q (rows, NH HD) for its new tokens.
struct Case {
  int NH, KV, HD;
  int64_t bs, past, rows, window;
};

template <typename T>
std::vector<T> stored(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = from_f32<T>(v[i]);
  return out;
}

// out[r, h HD + c] in double: softmax over the keys query r sees of (q . k) / sqrt(HD), times v.
std::vector<double> reference(const Case& c, const std::vector<float>& q,
                              const std::vector<float>& kv) {
  const int64_t O = int64_t{c.NH} * c.HD, kv_ld = 2 * int64_t{c.KV} * c.HD;
  std::vector<double> out(c.rows * O);
  for (int64_t r = 0; r < c.rows; ++r)
    for (int h = 0; h < c.NH; ++h) {
      const int g = h / (c.NH / c.KV);
      const int64_t pos = c.past + r,
                    first = c.window ? std::max<int64_t>(0, pos - c.window + 1) : 0;
      std::vector<double> s;
      for (int64_t t = first; t <= pos; ++t) {
        double d = 0;
        for (int i = 0; i < c.HD; ++i)
          d += double(q[r * O + h * c.HD + i]) * kv[t * kv_ld + g * c.HD + i];
        s.push_back(d / std::sqrt(double(c.HD)));
      }
      const double top = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - top));
      for (int i = 0; i < c.HD; ++i) {
        double acc = 0;
        for (int64_t t = first; t <= pos; ++t)
          acc += s[t - first] * kv[t * kv_ld + (c.KV + g) * c.HD + i];
        out[r * O + h * c.HD + i] = acc / sum;
      }
    }
  return out;
}

// The kernel's output for case c (q rounded to T, the cache to TC), widened to fp32.
template <typename T, typename TC = T>
std::vector<float> run(const Case& c, const std::vector<float>& q, const std::vector<float>& kv) {
  const int64_t O = int64_t{c.NH} * c.HD, kv_ld = 2 * int64_t{c.KV} * c.HD;
  const int64_t total = c.past + c.rows, nblocks = (total + c.bs - 1) / c.bs;
  // Blocks at scattered addresses, each its own allocation; the last one partly filled.
  std::vector<std::vector<TC>> blocks(nblocks, std::vector<TC>(c.bs * kv_ld));
  for (int64_t t = 0; t < total; ++t)
    for (int64_t i = 0; i < kv_ld; ++i)
      blocks[t / c.bs][(t % c.bs) * kv_ld + i] = from_f32<TC>(kv[t * kv_ld + i]);
  std::vector<const TC*> table;
  for (const auto& b : blocks) table.push_back(b.data());
  DecodeAttention a;
  a.rows = c.rows;
  a.past = c.past;
  a.block_size = c.bs;
  a.q_ld = O + 5;  // rows of q wider than its heads, as in the fused qkv
  a.o_ld = O;
  a.kv_ld = kv_ld;
  a.v_offset = int64_t{c.KV} * c.HD;
  a.NH = c.NH;
  a.KV = c.KV;
  a.HD = c.HD;
  a.window = c.window;
  std::vector<T> qs(c.rows * a.q_ld);
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t i = 0; i < O; ++i) qs[r * a.q_ld + i] = from_f32<T>(q[r * O + i]);
  std::vector<T> out(c.rows * O);
  attention_decode_forward(out.data(), qs.data(), table.data(), a);
  std::vector<float> widened(out.size());
  for (size_t i = 0; i < out.size(); ++i) widened[i] = to_f32(out[i]);
  return widened;
}

// Head dims with and without a vector tail, grouped and plain heads, blocks of odd sizes, one
// key (the first token), a window, several new rows, and enough work for the parallel loop.
constexpr Case kCases[] = {
    {2, 2, 16, 4, 0, 1, 0},  {4, 2, 19, 5, 17, 1, 0},     {4, 1, 8, 3, 10, 3, 0},
    {6, 3, 33, 7, 40, 2, 6}, {12, 12, 64, 16, 150, 1, 0}, {8, 2, 64, 16, 200, 4, 50},
};

template <typename T, typename TC = T>
void expect_matches_reference(double tolerance) {
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    const int64_t O = int64_t{c.NH} * c.HD, kv_ld = 2 * int64_t{c.KV} * c.HD;
    // Values as T stores them, so only the kernel's own arithmetic is measured.
    auto q = random_normal(c.rows * O, seed++, 2.0f),
         kv = random_normal((c.past + c.rows) * kv_ld, seed++);
    for (float& x : q) x = to_f32(from_f32<T>(x));
    for (float& x : kv) x = to_f32(from_f32<TC>(x));
    EXPECT_LT(max_scaled_error(run<T, TC>(c, q, kv), reference(c, q, kv)), tolerance)
        << "NH " << c.NH << " KV " << c.KV << " HD " << c.HD << " block " << c.bs << " past "
        << c.past << " rows " << c.rows << " window " << c.window;
  }
}

TEST(AttentionDecode, Fp32MatchesDoubleReference) {
  // fp32 dot products over HD <= 64 and sums over <= 204 keys of O(1) terms, fast_exp within
  // 2 ulp: a few 1e-7 of the output scale; 1e-5 is a wide margin, and a missing or extra key
  // moves outputs by 1e-3 or more.
  expect_matches_reference<float>(1e-5);
}

TEST(AttentionDecode, Bf16MatchesDoubleReference) {
  // fp32 arithmetic on exact bf16 inputs; the output's one rounding to bf16 is 2^-9 relative.
  expect_matches_reference<bf16>(4e-3);
}

// A cache of another type than the queries (--kv-cache-dtype): the keys and values are the
// cache type's values, widened exactly by the kernel, so the fp32 arithmetic's tolerance holds; a
// wrong widening of any code in play moves outputs by far more.
TEST(AttentionDecode, CachesOfOtherTypesMatchDoubleReference) {
  expect_matches_reference<float, fp8_e4m3>(1e-5);
  expect_matches_reference<float, fp8_e5m2>(1e-5);
  expect_matches_reference<float, bf16>(1e-5);
  expect_matches_reference<float, fp16>(1e-5);
  expect_matches_reference<bf16, fp8_e4m3>(4e-3);
  expect_matches_reference<fp16, fp8_e5m2>(4e-3);
}

TEST(AttentionDecode, EveryTargetMatchesTheBaseline) {
  // Targets differ only where multiply-adds are fused (baseline x86-64 has none): ulp-level.
  const Case c{8, 2, 40, 5, 60, 3, 0};
  const int64_t O = int64_t{c.NH} * c.HD, kv_ld = 2 * int64_t{c.KV} * c.HD;
  const auto q = random_normal(c.rows * O, 20), kv = random_normal((c.past + c.rows) * kv_ld, 21);
  std::vector<float> base;
  for (CpuTarget t : compiled_cpu_targets()) {
    if (!cpu_supports(t)) continue;
    ScopedCpuTarget scope(t);
    const auto out = run<float>(c, q, kv);
    if (base.empty()) {
      base = out;
      continue;
    }
    EXPECT_LT(max_scaled_error(out, base), 1e-5) << cpu_target_name(t);
  }
}

}  // namespace
}  // namespace tessera::kernels
