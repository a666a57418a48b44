// The watchdog and abort_job. Run by ctest as an ordinary distributed test (an operation slower
// than its neighbours but inside the timeout is not aborted; settings are validated). With
// --scenario=NAME it instead plays one failure for tests/cli/watchdog.sh, which runs it under
// mpirun and checks the exit code and the message:
//   stuck          rank 1 never reaches an all_reduce (sleeps); timeout 1 s
//   stuck_subgroup on 4 ranks, world rank 3 never reaches an all_reduce on its "tp" group [2,3]
//   stuck_recv     rank 0 receives from rank 1, which never sends; timeout 1 s
//   killed         rank 1 kills itself (SIGKILL) before an all_reduce
//   abort_all      every rank calls abort_job (a user error all ranks detect)
//   abort_one      only rank 1 calls abort_job; rank 0 waits in a barrier
// ranks: 2
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "dist_main.h"
#include "tessera/comm/process_group.h"
#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera::comm {
namespace {

TEST(Watchdog, SlowRankInsideTheTimeoutIsNotAborted) {
  auto w = ProcessGroup::world();
  const double saved = ProcessGroup::timeout();
  ProcessGroup::set_timeout(5);
  if (w->rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Tensor t = Tensor::zeros({4}, DType::kF32);
  t.data<float>()[0] = 1;
  w->all_reduce(t, ReduceOp::kSum).wait();
  EXPECT_EQ(t.data<float>()[0], static_cast<float>(w->size()));
  ProcessGroup::set_timeout(saved);
}

TEST(Watchdog, SettingsAreValidated) {
  EXPECT_THROW(ProcessGroup::set_timeout(0), Error);
  EXPECT_THROW(ProcessGroup::set_timeout(-3), Error);
  EXPECT_EQ(ProcessGroup::timeout(), 60.0);
}

void sleep_s(int s) { std::this_thread::sleep_for(std::chrono::seconds(s)); }

int run_scenario(const std::string& name) {
  auto w = ProcessGroup::world();
  const int me = w->rank();
  Tensor t = Tensor::zeros({16}, DType::kF32);
  if (name == "stuck") {
    ProcessGroup::set_timeout(1);
    if (me == 1) sleep_s(60);
    w->all_reduce(t, ReduceOp::kSum).wait();
  } else if (name == "stuck_subgroup") {
    ProcessGroup::set_timeout(1);
    auto tp = w->new_subgroups({{0, 1}, {2, 3}}, "tp");
    if (me == 3) sleep_s(60);
    tp->all_reduce(t, ReduceOp::kSum).wait();
  } else if (name == "stuck_recv") {
    ProcessGroup::set_timeout(1);
    if (me == 0) w->recv(t, 1).wait();
    if (me == 1) sleep_s(60);
  } else if (name == "killed") {
    ProcessGroup::set_timeout(30);
    w->barrier().wait();
    if (me == 1) std::raise(SIGKILL);
    w->all_reduce(t, ReduceOp::kSum).wait();
  } else if (name == "abort_all") {
    abort_job("error: --widget-size 7 is not divisible by 2", kUserErrorExitCode);
  } else if (name == "abort_one") {
    if (me == 1) abort_job("error: rank 1 cannot read data.bin", kUserErrorExitCode);
    w->barrier().wait();
  } else {
    std::fprintf(stderr, "unknown scenario '%s'\n", name.c_str());
    return 1;
  }
  shutdown();
  return 0;  // not reached in any scenario but a broken watchdog's
}

}  // namespace
}  // namespace tessera::comm

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--scenario=", 11) == 0) {
      return tessera::comm::run_scenario(argv[i] + 11);
    }
  }
  tessera::comm::ProcessGroup::world();
  tessera::comm::ProcessGroup::set_timeout(60);
  return tessera::testing::run_distributed_tests(argc, argv);
}
