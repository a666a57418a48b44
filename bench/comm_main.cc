// Communication benchmark: bus bandwidth of all_reduce, all_gather, reduce_scatter and
// all_to_all through ProcessGroup (queued on the communication thread, caller waits on the Work)
// next to the plain MPI call on the same buffers, measured in the same run, interleaved.
//
//   mpirun -np 2 build/bin/comm [--min-bytes 1024] [--max-bytes 268435456] [--rounds 7]
//                               [--op all_reduce] [--sum-dtype bf16]
//
// Size S follows nccl-tests: the all_reduce buffer, the all_gather output, the reduce_scatter
// input, the all_to_all input (fp32). Bus bandwidth = comm::ring_bytes(op, n, S) / time, i.e.
// S / time × (2(n-1)/n for all_reduce, (n-1)/n for the others), comparable across ops and with
// the link's peak. (A model of the link volume: the runtime's accounting, ProcessGroup::stats(),
// records the buffers handed to MPI instead.) A round times
// enough back-to-back calls to take ~50 ms (the slowest rank's mean per call); both paths run
// the same number of rounds, alternating which goes first, after the same warm-up, and each
// figure is the MEDIAN over the rounds: what a typical call costs, where the best round (used
// before) rewards whichever path had one lucky round on a shared machine.
// "ratio" = ProcessGroup bandwidth / MPI bandwidth (goal: >= 0.90 for S >= 1 MiB).
// --sum-dtype bf16|fp16: ProcessGroup's all_reduce and reduce_scatter send and sum the same fp32
// buffers in that type (comm/process_group.h, "Reductions in 16 bits": --grad-reduce-in-bf16's
// path) while MPI's stay fp32, so "ratio" is what halving the bytes gains; bandwidths count the
// fp32 buffer's bytes either way.
// "cpu%": the process's CPU time (user + system, every thread) over the wall time while a path's
// calls ran, in % of one core, the busiest rank's, median over the rounds: what moving the data
// takes from computation that would share the cores (MPI's waits poll; between hosts the pair
// exchanges block in the kernel, comm/pair_socket.h).
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "flag_pairs.h"
#include "tessera/comm/process_group.h"
#include "tessera/core/tensor.h"

