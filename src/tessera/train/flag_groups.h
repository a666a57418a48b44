// The flag groups of tessera-train defined outside arguments.cc (one file per concern, the table
// of flag_table.h). Internal to train/: arguments.cc's declare_flags() calls them in order.
#pragma once

#include "tessera/train/flag_table.h"

namespace tessera::train {

// ZeRO-Offload / ZeRO-Infinity (offload_flags.cc; docs/offload.md).
void add_offload_flags(FlagTable& t);
// Logging, metrics, TensorBoard, diagnostics (logging_flags.cc; docs/observability.md).
void add_logging_flags(FlagTable& t);
// DeepSpeed's launcher flags and the test hooks (logging_flags.cc).
void add_deepspeed_and_test_flags(FlagTable& t);
// Megatron's flags beyond the core table: implemented ones in their groups, then the no-effect
// and refused ones (megatron_flags.cc; docs/migration.md).
void add_megatron_flags(FlagTable& t);
// After parsing: refuses a refused flag (tessera::Error), turns no-effect ones into notices,
// resolves Megatron's aliases (--recompute-activations, --data-args-path, --profile) and checks
// their combinations.
void apply_megatron_flags(TrainArgs& args);
// Once the model is final (presets, Hugging Face config): --kv-channels, --rotary-percent and
// --no-position-embedding against the architecture. tessera::Error.
void check_megatron_model_flags(const TrainArgs& args);

}  // namespace tessera::train
