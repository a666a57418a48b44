// migration_table (arguments.h): the flag table as docs/migration.md shows it, generated from the
// parser's own rows so the document cannot drift from what tessera-train accepts.
#include <cstdio>
#include <set>
#include <string>

#include "tessera/train/arguments.h"
#include "tessera/train/deepspeed_keys.h"
#include "tessera/train/flag_table.h"

namespace tessera::train {
namespace {

// Flags that are Tessera's (or DeepSpeed's) and not Megatron-LM's: listed apart, not counted as
// Megatron flags.
const std::set<std::string>& tessera_own() {
  static const std::set<std::string> own = {"--model",
                                            "--num-threads",
                                            "--pipeline-schedule",
                                            "--print-mesh",
                                            "--check-collectives",
                                            "--flight-recorder-dir",
                                            "--flight-recorder-size",
                                            "--zero-stage",
                                            "--tp-reduce-in-16-bit",
                                            "--stage3-prefetch-bucket-size",
                                            "--stage3-param-persistence-threshold",
                                            "--stage3-max-live-parameters",
                                            "--keep-checkpoints",
                                            "--export-weights",
                                            "--metrics-file",
                                            "--timeline-file",
                                            "--timeline-iteration",
                                            "--dump-numerics",
                                            "--deepspeed",
                                            "--deepspeed_config",
                                            "--ds-sequence-parallel-size",
                                            "--skip-nan-iterations",
                                            "--offload-optimizer-nvme-path",
                                            "--offload-buffer-count",
                                            "--offload-pipeline",
                                            "--offload-fast-init",
                                            "--offload-sub-group-size",
                                            "--offload-param-nvme-path",
                                            "--offload-param-max-in-cpu",
                                            "--aio-backend",
                                            "--aio-block-size",
                                            "--aio-queue-depth",
                                            "--aio-intra-op-parallelism"};
  return own;
}

std::string cell(std::string text) {
  for (char& c : text)
    if (c == '|') c = '/';
  return text;
}

std::string name_cell(const FlagInfo& row) {
  return "`" + row.name + "`" + (row.aliases.empty() ? "" : " (" + row.aliases + ")");
}

}  // namespace

std::string migration_table() {
  int implemented = 0, no_effect = 0, refused = 0, own = 0;
  std::string impl_rows, no_effect_rows, refused_rows, own_rows;
  for (const FlagInfo& row : flag_rows()) {
    if (row.group == FlagGroup::kTestHooks) continue;
    if (tessera_own().count(row.name)) {
      ++own;
      own_rows += "| " + name_cell(row) + " | " + cell(row.help) + " |\n";
      continue;
    }
    switch (row.effect) {
      case FlagEffect::kImplemented:
        ++implemented;
        impl_rows += "| " + name_cell(row) + " | " + flag_group_name(row.group) + " | " +
                     (row.default_value.empty() ? "" : "`" + row.default_value + "`") + " | " +
                     cell(row.note) + " |\n";
        break;
      case FlagEffect::kNoEffect:
        ++no_effect;
        no_effect_rows += "| " + name_cell(row) + " | " + cell(row.note) + " |\n";
        break;
      case FlagEffect::kRefused:
        ++refused;
        refused_rows += "| " + name_cell(row) + " | " + cell(row.note) + " |\n";
        break;
    }
  }
  char counts[256];
  std::snprintf(counts, sizeof counts,
                "Megatron-LM flags: **%d implemented, %d accepted with no effect, %d refused**; "
                "%d flags of Tessera's own.\n",
                implemented, no_effect, refused, own);
  return std::string(counts) +
         "\n### Implemented\n\n| flag | group | default | differs from Megatron |\n"
         "| --- | --- | --- | --- |\n" +
         impl_rows +
         "\n### Accepted, no effect on this backend (logged once at start)\n\n"
         "| flag | why |\n| --- | --- |\n" +
         no_effect_rows + "\n### Refused (one line, exit 2)\n\n| flag | why |\n| --- | --- |\n" +
         refused_rows + "\n### Tessera's own\n\n| flag | what |\n| --- | --- |\n" + own_rows +
         "\n## DeepSpeed config keys\n\n" + deepspeed_key_markdown();
}

}  // namespace tessera::train
