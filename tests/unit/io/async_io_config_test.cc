// AioConfig validation and the choice of backend, including the fall back to threads when the
// kernel refuses io_uring, produced for real by a seccomp filter as Docker's default profile does.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <iostream>

#include "io/io_test_util.h"
#include "tessera/core/error.h"
#include "tessera/io/async_io.h"
#include "tessera/io/uring_io.h"

namespace tessera::io {
namespace {

std::string validation_error(void (*change)(AioConfig&)) {
  AioConfig config;
  change(config);
  try {
    validate(config);
  } catch (const Error& e) {
    return e.what();
  }
  return "valid";
}

TEST(AioConfig, DefaultsAreDeepSpeeds) {
  const AioConfig config;
  EXPECT_EQ(config.block_size, 1048576);
  EXPECT_EQ(config.queue_depth, 8);
  EXPECT_EQ(config.intra_op_parallelism, 1);
  EXPECT_FALSE(config.single_submit);
  EXPECT_TRUE(config.overlap_events);
  EXPECT_NO_THROW(validate(config));
}

TEST(AioConfig, EachOutOfRangeKeyIsOneErrorNamingIt) {
  const std::string block =
      ": expected a positive multiple of 4096 bytes (DeepSpeed's default is 1048576)";
  EXPECT_EQ(validation_error([](AioConfig& c) { c.block_size = 0; }),
            "aio.block_size is 0" + block);
  EXPECT_EQ(validation_error([](AioConfig& c) { c.block_size = 1000; }),
            "aio.block_size is 1000" + block);
  EXPECT_EQ(validation_error([](AioConfig& c) { c.block_size = -4096; }),
            "aio.block_size is -4096" + block);
  EXPECT_EQ(validation_error([](AioConfig& c) { c.queue_depth = 0; }),
            "aio.queue_depth is 0: expected an integer from 1 to 1024");
  EXPECT_EQ(validation_error([](AioConfig& c) { c.queue_depth = 1025; }),
            "aio.queue_depth is 1025: expected an integer from 1 to 1024");
  EXPECT_EQ(validation_error([](AioConfig& c) { c.intra_op_parallelism = 0; }),
            "aio.intra_op_parallelism is 0: expected an integer from 1 to 64");
  EXPECT_EQ(validation_error([](AioConfig& c) { c.intra_op_parallelism = 65; }),
            "aio.intra_op_parallelism is 65: expected an integer from 1 to 64");
  EXPECT_EQ(validation_error([](AioConfig& c) { c.queue_depth = 1024; }), "valid");
  EXPECT_EQ(validation_error([](AioConfig& c) { c.block_size = 4096; }), "valid");
  AioConfig bad;
  bad.queue_depth = 0;
  EXPECT_THROW(make_async_io(bad, IoBackend::kThreads), Error);
}

TEST(MakeAsyncIo, AutoPicksIoUringWhenTheKernelAllowsIt) {
  std::string why;
  if (make_uring_io(AioConfig{}, &why) == nullptr) GTEST_SKIP() << why;
  std::string fallback = "untouched";
  EXPECT_STREQ(make_async_io(AioConfig{}, IoBackend::kAuto, &fallback)->name(), "io_uring");
  EXPECT_EQ(fallback, "untouched");
  EXPECT_STREQ(make_async_io(AioConfig{}, IoBackend::kThreads)->name(), "threads");
}

// Makes io_uring_setup fail with `err` in this process from now on, as a seccomp profile does.
bool refuse_io_uring_setup(int err) {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K,
               SECCOMP_RET_ERRNO | (static_cast<unsigned>(err) & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

// In a child process whose io_uring_setup fails with `err`: kAuto gives a working thread pool
// and says why, naming strerror(err); kUring is an error with the same reason.
int expect_fallback(int err, const std::string& dir) {
  if (!refuse_io_uring_setup(err)) {
    std::cerr << "cannot install the seccomp filter: " << std::strerror(errno) << "\n";
    return 10;
  }
  const std::string reason = std::string("io_uring_queue_init failed: ") + std::strerror(err);
  std::string why;
  auto io = make_async_io(AioConfig{}, IoBackend::kAuto, &why);
  if (std::string(io->name()) != "threads" ||
      why.rfind("io_uring is unavailable, using the thread pool of pread/pwrite: " + reason, 0) !=
          0) {
    std::cerr << "kAuto gave " << io->name() << ", why: " << why << "\n";
    return 1;
  }
  DirectFile file = DirectFile::create(dir + "/fallback", 1 << 20);
  AlignedBuffer buffer(1 << 20, 4096, MemoryCategory::kOther);
  testing::fill_random(buffer.data(), 1 << 20, 3);
  io->wait(io->submit({&file, buffer.data(), 1 << 20, 0, true}));
  if (testing::read_with_ifstream(file.path()) !=
      std::vector<char>(buffer.as<char>(), buffer.as<char>() + (1 << 20))) {
    std::cerr << "the fallback engine wrote other bytes\n";
    return 2;
  }
  try {
    make_async_io(AioConfig{}, IoBackend::kUring);
    std::cerr << "kUring gave an engine\n";
    return 3;
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("aio: io_uring is unavailable: " + reason, 0) != 0) {
      std::cerr << "kUring: " << e.what() << "\n";
      return 4;
    }
  }
  std::cerr << why << "\n";
  return 0;
}

TEST(MakeAsyncIo, AutoFallsBackToThreadsWhenIoUringIsNotPermitted) {
  testing::ScratchDir dir;
  auto child = [&] { return expect_fallback(EPERM, dir.path()); };
  EXPECT_IN_CHILD_PROCESS(child);
}

TEST(MakeAsyncIo, AutoFallsBackToThreadsWhenIoUringIsNotImplemented) {
  testing::ScratchDir dir;
  auto child = [&] { return expect_fallback(ENOSYS, dir.path()); };
  EXPECT_IN_CHILD_PROCESS(child);
}

}  // namespace
}  // namespace tessera::io
