// Tensor-parallel building blocks under MPI, with TP = the world size: the region mappings
// (against hand-computed expectations), vocab-parallel cross-entropy (against the single-process
// kernel on the full logits, padded vocabulary and masked rows included) and a column-parallel
// linear followed by a row-parallel linear (against the single-process two-layer result, forward
// and backward). Every rank builds the same full inputs from fixed seeds and takes its shard, so
// the single-process reference is computed on every rank without communication.
// ranks: 1 2 4
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist_main.h"
#include "tessera/comm/parallel_state.h"
#include "tessera/comm/process_group.h"
#include "tessera/core/error.h"
#include "tessera/core/tensor.h"
#include "tessera/kernels/cross_entropy.h"
#include "tessera/kernels/linear.h"
#include "tessera/parallel/mappings.h"
#include "tessera/parallel/vocab_parallel_cross_entropy.h"
#include "testing/numeric.h"

namespace tessera::parallel {
namespace {

using comm::OpType;
using comm::ProcessGroup;
using testing::max_scaled_error;
using testing::random_normal;

Tensor f32_tensor(const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}
std::vector<float> to_vector(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

// ---------------------------------------------------------------------------------------------
// Sequence/tensor-parallel mappings

// Element i of rank r's input: multiples of 1/4 in [-2, 2], exact in fp32 and bf16, and so are
// their sums over <= 4 ranks, so every expectation below is exact and compared with ==.
float value(int r, int64_t i) { return 0.25f * static_cast<float>((r * 31 + i * 7) % 17 - 8); }

// Element i summed over the n ranks' inputs (exact, see value()).
float summed(int n, int64_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += value(r, i);
  return s;
}

Tensor rank_input(DType d, int r, const Shape& shape, int64_t offset = 0) {
  Tensor f = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = value(r, offset + i);
  return d == DType::kF32 ? f : f.to(d, MemoryCategory::kActivations);
}

std::vector<float> as_f32(const Tensor& t) {
  return to_vector(t.dtype() == DType::kF32 ? t : t.to(DType::kF32, MemoryCategory::kOther));
}

TEST(TensorParallelMappings, AllReduceMappings) {
  const auto mesh = testing::tensor_parallel_world_mesh();
  ProcessGroup& tp = *mesh->group(comm::GroupKind::kTensor);
  const int n = tp.size(), me = tp.rank();
  for (DType d : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(d));
    const Shape shape = {3, 5};
    Tensor x = rank_input(d, me, shape);
    EXPECT_EQ(copy_to_tp_region_forward(x, tp).raw(), x.raw());  // identity: same storage

    tp.reset_stats();
    Tensor y = reduce_from_tp_region_forward(rank_input(d, me, shape), tp);
    Tensor dx = copy_to_tp_region_backward(rank_input(d, me, shape, 100), tp);
    EXPECT_EQ(tp.stats().calls_of(OpType::kAllReduce), n > 1 ? 2 : 0);
    // 15 elements each, handed to MPI as fp32 whatever the dtype (16-bit sums accumulate in fp32).
    EXPECT_EQ(tp.stats().sent_bytes_of(OpType::kAllReduce), n > 1 ? 2 * 15 * 4 : 0);
    const std::vector<float> yv = as_f32(y), dxv = as_f32(dx);
    for (int64_t i = 0; i < 15; ++i) {
      EXPECT_EQ(yv[i], summed(n, i)) << i;
      EXPECT_EQ(dxv[i], summed(n, 100 + i)) << i;
    }
    Tensor dy = rank_input(d, me, shape);
    EXPECT_EQ(reduce_from_tp_region_backward(dy, tp).raw(), dy.raw());
  }
}

// SixteenBitSums::kInOwnType (--tp-reduce-in-16-bit): 16-bit tensors are sent and summed in their
// own type, two bytes an element (the sums here are exact in bf16 and fp16 alike); fp32 tensors
// are unaffected.
TEST(TensorParallelMappings, SixteenBitSumsInTheirOwnType) {
  const auto mesh = testing::tensor_parallel_world_mesh();
  ProcessGroup& tp = *mesh->group(comm::GroupKind::kTensor);
  const int n = tp.size(), me = tp.rank();
  if (n == 1) GTEST_SKIP() << "no sums at one rank";
  const SixteenBitSums own = SixteenBitSums::kInOwnType;
  for (DType d : {DType::kBF16, DType::kF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(d));
    const int64_t element = d == DType::kF32 ? 4 : 2;
    tp.reset_stats();
    Tensor y = reduce_from_tp_region_forward(rank_input(d, me, {3, 5}), tp, own);
    Tensor dx = copy_to_tp_region_backward(rank_input(d, me, {3, 5}, 100), tp, own);
    EXPECT_EQ(tp.stats().sent_bytes_of(OpType::kAllReduce), 2 * 15 * element);
    // Sequence parallelism: 2 samples of 2n tokens of width 3 reduce-scattered.
    const Shape full = {2 * 2 * n, 3};
    Tensor part =
        reduce_scatter_to_sequence_parallel_region_forward(rank_input(d, me, full), tp, 2, own);
    Tensor dpart =
        gather_from_sequence_parallel_region_backward(rank_input(d, me, full, 50), tp, 2, own);
    EXPECT_EQ(tp.stats().sent_bytes_of(OpType::kReduceScatter), 2 * 2 * 2 * n * 3 * element);
    const std::vector<float> yv = as_f32(y), dxv = as_f32(dx), pv = as_f32(part),
                             dpv = as_f32(dpart);
    for (int64_t i = 0; i < 15; ++i) {
      EXPECT_EQ(yv[i], summed(n, i)) << i;
      EXPECT_EQ(dxv[i], summed(n, 100 + i)) << i;
    }
    // This rank's 2 tokens of each sample: rows b * 2n + 2 me + t of the full tensor.
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 0; t < 2; ++t)
        for (int64_t c = 0; c < 3; ++c) {
          const int64_t at = ((b * 2 * n) + 2 * me + t) * 3 + c, got = (b * 2 + t) * 3 + c;
          EXPECT_EQ(pv[got], summed(n, at)) << at;
          EXPECT_EQ(dpv[got], summed(n, 50 + at)) << at;
        }
  }
}

TEST(TensorParallelMappings, SequenceParallelRoundTrip) {
  const auto mesh = testing::tensor_parallel_world_mesh();
  ProcessGroup& tp = *mesh->group(comm::GroupKind::kTensor);
  const int n = tp.size(), me = tp.rank();
  const int64_t S_local = 3, H = 5, slice = S_local * H;
  for (DType d : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(d));
    // Forward gather: rows [r*S_local, (r+1)*S_local) of the full tensor are rank r's slice.
    Tensor x = rank_input(d, me, {S_local, H});
    Tensor full = gather_from_sequence_parallel_region_forward(x, tp);
    ASSERT_EQ(full.shape(), (Shape{n * S_local, H}));
    const std::vector<float> fv = as_f32(full);
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < slice; ++i) EXPECT_EQ(fv[r * slice + i], value(r, i));

