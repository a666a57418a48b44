#include "tessera/inference/inference_flags.h"

#include "tessera/core/error.h"
#include "tessera/inference/kv_cache.h"
#include "tessera/quant/quantized_matrix.h"

namespace tessera::inference {

void add_inference_flags(CLI::App& app, InferenceFlags& f) {
  app.add_option("--load", f.load, "Tessera checkpoint or Hugging Face model directory")
      ->required();
  app.add_option("--dtype", f.dtype, "compute dtype")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_option("--tokenizer-type", f.tokenizer.type,
                 "as tessera-train (default: the tokenizer.json beside the weights)");
  app.add_option("--tokenizer-model", f.tokenizer.tokenizer_model, "as tessera-train");
  app.add_option("--vocab-file", f.tokenizer.vocab_file, "GPT2BPETokenizer: encoder.json");
  app.add_option("--merge-file", f.tokenizer.merge_file, "GPT2BPETokenizer: vocab.bpe");
  app.add_option("--max-batch", f.engine.max_sequences, "sequences decoded together")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--kv-block-size", f.engine.block_size, "tokens per KV-cache block")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--kv-cache-dtype", f.engine.kv_cache_dtype,
                 "the KV cache's element type: auto (the compute dtype), fp32, bf16, fp16, fp8 "
                 "(= fp8_e4m3, vLLM's), fp8_e5m2")
      ->check(CLI::IsMember(kv_cache_dtype_names()))
      ->capture_default_str();
  app.add_option("--num-threads", f.threads, "threads (default: the cores)");
  app.add_option(
         "--quantize", f.quantize,
         "quantize the linear weights on load: fp6, int8, q8_0 or q4 (docs/quantization.md)")
      ->check(CLI::IsMember({"fp6", "int8", "q8_0", "q4"}));
  app.add_option("--quantize-group-size", f.quantize_group, "q4: weights per scale and minimum")
      ->check(CLI::IsMember({32, 64}))
      ->capture_default_str();
  app.add_flag("--quantize-output-layer", f.quantize_output_layer,
               "with --quantize, the output layer too (the embedding stays)");
}

DType compute_dtype(const InferenceFlags& f) {
  return f.dtype == "bf16" ? DType::kBF16 : f.dtype == "fp16" ? DType::kF16 : DType::kF32;
}

LoadedModel load_for_inference(const InferenceFlags& f, const parallel::TensorParallel& tp) {
  LoadedModel loaded = load_model(f.load, compute_dtype(f), tp);
  if (!f.quantize.empty()) {
    if (!loaded.quantized.empty())
      throw Error("--quantize " + f.quantize + ": " + f.load + " is already quantized to " +
                  loaded.quantized +
                  " (its config.json's \"quantization\"); load it without --quantize");
    try {
      loaded.model->quantize_weights(quant::parse_quant_format(f.quantize), f.quantize_group,
                                     f.quantize_output_layer);
    } catch (const Error& e) {
      throw Error("--quantize " + f.quantize + ": " + e.what());
    }
    loaded.source += ", quantized to " + f.quantize;
  }
  return loaded;
}

std::unique_ptr<data::Tokenizer> make_tokenizer(const InferenceFlags& f,
                                                const LoadedModel& loaded) {
  data::TokenizerOptions options = f.tokenizer;
  if (options.type.empty()) {
    if (loaded.tokenizer_json.empty()) return nullptr;
    options.type = "HuggingFaceTokenizer";
    options.tokenizer_model = loaded.tokenizer_json;
  }
  return data::make_tokenizer(options);
}

}  // namespace tessera::inference
