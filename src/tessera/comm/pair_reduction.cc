#include "tessera/comm/pair_reduction.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::comm::detail {
namespace {

constexpr int64_t kChunk = kPairChunkBytes / static_cast<int64_t>(sizeof(float));

// What the pair operations keep for a group communicator (see the header), made by the first of
// them on it: the duplicate their exchanges run on, and whether the two members are on different
// hosts (no shared memory between them). Both are collective; the group's collectives run in the
// same order on both members, so both make them at the same point. Group communicators live
// until MPI_Finalize, so a handle is never reused for another group.
struct PairComm {
  MPI_Comm exchange = MPI_COMM_NULL;
  bool spans_hosts = false;
};

const PairComm& pair_comm(MPI_Comm comm) {
  static std::mutex mu;
  static std::map<MPI_Comm, PairComm> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(comm);
  if (it == known.end()) {
    PairComm p;
    if (MPI_Comm_dup(comm, &p.exchange) != MPI_SUCCESS)
      throw Error("pair reduction: MPI_Comm_dup failed");
    MPI_Comm shared = MPI_COMM_NULL;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared) != MPI_SUCCESS)
      throw Error("pair reduction: MPI_Comm_split_type failed");
    int on_this_host = 0;
    MPI_Comm_size(shared, &on_this_host);
    MPI_Comm_free(&shared);
    p.spans_hosts = on_this_host == 1;
    it = known.emplace(comm, p).first;
  }
  return it->second;
}

// Receives `count_in` floats from the peer into `recv` and sends `count_out` floats from `send`, as
// chunks of at most kChunk (tagged with their index: at most 2^31 floats, 2048 chunks), every
// receive posted before the first send; returns when all are done.
void exchange(float* recv, int64_t count_in, const float* send, int64_t count_out, int peer,
              MPI_Comm comm) {
  std::vector<MPI_Request> reqs;
  reqs.reserve(static_cast<size_t>((count_in + count_out) / kChunk + 2));
  for (int64_t at = 0, k = 0; at < count_in; at += kChunk, ++k) {
    reqs.emplace_back();
    MPI_Irecv(recv + at, static_cast<int>(std::min(kChunk, count_in - at)), MPI_FLOAT, peer,
              static_cast<int>(k), comm, &reqs.back());
  }
  for (int64_t at = 0, k = 0; at < count_out; at += kChunk, ++k) {
    reqs.emplace_back();
    MPI_Isend(send + at, static_cast<int>(std::min(kChunk, count_out - at)), MPI_FLOAT, peer,
              static_cast<int>(k), comm, &reqs.back());
  }
  MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
}

void add_into(float* __restrict mine, const float* __restrict theirs, int64_t n) {
  for (int64_t i = 0; i < n; ++i) mine[i] += theirs[i];
}

int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

}  // namespace

bool pair_reduction_applies(int group_size, int64_t count, MPI_Datatype type, MPI_Op op) {
  return group_size == 2 && type == MPI_FLOAT && op == MPI_SUM && count * 4 >= kPairMinBytes;
}

bool pair_spans_hosts(MPI_Comm comm) { return pair_comm(comm).spans_hosts; }

void pair_all_reduce_sum(float* buf, int64_t count, MPI_Comm group_comm) {
  MPI_Comm comm = pair_comm(group_comm).exchange;
  const int peer = 1 - rank_in(comm);
  // Not zeroed: every element is received before it is read.
  const std::unique_ptr<float[]> theirs(new float[static_cast<size_t>(count)]);
  exchange(theirs.get(), count, buf, count, peer, comm);
  add_into(buf, theirs.get(), count);
}

void pair_reduce_scatter_sum(const float* in, float* out, int64_t count, MPI_Comm group_comm) {
  // MPI's reduce-scatter takes no overlapping buffers either; here the sum would read values
  // already overwritten.
  if (out < in + 2 * count && in < out + count)
    throw Error("reduce_scatter: the output overlaps the input");
  MPI_Comm comm = pair_comm(group_comm).exchange;
  const int rank = rank_in(comm), peer = 1 - rank;
  // The peer's values of this rank's block arrive in `out`; this rank's values are added there.
  exchange(out, count, in + (1 - rank) * count, count, peer, comm);
  add_into(out, in + rank * count, count);
}

}  // namespace tessera::comm::detail