namespace {

using tessera::DType;
using tessera::MemoryCategory;
using tessera::Tensor;
using tessera::comm::OpType;
using tessera::comm::ProcessGroup;
using tessera::comm::ReduceOp;

double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

struct Timing {
  double seconds = 0;    // per call, the slowest rank's, averaged over the calls
  double cpu_share = 0;  // process CPU time / wall time, the busiest rank's
};

Timing time_per_call(MPI_Comm comm, int iters, const std::function<void()>& fn) {
  MPI_Barrier(comm);
  const double cpu0 = process_cpu_seconds();
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) fn();
  const double wall = MPI_Wtime() - t0;
  double worst[2] = {wall / iters, (process_cpu_seconds() - cpu0) / wall};
  MPI_Allreduce(MPI_IN_PLACE, worst, 2, MPI_DOUBLE, MPI_MAX, comm);
  return {worst[0], worst[1]};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string human(int64_t bytes) {
  char buf[32];
  if (bytes >= (1 << 20)) {
    std::snprintf(buf, sizeof buf, "%lld MiB", static_cast<long long>(bytes >> 20));
  } else {
    std::snprintf(buf, sizeof buf, "%lld KiB", static_cast<long long>(bytes >> 10));
  }
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t min_bytes = 1024, max_bytes = int64_t{256} << 20;
  int rounds = 7;
  std::string only;  // --op NAME: run one operation
  DType sum_dtype = DType::kF32;
  tessera::bench::require_flag_pairs(argc, argv, "comm");
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--min-bytes")) min_bytes = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--max-bytes")) max_bytes = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--op")) only = argv[i + 1];
    else if (!std::strcmp(argv[i], "--sum-dtype") && !std::strcmp(argv[i + 1], "bf16"))
      sum_dtype = DType::kBF16;
    else if (!std::strcmp(argv[i], "--sum-dtype") && !std::strcmp(argv[i + 1], "fp16"))
      sum_dtype = DType::kF16;
    else {
      std::fprintf(stderr, "comm: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  rounds = std::max(1, rounds);
  auto world = ProcessGroup::world();  // initialises MPI (MPI_THREAD_MULTIPLE)
  const int n = world->size(), me = world->rank();
  MPI_Comm comm;  // the raw MPI path gets its own communicator, as the ProcessGroup has
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (me == 0) {
    std::printf(
        "comm bench: %d ranks, fp32%s, check_collectives=%d; bus bandwidth in GB/s "
        "(1e9 B/s)\n",
        n,
        sum_dtype == DType::kF32 ? ""
                                 : (std::string(" (ProcessGroup's reductions summed in ") +
                                    tessera::dtype_name(sum_dtype) + ")")
                                       .c_str(),
        ProcessGroup::check_collectives() ? 1 : 0);
    std::printf("%-15s %9s %12s %10s %12s %10s %7s %8s %8s\n", "op", "size", "MPI us", "MPI GB/s",
                "PG us", "PG GB/s", "ratio", "MPI cpu%", "PG cpu%");
  }
  const char* ops[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"};
  for (const char* op : ops) {
    if (!only.empty() && only != op) continue;
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      const int64_t count = bytes / 4 / n * n;  // divisible by n
      const int block = static_cast<int>(count / n);
      const std::string name = op;
      Tensor a, b;
      std::function<void()> raw, pg;
      OpType type = OpType::kAllToAll;
      if (name == "all_reduce") {
        type = OpType::kAllReduce;
        a = Tensor::zeros({count}, DType::kF32, MemoryCategory::kComm);
        raw = [&] {
          MPI_Allreduce(MPI_IN_PLACE, a.raw(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm);
        };
        pg = [&] { world->all_reduce(a, ReduceOp::kSum, sum_dtype).wait(); };
      } else if (name == "all_gather") {
        type = OpType::kAllGather;
        a = Tensor::zeros({block}, DType::kF32, MemoryCategory::kComm);
        b = Tensor::zeros({count}, DType::kF32, MemoryCategory::kComm);
        raw = [&] { MPI_Allgather(a.raw(), block, MPI_FLOAT, b.raw(), block, MPI_FLOAT, comm); };
        pg = [&] { world->all_gather(a, b).wait(); };
      } else if (name == "reduce_scatter") {
        type = OpType::kReduceScatter;
        a = Tensor::zeros({count}, DType::kF32, MemoryCategory::kComm);
        b = Tensor::zeros({block}, DType::kF32, MemoryCategory::kComm);
        raw = [&] {
          MPI_Reduce_scatter_block(a.raw(), b.raw(), block, MPI_FLOAT, MPI_SUM, comm);
        };
        pg = [&] { world->reduce_scatter(a, b, ReduceOp::kSum, sum_dtype).wait(); };
      } else {
        a = Tensor::zeros({count}, DType::kF32, MemoryCategory::kComm);
        b = Tensor::zeros({count}, DType::kF32, MemoryCategory::kComm);
        raw = [&] { MPI_Alltoall(a.raw(), block, MPI_FLOAT, b.raw(), block, MPI_FLOAT, comm); };
        pg = [&] { world->all_to_all(a, b).wait(); };
      }
      // Warm up both paths alike (page faults, MPI's internal buffers and protocol state),
      // size the iterations, then warm up again for ~5 ms each.
      raw();
      pg();
      const double est = time_per_call(comm, 1, raw).seconds;
      int iters = static_cast<int>(std::clamp(0.05 / std::max(est, 1e-7), 1.0, 2000.0));
      MPI_Bcast(&iters, 1, MPI_INT, 0, comm);
      time_per_call(comm, std::max(1, iters / 10), raw);
      time_per_call(comm, std::max(1, iters / 10), pg);
      std::vector<double> ts_raw, ts_pg, cpu_raw, cpu_pg;
      const auto round = [&](const std::function<void()>& fn, std::vector<double>& ts,
                             std::vector<double>& cpu) {
        const Timing t = time_per_call(comm, iters, fn);
        ts.push_back(t.seconds);
        cpu.push_back(t.cpu_share);
      };
      for (int r = 0; r < rounds; ++r) {  // alternate which path goes first
        if (r % 2 == 0) round(raw, ts_raw, cpu_raw);
        round(pg, ts_pg, cpu_pg);
        if (r % 2 == 1) round(raw, ts_raw, cpu_raw);
      }
      const double t_raw = median(ts_raw), t_pg = median(ts_pg);
      const double bus = static_cast<double>(tessera::comm::ring_bytes(type, n, count * 4));
      const double bw_raw = bus / t_raw / 1e9, bw_pg = bus / t_pg / 1e9;
      if (me == 0) {
        std::printf("%-15s %9s %12.1f %10.2f %12.1f %10.2f %7.3f %8.0f %8.0f\n", op,
                    human(bytes).c_str(), t_raw * 1e6, bw_raw, t_pg * 1e6, bw_pg, bw_pg / bw_raw,
                    100 * median(cpu_raw), 100 * median(cpu_pg));
        std::fflush(stdout);
      }
    }
  }
  MPI_Comm_free(&comm);
  world.reset();
  tessera::comm::shutdown();
  return 0;
}