    // Backward of the gather with a constant gradient (rank r holds r+1 everywhere): every
    // element of the returned slice is the sum 1 + 2 + ... + n.
    Tensor dfull = Tensor::empty({n * S_local, H}, DType::kF32);
    for (int64_t i = 0; i < dfull.numel(); ++i) dfull.data<float>()[i] = float(me + 1);
    if (d != DType::kF32) dfull = dfull.to(d, MemoryCategory::kActivations);
    Tensor dx = gather_from_sequence_parallel_region_backward(dfull, tp);
    ASSERT_EQ(dx.shape(), (Shape{S_local, H}));
    for (float v : as_f32(dx)) EXPECT_EQ(v, float(n * (n + 1) / 2));

    // Round trip: the gathered tensor is identical on every rank, so reduce-scattering it as a
    // partial output gives n times this rank's own slice.
    Tensor back = reduce_scatter_to_sequence_parallel_region_forward(full, tp);
    ASSERT_EQ(back.shape(), (Shape{S_local, H}));
    const std::vector<float> bv = as_f32(back);
    for (int64_t i = 0; i < slice; ++i) EXPECT_EQ(bv[i], float(n) * value(me, i));

    // Reduce-scatter of distinct inputs: this rank's slice of the sum over ranks.
    Tensor partial = rank_input(d, me, {n * S_local, H}, 7);
    const std::vector<float> rv =
        as_f32(reduce_scatter_to_sequence_parallel_region_forward(partial, tp));
    for (int64_t i = 0; i < slice; ++i) EXPECT_EQ(rv[i], summed(n, 7 + me * slice + i)) << i;
    // Its backward is the all-gather of the slices' gradients.
    Tensor dslice = rank_input(d, me, {S_local, H}, 50);
    Tensor dpartial = reduce_scatter_to_sequence_parallel_region_backward(dslice, tp);
    ASSERT_EQ(dpartial.shape(), (Shape{n * S_local, H}));
    const std::vector<float> dv = as_f32(dpartial);
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < slice; ++i) EXPECT_EQ(dv[r * slice + i], value(r, 50 + i));
  }
  if (n > 1) {
    // A dim 0 that does not split evenly is refused on every rank before anything is issued.
    Tensor odd = Tensor::zeros({n * S_local + 1, H}, DType::kF32);
    EXPECT_THROW(reduce_scatter_to_sequence_parallel_region_forward(odd, tp), Error);
    EXPECT_THROW(gather_from_sequence_parallel_region_backward(odd, tp), Error);
  }
}

