// quantized: decode speed of weight-only quantization (docs/quantization.md) against limits
// measured in the same run.
//
// For each model (GPT-2 124M, the ~1 B LLaMA-style model; randomly initialised: speed does not
// depend on the values) in the activation dtype asked for (bf16 by default): single-sequence
// decode tokens/s unquantized, then with every format (the layers' linear weights and the
// output layer quantized, the embedding and norms not), each against its own bandwidth limit —
// the bytes one token reads (quantized codes and fp16 scales, the rest of the weights but the
// input embedding's other rows, the KV cache of the tokens so far on average) divided into the
// best read rate measured here (again before each measurement) — and the speed-up over
// unquantized decode; and prefill tokens/s.
//
//   build/bin/quantized [--model gpt2|llama1b|all] [--dtype bf16|fp32] [--threads N]
//                       [--prompt P] [--decode D] [--formats fp6,int8,q8_0,q4]
//                       [--kernels memory|cache]
//
// --kernels: the matrix-vector kernels alone instead (quantized_kernels.h).
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_models.h"
#include "flag_pairs.h"
#include "quantized_kernels.h"
#include "read_bandwidth.h"
#include "tessera/core/threads.h"
#include "tessera/inference/engine.h"
#include "tessera/kernels/build_info.h"
#include "tessera/kernels/gemm.h"
#include "tessera/quant/quantized_matrix.h"

