// ProcessGroup's reductions sent and summed in 16 bits (the `sum_dtype` overloads; contract in
// comm/process_group.h). References computed here from every rank's inputs, which each rank can
// regenerate: with two members each element must be round(round(a) + round(b)) exactly, for fp32
// tensors cut into pieces and for 16-bit tensors in place; with more, within the bound of one
// rounding per addition of the exact sum of the rounded inputs. Also: the bytes handed to MPI are
// half an fp32 reduction's, and the arguments it refuses.
// ranks: 2 3 4
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "dist_main.h"
#include "tessera/comm/pair_reduction.h"
#include "tessera/comm/process_group.h"
#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera::comm {
namespace {

// Rank r's input: normal values with a spread of magnitudes (their sums round in 16 bits).
std::vector<float> inputs_of(int rank, int64_t count) {
  std::mt19937 rng(static_cast<unsigned>(4000 + rank));
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 9) - 4);
  return v;
}

Tensor filled(int64_t n, float value) {
  Tensor t = Tensor::empty({n}, DType::kF32);
  std::fill(t.data<float>(), t.data<float>() + n, value);
  return t;
}

float round_to(DType d, float x) { return d == DType::kBF16 ? to_f32(bf16(x)) : to_f32(fp16(x)); }

// The unit roundoff of the 16-bit type: half its spacing at 1.
double unit_roundoff(DType d) { return d == DType::kBF16 ? 0x1p-8 : 0x1p-11; }

// Element i of the reduction over every member: exact (two members: the one rounding of the
// sum), or checked against the bound (n - 1) u sum|x| around the exact sum of the rounded inputs.
struct Checker {
  DType d;
  int n;
  int64_t count;  // elements a member holds (all_reduce) or contributes (reduce_scatter input)
  std::vector<std::vector<float>> all;
  Checker(DType dtype, int members, int64_t elements) : d(dtype), n(members), count(elements) {
    for (int r = 0; r < n; ++r) all.push_back(inputs_of(r, count));
  }
  // Wrong elements among got[0, m), element j of got being element `first + j` of the inputs.
  int64_t wrong(const float* got, int64_t first, int64_t m) const {
    int64_t bad = 0;
    for (int64_t j = 0; j < m; ++j) {
      const int64_t i = first + j;
      if (n == 2) {
        const float want = round_to(d, round_to(d, all[0][i]) + round_to(d, all[1][i]));
        bad += std::memcmp(&want, got + j, sizeof(float)) != 0;
        continue;
      }
      double exact = 0, magnitude = 0;
      for (int r = 0; r < n; ++r) {
        exact += round_to(d, all[r][i]);
        magnitude += std::fabs(round_to(d, all[r][i]));
      }
      const double bound = 1.01 * (n - 1) * unit_roundoff(d) * magnitude;
      bad += std::fabs(got[j] - exact) > bound || round_to(d, got[j]) != got[j];
    }
    return bad;
  }
};

const DType kSixteenBit[] = {DType::kBF16, DType::kF16};

TEST(SixteenBitReduction, AllReduceOfFp32InPiecesIsTheSixteenBitSum) {
  auto w = ProcessGroup::world();
  // A whole piece and a part: the pieces' edge must not show.
  const int64_t count = kSixteenBitPieceElements + 12345;
  for (DType d : kSixteenBit) {
    const Checker check(d, w->size(), count);
    Tensor t = Tensor::empty({count}, DType::kF32);
    std::memcpy(t.raw(), check.all[w->rank()].data(), count * sizeof(float));
    w->all_reduce(t, ReduceOp::kSum, d).wait();
    EXPECT_EQ(check.wrong(t.data<float>(), 0, count), 0) << dtype_name(d);
  }
}

