// main() for distributed gtest binaries: starts the communication runtime, runs the tests on
// every rank (rank 0 prints gtest's usual report, other ranks print only their failures, prefixed
// with the rank), makes every rank agree on the result (any failure anywhere fails the job) and
// shuts the runtime down.
//   int main(int argc, char** argv) { return tessera::testing::run_distributed_tests(argc, argv); }
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "tessera/comm/parallel_state.h"
#include "tessera/comm/process_group.h"
#include "tessera/core/tensor.h"

namespace tessera::testing {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

// A mesh whose tensor-parallel group is the whole world, built collectively (each test builds its
// own and drops it before the runtime shuts down).
inline std::unique_ptr<comm::ParallelState> tensor_parallel_world_mesh() {
  auto world = comm::ProcessGroup::world();
  return std::make_unique<comm::ParallelState>(
      world, comm::MeshLayout(world->size(), {.tensor = world->size()}));
}

// Two float arrays agree to rtol of the first's largest magnitude (plus 1e-6), and it is not all
// zero (a comparison of zeros would pass blind). `what` names the quantity in failures.
inline void expect_close_to_scale(const float* u, const float* v, int64_t n,
                                  const std::string& what, double rtol) {
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(double(u[i]) - v[i]));
    scale = std::max(scale, std::fabs(double(u[i])));
  }
  EXPECT_LE(worst, rtol * scale + 1e-6) << what << " (scale " << scale << ")";
  EXPECT_GT(scale, 0.0) << what;
}

inline int run_distributed_tests(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto world = comm::ProcessGroup::world();
  if (world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world->rank()));
  }
  int rc = RUN_ALL_TESTS() != 0 ? 1 : 0;
  Tensor t = Tensor::empty({1}, DType::kI32);
  t.data<int32_t>()[0] = rc;
  world->all_reduce(t, comm::ReduceOp::kMax).wait();
  rc = t.data<int32_t>()[0];
  world.reset();
  comm::shutdown();
  return rc;
}

}  // namespace tessera::testing
