// DirectFileWriter: a file handed over in pieces of any size, in any order, is written through
// O_DIRECT byte for byte as the same bytes written through the page cache (ifstream reads it
// back), with bytes never handed over reading as zero and the size exact, on both back ends and
// with staging buffers smaller than the pieces (so buffers are reused while writes are in
// flight); a write error names the file and the offset.
#include "tessera/io/direct_file_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "io_test_util.h"
#include "tessera/core/error.h"

namespace tessera::io {
namespace {

using testing::ScratchDir;

// Clears the process-wide fault injector however the test ends.
struct InjectorGuard {
  ~InjectorGuard() { set_thread_io_fault_injector(nullptr); }
};

struct Piece {
  int64_t offset, bytes;
};

// [0, size) cut at random points into pieces of 1 byte to ~200 KiB (many inside one block, many
// across several), shuffled; the pieces covering [hole_begin, hole_end) are left out.
std::vector<Piece> shuffled_pieces(int64_t size, int64_t hole_begin, int64_t hole_end,
                                   uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Piece> pieces;
  for (int64_t at = 0; at < size;) {
    const int kind = static_cast<int>(rng() % 4);
    const int64_t n = kind == 0   ? 1 + static_cast<int64_t>(rng() % 16)
                      : kind == 1 ? 1 + static_cast<int64_t>(rng() % 5000)
                                  : 1 + static_cast<int64_t>(rng() % 200000);
    const int64_t end = std::min(size, at + n);
    if (end <= hole_begin || at >= hole_end) pieces.push_back({at, end - at});
    at = end;
  }
  std::shuffle(pieces.begin(), pieces.end(), rng);
  return pieces;
}

class DirectFileWriterTest : public ::testing::TestWithParam<IoBackend> {};

TEST_P(DirectFileWriterTest, PiecesInAnyOrderMakeTheFileAsBufferedIoReadsIt) {
  ScratchDir dir;
  const std::string path = dir.file("out.bin");
  { std::ofstream create(path); }  // the caller's temporary exists before open()
  const int64_t size = 3 * (int64_t{1} << 20) + 12345;  // not a whole number of blocks
  std::vector<char> data(size);
  testing::fill_random(data.data(), size, 7);
  // A hole straddling block boundaries: never handed over, so it reads as zeros.
  const int64_t hole_begin = 1000000, hole_end = 1030000;
  const std::vector<Piece> pieces = shuffled_pieces(size, hole_begin, hole_end, 11);
  std::vector<char> expected = data;
  // The bytes no piece covers (the hole, widened to the pieces that touch it) read as zero.
  std::vector<bool> written(size, false);
  for (const Piece& p : pieces)
    std::fill(written.begin() + p.offset, written.begin() + p.offset + p.bytes, true);
  int64_t unwritten = 0;
  for (int64_t i = 0; i < size; ++i)
    if (!written[i]) {
      expected[i] = 0;
      ++unwritten;
    }
  ASSERT_GE(unwritten, hole_end - hole_begin);

  DirectFileWriter::Options options;
  options.backend = GetParam();
  options.staging_buffers = 2;
  options.staging_bytes = 64 << 10;  // smaller than most large pieces
  std::unique_ptr<DirectFileWriter> writer = DirectFileWriter::open(path, size, options);
  ASSERT_NE(writer, nullptr) << "the build tree's file system refused O_DIRECT";
  std::vector<char> scratch;
  for (const Piece& p : pieces) {
    // From a buffer the test overwrites at once: write_at must have copied what it needs.
    scratch.assign(data.begin() + p.offset, data.begin() + p.offset + p.bytes);
    writer->write_at(p.offset, scratch.data(), p.bytes);
    std::fill(scratch.begin(), scratch.end(), 'x');
  }
  writer->finish();
  writer.reset();
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(path)), size);
  const std::vector<char> got = testing::read_with_ifstream(path);
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected);
}

TEST_P(DirectFileWriterTest, AFileOfWholeBlocksAndAnEmptyFile) {
  ScratchDir dir;
  const std::string path = dir.file("blocks.bin"), empty = dir.file("empty.bin");
  const int64_t size = 8 << 20;
  std::vector<char> data(size);
  testing::fill_random(data.data(), size, 3);
  DirectFileWriter::Options options;
  options.backend = GetParam();
  auto writer = DirectFileWriter::open(path, size, options);
  ASSERT_NE(writer, nullptr);
  writer->write_at(size / 2, data.data() + size / 2, size / 2);
  writer->write_at(0, data.data(), size / 2);
  writer->finish();
  writer.reset();
  EXPECT_TRUE(testing::read_with_ifstream(path) == data);

  auto none = DirectFileWriter::open(empty, 0, options);
  ASSERT_NE(none, nullptr);
  none->finish();
  EXPECT_EQ(std::filesystem::file_size(empty), 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, DirectFileWriterTest,
                         ::testing::Values(IoBackend::kAuto, IoBackend::kThreads),
                         [](const auto& info) {
                           return info.param == IoBackend::kAuto ? "auto" : "threads";
                         });

// An I/O error on one piece (injected on the thread-pool back end) is an error of finish() (or of
// a later write_at reusing that piece's staging buffer) naming the file, the offset and errno.
TEST(DirectFileWriter, AWriteErrorNamesTheFileAndOffset) {
  ScratchDir dir;
  const std::string path = dir.file("faulty.bin");
  const int64_t size = 4 << 20;
  std::vector<char> data(size, 'a');
  InjectorGuard guard;
  set_thread_io_fault_injector(
      [&](const IoRequest& piece) { return piece.offset == (2 << 20) ? EIO : 0; });
  DirectFileWriter::Options options;
  options.backend = IoBackend::kThreads;
  auto writer = DirectFileWriter::open(path, size, options);
  ASSERT_NE(writer, nullptr);
  try {
    writer->write_at(0, data.data(), size);
    writer->finish();
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string expected = "write of " + path + " at offset " + std::to_string(2 << 20);
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::strerror(EIO)), std::string::npos) << e.what();
  }
}

// Destroyed without finish() while its writes are still running (an error elsewhere in a save):
// the destructor waits for them before the buffers go, and returns.
TEST(DirectFileWriter, DestroyedWithWritesInFlightReturns) {
  ScratchDir dir;
  const int64_t size = 8 << 20;
  std::vector<char> data(size, 'b');
  InjectorGuard guard;
  set_thread_io_fault_injector([](const IoRequest&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return 0;
  });
  DirectFileWriter::Options options;
  options.backend = IoBackend::kThreads;
  auto writer = DirectFileWriter::open(dir.file("unfinished.bin"), size, options);
  ASSERT_NE(writer, nullptr);
  writer->write_at(1, data.data(), size - 2);  // whole blocks in flight, two partial ones held
  writer.reset();
  SUCCEED();
}

}  // namespace
}  // namespace tessera::io
