// The streaming rate of optimizer state on NVMe, through the code the optimizer uses
// (offload/nvme_state_storage.h), for a state of --gb gigabytes (three fp32 arrays, as AdamW
// with bf16 compute) made with fast_init: the first read-write visit only writes (the state is
// made, not read: the initial write), then a read-only visit (what a checkpoint save does), then
// a read-write visit (what a step does, with the update left out so only I/O is timed). The
// buffers are allocated (and touched) before the clock starts. Prints
// one line per phase in GB/s; bench/offload.sh sets them beside fio's sequential O_DIRECT rates
// on the same file system.
//   offload_stream --dir DIR [--gb 4] [--sub-group-size 5e7] [--buffers 4] [--pipeline]
//                  [--backend auto|io_uring|threads] [--queue-depth 8] [--block-size 1048576]
#include <CLI/CLI.hpp>
#include <cstdio>

#include "tessera/core/clock.h"
#include "tessera/core/error.h"
#include "tessera/offload/nvme_state_storage.h"

using namespace tessera;

int main(int argc, char** argv) {
  CLI::App app{"offload_stream: optimizer-state streaming rate on NVMe"};
  std::string dir, backend = "auto";
  double gb = 4, sub_group = 5e7;
  int buffers = 4, queue_depth = 8;
  int64_t block_size = 1 << 20;
  bool pipeline = false;
  app.add_option("--dir", dir, "directory on the file system to measure")->required();
  app.add_option("--gb", gb, "state size in GB (10^9 bytes)");
  app.add_option("--sub-group-size", sub_group, "elements per sub-group");
  app.add_option("--buffers", buffers, "buffers of one sub-group each");
  app.add_flag("--pipeline", pipeline, "pipeline_read and pipeline_write");
  app.add_option("--backend", backend)->check(CLI::IsMember({"auto", "io_uring", "threads"}));
  app.add_option("--queue-depth", queue_depth);
  app.add_option("--block-size", block_size);
  CLI11_PARSE(app, argc, argv);
  try {
    constexpr int kArrays = 3;
    const int64_t numel = static_cast<int64_t>(gb * 1e9 / (4 * kArrays));
    io::AioConfig aio;
    aio.queue_depth = queue_depth;
    aio.block_size = block_size;
    offload::SwapDirectory swap(dir, "bench", "--dir");
    offload::SwapIo io(aio, backend == "io_uring"  ? io::IoBackend::kUring
                            : backend == "threads" ? io::IoBackend::kThreads
                                                   : io::IoBackend::kAuto);
    offload::NvmeStateStorage state(
        swap, io, "state.swp",
        {static_cast<int64_t>(sub_group), buffers, pipeline, pipeline, /*fast_init=*/true});
    const auto rate = [](int64_t bytes, double s) { return bytes / 1e9 / s; };
    state.initialize(numel, kArrays, [](const optim::StateStorage::Window& w) {
      for (float* a : w.arrays) std::fill(a, a + (w.end - w.begin), 1.0f);
    });
    auto t0 = Clock::now();
    state.for_each_window(optim::StateAccess::kReadWrite, [](const optim::StateStorage::Window&) {});
    const double write_s = seconds_since(t0);
    const int64_t bytes = state.file_bytes();
    t0 = Clock::now();
    double sum = 0;
    state.for_each_window(optim::StateAccess::kRead, [&](const optim::StateStorage::Window& w) {
      sum += w.arrays[2][w.end - w.begin - 1];
    });
    const double read_s = seconds_since(t0);
    t0 = Clock::now();
    state.for_each_window(optim::StateAccess::kReadWrite,
                          [&](const optim::StateStorage::Window& w) { w.arrays[0][0] += 1.0f; });
    const double step_s = seconds_since(t0);
    std::printf("state %.2f GB in %lld sub-groups of %lld elements, %d buffers, pipeline %s, %s\n",
                bytes / 1e9, static_cast<long long>(state.sub_groups()),
                static_cast<long long>(state.sub_group_elems()), buffers, pipeline ? "on" : "off",
                io.backend());
    std::printf("write (initial state): %.2f GB/s\n", rate(bytes, write_s));
    std::printf("read (read-only visit): %.2f GB/s\n", rate(bytes, read_s));
    std::printf("read+write (step visit): %.2f GB/s of each direction, %.2f GB/s both\n",
                rate(bytes, step_s), rate(2 * bytes, step_s));
    if (sum != static_cast<double>(state.sub_groups())) std::printf("(checksum %g)\n", sum);
  } catch (const Error& e) {
    std::fprintf(stderr, "offload_stream: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
