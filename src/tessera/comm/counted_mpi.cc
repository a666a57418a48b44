#include "tessera/comm/counted_mpi.h"

#include <numeric>
#include <string>

#include "tessera/comm/pair_reduction.h"
#include "tessera/core/error.h"

namespace tessera::comm {

int64_t CommStats::total_sent_bytes() const {
  return std::accumulate(sent_bytes.begin(), sent_bytes.end(), int64_t{0});
}

int64_t CommStats::total_received_bytes() const {
  return std::accumulate(received_bytes.begin(), received_bytes.end(), int64_t{0});
}

int64_t ring_bytes(OpType op, int n, int64_t full_bytes) {
  if (n < 1) throw Error("ring_bytes: group size " + std::to_string(n) + " is not positive");
  switch (op) {
    case OpType::kAllReduce:
      return 2 * (n - 1) * full_bytes / n;
    case OpType::kAllGather:
    case OpType::kReduceScatter:
    case OpType::kAllToAll:
      return (n - 1) * full_bytes / n;
    case OpType::kBroadcast:
    case OpType::kSend:
      return full_bytes;
    case OpType::kAllToAllv:
      throw Error("ring_bytes: all_to_allv's volume depends on its counts, not on one size");
    case OpType::kRecv:
    case OpType::kBarrier:
    case OpType::kCount:
      break;
  }
  return 0;
}

namespace detail {

void Counters::issue(OpType op) {
  std::lock_guard<std::mutex> lock(mu);
  stats.issued[static_cast<int>(op)] += 1;
}

void Counters::call(OpType op, int64_t sent, int64_t received) {
  std::lock_guard<std::mutex> lock(mu);
  const int i = static_cast<int>(op);
  stats.calls[i] += 1;
  stats.sent_bytes[i] += sent;
  stats.received_bytes[i] += received;
}

int64_t mpi_bytes(int64_t count, MPI_Datatype type) {
  int size = 0;
  MPI_Type_size(type, &size);
  return count * size;
}

void counted_allreduce(Counters& c, void* buf, int count, MPI_Datatype type, MPI_Op op, int n,
                       MPI_Comm comm) {
  const int64_t bytes = mpi_bytes(count, type);
  c.call(OpType::kAllReduce, bytes, bytes);
  if (pair_reduction_applies(n, count, type, op) && pair_spans_hosts(comm))
    return pair_all_reduce_sum(static_cast<float*>(buf), count, comm);
  MPI_Allreduce(MPI_IN_PLACE, buf, count, type, op, comm);
}

void counted_allgather(Counters& c, const void* in, void* out, int count, MPI_Datatype type, int n,
                       MPI_Comm comm) {
  const int64_t bytes = mpi_bytes(count, type);
  c.call(OpType::kAllGather, bytes, bytes * n);
  if (n == 2 && bytes >= kPairMinBytes && pair_spans_hosts(comm))
    return pair_all_gather(in, out, bytes, comm);
  MPI_Allgather(in, count, type, out, count, type, comm);
}

void counted_reduce_scatter(Counters& c, const void* in, void* out, int count, MPI_Datatype type,
                            MPI_Op op, int n, MPI_Comm comm) {
  c.call(OpType::kReduceScatter, mpi_bytes(int64_t{count} * n, type), mpi_bytes(count, type));
  if (pair_reduction_applies(n, count, type, op))
    return pair_reduce_scatter_sum(static_cast<const float*>(in), static_cast<float*>(out), count,
                                   comm);
  MPI_Reduce_scatter_block(in, out, count, type, op, comm);
}

void counted_alltoall(Counters& c, const void* in, void* out, int count, MPI_Datatype type, int n,
                      MPI_Comm comm) {
  const int64_t bytes = mpi_bytes(int64_t{count} * n, type);
  c.call(OpType::kAllToAll, bytes, bytes);
  MPI_Alltoall(in, count, type, out, count, type, comm);
}

void counted_alltoallv(Counters& c, const void* in, const std::vector<int>& sc,
                       const std::vector<int>& sd, void* out, const std::vector<int>& rc,
                       const std::vector<int>& rd, MPI_Datatype type, MPI_Comm comm) {
  c.call(OpType::kAllToAllv, mpi_bytes(std::accumulate(sc.begin(), sc.end(), int64_t{0}), type),
         mpi_bytes(std::accumulate(rc.begin(), rc.end(), int64_t{0}), type));
  MPI_Alltoallv(in, sc.data(), sd.data(), type, out, rc.data(), rd.data(), type, comm);
}

void counted_bcast(Counters& c, void* buf, int count, MPI_Datatype type, int root, bool is_root,
                   MPI_Comm comm) {
  const int64_t bytes = mpi_bytes(count, type);
  c.call(OpType::kBroadcast, is_root ? bytes : 0, is_root ? 0 : bytes);
  MPI_Bcast(buf, count, type, root, comm);
}

void counted_barrier(Counters& c, MPI_Comm comm) {
  c.call(OpType::kBarrier, 0, 0);
  MPI_Barrier(comm);
}

}  // namespace detail
}  // namespace tessera::comm
