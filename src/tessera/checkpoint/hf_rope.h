// The RoPE settings of a Hugging Face config.json: the `rope_scaling` block (Transformers 4.x)
// or `rope_parameters` (its newer name, which also holds rope_theta), read into Tessera's
// kernels::RopeScaling and written back. Only unscaled RoPE ("default") and Llama 3.x's
// rescaling ("llama3", Transformers' _compute_llama3_parameters in modeling_rope_utils.py) are
// computed; every other rope_type (linear, dynamic, yarn, longrope, ...) is refused.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tessera/kernels/rope_frequencies.h"

namespace tessera::checkpoint {

struct HfRope {
  std::optional<float> theta;  // the block's rope_theta, when it has one
  kernels::RopeScaling scaling;
};

// Reads the value of config key `key` ("rope_scaling" or "rope_parameters") of the file `path`:
// null is plain RoPE; an object's type is "rope_type" (or the legacy "type"): "default" (plain;
// no other key but rope_theta) or "llama3" with the numbers factor > 0, low_freq_factor > 0,
// high_freq_factor > low_freq_factor and the integer original_max_position_embeddings >= 1 (and
// optionally rope_theta). Throws tessera::Error, one line "<path>: key '<key>': ...", naming the
// type or inner key for anything else (another type, a missing, mistyped or unknown inner key).
HfRope read_hf_rope(const nlohmann::json& value, const std::string& path, const char* key);

// The rope_scaling block hf_config_json writes for a llama3 scaling, in the key order of Llama
// 3.1's config.json ({"factor", "low_freq_factor", "high_freq_factor",
// "original_max_position_embeddings", "rope_type": "llama3"}); each float as its shortest
// decimal, so read_hf_rope gives the same RopeScaling back. Not called when scaling is off.
nlohmann::ordered_json hf_rope_scaling_json(const kernels::RopeScaling& scaling);

// The shortest decimal that reads back as f, as a double: config.json then says 1e-05 rather
// than 9.999999747378752e-06 (1e-5f widened), and reading it back as a float gives f again.
double shortest_decimal(float f);

}  // namespace tessera::checkpoint
