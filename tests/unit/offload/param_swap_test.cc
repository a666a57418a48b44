// ZeRO 3 parameters on NVMe: odd-sized parts written out and read back bit for bit (pieces
// smaller than a part, fewer buffers than pieces, reads ahead cancelled to make room), the
// parts max_in_cpu keeps in memory never touched, and an I/O error naming the swap file. The
// swap files are on the repository's file system (the test's working directory), not tmpfs,
// which accepts unaligned direct I/O.
#include "tessera/offload/param_swap.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/memory.h"

namespace tessera::offload {
namespace {
namespace fs = std::filesystem;

// A fresh directory under the working directory, removed at the end.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    path = (fs::current_path() / ("param-swap-test." + std::to_string(::getpid()))).string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
};

constexpr int64_t kElems = 20'011;

// The bf16 elements of `t` as raw bits.
uint16_t* bits(Tensor& t) { return static_cast<uint16_t*>(t.raw()); }
const uint16_t* bits(const Tensor& t) { return static_cast<const uint16_t*>(t.raw()); }
// Unit u's part: none, then odd sizes and offsets (one element; one of 13011, many pieces), with
// gaps between them (other ranks' parts, persistent units) that the swap must never touch.
const std::vector<ParamSwap::Range> kParts = {
    {0, 0}, {3, 1003}, {1003, 5100}, {5100, 5101}, {7000, 20'011}};

Tensor random_bf16(uint64_t seed) {
  Tensor t = Tensor::empty({kElems}, DType::kBF16, MemoryCategory::kParams);
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < kElems; ++i) bits(t)[i] = static_cast<uint16_t>(rng());
  return t;
}

// Elements [b, e) of `t` equal those of `ref` bit for bit.
bool same(const Tensor& t, const std::vector<uint16_t>& ref, int64_t b, int64_t e) {
  return std::memcmp(bits(t) + b, ref.data() + b, (e - b) * 2) == 0;
}
bool zeros(const Tensor& t, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i)
    if (bits(t)[i] != 0) return false;
  return true;
}
std::vector<uint16_t> copy(const Tensor& t) { return {bits(t), bits(t) + kElems}; }

class ParamSwapTest : public ::testing::TestWithParam<io::IoBackend> {};

// A swap directory under a fresh scratch directory and a thread-pool engine with DeepSpeed's
// `aio` defaults: what most tests below swap through.
struct SwapBed {
  ScratchDir scratch;
  SwapDirectory dir{scratch.path, "param", "nvme_path"};
  SwapIo io{io::AioConfig{}, io::IoBackend::kThreads};
};

TEST_P(ParamSwapTest, OddPartsRoundTripBitwise) {
  ScratchDir scratch;
  SwapDirectory dir(scratch.path, "param", "nvme_path");
  SwapIo io(io::AioConfig{4096 * 2, 4, 2, false, true}, GetParam());
  // Pieces of 1500 elements, two buffers: the largest part is 9 pieces.
  ParamSwap swap(dir, io, "params.swp", ParamSwapOptions{2, 1500, 0});
  Tensor values = random_bf16(1);
  swap.initialize(values, kParts);
  EXPECT_FALSE(swap.swapped(0));
  for (int u = 1; u < 5; ++u) EXPECT_TRUE(swap.swapped(u)) << u;
  EXPECT_EQ(swap.swapped_units(), 4);
  EXPECT_EQ(swap.swapped_elems(), 1000 + 4097 + 1 + 13'011);
  EXPECT_EQ(swap.kept_elems(), 0);

  for (int round = 0; round < 2; ++round) {
    const std::vector<uint16_t> ref = copy(values);
    swap.write_out_all();
    // The large part's whole pages went back to the system (asked before reading them: a read
    // maps the zero page, which counts as resident).
    const int64_t page = sysconf(_SC_PAGESIZE);
    EXPECT_LE(resident_bytes(bits(values) + 7000, 13'011 * 2), 2 * page);
    for (int u = 1; u < 5; ++u)
      EXPECT_TRUE(zeros(values, kParts[u].first, kParts[u].second))
          << "round " << round << " " << u;
    // The gaps are not the swap's.
    EXPECT_TRUE(same(values, ref, 0, 3));
    EXPECT_TRUE(same(values, ref, 5101, 7000));

    // Reads ahead take both buffers (the large part does not fit: false); a wait for another
    // unit cancels the latest of them; every part comes back exact, in any order.
    EXPECT_FALSE(swap.start_read(4));
    EXPECT_FALSE(swap.start_read(2));
    swap.wait_read(3);
    swap.wait_read(1);
    swap.wait_read(4);
    swap.wait_read(2);
    for (int u = 1; u < 5; ++u)
      EXPECT_TRUE(same(values, ref, kParts[u].first, kParts[u].second)) << "round " << round;
    EXPECT_TRUE(swap.start_read(1));  // in memory: nothing to start
    // A released part is read again from the file, which still holds it.
    swap.release(1);
    EXPECT_TRUE(zeros(values, 3, 1003));
    EXPECT_TRUE(swap.start_read(1));
    swap.wait_read(1);
    EXPECT_TRUE(same(values, ref, 3, 1003));
    // Reads ahead cancelled before the parts change (an optimizer step) are not used.
    swap.release(4);
    EXPECT_FALSE(swap.start_read(4));
    swap.cancel_reads();
    // New values for every part, as the optimizer writes them (all owned elements).
    for (int u = 1; u < 5; ++u) {
      swap.wait_read(u);
      for (int64_t i = kParts[u].first; i < kParts[u].second; ++i)
        bits(values)[i] ^= static_cast<uint16_t>(0x5a5a + round);
    }
  }
  const SwapIo::Counters c = io.counters();
  EXPECT_GT(c.read_bytes, 0);
  EXPECT_GT(c.write_bytes, 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, ParamSwapTest,
                         ::testing::Values(io::IoBackend::kThreads, io::IoBackend::kUring),
                         [](const ::testing::TestParamInfo<io::IoBackend>& info) {
                           return info.param == io::IoBackend::kUring ? "uring" : "threads";
                         });

// As the optimizer's step passes the parts (flat order), write_out_through() writes each one out
// and gives its pages back at once, leaving the parts not passed yet in memory; write_out_all()
// then writes only the rest. Every part reads back as the step left it, step after step.
TEST(ParamSwap, WritingOutAsTheStepGoesReleasesEachPassedPart) {
  SwapBed bed;
  ParamSwap swap(bed.dir, bed.io, "params.swp", ParamSwapOptions{2, 1500, 0});
  Tensor values = random_bf16(4);
  swap.initialize(values, kParts);
  swap.write_out_all();
  const int64_t page = sysconf(_SC_PAGESIZE);
  for (int step = 0; step < 2; ++step) {
    // The step: every part in memory with new values.
    for (int u = 1; u < 5; ++u) {
      swap.wait_read(u);
      for (int64_t i = kParts[u].first; i < kParts[u].second; ++i)
        bits(values)[i] ^= static_cast<uint16_t>(0x1234 + step);
    }
    const std::vector<uint16_t> ref = copy(values);
    swap.write_out_through(1002);  // inside part 1: nothing passed yet
    EXPECT_TRUE(same(values, ref, 0, kElems));
    swap.write_out_through(5101);  // parts 1-3 passed
    EXPECT_TRUE(zeros(values, 3, 5101)) << step;
    EXPECT_TRUE(same(values, ref, 7000, kElems)) << step;  // part 4 still in memory
    EXPECT_GT(resident_bytes(bits(values) + 7000, 13'011 * 2), 2 * page);
    swap.write_out_through(5101);  // nothing more
    swap.write_out_all();          // part 4
    EXPECT_LE(resident_bytes(bits(values) + 7000, 13'011 * 2), 2 * page);
    EXPECT_TRUE(zeros(values, 7000, kElems));
    EXPECT_TRUE(same(values, ref, 0, 3));
    EXPECT_TRUE(same(values, ref, 5101, 7000));
    for (int u = 4; u >= 1; --u) swap.wait_read(u);
    EXPECT_TRUE(same(values, ref, 0, kElems)) << step;
  }
}

TEST(ParamSwap, MaxInCpuKeepsTheFirstPartsInMemory) {
  SwapBed bed;
  // Parts 1 and 2 (5097 elements) fit; part 3 would not, so it and all after it are swapped.
  ParamSwap swap(bed.dir, bed.io, "params.swp", ParamSwapOptions{2, 100'000'000, 5097});
  Tensor values = random_bf16(2);
  const std::vector<uint16_t> ref = copy(values);
  swap.initialize(values, kParts);
  EXPECT_FALSE(swap.swapped(1));
  EXPECT_FALSE(swap.swapped(2));
  EXPECT_TRUE(swap.swapped(3));
  EXPECT_TRUE(swap.swapped(4));
  EXPECT_EQ(swap.kept_elems(), 5097);
  swap.write_out_all();
  swap.release(1);  // kept in memory: nothing given back
  EXPECT_TRUE(same(values, ref, 0, 5100));
  EXPECT_TRUE(zeros(values, 7000, kElems));
  swap.wait_read(4);
  swap.wait_read(3);
  EXPECT_TRUE(same(values, ref, 0, kElems));
  // The file holds the swapped parts only (each piece aligned).
  EXPECT_LT(swap.file_bytes(), 2 * (1 + 13'011) + 2 * 65536);

  // A budget above everything swaps nothing: no file, no buffers.
  ParamSwap none(bed.dir, bed.io, "none.swp", ParamSwapOptions{2, 1000, kElems});
  Tensor other = random_bf16(3);
  none.initialize(other, kParts);
  for (int u = 0; u < 5; ++u) EXPECT_FALSE(none.swapped(u));
  EXPECT_EQ(none.file_bytes(), 0);
  EXPECT_EQ(none.buffer_bytes(), 0);
  EXPECT_FALSE(fs::exists(bed.dir.file("none.swp")));
}

TEST(ParamSwap, AnIoErrorNamesTheFileAndLeavesTheSwapUsable) {
  SwapBed bed;
  ParamSwap swap(bed.dir, bed.io, "params.swp", ParamSwapOptions{3, 2000, 0});
  Tensor values = random_bf16(4);
  const std::vector<uint16_t> ref = copy(values);
  swap.initialize(values, kParts);
  swap.write_out_all();
  io::set_thread_io_fault_injector([](const io::IoRequest& piece) {
    return piece.write ? 0 : EIO;  // every read fails
  });
  EXPECT_FALSE(swap.start_read(4));  // 7 pieces, 3 buffers
  try {
    swap.wait_read(4);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(bed.dir.file("params.swp")), std::string::npos) << what;
    EXPECT_NE(what.find("Input/output error"), std::string::npos) << what;
  }
  io::set_thread_io_fault_injector(nullptr);
  swap.wait_read(4);
  EXPECT_TRUE(same(values, ref, 7000, kElems));
}

}  // namespace
}  // namespace tessera::offload
