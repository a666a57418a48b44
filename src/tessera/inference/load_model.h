// A model for inference from what training and conversion leave behind: a Tessera checkpoint
// (a --save directory or one iteration's, saved under any layout: only the fp32 master weights
// are read, slice by slice) or a Hugging Face model directory (config.json and safetensors,
// docs/huggingface.md), in the compute dtype asked for (bf16 and fp16 round the fp32 weights to
// nearest even, as training's mixed precision does), whole or as this rank's tensor-parallel
// shards (every TP rank reads its slices). A quantized Hugging Face-style directory
// (checkpoint/quantized_hf.h) gets its stored codes installed as they are, quantized_weights'
// layers given this rank's rows (column-parallel) or columns (row-parallel; refused where the
// columns split the format's packs or groups).
#pragma once

#include <memory>
#include <string>

#include "tessera/core/dtype.h"
#include "tessera/model/gpt_model.h"

namespace tessera::inference {

struct LoadedModel {
  std::unique_ptr<model::GPTModel> model;
  std::string source;          // "Tessera checkpoint <dir>" or "Hugging Face directory <dir>"
  std::string tokenizer_json;  // a tokenizer.json found beside the weights, or ""
  // A tokenizer_config.json found beside the weights (its chat template, special tokens), or "".
  std::string tokenizer_config_json;
  // The format of a quantized directory's stored codes (checkpoint/quantized_hf.h), or "".
  std::string quantized;
};

// tessera::Error naming the directory (and the tensor) when `path` holds neither, or holds a
// damaged or incompatible one.
LoadedModel load_model(const std::string& path, DType dtype,
                       const parallel::TensorParallel& tp = {});

}  // namespace tessera::inference
