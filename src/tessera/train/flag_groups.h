// The flag groups of tessera-train defined outside arguments.cc (one file per concern, the table
// of flag_table.h). Internal to train/: arguments.cc's declare_flags() calls them in order.
#pragma once

#include "tessera/train/flag_table.h"

namespace tessera::train {

// Logging, metrics, TensorBoard, diagnostics (logging_flags.cc; docs/observability.md).
void add_logging_flags(FlagTable& t);
// DeepSpeed's launcher flags and the test hooks (logging_flags.cc).
void add_deepspeed_and_test_flags(FlagTable& t);

}  // namespace tessera::train
