// tessera-convert: Tessera checkpoints <-> Hugging Face model directories.
//
//   tessera-convert --from tessera CHECKPOINT --to hf OUT [--max-shard-size BYTES]
//   tessera-convert --from hf HF_DIR --to tessera OUT
//   tessera-convert --from tessera|hf SRC --to hf OUT --quantize fp6|int8|q8_0|q4
//                   [--quantize-group-size 32|64] [--quantize-output-layer]
//                   [--max-shard-size BYTES]
//
// --quantize writes a quantized Hugging Face-style directory (checkpoint/quantized_hf.h,
// docs/quantization.md) that tessera-generate and tessera-serve load as stored.
//
// CHECKPOINT is a --save directory (its latest checkpoint) or one iter_* directory, saved under
// any parallel layout. The Hugging Face side is config.json + model.safetensors (or shards with
// model.safetensors.index.json) for GPT2LMHeadModel and LlamaForCausalLM; tokenizer files
// travel along. Errors: one line naming the file and tensor, exit code 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/checkpoint/convert.h"
#include "tessera/core/error.h"
#include "tessera/core/tool_main.h"
#include "tessera/kernels/build_info.h"
#include "tessera/quant/quantized_matrix.h"

int main(int argc, char** argv) {
  CLI::App app("Convert between Tessera checkpoints and Hugging Face model directories");
  app.set_version_flag("--version", tessera::kernels::version_line);
  std::vector<std::string> from, to;
  double max_shard_bytes = 5e9;
  app.add_option("--from", from, "FORMAT PATH: tessera CHECKPOINT or hf HF_DIR")
      ->expected(2)
      ->required();
  app.add_option("--to", to, "FORMAT PATH: hf OUT or tessera OUT")->expected(2)->required();
  app.add_option("--max-shard-size", max_shard_bytes,
                 "--to hf: largest safetensors file in bytes before sharding (default 5e9)")
      ->check(CLI::PositiveNumber);
  std::string quantize;
  int64_t quantize_group = 32;
  bool quantize_output_layer = false;
  app.add_option("--quantize", quantize,
                 "--to hf: store the linear weights quantized: fp6, int8, q8_0 or q4");
  auto* group_flag = app.add_option("--quantize-group-size", quantize_group,
                                    "q4: weights per scale and minimum, 32 or 64");
  app.add_flag("--quantize-output-layer", quantize_output_layer,
               "with --quantize, the output layer too (the embedding stays)");
  return tessera::run_tool(app, argc, argv, "tessera-convert", [&] {
    const std::string direction = from[0] + "->" + to[0];
    if (max_shard_bytes < 1)  // a fraction passes CLI11's positive check
      throw tessera::Error("--max-shard-size " + std::to_string(max_shard_bytes) +
                           ": expected at least 1 byte");
    if (!quantize.empty()) {
      tessera::checkpoint::QuantSpec spec;
      spec.format = tessera::quant::parse_quant_format(quantize);
      if (group_flag->count() > 0 && spec.format != tessera::quant::QuantFormat::kQ4)
        throw tessera::Error(
            "--quantize-group-size: only q4 takes a group size (q8_0 has blocks "
            "of 32, fp6 and int8 one scale per row)");
      if (quantize_group != 32 && quantize_group != 64)
        throw tessera::Error("--quantize-group-size " + std::to_string(quantize_group) +
                             ": expected 32 or 64");
      spec.q4_group = quantize_group;
      spec.output_layer = quantize_output_layer;
      if (to[0] != "hf" || (from[0] != "tessera" && from[0] != "hf"))
        throw tessera::Error("--quantize: expected --from tessera|hf SRC --to hf OUT");
      tessera::checkpoint::convert_to_quantized_hf(from[0], from[1], to[1], spec,
                                                   static_cast<int64_t>(max_shard_bytes));
      std::printf("tessera-convert: %s %s -> hf %s (quantized %s)\n", from[0].c_str(),
                  from[1].c_str(), to[1].c_str(), quantize.c_str());
      return 0;
    }
    if (group_flag->count() > 0 || quantize_output_layer)
      throw tessera::Error("--quantize-group-size and --quantize-output-layer need --quantize");
    if (direction == "tessera->hf") {
      tessera::checkpoint::convert_checkpoint_to_hf(from[1], to[1],
                                                    static_cast<int64_t>(max_shard_bytes));
    } else if (direction == "hf->tessera") {
      tessera::checkpoint::convert_hf_to_checkpoint(from[1], to[1]);
    } else {
      throw tessera::Error("--from " + from[0] + " --to " + to[0] +
                           ": expected --from tessera DIR --to hf OUT or --from hf DIR --to "
                           "tessera OUT");
    }
    std::printf("tessera-convert: %s %s -> %s %s\n", from[0].c_str(), from[1].c_str(),
                to[0].c_str(), to[1].c_str());
    return 0;
  });
}