// ---------------------------------------------------------------------------------------------
// Vocab-parallel cross-entropy

struct CeCase {
  int64_t N;
  int64_t V_real;
  int64_t divisible_by;  // --make-vocab-size-divisible-by: V is padded to a multiple of it x TP
};

// Runs the vocab-parallel loss on this rank's shard and the kernel on the full logits, for T in
// {float, bf16}; returns nothing, asserts inside.
template <typename T>
void check_vocab_parallel_ce(const CeCase& c, double loss_tol, double dlogits_tol) {
  const auto mesh = testing::tensor_parallel_world_mesh();
  ProcessGroup& tp = *mesh->group(comm::GroupKind::kTensor);
  const int n = tp.size(), me = tp.rank();
  const int64_t unit = c.divisible_by * n;
  const int64_t V = (c.V_real + unit - 1) / unit * unit;
  const int64_t V_local = V / n, vocab_start = me * V_local;
  const int64_t N = c.N;
  SCOPED_TRACE("N " + std::to_string(N) + " V_real " + std::to_string(c.V_real) + " V " +
               std::to_string(V) + " TP " + std::to_string(n));

  // Full logits with padded columns set to a large value: if padding leaked into the softmax
  // the loss would be off by O(1).
  std::vector<float> full = random_normal(N * V, 11, 2.0f);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t v = c.V_real; v < V; ++v) full[r * V + v] = 30.0f;
  std::vector<int32_t> targets(N);
  std::vector<float> mask(N);
  for (int64_t r = 0; r < N; ++r) {
    // Targets spread over the whole real vocabulary (every rank owns some; the last real id too).
    targets[r] = r == 0 ? int32_t(c.V_real - 1) : int32_t((r * 7919) % c.V_real);
    mask[r] = r % 4 == 3 ? 0.0f : (r % 4 == 1 ? 0.5f : 1.0f);
    if (mask[r] == 0.0f) targets[r] = -1;  // masked rows must not be read
  }
  const float grad_scale = 0.25f;

  std::vector<T> full_t(N * V);
  for (int64_t i = 0; i < N * V; ++i) full_t[i] = from_f32<T>(full[i]);
  std::vector<float> ref_losses(N);
  std::vector<T> ref_d(N * V);
  kernels::cross_entropy_forward_backward<T>(ref_losses.data(), ref_d.data(), full_t.data(),
                                             targets.data(), mask.data(), N, V, c.V_real,
                                             grad_scale);

  std::vector<T> shard(N * V_local);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t v = 0; v < V_local; ++v) shard[r * V_local + v] = full_t[r * V + vocab_start + v];
  std::vector<float> losses(N);
  std::vector<T> d(N * V_local);
  tp.reset_stats();
  vocab_parallel_cross_entropy_forward_backward<T>(losses.data(), d.data(), shard.data(),
                                                   targets.data(), mask.data(), N, vocab_start,
                                                   V_local, c.V_real, grad_scale, tp);
  // Three small all-reduces (N fp32 values whatever T) and nothing else: the logits are never
  // gathered.
  const comm::CommStats st = tp.stats();
  int64_t calls = 0;
  for (int64_t k : st.calls) calls += k;
  EXPECT_EQ(st.calls_of(OpType::kAllReduce), n > 1 ? 3 : 0);
  EXPECT_EQ(calls, st.calls_of(OpType::kAllReduce));
  EXPECT_EQ(st.sent_bytes_of(OpType::kAllReduce), n > 1 ? 3 * N * 4 : 0);  // N fp32 each

  EXPECT_LE(max_scaled_error(losses, ref_losses), loss_tol);
  std::vector<float> d_f(N * V_local), ref_slice(N * V_local);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t v = 0; v < V_local; ++v) {
      d_f[r * V_local + v] = to_f32(d[r * V_local + v]);
      ref_slice[r * V_local + v] = to_f32(ref_d[r * V + vocab_start + v]);
    }
  EXPECT_LE(max_scaled_error(d_f, ref_slice), dlogits_tol);
  for (int64_t r = 0; r < N; ++r) {
    if (mask[r] == 0.0f) {
      EXPECT_EQ(losses[r], 0.0f) << r;
    }
    for (int64_t v = 0; v < V_local; ++v) {
      const bool padded = vocab_start + v >= c.V_real;
      if (padded || mask[r] == 0.0f) {
        EXPECT_EQ(to_f32(d[r * V_local + v]), 0.0f) << r << "," << v;
      }
    }
  }

  // In place (dlogits aliasing logits) gives the same bits; without dlogits, the same losses.
  std::vector<T> inplace = shard;
  std::vector<float> losses2(N), losses3(N);
  vocab_parallel_cross_entropy_forward_backward<T>(losses2.data(), inplace.data(), inplace.data(),
                                                   targets.data(), mask.data(), N, vocab_start,
                                                   V_local, c.V_real, grad_scale, tp);
  vocab_parallel_cross_entropy_forward_backward<T>(losses3.data(), static_cast<T*>(nullptr),
                                                   shard.data(), targets.data(), mask.data(), N,
                                                   vocab_start, V_local, c.V_real, grad_scale, tp);
  for (int64_t i = 0; i < N * V_local; ++i) EXPECT_EQ(to_f32(inplace[i]), to_f32(d[i])) << i;
  EXPECT_EQ(losses2, losses);
  EXPECT_EQ(losses3, losses);
}

