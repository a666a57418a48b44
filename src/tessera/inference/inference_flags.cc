#include "tessera/inference/inference_flags.h"

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
  app.add_option("--num-threads", f.threads, "threads (default: the cores)");
}

DType compute_dtype(const InferenceFlags& f) {
  return f.dtype == "bf16" ? DType::kBF16 : f.dtype == "fp16" ? DType::kF16 : DType::kF32;
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
