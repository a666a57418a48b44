// tessera-logits: the logits Tessera computes for one sequence of tokens, for comparisons with
// other implementations of the same architecture (tests/cli/hf_families.sh compares them with
// an independent float64 numpy forward, tests/cli/hf_reference.py).
//
//   tessera-logits --load HF_DIR --tokens 1,2,3,... --out FILE
//
// HF_DIR is read as `tessera-train --load` reads it (config.json and the safetensors weights,
// docs/huggingface.md). The forward runs in one process in fp32 without dropout, with the
// sequence length set to the number of tokens; FILE receives the logits as T rows of
// vocab_size little-endian float32 (the padded vocabulary columns dropped). One line is printed:
// the shape and the largest |logit|. Errors (a directory Tessera refuses, a token outside the
// vocabulary, an unwritable FILE): one line, exit code 2.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tessera/checkpoint/hf_import.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/tool_main.h"
#include "tessera/kernels/build_info.h"
#include "tessera/model/chunk_runner.h"
#include "tessera/model/gpt_model.h"

namespace {

using tessera::Error;
using tessera::Tensor;

// The weights of `weights` copied into a one-process fp32 model's parameters: every parameter
// is whole, in Tessera's layout; vocabulary rows beyond the real ones stay zero.
void load_weights(tessera::model::GPTModel& m, const std::map<std::string, Tensor>& weights) {
  for (tessera::model::Parameter& p : m.params().all()) {
    if (p.tied_copy) continue;
    const Tensor& w = weights.at(p.name);
    float* dst = p.value.data<float>();
    TESSERA_CHECK(w.numel() <= p.numel() && p.value.dtype() == tessera::DType::kF32);
    std::fill(dst, dst + p.numel(), 0.0f);
    std::memcpy(dst, w.data<float>(), static_cast<size_t>(w.numel()) * sizeof(float));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("The logits of a Hugging Face model directory's model for one token sequence");
  app.set_version_flag("--version", tessera::kernels::version_line);
  std::string load, out;
  std::vector<int64_t> tokens;
  app.add_option("--load", load, "Hugging Face model directory")->required();
  app.add_option("--tokens", tokens, "token ids, comma-separated")->delimiter(',')->required();
  app.add_option("--out", out, "file for the logits: T x vocab_size float32")->required();
  return tessera::run_tool(app, argc, argv, "tessera-logits", [&] {
    namespace model = tessera::model;
    if (!tessera::checkpoint::is_hf_directory(load))
      throw Error("--load " + load +
                  ": not a Hugging Face model directory (config.json plus model.safetensors or "
                  "model.safetensors.index.json)");
    model::ModelConfig cfg = tessera::checkpoint::read_hf_config(load);
    const int64_t T = static_cast<int64_t>(tokens.size());
    std::vector<int32_t> ids(tokens.size()), targets(tokens.size(), 0);
    for (size_t t = 0; t < tokens.size(); ++t) {
      if (tokens[t] < 0 || tokens[t] >= cfg.vocab_size)
        throw Error("--tokens: token " + std::to_string(tokens[t]) + " (position " +
                    std::to_string(t) + ") is outside the vocabulary [0, " +
                    std::to_string(cfg.vocab_size) + ")");
      ids[t] = static_cast<int32_t>(tokens[t]);
    }
    cfg.seq_length = static_cast<int>(T);
    const std::map<std::string, Tensor> weights = tessera::checkpoint::read_hf_weights(load, cfg);
    model::GPTModel m(cfg, tessera::DType::kF32, std::nullopt);  // load_weights writes all
    load_weights(m, weights);

    const model::Batch batch{ids.data(), targets.data(), nullptr, 1, T};
    const model::StepContext ctx = m.context(1, T, 0, 0, 0, /*training=*/false);
    const Tensor hidden = model::ChunkRunner(m).forward_chunk(0, Tensor(), batch, ctx, nullptr);
    const Tensor logits = m.logits(hidden, 1);
    const int64_t V = cfg.vocab_size, padded = logits.dim(1);
    std::vector<float> rows(static_cast<size_t>(T * V));
    float largest = 0.0f;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t v = 0; v < V; ++v) {
        rows[t * V + v] = logits.data<float>()[t * padded + v];
        largest = std::max(largest, std::fabs(rows[t * V + v]));
      }
    tessera::AtomicFile file(out);
    file.write(rows.data(), rows.size() * sizeof(float));
    file.commit();
    std::printf("tessera-logits: %lld x %lld logits (max |logit| %.6g) -> %s\n",
                static_cast<long long>(T), static_cast<long long>(V), largest, out.c_str());
    return 0;
  });
}
