#include "tessera/comm/sixteen_bit_reduction.h"

#include <algorithm>
#include <array>

#include "tessera/comm/pair_reduction.h"
#include "tessera/core/error.h"
#include "tessera/core/tensor.h"
#include "tessera/kernels/elementwise.h"

namespace tessera::comm {

int64_t sixteen_bit_reduction_scratch_bytes(OpType op, int n, int64_t numel) {
  if (numel <= 0) return 0;
  if (op == OpType::kAllReduce) return 2 * std::min(numel, kSixteenBitPieceElements);
  TESSERA_CHECK_MSG(op == OpType::kReduceScatter && n > 0 && numel % n == 0,
                    "sixteen_bit_reduction_scratch_bytes: an all_reduce or a reduce_scatter whose "
                    "input splits into n blocks");
  const int64_t block = std::min(numel / n, std::max<int64_t>(1, kSixteenBitPieceElements / n));
  return 2 * (int64_t{n} * block + block);  // the pieces of the n blocks, and this rank's result
}

namespace detail {
namespace {

// MPI_User_function: inout[i] = in[i] + inout[i] in fp32, rounded once to T (kernels::add: the
// vectorised widen, add and round to nearest even), or the larger of the two (exact).
template <typename T>
void sum(void* in, void* inout, int* len, MPI_Datatype*) {
  kernels::add(static_cast<T*>(inout), static_cast<const T*>(in), static_cast<const T*>(inout),
               *len);
}
template <typename T>
void max(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i)
    if (to_f32(a[i]) > to_f32(b[i])) b[i] = a[i];
}

// Rounds n floats into a 16-bit buffer of `dtype`, or widens one back.
void to_sixteen_bits(void* out, const float* in, int64_t n, DType dtype) {
  if (dtype == DType::kBF16)
    kernels::round_from_f32(static_cast<bf16*>(out), in, n);
  else
    kernels::round_from_f32(static_cast<fp16*>(out), in, n);
}
void from_sixteen_bits(float* out, const void* in, int64_t n, DType dtype) {
  if (dtype == DType::kBF16)
    kernels::widen_to_f32(out, static_cast<const bf16*>(in), n);
  else
    kernels::widen_to_f32(out, static_cast<const fp16*>(in), n);
}

char* at(void* base, int64_t elements) { return static_cast<char*>(base) + 2 * elements; }

}  // namespace

MPI_Op sixteen_bit_op(DType dtype, ReduceOp op) {
  TESSERA_CHECK_MSG(dtype == DType::kBF16 || dtype == DType::kF16,
                    "sixteen_bit_op: bf16 or fp16 only");
  static const std::array<MPI_Op, 4> ops = [] {
    std::array<MPI_Op, 4> made{};
    MPI_Op_create(&sum<bf16>, 1, &made[0]);
    MPI_Op_create(&max<bf16>, 1, &made[1]);
    MPI_Op_create(&sum<fp16>, 1, &made[2]);
    MPI_Op_create(&max<fp16>, 1, &made[3]);
    return made;
  }();
  return ops[(dtype == DType::kF16 ? 2 : 0) + (op == ReduceOp::kMax ? 1 : 0)];
}

// Two ranks' sums of 1 MiB or more go through the pair exchanges (pair_reduction.h) where the
// fp32 ones do: the all-reduce between hosts, the reduce-scatter always. Counted as the MPI call.
void all_reduce_sixteen_bit(Counters& c, void* buf, int count, DType dtype, ReduceOp op, int n,
                            MPI_Comm comm) {
  if (op == ReduceOp::kSum && sixteen_bit_pair_applies(n, count) && pair_spans_hosts(comm)) {
    c.call(OpType::kAllReduce, 2 * int64_t{count}, 2 * int64_t{count});
    return pair_all_reduce_sum(buf, count, dtype, comm);
  }
  counted_allreduce(c, buf, count, MPI_UINT16_T, sixteen_bit_op(dtype, op), n, comm);
}

void reduce_scatter_sixteen_bit(Counters& c, const void* in, void* out, int count, DType dtype,
                                ReduceOp op, int n, MPI_Comm comm) {
  if (op == ReduceOp::kSum && sixteen_bit_pair_applies(n, count)) {
    c.call(OpType::kReduceScatter, 2 * int64_t{n} * count, 2 * int64_t{count});
    return pair_reduce_scatter_sum(in, out, count, dtype, comm);
  }
  counted_reduce_scatter(c, in, out, count, MPI_UINT16_T, sixteen_bit_op(dtype, op), n, comm);
}

void all_reduce_fp32_in_sixteen_bits(Counters& c, float* data, int64_t count, DType sum_dtype,
                                     ReduceOp op, int n, MPI_Comm comm) {
  if (count == 0) return;
  const int64_t piece = std::min(count, kSixteenBitPieceElements);
  Tensor copy = Tensor::empty({piece}, sum_dtype, MemoryCategory::kComm);
  for (int64_t i = 0; i < count; i += piece) {
    const int64_t m = std::min(piece, count - i);
    to_sixteen_bits(copy.raw(), data + i, m, sum_dtype);
    all_reduce_sixteen_bit(c, copy.raw(), static_cast<int>(m), sum_dtype, op, n, comm);
    from_sixteen_bits(data + i, copy.raw(), m, sum_dtype);
  }
}

void reduce_scatter_fp32_in_sixteen_bits(Counters& c, const float* in, float* out, int64_t count,
                                         DType sum_dtype, ReduceOp op, int n, MPI_Comm comm) {
  if (count == 0) return;
  // A piece takes the same columns of every member's block: n blocks of `block` elements.
  const int64_t block = std::min(count, std::max<int64_t>(1, kSixteenBitPieceElements / n));
  Tensor pieces = Tensor::empty({n * block}, sum_dtype, MemoryCategory::kComm);
  Tensor mine = Tensor::empty({block}, sum_dtype, MemoryCategory::kComm);
  for (int64_t j = 0; j < count; j += block) {
    const int64_t m = std::min(block, count - j);
    for (int r = 0; r < n; ++r)
      to_sixteen_bits(at(pieces.raw(), r * m), in + r * count + j, m, sum_dtype);
    reduce_scatter_sixteen_bit(c, pieces.raw(), mine.raw(), static_cast<int>(m), sum_dtype, op, n,
                               comm);
    from_sixteen_bits(out + j, mine.raw(), m, sum_dtype);
  }
}

}  // namespace detail
}  // namespace tessera::comm
