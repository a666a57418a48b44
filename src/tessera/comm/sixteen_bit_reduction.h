// Internal to comm/: the reductions ProcessGroup sends and sums in 16 bits (all_reduce and
// reduce_scatter given a bf16 or fp16 `sum_dtype`; the contract is process_group.h's).
//
// MPI has no 16-bit floating-point type, so the values travel as MPI_UINT16_T under a
// user-defined operation (MPI_Op_create) that widens both operands to fp32 (exact), adds them (or
// takes the larger) and rounds the result to nearest even: every partial sum MPI's algorithm forms
// is rounded to the 16-bit type, as NCCL's 16-bit reductions are. An fp32 tensor goes through
// 16-bit copies of at most kSixteenBitPieceElements elements at a time (one MPI call a piece), so
// its scratch stays under ~12 MiB whatever the tensor's size (sixteen_bit_reduction_scratch_bytes).
// Two ranks' sums of 1 MiB or more take the pair exchanges where fp32 ones do (pair_reduction.h).
// Nothing outside comm/ includes this header.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "tessera/comm/counted_mpi.h"
#include "tessera/comm/process_group.h"
#include "tessera/core/dtype.h"

namespace tessera::comm::detail {

// The operation on `dtype` (kBF16 or kF16) values carried as MPI_UINT16_T. Made on first use
// (MPI must be initialised); commutative, as a + b and b + a round alike.
MPI_Op sixteen_bit_op(DType dtype, ReduceOp op);

// In place: `count` elements of `dtype` (bf16 or fp16) at buf, reduced over the group of n.
void all_reduce_sixteen_bit(Counters& c, void* buf, int count, DType dtype, ReduceOp op, int n,
                            MPI_Comm comm);
// out (count elements of `dtype`) = this rank's block of the reduction of in (n * count).
void reduce_scatter_sixteen_bit(Counters& c, const void* in, void* out, int count, DType dtype,
                                ReduceOp op, int n, MPI_Comm comm);

// fp32 data reduced in `sum_dtype` (bf16 or fp16): each piece rounded to a 16-bit copy
// (MemoryCategory::kComm), reduced as above, and widened back (exact). all_reduce is in place on
// `count` floats; reduce_scatter writes this rank's `count` floats of the n * count at in.
void all_reduce_fp32_in_sixteen_bits(Counters& c, float* data, int64_t count, DType sum_dtype,
                                     ReduceOp op, int n, MPI_Comm comm);
void reduce_scatter_fp32_in_sixteen_bits(Counters& c, const float* in, float* out, int64_t count,
                                         DType sum_dtype, ReduceOp op, int n, MPI_Comm comm);

}  // namespace tessera::comm::detail
