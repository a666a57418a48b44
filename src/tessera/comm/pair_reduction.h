// Internal to comm/: the fp32 sum reduce-scatter and all-reduce, and the all-gather, of exactly two
// ranks, made of chunked exchanges instead of MPI_Reduce_scatter_block / MPI_Allreduce /
// MPI_Allgather.
//
// Why: Open MPI 4.1's reduce-scatter of two ranks moved a 40 MiB buffer 3.0-3.6x slower than
// exchanging the halves does, on one host (shared memory) and between two hosts over TCP
// (there at 37% of a 1 Gbit/s link's rate each way); measured by the comm bench
// (bench/comm_main.cc, docs/performance.md). Each rank sends the peer's half as messages of at
// most kPairChunkBytes and adds its own half to what arrives: on one host every receive posted
// before the first send; between hosts the sends on a thread of their own and each chunk summed
// as it arrives (one thread progressing both directions ran at half a TCP link's rate; measured
// in pair_reduction.cc), over a TCP connection of the pair's own (pair_socket.h: the kernel moves
// the bytes while both threads block, where MPI's transport had to be polled) or, where that
// connection cannot be made, over MPI. The all-reduce sends the whole buffer each way and adds what
// arrives (Open MPI's recursive doubling for two ranks): between two hosts over TCP Open MPI's
// default, the ring, reached 69% of a shaped 1 Gbit/s link each way after a barrier and 55% back to
// back, its recursive doubling (coll_tuned_allreduce_algorithm 3) 94% either way
// (bench/mpi_exchange, docs/distributed.md); on one host the exchange was 8-15% slower than MPI's
// own, so there the all-reduce stays MPI's.
//
// Contract:
//  - pair_reduction_applies(): the group has two members, the data is fp32, the operation a
//    sum and the output at least kPairMinBytes (below it one MPI call's latency matters more):
//    the same answer on both members. Input and output must not overlap (as for MPI's).
//  - pair_spans_hosts(): whether the two members are on different hosts (no shared memory
//    between them, MPI_Comm_split_type), found with the duplicate below.
//  - Each element of rank r's block is the one IEEE sum of the two ranks' values: the bits
//    MPI's two-rank reduction gives, as a + b = b + a exactly (only a NaN's payload may differ).
//  - The exchanges run on a duplicate of the group's communicator made by the first call of any
//    of these on it, with the host question (both collective; the group's collectives run in the
//    same order on both members, so both make them at the same point), so they cannot match the
//    group's own point-to-point messages.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::comm::detail {

constexpr int64_t kPairChunkBytes = int64_t{4} << 20;
constexpr int64_t kPairMinBytes = int64_t{1} << 20;
// Between hosts, the pause between two tests of an unfinished transfer (pair_reduction.cc).
constexpr int kPairPollMicroseconds = 20;

bool pair_reduction_applies(int group_size, int64_t count, MPI_Datatype type, MPI_Op op);

// out (count floats) becomes this rank's block of the sum of in (2 * count floats): block r on
// rank r, as MPI_Reduce_scatter_block.
void pair_reduce_scatter_sum(const float* in, float* out, int64_t count, MPI_Comm comm);

bool pair_spans_hosts(MPI_Comm comm);

// out (2 * bytes) becomes both ranks' `in` (bytes each), rank r's at out + r * bytes, as
// MPI_Allgather of two ranks; in and out must not overlap. Applies to any data: the runtime uses
// it between hosts for 1 MiB or more (kPairMinBytes), where Open MPI's all-gather of two ranks
// back to back moved half the link's rate each way (63 MB/s on a shaped 1 Gbit/s link, 2026-12-04,
// docs/distributed.md), as its exchanges did.
void pair_all_gather(const void* in, void* out, int64_t bytes, MPI_Comm comm);

// buf (count floats) becomes the sum of both ranks' buf, in place, as MPI_Allreduce. The peer's
// values arrive in a buffer as large as buf on one host, in one 4 MiB buffer between hosts (two
// over MPI's transport; summed chunk by chunk as they arrive), allocated for the call and not
// counted by the memory accountant (as MPI's own reductions allocate theirs).
void pair_all_reduce_sum(float* buf, int64_t count, MPI_Comm comm);

// The same two sums on `count` bf16 or fp16 values (`dtype`) a rank, each element round(a + b)
// (kernels::add: widened, added in fp32, rounded to nearest even): the bits MPI's two-rank
// reduction gives under comm's 16-bit sum operation (sixteen_bit_reduction.h), which takes these
// on the same conditions as the fp32 ones (sixteen_bit_pair_applies).
bool sixteen_bit_pair_applies(int group_size, int64_t count);
void pair_all_reduce_sum(void* buf, int64_t count, DType dtype, MPI_Comm comm);
void pair_reduce_scatter_sum(const void* in, void* out, int64_t count, DType dtype, MPI_Comm comm);

}  // namespace tessera::comm::detail
