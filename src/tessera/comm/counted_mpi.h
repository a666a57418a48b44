// Internal to comm/: the accounting behind ProcessGroup::stats() (the contract is CommStats's,
// in process_group.h). Every MPI call that moves an operation's data is made through one of the
// counted_* functions below, or (the nonblocking point-to-point calls, in process_group.cc) right
// after a Counters::call made from the same count and datatype. Each counts what it hands MPI
// from the very arguments it passes on, just before the call, on the thread that makes it, so
// the figures are those of the buffers MPI was given (e.g. the fp32 copy of a 16-bit tensor),
// not of a formula applied when the operation was issued.
// Nothing outside comm/ includes this header.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "tessera/comm/process_group.h"

namespace tessera::comm::detail {

// A group's counters. Its tasks hold them too (shared_ptr): they count on the thread that calls
// MPI, which may run after the ProcessGroup itself is gone.
struct Counters {
  std::mutex mu;
  CommStats stats;

  void issue(OpType op);                                 // issued[op] += 1
  void call(OpType op, int64_t sent, int64_t received);  // one MPI call and its buffers' bytes
};

// Bytes of `count` elements of `type`, as MPI sizes them (MPI_Type_size).
int64_t mpi_bytes(int64_t count, MPI_Datatype type);

// The MPI calls of the collectives, with MPI's arguments plus the group size n where the
// receive (or send) buffer holds n blocks of `count`. Sent / received bytes counted:
void counted_allreduce(Counters& c, void* buf, int count, MPI_Datatype type, MPI_Op op, int n,
                       MPI_Comm comm);  // in place: count / count
void counted_allgather(Counters& c, const void* in, void* out, int count, MPI_Datatype type, int n,
                       MPI_Comm comm);  // count / n·count
void counted_reduce_scatter(Counters& c, const void* in, void* out, int count, MPI_Datatype type,
                            MPI_Op op, int n, MPI_Comm comm);  // n·count / count
void counted_alltoall(Counters& c, const void* in, void* out, int count, MPI_Datatype type, int n,
                      MPI_Comm comm);  // n·count / n·count
void counted_alltoallv(Counters& c, const void* in, const std::vector<int>& sc,
                       const std::vector<int>& sd, void* out, const std::vector<int>& rc,
                       const std::vector<int>& rd, MPI_Datatype type,
                       MPI_Comm comm);  // sum(sc) / sum(rc)
// The root's buffer is read, every other member's written: count / 0 on the root, 0 / count
// elsewhere.
void counted_bcast(Counters& c, void* buf, int count, MPI_Datatype type, int root, bool is_root,
                   MPI_Comm comm);
void counted_barrier(Counters& c, MPI_Comm comm);  // 0 / 0

}  // namespace tessera::comm::detail
