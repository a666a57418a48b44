#include "tessera/train/offload_setup.h"

#include "tessera/core/error.h"

namespace tessera::train {

namespace {

// The device of one block: the flag's path means "nvme"; "cpu" is host memory.
std::string device_of(const std::string& device, const std::string& path) {
  return !path.empty() && device == "none" ? "nvme" : device;
}

void check_device(const std::string& device, const std::string& key) {
  if (device != "none" && device != "cpu" && device != "nvme")
    throw Error(key + " is \"" + device + "\": expected \"none\", \"cpu\" or \"nvme\"");
}

}  // namespace

OffloadPlan offload_plan(const TrainArgs& a, int zero_stage) {
  OffloadPlan plan;
  const std::string opt_device = device_of(
      a.optimizer_cpu_offload && a.offload_optimizer_device == "none" ? "cpu"
                                                                      : a.offload_optimizer_device,
      a.offload_optimizer_nvme_path);
  const std::string param_device = device_of(a.offload_param_device, a.offload_param_nvme_path);
  check_device(opt_device, "zero_optimization.offload_optimizer.device");
  check_device(param_device, "zero_optimization.offload_param.device");
  // DeepSpeed's rules: optimizer offload needs a partitioned optimizer, parameter offload
  // partitioned parameters.
  if (opt_device != "none" && zero_stage < 1)
    throw Error(
        "zero_optimization.offload_optimizer (--offload-optimizer-nvme-path, "
        "--optimizer-cpu-offload) needs ZeRO stage 1, 2 or 3: the run is at stage " +
        std::to_string(zero_stage) + " (--zero-stage)");
  if (param_device != "none" && zero_stage < 3)
    throw Error(
        "zero_optimization.offload_param (--offload-param-nvme-path) needs ZeRO stage "
        "3: the run is at stage " +
        std::to_string(zero_stage) + " (--zero-stage)");
  plan.optimizer_nvme = opt_device == "nvme";
  plan.param_nvme = param_device == "nvme";
  plan.optimizer_path = a.offload_optimizer_nvme_path;
  plan.param_path = a.offload_param_nvme_path;
  if (plan.optimizer_nvme && plan.optimizer_path.empty())
    throw Error(
        "zero_optimization.offload_optimizer.nvme_path (--offload-optimizer-nvme-path) "
        "is not set: device \"nvme\" needs the directory for its swap files");
  if (plan.param_nvme && plan.param_path.empty())
    throw Error(
        "zero_optimization.offload_param.nvme_path (--offload-param-nvme-path) is not "
        "set: device \"nvme\" needs the directory for its swap files");
  if (a.offload_optimizer_buffer_count < 2)
    throw Error("zero_optimization.offload_optimizer.buffer_count (--offload-buffer-count) is " +
                std::to_string(a.offload_optimizer_buffer_count) +
                ": expected at least 2 (one sub-group is updated while another moves)");
  if (a.offload_param_buffer_count < 2)
    throw Error("zero_optimization.offload_param.buffer_count is " +
                std::to_string(a.offload_param_buffer_count) + ": expected at least 2");
  if (a.offload_param_buffer_size <= 0)
    throw Error("zero_optimization.offload_param.buffer_size is " +
                std::to_string(a.offload_param_buffer_size) + ": expected a positive count");
  if (a.offload_sub_group_size <= 0)
    throw Error("zero_optimization.sub_group_size (--offload-sub-group-size) is " +
                std::to_string(a.offload_sub_group_size) + ": expected a positive count");
  plan.state.sub_group_size = a.offload_sub_group_size;
  plan.state.buffer_count = a.offload_optimizer_buffer_count;
  plan.state.pipeline_read = a.offload_pipeline_read || a.offload_pipeline;
  plan.state.pipeline_write = a.offload_pipeline_write || a.offload_pipeline;
  plan.state.fast_init = a.offload_fast_init;
  // The partition's fp32 gradients go to the swap at the accumulation boundary too, as
  // DeepSpeed's (distributed/gradient_offload.h).
  plan.state.gradients = true;
  if (plan.optimizer_nvme && !a.dump_numerics.empty())
    throw Error(
        "--dump-numerics records the gradients after the step, but with offload_optimizer on "
        "NVMe (--offload-optimizer-nvme-path) they leave memory at the accumulation boundary: "
        "dump a run without the optimizer offload (it is bitwise the same run)");
  plan.param.buffer_count = a.offload_param_buffer_count;
  plan.param.buffer_size = a.offload_param_buffer_size;
  plan.param.max_in_cpu = a.offload_param_max_in_cpu;
  plan.aio.block_size = a.aio_block_size;
  plan.aio.queue_depth = a.aio_queue_depth;
  plan.aio.intra_op_parallelism = a.aio_intra_op_parallelism;
  plan.aio.single_submit = a.aio_single_submit;
  plan.aio.overlap_events = a.aio_overlap_events;
  io::validate(plan.aio);
  plan.backend = a.aio_backend == "io_uring"  ? io::IoBackend::kUring
                 : a.aio_backend == "threads" ? io::IoBackend::kThreads
                                              : io::IoBackend::kAuto;
  return plan;
}

std::vector<std::string> offload_notices(const TrainArgs& a) {
  std::vector<std::string> out;
  if ((a.optimizer_cpu_offload || a.offload_optimizer_device == "cpu") &&
      a.offload_optimizer_nvme_path.empty())
    out.push_back(
        "offload_optimizer device \"cpu\" (--optimizer-cpu-offload): the optimizer state stays "
        "in host memory, which is this backend's device memory (NVMe: "
        "--offload-optimizer-nvme-path)");
  if (a.offload_param_device == "cpu")
    out.push_back(
        "offload_param device \"cpu\": the parameters stay in host memory, which is this "
        "backend's device memory");
  return out;
}

std::unique_ptr<OffloadRuntime> make_offload_runtime(const OffloadPlan& plan) {
  auto rt = std::make_unique<OffloadRuntime>();
  rt->plan = plan;
  if (!plan.any_nvme()) return rt;
  if (plan.optimizer_nvme)
    rt->optimizer_dir = std::make_unique<offload::SwapDirectory>(
        plan.optimizer_path, "optimizer",
        "zero_optimization.offload_optimizer.nvme_path (--offload-optimizer-nvme-path)");
  if (plan.param_nvme)
    rt->param_dir = std::make_unique<offload::SwapDirectory>(
        plan.param_path, "param",
        "zero_optimization.offload_param.nvme_path (--offload-param-nvme-path)");
  rt->io = std::make_unique<offload::SwapIo>(plan.aio, plan.backend);
  return rt;
}

}  // namespace tessera::train
