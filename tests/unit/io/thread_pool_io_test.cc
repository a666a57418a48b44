#include "tessera/io/thread_pool_io.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "io/io_test_util.h"
#include "tessera/core/error.h"

namespace tessera::io {
namespace {

// Clears the process-wide injector however the test ends.
struct InjectorGuard {
  ~InjectorGuard() { set_thread_io_fault_injector(nullptr); }
};

// An injected EIO on one piece: that request's error names the file, the piece's offset and
// size and strerror(EIO); the other pieces complete, and the engine works afterwards.
TEST(ThreadPoolIo, InjectedEioNamesTheFileAndOffsetAndTheEngineGoesOn) {
  testing::ScratchDir dir;
  constexpr int64_t kBlock = 64 << 10;
  DirectFile file = DirectFile::create(dir.file("eio"), 6 * kBlock);
  AlignedBuffer data(6 * kBlock, 4096, MemoryCategory::kOther);
  testing::fill_random(data.data(), 6 * kBlock, 4);
  AioConfig config;
  config.block_size = kBlock;
  config.intra_op_parallelism = 3;
  auto io = make_async_io(config, IoBackend::kThreads);

  InjectorGuard guard;
  set_thread_io_fault_injector([&](const IoRequest& piece) {
    return piece.file == &file && piece.offset == 4 * kBlock ? EIO : 0;
  });
  const AsyncIo::Ticket ok = io->submit({&file, data.data(), 2 * kBlock, 0, true});
  const AsyncIo::Ticket bad =
      io->submit({&file, data.as<char>() + 2 * kBlock, 4 * kBlock, 2 * kBlock, true});
  try {
    io->wait(bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "write of " + file.path() +
                                         " at offset 262144 (65536 bytes)"
                                         " failed: " +
                                         std::strerror(EIO));
    EXPECT_NE(std::string(e.what()).find("Input/output error"), std::string::npos);
  }
  io->wait(ok);
  EXPECT_EQ(io->bytes_written(), 5 * kBlock);  // every piece but the failed one

  set_thread_io_fault_injector(nullptr);
  io->wait(io->submit({&file, data.as<char>() + 4 * kBlock, kBlock, 4 * kBlock, true}));
  const std::vector<char> on_disk = testing::read_with_ifstream(file.path());
  ASSERT_EQ(static_cast<int64_t>(on_disk.size()), 6 * kBlock);
  EXPECT_EQ(std::memcmp(on_disk.data(), data.data(), 6 * kBlock), 0);
}

// At most queue_depth pieces run at once, however many threads there are. The injector, called
// as each piece starts, sees how many are inside it; the sleep keeps them there long enough
// for the threads to pile up if the limit were not kept.
TEST(ThreadPoolIo, KeepsAtMostQueueDepthPiecesInFlight) {
  testing::ScratchDir dir;
  DirectFile file = DirectFile::create(dir.file("depth"), 1 << 20);
  AlignedBuffer buffer(1 << 20, 4096, MemoryCategory::kOther);
  for (int depth : {1, 2, 8}) {
    AioConfig config;
    config.block_size = 64 << 10;
    config.queue_depth = depth;
    config.intra_op_parallelism = 4;
    auto io = make_async_io(config, IoBackend::kThreads);
    std::atomic<int> inside{0};
    std::atomic<int> most{0};
    InjectorGuard guard;
    set_thread_io_fault_injector([&](const IoRequest&) {
      const int now = ++inside;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      --inside;
      return 0;
    });
    io->wait(io->submit({&file, buffer.data(), 1 << 20, 0, true}));
    EXPECT_LE(most.load(), std::min(depth, 4)) << "queue_depth " << depth;
    EXPECT_GE(most.load(), 1);
  }
}

// wait_all reports the first failed request and counts the others.
TEST(ThreadPoolIo, WaitAllReportsTheFirstFailureAndCountsTheRest) {
  testing::ScratchDir dir;
  DirectFile file = DirectFile::create(dir.file("eio"), 4 << 20);
  AlignedBuffer buffer(4 << 20, 4096, MemoryCategory::kOther);
  auto io = make_async_io(AioConfig{}, IoBackend::kThreads);
  InjectorGuard guard;
  set_thread_io_fault_injector([](const IoRequest& piece) { return piece.write ? 0 : EIO; });
  for (int i = 0; i < 3; ++i) {
    io->submit({&file, buffer.as<char>() + (i << 20), 1 << 20, int64_t{i} << 20, false});
  }
  io->submit({&file, buffer.as<char>() + (3 << 20), 1 << 20, 3 << 20, true});
  try {
    io->wait_all();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "read of " + file.path() +
                  " at offset 0 (1048576 bytes)"
                  " failed: Input/output error (and 2 other requests failed)");
  }
  EXPECT_EQ(io->bytes_written(), 1 << 20);
}

}  // namespace
}  // namespace tessera::io
