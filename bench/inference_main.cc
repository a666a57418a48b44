// inference: the engine's speed (docs/inference.md) against limits measured in the same run.
//
//   decode    single-sequence tokens/s against the memory-bandwidth limit: the bytes a token
//             reads (every weight but the input embedding's other rows, plus the KV cache of the
//             tokens so far, on average over the run) divided into the machine's read bandwidth,
//             measured here by reading a 1 GiB array (bench/read_bandwidth.h)
//   prefill   prompt tokens/s of one request, in model FLOPs (Megatron's forward formula: a third
//             of train/flops.h's forward + backward) against the GEMM rate measured here
//             (kernels::measure_peak_gflops)
//   batch     decode tokens/s with 1, 8 and 32 sequences in the batch
//
// Models are randomly initialised (speed does not depend on the values): GPT-2 124M and a ~1 B
// LLaMA-style model (bench_models.h). Usage:
//   build/bin/inference [--model gpt2|llama1b|all] [--dtype fp32|bf16|all] [--threads N]
//                       [--prompt P] [--decode D] [--batches 1,8,32]
//                       [--kv-cache-dtype auto|fp32|bf16|fp16|fp8|fp8_e4m3|fp8_e5m2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_models.h"
#include "flag_pairs.h"
#include "read_bandwidth.h"
#include "tessera/core/threads.h"
#include "tessera/inference/engine.h"
#include "tessera/inference/kv_cache.h"
#include "tessera/kernels/build_info.h"
#include "tessera/kernels/gemm.h"
#include "tessera/train/flops.h"

namespace {

using tessera::DType;
using Clock = std::chrono::steady_clock;
namespace inference = tessera::inference;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Run {
  double prefill_s = 0;  // the step that read every prompt
  double decode_s = 0;   // the steps after it
  int64_t decode_steps = 0;
};

// `batch` requests of `prompt` tokens each generating `decode` tokens: the prefill step and the
// decode steps timed apart.
Run generate(tessera::model::GPTModel& model, int batch, int64_t prompt, int64_t decode,
             const std::string& kv_cache_dtype) {
  inference::EngineOptions o;
  o.kv_cache_dtype = kv_cache_dtype;
  o.max_sequences = batch;
  o.prefill_chunk = prompt;
  o.cache_tokens = batch * (prompt + decode + 16);
  inference::Engine engine(model, o);
  for (int b = 0; b < batch; ++b) {
    inference::GenerationRequest r;
    for (int64_t t = 0; t < prompt; ++t)
      r.prompt.push_back(static_cast<int32_t>((t * 31 + b) % 1000));
    r.max_tokens = decode;
    r.sampling.temperature = 0;
    engine.submit(r);
  }
  Run run;
  auto t0 = Clock::now();
  engine.step();  // every prompt, and each sequence's first token
  run.prefill_s = seconds_since(t0);
  t0 = Clock::now();
  while (!engine.idle()) {
    engine.step();
    ++run.decode_steps;
  }
  run.decode_s = seconds_since(t0);
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::bench::DecodeBenchFlags flags;
  flags.dtype = "all";
  std::vector<int> batches = {1, 8, 32};
  std::string kv_cache_dtype = "auto";
  tessera::bench::require_flag_pairs(argc, argv, "inference");
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (flags.take(f, v)) continue;
    if (f == "--kv-cache-dtype") {
      kv_cache_dtype = v;
    } else if (f == "--batches") {
      batches.clear();
      for (size_t at = 0; at < v.size();) {
        const size_t comma = v.find(',', at);
        batches.push_back(std::stoi(v.substr(at, comma - at)));
        at = comma == std::string::npos ? v.size() : comma + 1;
      }
    } else {
      std::fprintf(stderr, "inference: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  const std::string &which = flags.model, &dtypes = flags.dtype;
  const int threads = flags.threads;
  const int64_t prompt = flags.prompt, decode = flags.decode;
  const double bandwidth = tessera::bench::announce_read_bandwidth(threads);
  std::vector<tessera::bench::NamedModel> models = tessera::bench::decode_models(which);
  std::vector<DType> kinds;
  if (dtypes == "fp32" || dtypes == "all") kinds.push_back(DType::kF32);
  if (dtypes == "bf16" || dtypes == "all") kinds.push_back(DType::kBF16);
  for (DType dtype : kinds) {
    const double peak = tessera::kernels::measure_peak_gflops(dtype);
    std::printf("%s GEMM rate (2048^3, measured now): %.1f GFLOP/s\n", tessera::dtype_name(dtype),
                peak);
    for (tessera::bench::NamedModel& m : models) {
      m.cfg.seq_length = std::max<int64_t>(m.cfg.seq_length, prompt + decode + 1);
      m.cfg.max_position_embeddings = std::max(m.cfg.max_position_embeddings, m.cfg.seq_length);
      tessera::model::GPTModel model(m.cfg, dtype, 1);
      const double elem = tessera::dtype_size(dtype);
      // Bytes one decoded token reads: the weights (one row of the input embedding), and the
      // cache of prompt + decode / 2 tokens on average.
      const tessera::model::ModelConfig& c = m.cfg;
      double params = 0;
      for (const tessera::model::Parameter& p : model.params().all()) params += p.numel();
      const double embedding_rows = static_cast<double>(model.padded_vocab()) * c.hidden_size;
      const double weights = (params - embedding_rows + c.hidden_size +
                              (c.untie_embeddings_and_output_weights ? 0.0 : embedding_rows)) *
                             elem;
      const double cache_elem = static_cast<double>(
          inference::kv_element_bytes(inference::parse_kv_cache_dtype(kv_cache_dtype, dtype)));
      const double cache_per_token = 2.0 * c.num_layers * c.kv_heads() * c.head_dim() * cache_elem;
      const double bytes = weights + cache_per_token * (prompt + decode / 2.0);
      for (int batch : batches) {
        const Run r = generate(model, batch, prompt, decode, kv_cache_dtype);
        const double tokens_s = batch * r.decode_steps / r.decode_s;
        if (batch == 1) {
          const double limit = bandwidth * 1e9 / bytes;
          tessera::model::ModelConfig at_prompt = c;  // the attention term at the prompt's length
          at_prompt.seq_length = static_cast<int>(prompt);
          const double prefill_flops =
              tessera::train::model_flops(at_prompt, model.padded_vocab(), 1) / 3.0;
          std::printf(
              "%s %s: prefill %lld tokens %.1f tokens/s, %.1f GFLOP/s (%.0f%% of the GEMM rate); "
              "decode batch 1: %.1f tokens/s against %.1f by bandwidth (%.1f MB a token): %.0f%%\n",
              m.name, tessera::dtype_name(dtype), static_cast<long long>(prompt),
              prompt / r.prefill_s, prefill_flops / r.prefill_s / 1e9,
              100.0 * prefill_flops / r.prefill_s / 1e9 / peak, tokens_s, limit, bytes / 1e6,
              100.0 * tokens_s / limit);
        } else {
          std::printf("%s %s: decode batch %d: %.1f tokens/s\n", m.name, tessera::dtype_name(dtype),
                      batch, tokens_s);
        }
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
