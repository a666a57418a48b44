// Optimizer state on NVMe: the storage against a plain vector (every combination of sub-group
// size, buffers, pipelining, fast init and I/O backend), the optimizer with its state on NVMe
// against the same optimizer in memory (bitwise), I/O errors surfacing with the file named, and
// the swap directory's life (removed at exit, a dead run's removed by the next, a live one kept).
// The swap files are on the repository's file system (the test's working directory), not tmpfs,
// which accepts unaligned direct I/O.
#include "tessera/offload/nvme_state_storage.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "io/io_test_util.h"
#include "tessera/core/error.h"
#include "tessera/model/gpt_model.h"
#include "tessera/optim/optimizer.h"

namespace tessera::offload {
namespace {
namespace fs = std::filesystem;
using io::testing::ScratchDir;

// The value array k of element i starts from.
float initial(int k, int64_t i) { return static_cast<float>(k * 1000003 + i) * 0.25f; }

struct Case {
  int64_t sub_group;
  int buffers;
  bool pipeline_read, pipeline_write, fast_init;
  io::IoBackend backend;
};

// Each test's scratch directory (on the repository's file system), the I/O engine of the case's
// back end, and the case's storage options.
class NvmeStateStorageTest : public ::testing::TestWithParam<Case> {
 protected:
  NvmeStateOptions options() const {
    const Case& c = GetParam();
    return NvmeStateOptions{c.sub_group, c.buffers, c.pipeline_read, c.pipeline_write, c.fast_init};
  }
  ScratchDir scratch_;
  SwapDirectory dir_{scratch_.path(), "test", "nvme_path"};
  SwapIo io_{io::AioConfig{4096 * 4, 3, 2, false, true}, GetParam().backend};
};

TEST_P(NvmeStateStorageTest, VisitsEqualAVectorInMemory) {
  const Case c = GetParam();
  NvmeStateStorage storage(dir_, io_, "state.swp", options());
  // An odd size: the last sub-group is short and not a multiple of the alignment.
  const int64_t n = 10'001;
  const int arrays = 3;
  int64_t init_calls = 0;
  storage.initialize(n, arrays, [&](const optim::StateStorage::Window& w) {
    ++init_calls;
    for (int k = 0; k < arrays; ++k)
      for (int64_t i = w.begin; i < w.end; ++i) w.arrays[k][i - w.begin] = initial(k, i);
  });
  EXPECT_EQ(init_calls, c.fast_init ? 0 : storage.sub_groups());
  std::vector<std::vector<float>> ref(arrays, std::vector<float>(n));
  for (int k = 0; k < arrays; ++k)
    for (int64_t i = 0; i < n; ++i) ref[k][i] = initial(k, i);

  std::mt19937 rng(7);
  for (int pass = 0; pass < 3; ++pass) {
    const float add = static_cast<float>(rng() % 100) - 50.0f;
    // As the trainer does before a forward pass: the first sub-groups read ahead (past the
    // last pass's writes still in flight).
    if (pass > 0) storage.prefetch();
    int64_t next = 0;
    storage.for_each_window(optim::StateAccess::kReadWrite,
                            [&](const optim::StateStorage::Window& w) {
                              ASSERT_EQ(w.begin, next);  // consecutive, in order
                              ASSERT_LE(w.end - w.begin, storage.sub_group_elems());
                              next = w.end;
                              for (int k = 0; k < arrays; ++k)
                                for (int64_t i = w.begin; i < w.end; ++i) {
                                  ASSERT_EQ(w.arrays[k][i - w.begin], ref[k][i])
                                      << "pass " << pass << " array " << k << " element " << i;
                                  w.arrays[k][i - w.begin] += add * (k + 1);
                                }
                            });
    ASSERT_EQ(next, n);
    for (int k = 0; k < arrays; ++k)
      for (int64_t i = 0; i < n; ++i) ref[k][i] += add * (k + 1);
  }
  // A read-only visit changes nothing on disk.
  storage.for_each_window(optim::StateAccess::kRead, [&](const optim::StateStorage::Window& w) {
    for (int64_t i = w.begin; i < w.end; ++i) w.arrays[0][i - w.begin] = -1.0f;
  });
  storage.for_each_window(optim::StateAccess::kRead, [&](const optim::StateStorage::Window& w) {
    for (int k = 0; k < arrays; ++k)
      for (int64_t i = w.begin; i < w.end; ++i) ASSERT_EQ(w.arrays[k][i - w.begin], ref[k][i]);
  });
  const SwapIo::Counters counters = io_.counters();
  EXPECT_GT(counters.read_bytes, 0);
  EXPECT_GT(counters.write_bytes, 0);
  EXPECT_GE(counters.busy_s, counters.exposed_s);
}

// The step's gradients held by the storage: handed over in pieces of any size, in a shuffled
// order, across the chunks of the gradient file (chunks of one alignment block here, so pieces
// straddle them and leave gaps that later pieces fill), some deferred and handed over last;
// each step's windows carry exactly the values stored for it, also in sub-groups the state read
// ahead before they were stored.
TEST_P(NvmeStateStorageTest, StepsReadTheGradientsStoredForThem) {
  NvmeStateOptions o = options();
  o.gradients = true;
  o.gradient_chunk_bytes = 1;  // rounded up to the alignment
  NvmeStateStorage storage(dir_, io_, "state.swp", o);
  ASSERT_TRUE(storage.holds_gradients());
  const int64_t n = 10'001;
  storage.initialize(n, 2, [&](const optim::StateStorage::Window& w) {
    for (float* a : w.arrays) std::fill(a, a + (w.end - w.begin), 0.0f);
  });
  std::vector<float> state(n, 0.0f);
  std::mt19937 rng(5);
  for (int pass = 0; pass < 3; ++pass) {
    if (pass > 0) storage.prefetch();  // before the gradients exist, as the trainer does
    std::vector<float> grads(n);
    for (int64_t i = 0; i < n; ++i) grads[i] = static_cast<float>(pass * 100003 + i) * 0.5f;
    std::vector<std::pair<int64_t, int64_t>> pieces;
    for (int64_t at = 0; at < n;) {
      const int64_t len = std::min<int64_t>(n - at, 1 + rng() % 3000);
      pieces.emplace_back(at, len);
      at += len;
    }
    std::shuffle(pieces.begin(), pieces.end(), rng);
    // Every fourth piece is announced first and handed over after all the others (written
    // into the file through the blocks around it).
    for (size_t k = 0; k < pieces.size(); ++k) {
      const auto [at, len] = pieces[k];
      if (k % 4 == 1) {
        storage.defer_gradients(at, len);
      } else {
        storage.store_gradients(at, grads.data() + at, len);
      }
    }
    for (size_t k = 1; k < pieces.size(); k += 4)
      storage.store_gradients(pieces[k].first, grads.data() + pieces[k].first, pieces[k].second);
    storage.gradients_stored();
    int64_t next = 0;
    storage.for_each_window(optim::StateAccess::kStep, [&](const optim::StateStorage::Window& w) {
      ASSERT_EQ(w.begin, next);
      next = w.end;
      ASSERT_NE(w.grads, nullptr);
      for (int64_t i = w.begin; i < w.end; ++i) {
        ASSERT_EQ(w.grads[i - w.begin], grads[i]) << "pass " << pass << " element " << i;
        ASSERT_EQ(w.arrays[0][i - w.begin], state[i]);
        w.arrays[0][i - w.begin] += w.grads[i - w.begin];
      }
    });
    ASSERT_EQ(next, n);
    for (int64_t i = 0; i < n; ++i) state[i] += grads[i];
    // Other visits carry none.
    storage.for_each_window(optim::StateAccess::kRead, [&](const optim::StateStorage::Window& w) {
      EXPECT_EQ(w.grads, nullptr);
    });
  }
  // A step uses its gradients once; one gradient not stored: stale values are never read.
  // "fast": the child dies at the check, before any I/O, leaving the parent's scratch directory
  // to it (a re-executed child would leave its own behind).
  GTEST_FLAG_SET(death_test_style, "fast");
  EXPECT_DEATH(storage.for_each_window(optim::StateAccess::kStep, [](const auto&) {}),
               "a step before its gradients were stored");
  storage.store_gradients(0, state.data(), n - 1);
  EXPECT_DEATH(storage.gradients_stored(), "not every owned gradient was stored");
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, NvmeStateStorageTest,
    ::testing::Values(Case{1000, 2, false, false, false, io::IoBackend::kThreads},
                      Case{1000, 2, true, true, false, io::IoBackend::kUring},
                      Case{3000, 3, true, false, true, io::IoBackend::kThreads},
                      Case{3000, 4, false, true, false, io::IoBackend::kUring},
                      Case{1000, 4, true, true, true, io::IoBackend::kThreads},
                      Case{1'000'000'000, 2, true, true, false, io::IoBackend::kUring}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return "group" + std::to_string(c.sub_group) + "_buffers" + std::to_string(c.buffers) +
             (c.pipeline_read ? "_read" : "") + (c.pipeline_write ? "_write" : "") +
             (c.fast_init ? "_fastinit" : "") +
             (c.backend == io::IoBackend::kUring ? "_uring" : "_threads");
    });

// The optimizer with its state on NVMe takes the same steps as in memory, bit for bit: bf16
// compute (separate master weights) and fp32 (the master is the model's buffer), sharded over
// ranges that cut parameters, with sub-groups far smaller than a parameter.
// With `gradients` the storage holds them: the flat buffer's owned gradients are stored (last
// range first, as the boundary hands them over) and zeroed before each step.
void expect_same_steps(DType dtype, const std::string& kind, bool gradients = false) {
  ScratchDir scratch;
  model::ModelConfig cfg = model::preset("gpt2-tiny");
  model::GPTModel a(cfg, dtype, 1), b(cfg, dtype, 1);
  const int64_t n = a.params().numel();
  const optim::Optimizer::Ranges owned = {{5, n / 3}, {n / 2 + 7, n - 3}};
  optim::OptimizerOptions options{kind, 0.9, 0.95, 1e-8, 0.9, 0.1};
  optim::Optimizer in_memory(a.params(), options, owned);
  SwapDirectory dir(scratch.path(), "opt", "nvme_path");
  SwapIo io(io::AioConfig{}, io::IoBackend::kAuto);
  NvmeStateOptions nvme{1500, 3, true, true, false};
  nvme.gradients = gradients;
  auto storage = std::make_unique<NvmeStateStorage>(dir, io, "opt.swp", nvme);
  NvmeStateStorage& held = *storage;
  optim::Optimizer on_nvme(b.params(), options, owned, std::move(storage));
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int step = 0; step < 3; ++step) {
    for (int64_t i = 0; i < n; ++i) {
      const float g = normal(rng);
      a.params().flat_grads().data<float>()[i] = g;
      b.params().flat_grads().data<float>()[i] = g;
    }
    if (gradients) {
      float* g = b.params().flat_grads().data<float>();
      const int64_t second = owned[0].second - owned[0].first;
      held.store_gradients(second, g + owned[1].first, owned[1].second - owned[1].first);
      held.store_gradients(0, g + owned[0].first, second);
      held.gradients_stored();
      std::fill(g, g + n, 0.0f);
    }
    in_memory.step(1e-2, 0.5f);
    on_nvme.step(1e-2, 0.5f);
  }
  const size_t bytes = n * dtype_size(dtype);
  EXPECT_EQ(std::memcmp(a.params().flat_values().raw(), b.params().flat_values().raw(), bytes), 0);
  const Tensor ma = in_memory.owned_master(), mb = on_nvme.owned_master();
  EXPECT_EQ(std::memcmp(ma.raw(), mb.raw(), ma.numel() * 4), 0);
  // The parameter norm's sum of squares runs per piece on NVMe (the sum's order, not its terms,
  // differs): equal to double rounding.
  const double ssq = in_memory.master_sum_squares({{0, n}});
  EXPECT_NEAR(on_nvme.master_sum_squares({{0, n}}), ssq, 1e-13 * ssq);
}

TEST(NvmeOptimizer, AdamWBf16EqualsInMemoryBitwise) { expect_same_steps(DType::kBF16, "adam"); }
TEST(NvmeOptimizer, AdamWFp32EqualsInMemoryBitwise) { expect_same_steps(DType::kF32, "adam"); }
TEST(NvmeOptimizer, SgdBf16EqualsInMemoryBitwise) { expect_same_steps(DType::kBF16, "sgd"); }
TEST(NvmeOptimizer, AdamWBf16WithTheGradientsOnNvmeEqualsInMemoryBitwise) {
  expect_same_steps(DType::kBF16, "adam", true);
}
TEST(NvmeOptimizer, AdamWFp32WithTheGradientsOnNvmeEqualsInMemoryBitwise) {
  expect_same_steps(DType::kF32, "adam", true);
}

// DeepSpeed's default sub-group (1e9 elements) over a state that large makes buffers of 12 GB
// each; more than the host has is one line naming the setting before anything is allocated or
// written (here 1e12 elements: 48 TB of buffers).
TEST(NvmeStateStorage, BuffersLargerThanTheHostAreRefusedNamingTheSetting) {
  ScratchDir scratch;
  SwapDirectory dir(scratch.path(), "big", "nvme_path");
  SwapIo io(io::AioConfig{}, io::IoBackend::kThreads);
  NvmeStateStorage storage(dir, io, "state.swp",
                           NvmeStateOptions{1'000'000'000'000, 4, false, false, true});
  try {
    storage.initialize(1'000'000'000'000, 3, [](const optim::StateStorage::Window&) {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("need 48000.0 GB of host memory"), std::string::npos) << what;
    EXPECT_NE(what.find("--offload-sub-group-size"), std::string::npos) << what;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("state.swp")));
  // Buffers one rank can hold (48 MB), times the ranks sharing the host: 48 TB.
  NvmeStateOptions shared{1'000'000, 4, false, false, true};
  shared.ranks_on_host = 1'000'000;
  NvmeStateStorage crowded(dir, io, "crowded.swp", shared);
  try {
    crowded.initialize(1'000'000'000, 3, [](const optim::StateStorage::Window&) {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("GB of host memory for the 1000000 ranks there"), std::string::npos)
        << what;
  }
}

TEST(NvmeStateStorage, AnIoErrorNamesTheFileAndLeavesTheStorageUsable) {
  ScratchDir scratch;
  SwapDirectory dir(scratch.path(), "err", "nvme_path");
  SwapIo io(io::AioConfig{}, io::IoBackend::kThreads);
  NvmeStateStorage storage(dir, io, "state.swp", NvmeStateOptions{1024, 2, true, true, false});
  storage.initialize(5000, 2, [](const optim::StateStorage::Window& w) {
    for (float* a : w.arrays) std::fill(a, a + (w.end - w.begin), 1.0f);
  });
  io::set_thread_io_fault_injector([](const io::IoRequest& piece) {
    return !piece.write && piece.offset > 0 ? EIO : 0;  // reads past the first sub-group fail
  });
  try {
    storage.for_each_window(optim::StateAccess::kReadWrite, [](const auto&) {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(dir.file("state.swp")), std::string::npos) << what;
    EXPECT_NE(what.find("Input/output error"), std::string::npos) << what;
  }
  io::set_thread_io_fault_injector(nullptr);
  float sum = 0;
  storage.for_each_window(optim::StateAccess::kRead, [&](const optim::StateStorage::Window& w) {
    for (int64_t i = w.begin; i < w.end; ++i) sum += w.arrays[1][i - w.begin];
  });
  EXPECT_EQ(sum, 5000.0f);
}

TEST(SwapDirectory, RemovedAtExitAndADeadRunsRemovedByTheNext) {
  ScratchDir scratch;
  std::string mine;
  {
    SwapDirectory dir(scratch.path(), "a", "nvme_path");
    mine = dir.path();
    EXPECT_TRUE(fs::is_directory(mine));
    // A live run's directory survives another run's scan.
    EXPECT_EQ(SwapDirectory::remove_stale(scratch.path()), 0);
    EXPECT_TRUE(fs::is_directory(mine));
  }
  EXPECT_FALSE(fs::exists(mine));
  // A child makes its directory and dies without cleaning up (as a killed run).
  const pid_t child = fork();
  if (child == 0) {
    SwapDirectory dir(scratch.path(), "dead", "nvme_path");
    std::ofstream(dir.file("x.swp")) << "state";
    _exit(0);  // no destructors
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  int leftovers = 0;
  for (const auto& e : fs::directory_iterator(scratch.path())) leftovers += e.is_directory();
  ASSERT_EQ(leftovers, 1);
  SwapDirectory next(scratch.path(), "b", "nvme_path");
  int left = 0;
  for (const auto& e : fs::directory_iterator(scratch.path())) left += e.is_directory();
  EXPECT_EQ(left, 1);  // only `next`
  EXPECT_TRUE(fs::is_directory(next.path()));
}

TEST(SwapDirectory, BadPathsAreOneLineNamingTheSetting) {
  ScratchDir scratch;
  try {
    SwapDirectory dir(scratch.path() + "/missing", "a", "offload_optimizer.nvme_path");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("offload_optimizer.nvme_path \"" + scratch.path() +
                                         "/missing\" does not exist"),
              std::string::npos)
        << e.what();
  }
  SwapDirectory dir(scratch.path(), "a", "nvme_path");
  EXPECT_THROW(dir.check_space(int64_t{1} << 62, "the swap files"), Error);
  EXPECT_NO_THROW(dir.check_space(4096, "the swap files"));
}

}  // namespace
}  // namespace tessera::offload
