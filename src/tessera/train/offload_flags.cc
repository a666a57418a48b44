// tessera-train's offload flags (ZeRO-Offload / ZeRO-Infinity; docs/offload.md): Megatron's
// --optimizer-cpu-offload, and flags named after DeepSpeed's offload_optimizer, offload_param,
// sub_group_size and aio keys, whose defaults they share.
#include "tessera/train/flag_groups.h"

namespace tessera::train {

void add_offload_flags(FlagTable& t) {
  t.group(FlagGroup::kParallel);
  t.flag("--optimizer-cpu-offload", &TrainArgs::optimizer_cpu_offload,
         "keep the optimizer state in host memory (Megatron's flag; on this backend host memory "
         "is where it always is)");
  t.note("--optimizer-cpu-offload",
         "host memory is this backend's device memory: the state stays where it is; "
         "--offload-optimizer-nvme-path moves it to NVMe");
  t.option("--optimizer-offload-fraction", &TrainArgs::optimizer_offload_fraction,
           "with --optimizer-cpu-offload: the share of the state offloaded (Megatron's flag; "
           "all of it is in host memory here)")
      ->check(CLI::Range(0.0, 1.0));
  t.option("--offload-optimizer-nvme-path", &TrainArgs::offload_optimizer_nvme_path,
           "ZeRO-Infinity: keep the optimizer state (fp32 master weights, moments) in swap files "
           "under this directory and stream it through --offload-buffer-count buffers "
           "(DeepSpeed's offload_optimizer device nvme)");
  t.option("--offload-buffer-count", &TrainArgs::offload_optimizer_buffer_count,
           "optimizer offload: buffers of one sub-group each (at least 2)");
  t.flag("--offload-pipeline", &TrainArgs::offload_pipeline,
         "optimizer offload: read the next sub-group and write the last while one is updated "
         "(DeepSpeed's pipeline_read and pipeline_write)");
  t.flag("--offload-fast-init", &TrainArgs::offload_fast_init,
         "optimizer offload: do not write the initial state; make it when first needed");
  t.option("--offload-sub-group-size", &TrainArgs::offload_sub_group_size,
           "optimizer offload: elements per swap unit (DeepSpeed's sub_group_size)")
      ->check(CLI::PositiveNumber);
  t.option("--offload-param-nvme-path", &TrainArgs::offload_param_nvme_path,
           "ZeRO 3: keep each rank's parameter shards in swap files under this directory, read "
           "before each gather (DeepSpeed's offload_param device nvme)");
  t.option("--offload-param-max-in-cpu", &TrainArgs::offload_param_max_in_cpu,
           "parameter offload: elements of shards that may stay in memory")
      ->check(CLI::NonNegativeNumber);
  t.option("--aio-backend", &TrainArgs::aio_backend,
           "swap I/O engine: auto (io_uring, else a thread pool), io_uring or threads")
      ->check(CLI::IsMember({"auto", "io_uring", "threads"}));
  t.option("--aio-block-size", &TrainArgs::aio_block_size, "swap I/O: bytes per request");
  t.option("--aio-queue-depth", &TrainArgs::aio_queue_depth, "swap I/O: requests in flight");
  t.option("--aio-intra-op-parallelism", &TrainArgs::aio_intra_op_parallelism,
           "swap I/O: threads of the thread-pool engine");
}

}  // namespace tessera::train
