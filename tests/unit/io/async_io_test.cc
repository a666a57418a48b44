// Both AsyncIo backends against plain buffered I/O: what the engine writes is read back with
// std::ifstream, what std::ofstream wrote is read by the engine, compared byte for byte.
#include "tessera/io/async_io.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <ostream>
#include <vector>

#include "io/io_test_util.h"
#include "tessera/core/error.h"
#include "tessera/io/uring_io.h"

namespace tessera::io {
namespace {

using testing::ScratchDir;

struct EngineCase {
  const char* name;
  IoBackend backend;
  int queue_depth;
  int threads;
  bool single_submit;
  bool overlap_events;
};
void PrintTo(const EngineCase& c, std::ostream* os) { *os << c.name; }

constexpr int64_t kBlock = 64 << 10;  // small blocks: many pieces per request

class AsyncIoTest : public ::testing::TestWithParam<EngineCase> {
 protected:
  void SetUp() override {
    if (GetParam().backend != IoBackend::kUring) return;
    std::string why;
    if (make_uring_io(AioConfig{}, &why) == nullptr) GTEST_SKIP() << why;
  }

  AioConfig config(int64_t block_size = kBlock) const {
    AioConfig c;
    c.block_size = block_size;
    c.queue_depth = GetParam().queue_depth;
    c.intra_op_parallelism = GetParam().threads;
    c.single_submit = GetParam().single_submit;
    c.overlap_events = GetParam().overlap_events;
    return c;
  }
  std::unique_ptr<AsyncIo> engine(int64_t block_size = kBlock) const {
    auto io = make_async_io(config(block_size), GetParam().backend);
    EXPECT_STREQ(io->name(), GetParam().backend == IoBackend::kUring ? "io_uring" : "threads");
    return io;
  }
};

// Consecutive requests of the sizes below: odd numbers of blocks, sizes that are multiples of
// the alignment `unit` but not of the block, so that later requests start, and their pieces
// cross block boundaries, off the block grid.
struct Span {
  int64_t offset, bytes;
};
std::vector<Span> spans(int64_t unit) {
  const int64_t sizes[] = {
      3 * kBlock,         // an odd number of blocks
      unit,               // one alignment unit: what follows starts off the block grid
      kBlock + 5 * unit,  // not a multiple of the block
      5 * kBlock,         // each piece crosses a block boundary
      kBlock - unit,
      7 * unit,
      2 * kBlock + unit,
      kBlock,
  };
  std::vector<Span> out;
  int64_t at = 0;
  for (int64_t bytes : sizes) {
    out.push_back({at, bytes});
    at += bytes;
  }
  return out;
}

TEST_P(AsyncIoTest, WritesAndReadsRandomDataLikeBufferedIo) {
  ScratchDir dir;
  const DirectIoAlignment a = direct_io_alignment(dir.path());
  const int64_t unit = std::max(a.offset, a.memory);
  const std::vector<Span> requests = spans(unit);
  const int64_t total = requests.back().offset + requests.back().bytes;
  AlignedBuffer data(total, unit, MemoryCategory::kOther);
  testing::fill_random(data.data(), total, 1);
  auto io = engine();

  // The engine writes, buffered I/O reads. All requests in flight, waited for in reverse.
  DirectFile out = DirectFile::create(dir.file("written"), total);
  std::vector<AsyncIo::Ticket> tickets;
  for (const Span& s : requests) {
    tickets.push_back(io->submit({&out, data.as<char>() + s.offset, s.bytes, s.offset, true}));
  }
  for (auto t = tickets.rbegin(); t != tickets.rend(); ++t) io->wait(*t);
  const std::vector<char> written = testing::read_with_ifstream(out.path());
  ASSERT_EQ(static_cast<int64_t>(written.size()), total);
  EXPECT_EQ(std::memcmp(written.data(), data.data(), total), 0);
  EXPECT_EQ(io->bytes_written(), total);

  // Buffered I/O writes, the engine reads (O_DIRECT flushes the page cache's dirty copy first).
  testing::fill_random(data.data(), total, 2);
  testing::write_with_ofstream(dir.file("reference"), data.data(), total);
  DirectFile in = DirectFile::open(dir.file("reference"), /*writable=*/false);
  AlignedBuffer readback(total, unit, MemoryCategory::kOther);
  for (const Span& s : requests) {
    io->submit({&in, readback.as<char>() + s.offset, s.bytes, s.offset, false});
  }
  io->wait_all();
  EXPECT_EQ(std::memcmp(readback.data(), data.data(), total), 0);
  EXPECT_EQ(io->bytes_read(), total);
  EXPECT_EQ(io->bytes_written(), total);
}

TEST_P(AsyncIoTest, ReadPastTheEndIsAShortReadNamingPathAndOffset) {
  ScratchDir dir;
  DirectFile file = DirectFile::create(dir.file("short"), 5 * kBlock / 2);
  AlignedBuffer buffer(4 * kBlock, 4096, MemoryCategory::kOther);
  auto io = engine();
  // Pieces at 2 and 3 blocks both fall short; the one at the lower offset is reported.
  const AsyncIo::Ticket t = io->submit({&file, buffer.data(), 4 * kBlock, 0, false});
  try {
    io->wait(t);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "short read of " + file.path() + " at offset 131072: got 32768 of 65536 bytes");
  }
  // The engine goes on: the part that exists reads.
  io->wait(io->submit({&file, buffer.data(), 2 * kBlock, 0, false}));
  EXPECT_EQ(io->bytes_read(), 2 * kBlock + kBlock / 2 + 2 * kBlock);
}

TEST_P(AsyncIoTest, MisalignedRequestsAreErrorsNamingTheFile) {
  ScratchDir dir;
  DirectFile file = DirectFile::create(dir.file("aligned"), kBlock);
  const DirectIoAlignment a = file.alignment();
  AlignedBuffer buffer(2 * kBlock, std::max<int64_t>(a.memory, 4096), MemoryCategory::kOther);
  auto io = engine();
  auto message = [&](const IoRequest& r) -> std::string {
    try {
      io->submit(r);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string alignment = ": expected a multiple of the file's direct I/O alignment ";
  const std::string off = std::to_string(a.offset);
  EXPECT_EQ(
      message({&file, buffer.data(), a.offset, a.offset / 2, false}),
      "read of " + file.path() + ": offset " + std::to_string(a.offset / 2) + alignment + off);
  EXPECT_EQ(message({&file, buffer.data(), a.offset + a.offset / 2, 0, true}),
            "write of " + file.path() + ": length " + std::to_string(a.offset + a.offset / 2) +
                " bytes" + alignment + off);
  if (a.memory > 1) {
    const std::string m = message({&file, buffer.as<char>() + a.memory / 2, a.offset, 0, false});
    EXPECT_EQ(m.rfind("read of " + file.path() + ": buffer address 0x", 0), 0u) << m;
    EXPECT_NE(m.find(alignment + std::to_string(a.memory)), std::string::npos) << m;
  }
  DirectFile read_only = DirectFile::open(file.path(), /*writable=*/false);
  EXPECT_EQ(message({&read_only, buffer.data(), a.offset, 0, true}),
            "write of " + file.path() + ": the file was opened read-only");
  // Nothing was queued: the engine still works.
  io->wait(io->submit({&file, buffer.data(), kBlock, 0, true}));
  EXPECT_EQ(io->bytes_written(), kBlock);
}

// A write past the file size limit (RLIMIT_FSIZE, in a child process) fails with EFBIG naming
// the file and where: the piece at 1 MiB moves 512 KiB up to the limit, then its remainder fails.
TEST_P(AsyncIoTest, WriteBeyondTheFileSizeLimitFailsWithEfbig) {
  ScratchDir dir;
  const std::string path = dir.file("limited");
  auto child = [&] {
    std::signal(SIGXFSZ, SIG_IGN);  // else the kernel kills the process instead of EFBIG
    const rlim_t limit = 3 << 19;   // 1.5 MiB
    const rlimit fsize{limit, limit};
    if (setrlimit(RLIMIT_FSIZE, &fsize) != 0) return 10;
    std::string error = "no error";
    int64_t written = 0;
    {
      DirectFile file = DirectFile::create(path, 0);
      AlignedBuffer buffer(2 << 20, 4096, MemoryCategory::kOther);
      auto io = make_async_io(config(1 << 20), GetParam().backend);
      try {
        io->wait(io->submit({&file, buffer.data(), 2 << 20, 0, true}));
      } catch (const Error& e) {
        error = e.what();
      }
      written = io->bytes_written();
    }
    const std::string expected =
        "write of " + path + " at offset 1572864 (524288 bytes) failed: " + std::strerror(EFBIG);
    if (error != expected || written != static_cast<int64_t>(limit)) {
      std::cerr << "got      " << error << " (" << written << " bytes written)\nexpected "
                << expected << " (" << limit << ")\n";
      return 1;
    }
    return 0;
  };
  EXPECT_IN_CHILD_PROCESS(child);
}

TEST_P(AsyncIoTest, EmptyRequestsAndRepeatedWaitsReturnAtOnce) {
  ScratchDir dir;
  DirectFile file = DirectFile::create(dir.file("f"), kBlock);
  AlignedBuffer buffer(kBlock, 4096, MemoryCategory::kOther);
  auto io = engine();
  const AsyncIo::Ticket empty = io->submit({&file, nullptr, 0, 0, false});
  const AsyncIo::Ticket full = io->submit({&file, buffer.data(), kBlock, 0, false});
  EXPECT_GT(full, empty);
  io->wait(full);
  io->wait(full);
  io->wait(empty);
  io->wait_all();
  EXPECT_EQ(io->bytes_read(), kBlock);
}

// Destroying an engine with pieces queued and in flight returns (the started pieces finish
// before the buffer below goes away) and leaves the process working.
TEST_P(AsyncIoTest, DestroyingWithPiecesInFlightReturns) {
  ScratchDir dir;
  DirectFile file = DirectFile::create(dir.file("f"), 64 * kBlock);
  AlignedBuffer buffer(64 * kBlock, 4096, MemoryCategory::kOther);
  for (int round = 0; round < 3; ++round) {
    auto io = engine();
    io->submit({&file, buffer.data(), 64 * kBlock, 0, round % 2 == 0});
  }
  auto io = engine();
  io->wait(io->submit({&file, buffer.data(), 64 * kBlock, 0, false}));
  EXPECT_EQ(io->bytes_read(), 64 * kBlock);
}

const EngineCase kCases[] = {
    {"threads_qd1", IoBackend::kThreads, 1, 1, false, true},
    {"threads_qd8", IoBackend::kThreads, 8, 1, false, true},
    {"threads_qd8_4threads", IoBackend::kThreads, 8, 4, false, true},
    {"threads_qd2_4threads", IoBackend::kThreads, 2, 4, false, true},
    {"uring_qd1", IoBackend::kUring, 1, 1, false, true},
    {"uring_qd8", IoBackend::kUring, 8, 1, false, true},
    {"uring_qd8_single_submit", IoBackend::kUring, 8, 1, true, true},
    {"uring_qd8_no_overlap", IoBackend::kUring, 8, 1, false, false},
    {"uring_qd3_single_submit_no_overlap", IoBackend::kUring, 3, 1, true, false},
};
INSTANTIATE_TEST_SUITE_P(Backends, AsyncIoTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tessera::io