namespace {

using tessera::DType;
using Clock = std::chrono::steady_clock;
namespace inference = tessera::inference;
namespace quant = tessera::quant;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Speed {
  double prefill_tokens_s = 0, decode_tokens_s = 0;
  // Share of the fastest decode's wall time inside the matrix products (gemm.h's gemm_seconds,
  // which counts the quantized and unquantized matrix-vector products too): the rest is
  // attention, norms, the step's bookkeeping and the threads' fork and join.
  double decode_products_share = 0;
};

// One request of `prompt` tokens generating `decode`, greedy: the prefill step and the decode
// steps timed apart (best of kRepeats).
//
// Best of four: the project's machines are shared virtual ones whose speed moves by tens of
// percent from one second to the next (the same build measured 39 and 63 q4 tokens/s minutes
// apart), and the read rate the figures are held against is a best of five passes too.
constexpr int kRepeats = 4;
Speed measure(tessera::model::GPTModel& model, int64_t prompt, int64_t decode) {
  Speed best;
  for (int r = 0; r < kRepeats; ++r) {
    inference::EngineOptions o;
    o.max_sequences = 1;
    o.prefill_chunk = prompt;
    o.cache_tokens = prompt + decode + 16;
    inference::Engine engine(model, o);
    inference::GenerationRequest req;
    for (int64_t t = 0; t < prompt; ++t)
      req.prompt.push_back(static_cast<int32_t>((t * 31) % 1000));
    req.max_tokens = decode;
    req.sampling.temperature = 0;
    engine.submit(req);
    auto t0 = Clock::now();
    engine.step();
    const double prefill = seconds_since(t0);
    t0 = Clock::now();
    const double products0 = tessera::kernels::gemm_seconds();
    int64_t steps = 0;
    for (; !engine.idle(); ++steps) engine.step();
    const double dec = seconds_since(t0);
    const double products = tessera::kernels::gemm_seconds() - products0;
    best.prefill_tokens_s = std::max(best.prefill_tokens_s, prompt / prefill);
    if (steps / dec > best.decode_tokens_s) {
      best.decode_tokens_s = steps / dec;
      best.decode_products_share = products / dec;
    }
  }
  return best;
}

// Bytes one decoded token reads with the linear weights in `format` (nullptr: unquantized).
double bytes_per_token(tessera::model::GPTModel& model, const quant::QuantFormat* format,
                       int64_t group, double cached_tokens) {
  const tessera::model::ModelConfig& c = model.config();
  const double elem = tessera::dtype_size(model.params().compute_dtype());
  double bytes = 0;
  for (const tessera::model::Parameter& p : model.params().all()) {
    const bool input_embedding = p.embedding_or_output && p.name.find("embed") != std::string::npos;
    if (input_embedding) {
      bytes += c.hidden_size * elem;  // one row (position embeddings: one row too, roughly)
      if (!c.untie_embeddings_and_output_weights)  // the tied output layer reads it all
        bytes += format
                     ? quant::quant_matrix_bytes(*format, p.local_shape[0], p.local_shape[1], group)
                     : p.numel() * elem;
      continue;
    }
    if (format && p.local_shape.size() == 2)
      bytes += quant::quant_matrix_bytes(*format, p.local_shape[0], p.local_shape[1], group);
    else
      bytes += p.numel() * elem;
  }
  return bytes + 2.0 * c.num_layers * c.kv_heads() * c.head_dim() * elem * cached_tokens;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::bench::DecodeBenchFlags flags;
  flags.dtype = "bf16";
  std::string formats_arg = "fp6,int8,q8_0,q4";
  std::string kernels;  // "memory" or "cache": the kernels alone
  tessera::bench::require_flag_pairs(argc, argv, "quantized");
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (flags.take(f, v)) continue;
    if (f == "--formats") {
      formats_arg = v;
    } else if (f == "--kernels" && (v == "memory" || v == "cache")) {
      kernels = v;
    } else {
      std::fprintf(stderr, "quantized: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  std::vector<quant::QuantFormat> formats;
  for (size_t at = 0; at < formats_arg.size();) {
    const size_t comma = formats_arg.find(',', at);
    formats.push_back(quant::parse_quant_format(formats_arg.substr(at, comma - at)));
    at = comma == std::string::npos ? formats_arg.size() : comma + 1;
  }
  const std::string& which = flags.model;
  const int64_t prompt = flags.prompt, decode = flags.decode;
  const DType dtype = flags.dtype == "fp32" ? DType::kF32 : DType::kBF16;
  // The read rate is measured again before each measurement and the best so far taken: a
  // machine slow at the start would otherwise flatter every later figure.
  double bandwidth = tessera::bench::announce_read_bandwidth(flags.threads);
  if (!kernels.empty()) {
    tessera::bench::quantized_kernel_speeds(formats, bandwidth, kernels == "cache");
    return 0;
  }
  std::vector<tessera::bench::NamedModel> models = tessera::bench::decode_models(which);
  constexpr int64_t kGroup = 32;
  for (tessera::bench::NamedModel& m : models) {
    m.cfg.seq_length = std::max<int64_t>(m.cfg.seq_length, prompt + decode + 1);
    m.cfg.max_position_embeddings = std::max(m.cfg.max_position_embeddings, m.cfg.seq_length);
    tessera::model::GPTModel model(m.cfg, dtype, 1);
    const double cached = prompt + decode / 2.0;
    bandwidth = std::max(bandwidth, tessera::bench::read_bandwidth_gbs());
    const Speed plain = measure(model, prompt, decode);
    const double plain_bytes = bytes_per_token(model, nullptr, kGroup, cached);
    const double plain_limit = bandwidth * 1e9 / plain_bytes;
    std::printf(
        "%s %s unquantized: prefill %.1f tokens/s; decode %.2f tokens/s against %.2f by "
        "bandwidth (%.1f MB a token at %.1f GB/s): %.0f%%; products %.0f%% of decode\n",
        m.name, tessera::dtype_name(dtype), plain.prefill_tokens_s, plain.decode_tokens_s,
        plain_limit, plain_bytes / 1e6, bandwidth, 100 * plain.decode_tokens_s / plain_limit,
        100 * plain.decode_products_share);
    std::fflush(stdout);
    for (quant::QuantFormat f : formats) {
      model.quantize_weights(f, kGroup, /*output_layer=*/true);
      bandwidth = std::max(bandwidth, tessera::bench::read_bandwidth_gbs());
      const Speed s = measure(model, prompt, decode);
      const double bytes = bytes_per_token(model, &f, kGroup, cached);
      const double limit = bandwidth * 1e9 / bytes;
      std::printf(
          "%s %s %s: prefill %.1f tokens/s; decode %.2f tokens/s against %.2f by "
          "bandwidth (%.1f MB a token at %.1f GB/s): %.0f%%; %.2fx unquantized decode; products "
          "%.0f%% of decode\n",
          m.name, tessera::dtype_name(dtype), quant::quant_format_name(f), s.prefill_tokens_s,
          s.decode_tokens_s, limit, bytes / 1e6, bandwidth, 100 * s.decode_tokens_s / limit,
          s.decode_tokens_s / plain.decode_tokens_s, 100 * s.decode_products_share);
      std::fflush(stdout);
    }
  }
  return 0;
}