// Sizes: V_real 37 with 4 x TP padding puts real and padded columns in one shard (TP 4: 48
// columns, the last shard has 1 real column); V_real 5 with 2 x TP padding gives TP 4 a shard
// made only of padding; 53 rows with 131 ids exercise tails.
const std::vector<CeCase> kCeCases = {{9, 37, 4}, {6, 5, 2}, {53, 131, 8}, {8, 64, 16}};

TEST(VocabParallelCrossEntropy, MatchesKernelF32) {
  // Same fp32 math and the same vector exp as the kernel from the same inputs; the exp-sum is
  // split over the shards and summed across ranks: a few fp32 ulps.
  for (const CeCase& c : kCeCases) check_vocab_parallel_ce<float>(c, 1e-6, 1e-6);
}

TEST(VocabParallelCrossEntropy, MatchesKernelBf16) {
  // Identical bf16 inputs and fp32 arithmetic: losses agree to fp32 rounding (1e-6). Each
  // gradient entry is the bf16 rounding of fp32 values that agree to ~1e-7 relative, so it can
  // land one bf16 ulp (2^-8 of the entry, at most 2^-8 of the row's largest) away: 4e-3.
  for (const CeCase& c : kCeCases) check_vocab_parallel_ce<bf16>(c, 1e-6, 4e-3);
}

// ---------------------------------------------------------------------------------------------
// Column-parallel linear -> row-parallel linear (the MLP / attention pattern)

