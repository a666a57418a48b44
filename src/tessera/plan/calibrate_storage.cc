// The swap directory's direct-I/O rates (contract in calibrate.h), measured through the engine
// NVMe offload streams with (offload/swap_io.h, DeepSpeed's default aio settings).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/io/aligned_buffer.h"
#include "tessera/io/direct_file.h"
#include "tessera/offload/swap_io.h"
#include "tessera/plan/calibrate.h"

namespace tessera::plan {
namespace {

using Clock = std::chrono::steady_clock;

// Requests in flight at once (of 64 MiB; 1 MiB quick): the offload's sub-groups and gradient
// chunks are requests of megabytes, which the engine cuts into aio.block_size pieces
// queue_depth deep.
constexpr int kInFlight = 4;

// Seconds to move `total` bytes of the file through `buffers` (write or read), every rank starting
// together.
double stream(comm::ProcessGroup& world, offload::SwapIo& io, const io::DirectFile& file,
              std::vector<io::AlignedBuffer>& buffers, int64_t request, int64_t total, bool write) {
  world.barrier().wait();
  const auto t0 = Clock::now();
  std::vector<io::AsyncIo::Ticket> tickets(buffers.size());
  std::vector<bool> busy(buffers.size(), false);
  int64_t k = 0;
  for (int64_t offset = 0; offset < total; offset += request, ++k) {
    const size_t b = static_cast<size_t>(k) % buffers.size();
    if (busy[b]) io.wait(tickets[b]);
    tickets[b] = write ? io.write(file, buffers[b].data(), request, offset)
                       : io.read(file, buffers[b].data(), request, offset);
    busy[b] = true;
  }
  io.wait_all();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

void require_storage_dir(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) throw Error("--nvme-path " + dir + ": not a directory");
  const std::string probe = dir + "/tessera-plan-probe." + std::to_string(::getpid());
  const bool direct = io::DirectFile::create_if_supported(probe, 0).has_value();
  std::error_code ignored;
  std::filesystem::remove(probe, ignored);
  if (!direct)
    throw Error("--nvme-path " + dir +
                ": the file system refuses direct I/O (O_DIRECT), as NVMe offload needs");
}

StorageRates calibrate_storage(comm::ProcessGroup& world, const std::string& dir, bool quick) {
  require_storage_dir(dir);
  const int64_t request = quick ? int64_t{1} << 20 : int64_t{64} << 20;
  const int64_t total = quick ? int64_t{16} << 20 : int64_t{1} << 30;
  const int rounds = quick ? 1 : 3;
  const std::string path = dir + "/tessera-calibrate-storage." + std::to_string(::getpid()) +
                           "." + std::to_string(world.rank());
  const int64_t alignment = io::direct_io_alignment(dir).strictest();
  std::vector<io::AlignedBuffer> buffers;
  for (int i = 0; i < kInFlight; ++i) {
    buffers.emplace_back(request, alignment, MemoryCategory::kOther);
    std::memset(buffers.back().data(), 0x5a, static_cast<size_t>(request));
  }
  offload::SwapIo io(io::AioConfig{}, io::IoBackend::kAuto);
  std::vector<double> writes, reads;
  std::error_code ignored;
  try {
    io::DirectFile file = io::DirectFile::create(path, total);
    for (int r = 0; r < rounds; ++r) {
      writes.push_back(stream(world, io, file, buffers, request, total, true));
      reads.push_back(stream(world, io, file, buffers, request, total, false));
    }
  } catch (...) {
    std::filesystem::remove(path, ignored);
    throw;
  }
  std::filesystem::remove(path, ignored);
  std::sort(writes.begin(), writes.end());
  std::sort(reads.begin(), reads.end());
  StorageRates rates;
  rates.write_bytes_per_s = static_cast<double>(total) / writes[writes.size() / 2];
  rates.read_bytes_per_s = static_cast<double>(total) / reads[reads.size() / 2];
  return rates;
}

}  // namespace tessera::plan
