// The one table of DeepSpeed config keys (DeepSpeed's docs/_pages/config-json.md and the keys its
// deepspeed/runtime/config.py reads): for every key path, whether Tessera implements it, accepts
// it with no effect on this backend, or refuses it, with the reason. The parser
// (deepspeed_config.cc) classifies every key of a file through this table before it applies
// anything, so a key is never silently ignored:
//   implemented  read by the parser and honoured (some values may still be refused, with a
//                reason naming the value: e.g. an offload device other than "none");
//   no effect    accepted; one warning per row at start naming the key and why;
//   refused      one error line naming the key and why, unless the file gives the row's inert
//                value (the value that means "off", which is what Tessera does anyway).
// A key the table does not know is an error naming it. docs/migration.md is generated from
// deepspeed_key_table() (`tessera-train --print-deepspeed-keys` prints it as Markdown).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::train {

enum class DeepSpeedKeyClass { kImplemented, kNoEffect, kRefused };

const char* deepspeed_key_class_name(DeepSpeedKeyClass c);  // "implemented", "no effect", "refused"

struct DeepSpeedKey {
  // Dotted path from the top of the file ("zero_optimization.stage"). A path ending in ".*"
  // covers every key below that block, at any depth; an exact row wins over it.
  std::string_view path;
  DeepSpeedKeyClass kind;
  // implemented: what the key becomes in Tessera; no effect / refused: why.
  std::string_view reason;
  // refused rows: the JSON text of the value accepted as a no-op ("false", "\"none\"", "1");
  // empty: any value is refused.
  std::string_view inert = {};
  // Keys that may be "auto" (as Hugging Face Trainer configs write them): where the value comes
  // from (deepspeed_auto.h resolves them). Empty: "auto" is refused for this key.
  std::string_view auto_from = {};
};

// Every row, in the order of DeepSpeed's documentation. Immutable; thread-safe.
const std::vector<DeepSpeedKey>& deepspeed_key_table();

// The row for a dotted key path: the exact row, else the longest ".*" row above it; nullptr when
// there is none.
const DeepSpeedKey* find_deepspeed_key(std::string_view path);

// True when some row lies strictly below `path` (the path is a block the table opens).
bool deepspeed_block_has_rows(std::string_view path);

// How many rows of each class (implemented, no effect, refused), for docs and the closing note.
struct DeepSpeedKeyCounts {
  size_t implemented = 0, no_effect = 0, refused = 0;
};
DeepSpeedKeyCounts deepspeed_key_counts();

// The table as Markdown (| key | class | "auto" from | reason |) with a line of counts: what
// `tessera-train --print-deepspeed-keys` prints.
std::string deepspeed_key_markdown();

// Classifies every key of a parsed config (`file` names it in messages): throws tessera::Error
// for an unknown key or a refused key with a value other than its inert one; returns one warning
// per no-effect row present ("FILE: KEY has no effect on this backend: REASON"). Null values
// count as absent, as DeepSpeed treats them.
std::vector<std::string> classify_deepspeed_keys(const nlohmann::json& config,
                                                 const std::string& file);

}  // namespace tessera::train