TEST(TensorParallelLinear, ColumnThenRowMatchesSingleProcess) {
  const auto mesh = testing::tensor_parallel_world_mesh();
  ProcessGroup& tp = *mesh->group(comm::GroupKind::kTensor);
  const int n = tp.size(), me = tp.rank();
  // F splits over 1, 2 and 4 ranks; C, OC and N are not multiples of 16.
  const int64_t N = 5, C = 7, F = 20, OC = 9;
  const int64_t F_local = F / n, f0 = me * F_local;

  const std::vector<float> x = random_normal(N * C, 21);
  const std::vector<float> w1 = random_normal(F * C, 22, 0.4f);   // (F, C)
  const std::vector<float> b1 = random_normal(F, 23, 0.1f);       // (F)
  const std::vector<float> w2 = random_normal(OC * F, 24, 0.3f);  // (OC, F)
  const std::vector<float> dy = random_normal(N * OC, 25);        // probe: dloss/dy

  // Single process.
  std::vector<float> h(N * F), y(N * OC), dh(N * F), dx(N * C);
  std::vector<float> dw1(F * C, 0.0f), db1(F, 0.0f), dw2(OC * F, 0.0f);
  kernels::linear_forward<float>(h.data(), x.data(), w1.data(), b1.data(), N, C, F);
  kernels::linear_forward<float>(y.data(), h.data(), w2.data(), nullptr, N, F, OC);
  kernels::linear_backward<float>(dh.data(), dw2.data(), nullptr, dy.data(), h.data(), w2.data(), N,
                                  F, OC);
  kernels::linear_backward<float>(dx.data(), dw1.data(), db1.data(), dh.data(), x.data(), w1.data(),
                                  N, C, F);

  // This rank's shards: column-parallel weight rows [f0, f0 + F_local) (and bias entries),
  // row-parallel weight columns [f0, f0 + F_local).
  std::vector<float> w1_s(w1.begin() + f0 * C, w1.begin() + (f0 + F_local) * C);
  std::vector<float> b1_s(b1.begin() + f0, b1.begin() + f0 + F_local);
  std::vector<float> w2_s(OC * F_local);
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t f = 0; f < F_local; ++f) w2_s[o * F_local + f] = w2[o * F + f0 + f];

  // Forward.
  Tensor x_t = copy_to_tp_region_forward(f32_tensor(x, {N, C}), tp);
  std::vector<float> h_s(N * F_local);
  kernels::linear_forward<float>(h_s.data(), x_t.data<float>(), w1_s.data(), b1_s.data(), N, C,
                                 F_local);
  Tensor y_t = Tensor::empty({N, OC}, DType::kF32);
  // The row layer's bias (none here) would be added after the reduction, once.
  kernels::linear_forward<float>(y_t.data<float>(), h_s.data(), w2_s.data(), nullptr, N, F_local,
                                 OC);
  y_t = reduce_from_tp_region_forward(y_t, tp);

  // Backward.
  Tensor dy_t = reduce_from_tp_region_backward(f32_tensor(dy, {N, OC}), tp);
  std::vector<float> dh_s(N * F_local), dw1_s(F_local * C, 0.0f), db1_s(F_local, 0.0f),
      dw2_s(OC * F_local, 0.0f);
  kernels::linear_backward<float>(dh_s.data(), dw2_s.data(), nullptr, dy_t.data<float>(),
                                  h_s.data(), w2_s.data(), N, F_local, OC);
  Tensor dx_t = Tensor::empty({N, C}, DType::kF32);
  kernels::linear_backward<float>(dx_t.data<float>(), dw1_s.data(), db1_s.data(), dh_s.data(),
                                  x_t.data<float>(), w1_s.data(), N, C, F_local);
  dx_t = copy_to_tp_region_backward(dx_t, tp);

  // GEMMs over split sums differ from the full GEMM only in fp32 summation order: ~1e-7.
  constexpr double kTol = 1e-5;
  EXPECT_LE(max_scaled_error(to_vector(y_t), y), kTol);
  EXPECT_LE(max_scaled_error(to_vector(dx_t), dx), kTol);
  const std::vector<float> dw1_ref(dw1.begin() + f0 * C, dw1.begin() + (f0 + F_local) * C);
  const std::vector<float> db1_ref(db1.begin() + f0, db1.begin() + f0 + F_local);
  std::vector<float> dw2_ref(OC * F_local);
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t f = 0; f < F_local; ++f) dw2_ref[o * F_local + f] = dw2[o * F + f0 + f];
  EXPECT_LE(max_scaled_error(dw1_s, dw1_ref), kTol);
  EXPECT_LE(max_scaled_error(db1_s, db1_ref), kTol);
  EXPECT_LE(max_scaled_error(dw2_s, dw2_ref), kTol);
}

}  // namespace
}  // namespace tessera::parallel

int main(int argc, char** argv) {
  tessera::comm::ProcessGroup::set_check_collectives(true);
  // A failing test may leave ranks out of step; the watchdog then ends the job in a minute.
  tessera::comm::ProcessGroup::set_timeout(60);
  return tessera::testing::run_distributed_tests(argc, argv);
}
