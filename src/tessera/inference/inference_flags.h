// The flags tessera-generate and tessera-serve share: what to load, in which dtype, with which
// tokenizer, and the engine's batch and cache block sizes; and what they lead to (the compute
// dtype, the tokenizer: the one given, else the tokenizer.json found beside the weights).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "tessera/core/dtype.h"
#include "tessera/data/tokenizer.h"
#include "tessera/inference/engine.h"
#include "tessera/inference/load_model.h"

namespace tessera::inference {

struct InferenceFlags {
  std::string load;
  std::string dtype = "fp32";
  // type "" until --tokenizer-type is given (then the tokenizer.json found is not used).
  data::TokenizerOptions tokenizer = [] {
    data::TokenizerOptions o;
    o.type = "";
    return o;
  }();
  EngineOptions engine;
  int threads = 0;
  // Weight-only quantization on load (quant/quantized_matrix.h): "" for none.
  std::string quantize;
  int64_t quantize_group = 32;         // q4's group
  bool quantize_output_layer = false;  // the output layer too (the embedding never)
};

void add_inference_flags(CLI::App& app, InferenceFlags& flags);
DType compute_dtype(const InferenceFlags& flags);
// The model --load names, this rank's TP shards, quantized as --quantize asks (load_model.h).
LoadedModel load_for_inference(const InferenceFlags& flags, const parallel::TensorParallel& tp);
// nullptr when neither a --tokenizer-type nor a tokenizer.json beside the weights is there.
std::unique_ptr<data::Tokenizer> make_tokenizer(const InferenceFlags& flags,
                                                const LoadedModel& loaded);

}  // namespace tessera::inference
