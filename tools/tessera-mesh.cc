// tessera-mesh: prints the process mesh for given parallel sizes, without starting MPI, so a
// layout can be checked before a big job.
//
//   tessera-mesh --world-size 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
//       [--context-parallel-size C] [--expert-model-parallel-size E]
//       [--expert-tensor-parallel-size T]
//
// Prints a one-line summary, every rank's coordinates (dense grid tp/cp/dp/pp, expert grid
// etp/ep/edp), then every group kind's groups, one line per kind (see comm/parallel_state.h).
// Sizes that do not divide: one line on stderr, exit code 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "tessera/comm/parallel_state.h"
#include "tessera/core/error.h"
#include "tessera/core/tool_main.h"
#include "tessera/kernels/build_info.h"

namespace {

constexpr const char* kTool = "tessera-mesh";

}  // namespace

int main(int argc, char** argv) {
  int world_size = 0;
  tessera::comm::ParallelConfig cfg;
  CLI::App app{"Print every rank's coordinates and process groups for a parallel layout."};
  app.set_version_flag("--version", tessera::kernels::version_line);
  app.add_option("--world-size", world_size, "Number of processes (ranks)")->required();
  app.add_option("--tensor-model-parallel-size", cfg.tensor, "TP size")->capture_default_str();
  app.add_option("--pipeline-model-parallel-size", cfg.pipeline, "PP size")->capture_default_str();
  app.add_option("--context-parallel-size", cfg.context, "CP size")->capture_default_str();
  app.add_option("--expert-model-parallel-size", cfg.expert, "EP size")->capture_default_str();
  app.add_option("--expert-tensor-parallel-size", cfg.expert_tensor,
                 "Expert TP size (0: same as --tensor-model-parallel-size)")
      ->capture_default_str();
  return tessera::run_tool(app, argc, argv, kTool, [&] {
    const tessera::comm::MeshLayout layout(world_size, cfg);
    std::fputs(tessera::comm::format_mesh(layout).c_str(), stdout);
    return 0;
  });
}
