// mpi_exchange: how two ranks' simultaneous exchange of a large buffer moves through MPI, by
// pattern — the question behind the multi-host step arithmetic (docs/distributed.md, "Running on
// several machines"). Between two hosts over TCP (scripts/multihost.sh, a shaped link), Open
// MPI's ring all-reduce of n = 2 ranks is two steps in which each rank posts a receive of half
// the buffer and sends its other half as one message. Measured here, side by side, with MPI
// initialised as Tessera's runtime does it (MPI_THREAD_MULTIPLE):
//   one message    each rank MPI_Irecv + MPI_Send of BYTES (the ring step's pattern)
//   chunked        the same bytes as CHUNK-byte messages, every send and receive posted at once
//   all_reduce     MPI_Allreduce (sum, fp32) of 2 x BYTES in place: two such steps
//   back to back   ROUNDS of those all-reduces with nothing between them, per call (a
//                  data-parallel step's gradient buckets; the others start after a barrier)
// Each figure is the median of ROUNDS, in seconds and in MB/s each way; a full-duplex link
// of R bytes/s moves one message each way in BYTES / R.
//
//   mpirun -np 2 build/bin/mpi_exchange [--bytes 20971520] [--chunk 4194304] [--rounds 5]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "flag_pairs.h"

namespace {

double median_seconds(int rounds, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    fn();
    double dt = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(dt);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  long long bytes = 20LL << 20, chunk = 4LL << 20;
  int rounds = 5;
  tessera::bench::require_flag_pairs(argc, argv, "mpi_exchange");
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--bytes")) bytes = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--chunk")) chunk = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "mpi_exchange: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (bytes < 4 || bytes % 4 != 0 || chunk < 4 || chunk % 4 != 0 || rounds < 1 ||
      bytes / 4 > (1LL << 30)) {
    std::fprintf(stderr,
                 "mpi_exchange: --bytes and --chunk must be positive multiples of 4 (bytes at "
                 "most 4 GiB), --rounds at least 1\n");
    return 2;
  }
  int provided = 0, rank = 0, size = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "mpi_exchange: needs exactly 2 ranks, got %d\n", size);
    MPI_Finalize();
    return 2;
  }
  const int peer = 1 - rank;
  const long long n = bytes / 4, per_chunk = std::min(chunk / 4, n);
  std::vector<float> out(n, 1.0f), in(n), both(2 * n, 1.0f);
  auto one_message = [&] {
    MPI_Request req;
    MPI_Irecv(in.data(), static_cast<int>(n), MPI_FLOAT, peer, 0, MPI_COMM_WORLD, &req);
    MPI_Send(out.data(), static_cast<int>(n), MPI_FLOAT, peer, 0, MPI_COMM_WORLD);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  };
  auto chunked = [&] {
    std::vector<MPI_Request> reqs;
    for (long long at = 0; at < n; at += per_chunk) {
      const int m = static_cast<int>(std::min(per_chunk, n - at));
      reqs.emplace_back();
      MPI_Irecv(in.data() + at, m, MPI_FLOAT, peer, 1, MPI_COMM_WORLD, &reqs.back());
      reqs.emplace_back();
      MPI_Isend(out.data() + at, m, MPI_FLOAT, peer, 1, MPI_COMM_WORLD, &reqs.back());
    }
    MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  };
  auto all_reduce = [&] {
    MPI_Allreduce(MPI_IN_PLACE, both.data(), static_cast<int>(2 * n), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  };
  one_message();  // warm up the connection and both paths
  chunked();
  const double t_one = median_seconds(rounds, one_message);
  const double t_chunked = median_seconds(rounds, chunked);
  const double t_reduce = median_seconds(rounds, all_reduce);
  auto back_to_back = [&] {
    for (int r = 0; r < rounds; ++r) all_reduce();
  };
  const double t_back_to_back = median_seconds(1, back_to_back) / rounds;
  if (rank == 0) {
    const double mb = static_cast<double>(bytes) / 1e6;
    std::printf("mpi_exchange: 2 ranks, %.1f MB each way, median of %d rounds\n", mb, rounds);
    std::printf("one message each way: %.3f s (%.1f MB/s each way)\n", t_one, mb / t_one);
    std::printf("chunked (%lld-byte messages, all posted): %.3f s (%.1f MB/s each way)\n",
                static_cast<long long>(per_chunk * 4), t_chunked, mb / t_chunked);
    std::printf("all_reduce of %.1f MB (two such steps): %.3f s (%.1f MB/s each way)\n", 2 * mb,
                t_reduce, 2 * mb / t_reduce);
    std::printf("all_reduce back to back, %d calls: %.3f s a call (%.1f MB/s each way)\n", rounds,
                t_back_to_back, 2 * mb / t_back_to_back);
  }
  MPI_Finalize();
  return 0;
}
