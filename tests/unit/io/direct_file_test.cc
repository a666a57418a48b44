#include "tessera/io/direct_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "io/io_test_util.h"
#include "tessera/core/error.h"
#include "tessera/io/aligned_buffer.h"

namespace tessera::io {
namespace {

using testing::ScratchDir;

bool power_of_two(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

TEST(DirectIoAlignment, IsAPowerOfTwoOnTheTestFileSystem) {
  ScratchDir dir;
  const DirectIoAlignment of_dir = direct_io_alignment(dir.path());
  DirectFile file = DirectFile::create(dir.file("f"), 4096);
  for (const DirectIoAlignment& a : {of_dir, direct_io_alignment(file.path()), file.alignment()}) {
    // Offsets: at least a logical sector. Memory: statx's dio_mem_align is the device's DMA
    // alignment, which may be below 512 (4 on some NVMe devices); only a power of two is certain.
    EXPECT_TRUE(power_of_two(a.offset) && a.offset >= 512) << a.offset;
    EXPECT_TRUE(power_of_two(a.memory)) << a.memory;
  }
}

TEST(DirectIoAlignment, MissingPathIsAnErrorNamingIt) {
  ScratchDir dir;
  const std::string missing = dir.file("missing");
  try {
    direct_io_alignment(missing);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos);
  }
}

TEST(AlignUp, RoundsUpToMultiples) {
  EXPECT_EQ(align_up(0, 512), 0);
  EXPECT_EQ(align_up(1, 512), 512);
  EXPECT_EQ(align_up(512, 512), 512);
  EXPECT_EQ(align_up(513, 4096), 4096);
  EXPECT_EQ(align_up(int64_t{5} << 32, 4096), int64_t{5} << 32);
}

TEST(DirectFile, CreateReservesTheSizeAndOpenReadsIt) {
  ScratchDir dir;
  const std::string path = dir.file("reserved");
  {
    DirectFile file = DirectFile::create(path, 5 << 20);
    EXPECT_GE(file.fd(), 0);
    EXPECT_EQ(file.size(), 5 << 20);
    EXPECT_TRUE(file.writable());
    DirectFile moved = std::move(file);
    EXPECT_EQ(file.fd(), -1);
    EXPECT_EQ(moved.path(), path);
  }
  EXPECT_EQ(std::filesystem::file_size(path), 5u << 20);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_GE(st.st_blocks * 512, 5 << 20) << "fallocate reserved the blocks";
  DirectFile reopened = DirectFile::open(path, /*writable=*/false);
  EXPECT_EQ(reopened.size(), 5 << 20);
  EXPECT_FALSE(reopened.writable());
  EXPECT_TRUE(fcntl(reopened.fd(), F_GETFL) & O_DIRECT);
}

TEST(DirectFile, OpeningAMissingFileNamesIt) {
  ScratchDir dir;
  const std::string path = dir.file("missing");
  try {
    DirectFile::open(path, false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot open " + path + " for direct I/O: No such file or directory");
  }
}

// A full disk, simulated by the file size limit (RLIMIT_FSIZE) in a child process: fallocate
// then fails with EFBIG as it would with ENOSPC, and create() says so naming the path and size,
// and leaves no file behind.
TEST(DirectFile, CreateBeyondTheSpaceAllowedIsOneErrorNamingThePath) {
  ScratchDir dir;
  const std::string path = dir.file("too-big");
  auto child = [&] {
    std::signal(SIGXFSZ, SIG_IGN);  // else the kernel kills the process instead of EFBIG
    const rlimit limit{1 << 20, 1 << 20};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) return 10;
    try {
      DirectFile::create(path, 64 << 20);
      std::cerr << "no error\n";
      return 1;
    } catch (const Error& e) {
      const std::string expected =
          "cannot reserve 67108864 bytes for " + path + ": " + std::strerror(EFBIG);
      if (e.what() != expected) {
        std::cerr << "got      " << e.what() << "\nexpected " << expected << "\n";
        return 2;
      }
    }
    if (std::filesystem::exists(path)) {
      std::cerr << path << " was left behind\n";
      return 3;
    }
    return 0;
  };
  EXPECT_IN_CHILD_PROCESS(child);
}

// What the alignment checks of AsyncIo guard against: ext4 refuses an O_DIRECT write at an
// offset that is not a multiple of its alignment. Other file systems may accept it (tmpfs does),
// so the test runs on ext4 only.
TEST(DirectFile, Ext4RefusesAnUnalignedDirectWrite) {
  ScratchDir dir;
  struct statfs fs {};
  ASSERT_EQ(::statfs(dir.path().c_str(), &fs), 0);
  constexpr long kExt4Magic = 0xEF53;
  if (fs.f_type != kExt4Magic) GTEST_SKIP() << "not ext4: the refusal is ext4's";
  DirectFile file = DirectFile::create(dir.file("f"), 1 << 16);
  const DirectIoAlignment a = file.alignment();
  AlignedBuffer buffer(a.offset, a.memory, MemoryCategory::kOther);
  ASSERT_EQ(::pwrite(file.fd(), buffer.data(), a.offset, a.offset), a.offset) << "aligned works";
  errno = 0;
  EXPECT_EQ(::pwrite(file.fd(), buffer.data(), a.offset, a.offset / 2), -1);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace tessera::io
