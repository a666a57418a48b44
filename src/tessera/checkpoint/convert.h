// tessera-convert's conversions between Tessera checkpoints and Hugging Face model directories
// (docs/huggingface.md, docs/checkpoints.md).
#pragma once

#include <cstdint>
#include <string>

#include "tessera/checkpoint/quantized_hf.h"

namespace tessera::checkpoint {

// The tokenizer files a Hugging Face directory may carry along its weights; conversions copy
// those present in either direction.
inline constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                                  "special_tokens_map.json"};

// A Tessera checkpoint (a save directory or one iteration's directory, saved under any layout)
// to a Hugging Face directory: config.json and the fp32 master weights as model.safetensors, or
// shards of at most `max_shard_bytes` with an index. Reads one slice at a time into whole
// tensors. Throws tessera::Error naming the file (and tensor) on a missing, damaged or
// incompatible checkpoint, or a model Transformers cannot represent.
void convert_checkpoint_to_hf(const std::string& checkpoint, const std::string& out_dir,
                              int64_t max_shard_bytes);

// `tessera-convert --quantize`: a Tessera checkpoint (as above) or an unquantized Hugging Face
// directory to a quantized Hugging Face-style directory (quantized_hf.h; sharded beyond
// max_shard_bytes as the unquantized export is). Tokenizer files travel along. Throws
// tessera::Error as the conversions above and write_quantized_hf do (a weight whose shape the
// format cannot pack, named).
void convert_to_quantized_hf(const std::string& from, const std::string& source,
                             const std::string& out_dir, const QuantSpec& spec,
                             int64_t max_shard_bytes);

// A Hugging Face directory to a Tessera release checkpoint in `out` (iteration 0, weights only,
// one file; `--load out` starts training from it under any layout). Throws tessera::Error
// naming the file and tensor on anything read_hf_config/read_hf_weights refuse (a quantized
// directory among them: its weights are for inference).
void convert_hf_to_checkpoint(const std::string& hf_dir, const std::string& out);

}  // namespace tessera::checkpoint
