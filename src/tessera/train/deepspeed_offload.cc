// A DeepSpeed config's ZeRO-Offload / ZeRO-Infinity keys (docs/offload.md) mapped onto
// tessera-train's offload flags: zero_optimization.offload_optimizer, .offload_param and
// .sub_group_size, and the top-level "aio" block, with DeepSpeed's defaults
// (deepspeed/runtime/zero/offload_config.py, deepspeed/runtime/swap_tensor/aio_config.py).
// Devices and the stage rules are checked once the stage is final (train/offload_setup.h).
#include "tessera/train/deepspeed_section.h"

namespace tessera::train::deepspeed {

namespace {

// A block's device and nvme_path; with device "none" DeepSpeed ignores the block's other keys.
std::string read_device(Section& block, std::string TrainArgs::*device_field,
                        std::string TrainArgs::*path_field, TrainArgs& args) {
  const std::string device = block.string("device", "none");
  if (device != "none" && device != "cpu" && device != "nvme")
    block.fail(block.name("device"), "\"" + device + "\": expected \"none\", \"cpu\" or \"nvme\"");
  const std::string path = block.string("nvme_path", "");
  if (device == "nvme" && path.empty())
    block.fail(block.name("nvme_path"),
               "is not set: device \"nvme\" needs the directory for its swap files");
  if (device == "nvme") {
    if (args.given(path_field) && args.*path_field != path)
      block.fail(block.name("nvme_path"),
                 "\"" + path + "\" contradicts " + flag_name(path_field) + " " + args.*path_field);
    args.*path_field = path;
  }
  args.*device_field = device;
  block.boolean("pin_memory", false);  // no effect: every buffer is host memory already
  return device;
}

int64_t positive(Section& block, const char* key, int64_t fallback, int64_t least) {
  const int64_t v = block.integer(key, fallback);
  if (v < least)
    block.fail(block.name(key),
               "is " + std::to_string(v) + ": expected at least " + std::to_string(least));
  return v;
}

}  // namespace

void apply_offload(Section& z, Section& top, TrainArgs& args) {
  const std::string& file = z.file();
  Section opt = z.section("offload_optimizer");
  if (read_device(opt, &TrainArgs::offload_optimizer_device,
                  &TrainArgs::offload_optimizer_nvme_path, args) == "nvme") {
    set_unless_given(args, &TrainArgs::offload_optimizer_buffer_count,
                     static_cast<int>(positive(opt, "buffer_count", 4, 2)), file,
                     opt.name("buffer_count"), opt.contains("buffer_count"));
    args.offload_pipeline_read = opt.boolean("pipeline_read", false);
    args.offload_pipeline_write = opt.boolean("pipeline_write", false);
    args.offload_fast_init = opt.boolean("fast_init", false) || args.offload_fast_init;
  }
  opt.check_read();
  Section param = z.section("offload_param");
  if (read_device(param, &TrainArgs::offload_param_device, &TrainArgs::offload_param_nvme_path,
                  args) == "nvme") {
    args.offload_param_buffer_count = static_cast<int>(positive(param, "buffer_count", 5, 2));
    args.offload_param_buffer_size = positive(param, "buffer_size", 100'000'000, 1);
    set_unless_given(args, &TrainArgs::offload_param_max_in_cpu,
                     positive(param, "max_in_cpu", 1'000'000'000, 0), file,
                     param.name("max_in_cpu"), param.contains("max_in_cpu"));
  }
  param.check_read();
  set_unless_given(args, &TrainArgs::offload_sub_group_size,
                   positive(z, "sub_group_size", 1'000'000'000, 1), file, z.name("sub_group_size"),
                   z.contains("sub_group_size"));

  Section aio = top.section("aio");
  set_unless_given(args, &TrainArgs::aio_block_size, aio.integer("block_size", 1 << 20), file,
                   aio.name("block_size"), aio.contains("block_size"));
  set_unless_given(args, &TrainArgs::aio_queue_depth,
                   static_cast<int>(aio.integer("queue_depth", 8)), file, aio.name("queue_depth"),
                   aio.contains("queue_depth"));
  // "thread_count" is the older spelling of intra_op_parallelism.
  const char* threads = aio.contains("thread_count") ? "thread_count" : "intra_op_parallelism";
  set_unless_given(args, &TrainArgs::aio_intra_op_parallelism,
                   static_cast<int>(aio.integer(threads, 1)), file, aio.name(threads),
                   aio.contains(threads));
  args.aio_single_submit = aio.boolean("single_submit", false);
  args.aio_overlap_events = aio.boolean("overlap_events", true);
  if (aio.boolean("use_gds", false))
    aio.fail(aio.name("use_gds"), "true is not supported: GPUDirect Storage needs a GPU");
  aio.check_read();
}

}  // namespace tessera::train::deepspeed