TEST(SixteenBitReduction, ReduceScatterOfFp32InPiecesIsTheSixteenBitSum) {
  auto w = ProcessGroup::world();
  const int n = w->size();
  // A block longer than a piece's share of it, and one shorter.
  for (int64_t block : {kSixteenBitPieceElements / n + 777, int64_t{1001}}) {
    for (DType d : kSixteenBit) {
      const Checker check(d, n, n * block);
      Tensor in = Tensor::empty({n * block}, DType::kF32),
             out = Tensor::empty({block}, DType::kF32);
      std::memcpy(in.raw(), check.all[w->rank()].data(), n * block * sizeof(float));
      w->reduce_scatter(in, out, ReduceOp::kSum, d).wait();
      EXPECT_EQ(check.wrong(out.data<float>(), w->rank() * block, block), 0)
          << dtype_name(d) << ", block " << block;
    }
  }
}

TEST(SixteenBitReduction, SixteenBitTensorsReduceInTheirOwnType) {
  auto w = ProcessGroup::world();
  const int n = w->size();
  const int64_t block = 5003;
  for (DType d : kSixteenBit) {
    const Checker check(d, n, n * block);
    const std::vector<float>& mine = check.all[w->rank()];
    Tensor whole = Tensor::empty({n * block}, DType::kF32);
    std::memcpy(whole.raw(), mine.data(), n * block * sizeof(float));
    Tensor t = whole.to(d, MemoryCategory::kOther), in = whole.to(d, MemoryCategory::kOther);
    Tensor out = Tensor::empty({block}, d);
    w->all_reduce(t, ReduceOp::kSum, d).wait();
    w->reduce_scatter(in, out, ReduceOp::kSum, d).wait();
    const Tensor sum = t.to(DType::kF32, MemoryCategory::kOther);
    const Tensor part = out.to(DType::kF32, MemoryCategory::kOther);
    EXPECT_EQ(check.wrong(sum.data<float>(), 0, n * block), 0) << dtype_name(d);
    EXPECT_EQ(check.wrong(part.data<float>(), w->rank() * block, block), 0) << dtype_name(d);
  }
}

// What makes it a 16-bit sum: 1 plus a quarter of the spacing at 1 rounds back to 1, where the
// fp32 accumulation (ProcessGroup's default for 16-bit tensors) keeps it. Two members: one
// addition, so the order cannot matter.
TEST(SixteenBitReduction, PartialSumsRoundToSixteenBits) {
  auto w = ProcessGroup::world();
  if (w->size() != 2) GTEST_SKIP() << "one addition needs two members";
  for (DType d : kSixteenBit) {
    const float eps = 2 * static_cast<float>(unit_roundoff(d));
    Tensor t = filled(4, w->rank() == 0 ? 1.0f : 0.75f * eps);
    Tensor fp32_sum = t.clone(MemoryCategory::kOther);
    w->all_reduce(t, ReduceOp::kSum, d).wait();
    w->all_reduce(fp32_sum, ReduceOp::kSum).wait();
    // 1 + 0.75 eps: rounds up to 1 + eps in 16 bits; 0.75 eps itself is exact in either type.
    EXPECT_EQ(t.data<float>()[0], 1.0f + eps) << dtype_name(d);
    EXPECT_EQ(fp32_sum.data<float>()[0], 1.0f + 0.75f * eps) << dtype_name(d);
    Tensor small = filled(4, w->rank() == 0 ? 1.0f : 0.25f * eps);
    w->all_reduce(small, ReduceOp::kSum, d).wait();
    EXPECT_EQ(small.data<float>()[3], 1.0f) << dtype_name(d);
  }
}

