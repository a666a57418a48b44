// tessera-train's main: parse, bring up the runtime and the process mesh, train; every error is
// one line and exit code 2 on every rank.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "tessera/comm/hosts.h"
#include "tessera/comm/parallel_state.h"
#include "tessera/comm/process_group.h"
#include "tessera/core/threads.h"
#include "tessera/core/tool_main.h"
#include "tessera/kernels/build_info.h"
#include "tessera/train/deepspeed_config.h"
#include "tessera/train/offload_setup.h"
#include "tessera/train/rank_layout.h"
#include "tessera/train/sharding.h"
#include "tessera/train/trainer.h"

namespace tessera::train {

namespace {

// Brings up the runtime and checks the layout; returns nullptr when the run is done
// (--print-mesh).
std::unique_ptr<comm::ParallelState> setup_distributed(const TrainArgs& args) {
  auto world = comm::ProcessGroup::world();
  // The flags win when given; otherwise what the runtime read from TESSERA_DISTRIBUTED_TIMEOUT_
  // SECONDS and TESSERA_CHECK_COLLECTIVES (or its defaults) stands, so those variables work
  // with tessera-train as they do with every other program on the runtime.
  if (args.given(&TrainArgs::distributed_timeout_minutes))
    comm::ProcessGroup::set_timeout(args.distributed_timeout_minutes * 60.0);
  if (args.check_collectives) comm::ProcessGroup::set_check_collectives(true);
  const char* recorder_dir = std::getenv("TESSERA_FLIGHT_RECORDER_DIR");
  if (!args.flight_recorder_dir.empty())
    comm::ProcessGroup::set_flight_recorder(args.flight_recorder_dir, args.flight_recorder_size);
  else if (recorder_dir != nullptr && args.given(&TrainArgs::flight_recorder_size))
    comm::ProcessGroup::set_flight_recorder(recorder_dir, args.flight_recorder_size);
  const comm::ParallelConfig cfg = parallel_config(args);
  check_expert_tensor_parallel_size(args);
  const comm::MeshLayout layout(world->size(), cfg);  // tessera::Error on sizes that do not fit
  const std::vector<std::string> hosts = comm::gather_host_names(*world);
  if (args.print_mesh) {
    if (world->rank() == 0) std::printf("%s", comm::format_mesh(layout, hosts).c_str());
    return nullptr;
  }
  if (world->rank() == 0)
    for (const comm::HostSpan& span : comm::groups_spanning_hosts(layout, hosts))
      std::fprintf(stderr, "%s\n", comm::host_span_warning(span).c_str());
  if (layout.expert() > 1) args.model.validate_expert_parallel(layout.expert());
  return std::make_unique<comm::ParallelState>(world, layout);
}

}  // namespace

int train_main(int argc, const char* const* argv) {
  bool runtime_up = false;
  try {
    TrainArgs args;
    if (!parse_arguments(argc, argv, args)) return 0;
    resolve_argument_files(args);
    // Chosen before anything runs: an unknown TESSERA_CPU_TARGET is an error on every rank,
    // reported once (by launcher rank 0) like a bad flag.
    const std::string version = kernels::version_line();
    runtime_up = true;
    if (drop_sequence_parallel_without_tp(args) && launcher_rank() == 0)
      std::fprintf(stderr,
                   "warning: --sequence-parallel has no effect with "
                   "--tensor-model-parallel-size 1; turned off\n");
    auto state = setup_distributed(args);
    if (!state) {
      comm::shutdown();
      return 0;
    }
    const DeepSpeedApplied applied = apply_batch_arguments(args, state->layout().data());
    if (args.deepspeed && state->rank() == 0) print_deepspeed_report(applied);
    // Bad offload settings are refused before anything is built; "cpu" devices are noted.
    offload_plan(args, effective_zero_stage(args));
    for (const std::string& notice : offload_notices(args)) args.notices.push_back(notice);
    set_num_threads(args.num_threads);
    // Rank 0 reports for the job (Megatron's print_rank_0); the others' progress lines would
    // repeat it. Errors still reach stderr from every rank.
    if (state->rank() != 0 && !std::freopen("/dev/null", "w", stdout))
      throw Error("cannot silence stdout on rank " + std::to_string(state->rank()));
    std::printf("%s\n", version.c_str());
    for (const std::string& notice : args.notices) std::printf("note: %s\n", notice.c_str());
    std::printf("distributed: watchdog timeout %g s, collective consistency checks %s\n",
                comm::ProcessGroup::timeout(),
                comm::ProcessGroup::check_collectives() ? "on" : "off");
    {
      TrainerGroups groups;
      groups.tp =
          parallel::TensorParallel(state->group(comm::GroupKind::kTensor), args.sequence_parallel,
                                   args.tp_reduce_in_16_bit ? parallel::SixteenBitSums::kInOwnType
                                                            : parallel::SixteenBitSums::kInFp32);
      // Gradients reduce over data x context parallel (= the data-parallel group at CP 1).
      groups.dp = state->group(comm::GroupKind::kDataContext);
      if (state->layout().context() > 1) groups.cp = state->group(comm::GroupKind::kContext);
      groups.pp = state->group(comm::GroupKind::kPipeline);
      groups.embedding = state->group(comm::GroupKind::kEmbedding);
      groups.model = state->group(comm::GroupKind::kModel);
      groups.world = state->world();
      // Expert TP 1 under TP > 1: the experts live in a grid of their own even at EP 1.
      groups.experts_whole = state->layout().expert_tensor() == 1 && state->layout().tensor() > 1;
      if (state->layout().expert() > 1 || groups.experts_whole) {
        if (state->layout().expert() > 1) groups.ep = state->group(comm::GroupKind::kExpert);
        groups.edp = state->group(comm::GroupKind::kExpertData);
        groups.expert_model = state->group(comm::GroupKind::kExpertTensorExpert);
      }
      for (int r = 0; r < state->layout().world_size(); ++r)
        groups.pp_rank_of.push_back(state->layout().coords(r).pp);
      Trainer trainer(args, groups);
      trainer.train();
    }
    state.reset();
    comm::shutdown();
    return 0;
  } catch (const Error& e) {
    std::fflush(stdout);
    // Every rank sees the same bad flag or size; one line from rank 0, exit code 2 everywhere.
    if (runtime_up) comm::abort_job(std::string("error: ") + e.what(), kUserErrorExitCode);
    if (launcher_rank() == 0) std::fprintf(stderr, "error: %s\n", e.what());
    return kUserErrorExitCode;
  } catch (const std::exception& e) {
    // A library's exception (e.g. std::filesystem on a path it cannot use) is still one line.
    std::fflush(stdout);
    const std::string message = std::string("error: ") + one_line(e.what());
    if (runtime_up) comm::abort_job(message, kUserErrorExitCode);
    std::fprintf(stderr, "%s\n", message.c_str());
    return kUserErrorExitCode;
  }
}

}  // namespace tessera::train
