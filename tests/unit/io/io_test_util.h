// Helpers of the io/ tests. Files live in a fresh directory of the file system the tests run on
// (the build tree), not under $TMPDIR: tmpfs accepts unaligned O_DIRECT, so alignment and direct
// I/O are only exercised on a disk file system.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "testing/temp_dir.h"

namespace tessera::io::testing {

// A fresh directory under the current directory (the build tree: a real disk, not tmpfs),
// removed with its contents by the destructor.
class ScratchDir : public tessera::testing::TempDir {
 public:
  ScratchDir() : TempDir(std::filesystem::current_path().string(), "io-test") {}
};

// Reproducible random bytes.
inline void fill_random(void* data, int64_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto* p = static_cast<unsigned char*>(data);
  for (int64_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(rng() >> 56);
}

// The reference side of every round trip: plain buffered I/O through the page cache.
inline std::vector<char> read_with_ifstream(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

inline void write_with_ofstream(const std::string& path, const void* data, int64_t bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

// Runs `body` (returning an exit code, 0 for success) in a forked child with gtest's death-test
// machinery, for what must not touch the test process (resource limits, seccomp filters); what
// the child prints to stderr is shown when it fails. `body` is a variable: a lambda written in
// the macro's argument would be cut at its commas.
#define EXPECT_IN_CHILD_PROCESS(body) \
  EXPECT_EXIT(std::_Exit((body)()), ::testing::ExitedWithCode(0), "")

}  // namespace tessera::io::testing
