// The run's offload (ZeRO-Offload / ZeRO-Infinity; docs/offload.md): the settings resolved from
// the flags and a DeepSpeed config, checked against the ZeRO stage with DeepSpeed's rules, and
// the per-rank runtime (the swap I/O engine and directories) the optimizer and ZeRO 3 use.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/io/async_io.h"
#include "tessera/offload/nvme_state_storage.h"
#include "tessera/offload/param_swap.h"
#include "tessera/offload/swap_directory.h"
#include "tessera/offload/swap_io.h"
#include "tessera/train/arguments.h"

namespace tessera::train {

struct OffloadPlan {
  bool optimizer_nvme = false;  // offload_optimizer.device "nvme"
  bool param_nvme = false;      // offload_param.device "nvme"
  std::string optimizer_path, param_path;
  offload::NvmeStateOptions state;
  offload::ParamSwapOptions param;
  io::AioConfig aio;
  io::IoBackend backend = io::IoBackend::kAuto;
  bool any_nvme() const { return optimizer_nvme || param_nvme; }
};

// The settings of `args` for a run at ZeRO stage `zero_stage`. tessera::Error, one line naming
// the flag and the DeepSpeed key, for: an unknown device; NVMe without a path; optimizer
// offload below stage 1 or parameter offload below stage 3 (DeepSpeed's rules); buffer_count
// below 2; an aio value out of range. The same on every rank, so every rank exits 2.
OffloadPlan offload_plan(const TrainArgs& args, int zero_stage);

// Notices for the start of the run: devices "cpu" (host memory is where the state is anyway).
std::vector<std::string> offload_notices(const TrainArgs& args);

// One rank's offload runtime: the I/O engine and its swap directories, created (and checked:
// missing or read-only paths, free space for `optimizer_bytes` + `param_bytes`) before
// training starts. Destroying it removes the swap files.
struct OffloadRuntime {
  OffloadPlan plan;
  std::unique_ptr<offload::SwapIo> io;
  std::unique_ptr<offload::SwapDirectory> optimizer_dir, param_dir;
};
std::unique_ptr<OffloadRuntime> make_offload_runtime(const OffloadPlan& plan);

}  // namespace tessera::train