// The two-rank all-reduce by exchange (comm/pair_reduction.h), which the runtime takes between
// hosts (cli.multihost trains with --grad-reduce-in-bf16 there, bitwise against one host): called
// directly here, on one host (each rank's values received whole), against round(round(a) +
// round(b)). (The two-rank reduce-scatter of 1 MiB or more takes
// the exchanges on one host too: ReduceScatterOfFp32InPiecesIsTheSixteenBitSum covers it.)
TEST(SixteenBitReduction, TwoRankAllReduceByExchange) {
  auto w = ProcessGroup::world();
  if (w->size() != 2) GTEST_SKIP() << "a pair";
  MPI_Comm pair = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &pair);
  const int64_t count = 3 * (detail::kPairChunkBytes / 2) + 999;  // chunks and a part
  for (DType d : kSixteenBit) {
    const Checker check(d, 2, count);
    Tensor t = Tensor::empty({count}, DType::kF32);
    std::memcpy(t.raw(), check.all[w->rank()].data(), count * sizeof(float));
    Tensor sixteen = t.to(d, MemoryCategory::kOther);
    detail::pair_all_reduce_sum(sixteen.raw(), count, d, pair);
    const Tensor sum = sixteen.to(DType::kF32, MemoryCategory::kOther);
    EXPECT_EQ(check.wrong(sum.data<float>(), 0, count), 0) << dtype_name(d);
  }
  // Not freed: the exchanges keep a duplicate keyed by the handle (pair_reduction.h).
}

TEST(SixteenBitReduction, MaxInSixteenBits) {
  auto w = ProcessGroup::world();
  Tensor t = filled(3, 1.0f + static_cast<float>(w->rank()) / 64);
  w->all_reduce(t, ReduceOp::kMax, DType::kBF16).wait();
  EXPECT_EQ(t.data<float>()[1], 1.0f + static_cast<float>(w->size() - 1) / 64);
}

// CommStats counts the buffers handed to MPI: the 16-bit copies, two bytes an element.
TEST(SixteenBitReduction, HandsMpiHalfTheBytes) {
  auto w = ProcessGroup::world();
  const int n = w->size();
  const int64_t count = 3 * kSixteenBitPieceElements / 2 / n * n;  // two pieces
  Tensor t = Tensor::zeros({count}, DType::kF32), out = Tensor::zeros({count / n}, DType::kF32);
  w->reset_stats();
  w->all_reduce(t, ReduceOp::kSum, DType::kBF16).wait();
  w->reduce_scatter(t, out, ReduceOp::kSum, DType::kF16).wait();
  const CommStats s = w->stats();
  EXPECT_EQ(s.sent_bytes_of(OpType::kAllReduce), 2 * count);
  EXPECT_EQ(s.calls_of(OpType::kAllReduce), 2);
  EXPECT_EQ(s.sent_bytes_of(OpType::kReduceScatter), 2 * count);
  EXPECT_EQ(s.received_bytes_of(OpType::kReduceScatter), 2 * count / n);
  EXPECT_EQ(sixteen_bit_reduction_scratch_bytes(OpType::kAllReduce, n, count),
            2 * kSixteenBitPieceElements);
  EXPECT_EQ(sixteen_bit_reduction_scratch_bytes(OpType::kReduceScatter, 4, 400), 2 * (400 + 100));
}

TEST(SixteenBitReduction, RefusesWhatItCannotSum) {
  auto w = ProcessGroup::world();
  Tensor b = Tensor::zeros({4}, DType::kBF16), i = Tensor::zeros({4}, DType::kI32);
  Tensor f = Tensor::zeros({4}, DType::kF32);
  EXPECT_THROW(w->all_reduce(b, ReduceOp::kSum, DType::kF16), Error);
  EXPECT_THROW(w->all_reduce(i, ReduceOp::kSum, DType::kBF16), Error);
  EXPECT_THROW(w->all_reduce(f, ReduceOp::kSum, DType::kI32), Error);
  Tensor out = Tensor::zeros({4}, DType::kF32);  // not 4 / n elements
  EXPECT_THROW(w->reduce_scatter(f, out, ReduceOp::kSum, DType::kBF16), Error);
}

}  // namespace
}  // namespace tessera::comm

int main(int argc, char** argv) {
  tessera::comm::ProcessGroup::world();
  tessera::comm::ProcessGroup::set_check_collectives(true);
  tessera::comm::ProcessGroup::set_timeout(60);
  return tessera::testing::run_distributed_tests(argc, argv);
}
