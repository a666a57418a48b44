// tessera-convert: Tessera checkpoints <-> Hugging Face model directories.
//
//   tessera-convert --from tessera CHECKPOINT --to hf OUT [--max-shard-size BYTES]
//   tessera-convert --from hf HF_DIR --to tessera OUT
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
  return tessera::run_tool(app, argc, argv, "tessera-convert", [&] {
    const std::string direction = from[0] + "->" + to[0];
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
