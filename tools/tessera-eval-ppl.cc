// tessera-eval-ppl: a model's perplexity over a text file or a Megatron indexed dataset, and with
// --kl-divergence how far a quantized model's next-token distributions are from the unquantized
// model's (llama.cpp's `llama-perplexity --kl-divergence` measure, computed here in one run).
//
//   tessera-eval-ppl --load DIR (--text-file F | --data-path PREFIX [--split S --split-part P])
//                    [--seq-length T] [--max-tokens N] [--quantize FORMAT [--kl-divergence]]
//                    [--json]
//
// The token stream (the file encoded by the tokenizer, or the dataset's documents in order —
// with --split, only the documents of one part, carved as tessera-train's --split carves them:
// `--split 95,5,0 --split-part valid` is the validation text of a run with that split) is cut
// into windows of T + 1 tokens, one after the other; in each window every token after the first
// is predicted from those before it in the window (as Megatron's evaluation loss), so perplexity
// is exp(mean negative log-likelihood) over windows x T tokens. With --kl-divergence the same
// windows run through the model without --quantize too, and for every predicted position
// KL(P_unquantized || P_quantized) = sum_v p(v) (log p(v) - log q(v)) is taken in double over the
// whole vocabulary; printed: its mean, its 99th percentile, and how often both models rank the
// same token first. Under mpirun the ranks are one tensor-parallel group (rank 0 prints). Bad
// flags or files: one line, exit code 2.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/threads.h"
#include "tessera/core/tool_main.h"
#include "tessera/data/dataset_index.h"
#include "tessera/data/indexed_dataset.h"
#include "tessera/inference/engine.h"
#include "tessera/inference/inference_flags.h"
#include "tessera/kernels/build_info.h"
#include "tessera/model/chunk_runner.h"
#include "tessera/parallel/tensor_parallel.h"
#include "tessera/train/arguments.h"

namespace {

using tessera::Error;
using tessera::Tensor;
namespace inference = tessera::inference;
namespace model = tessera::model;

// log-softmax of one row of logits, in double.
std::vector<double> log_softmax(const float* row, int64_t V) {
  double top = row[0];
  for (int64_t v = 1; v < V; ++v) top = std::max(top, static_cast<double>(row[v]));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - top);
  const double log_z = top + std::log(sum);
  std::vector<double> out(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) out[v] = row[v] - log_z;
  return out;
}

// The logits (T, V) of every position of one window, fp32, whole vocabulary on every rank.
Tensor window_logits(model::GPTModel& m, const std::vector<int32_t>& inputs) {
  const int64_t T = static_cast<int64_t>(inputs.size());
  std::vector<int32_t> targets(static_cast<size_t>(T), 0);
  const model::Batch batch{inputs.data(), targets.data(), nullptr, 1, T};
  const model::StepContext ctx = m.context(1, T, 0, 0, 0, /*training=*/false);
  const Tensor hidden = model::ChunkRunner(m).forward_chunk(0, Tensor(), batch, ctx, nullptr);
  return inference::gather_vocabulary(
      m.logits(hidden, 1).to(tessera::DType::kF32, tessera::MemoryCategory::kActivations),
      m.tensor_parallel());
}

// `split_part` 0, 1, 2 (train, valid, test) of --split `split`, or -1 for every document.
std::vector<int32_t> read_tokens(const std::string& text_file, const std::string& data_path,
                                 const std::string& split, int split_part,
                                 const tessera::data::Tokenizer* tokenizer, int64_t limit) {
  std::vector<int32_t> tokens;
  if (!text_file.empty()) {
    if (tokenizer == nullptr)
      throw Error(
          "--text-file needs a tokenizer: give --tokenizer-type (no tokenizer.json beside "
          "the weights)");
    tokens = tokenizer->encode(tessera::read_file(text_file, "text file"));
  } else {
    const tessera::data::IndexedDataset ds(data_path);
    int64_t first = 0, last = ds.num_sequences();
    if (split_part >= 0) {
      const auto ranges = tessera::data::split_document_ranges(
          tessera::train::split_fractions(split), ds.num_documents());
      if (!ranges[split_part])
        throw Error("--split " + split + ": the part asked for has no documents");
      const std::span<const int64_t> docs = ds.document_indices();
      first = docs[ranges[split_part]->begin];
      last = docs[ranges[split_part]->end];
    }
    for (int64_t i = first; i < last && static_cast<int64_t>(tokens.size()) < limit; ++i) {
      const int64_t n = ds.sequence_length(i);
      const size_t at = tokens.size();
      tokens.resize(at + static_cast<size_t>(n));
      ds.get(i, 0, n, tokens.data() + at);
    }
  }
  if (static_cast<int64_t>(tokens.size()) > limit) tokens.resize(static_cast<size_t>(limit));
  return tokens;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(std::ceil(p / 100 * v.size())) - 1);
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  inference::InferenceFlags flags;
  std::string text_file, data_path, split, split_part;
  int64_t seq_length = 0, max_tokens = int64_t{1} << 40;
  bool kl = false, json = false;
  CLI::App app(
      "Perplexity of a model over a text file or a Megatron dataset, and the KL "
      "divergence of a quantized model from the unquantized one");
  app.set_version_flag("--version", tessera::kernels::version_line);
  inference::add_inference_flags(app, flags);
  auto* text = app.add_option("--text-file", text_file, "a text file, encoded by the tokenizer");
  auto* data = app.add_option("--data-path", data_path, "a Megatron indexed dataset's prefix");
  text->excludes(data);
  auto* split_flag = app.add_option("--split", split, "with --data-path: tessera-train's --split");
  app.add_option("--split-part", split_part, "with --split: which part (train, valid, test)")
      ->check(CLI::IsMember({"train", "valid", "test"}))
      ->needs(split_flag);
  split_flag->needs(data);
  app.add_option("--seq-length", seq_length, "tokens predicted per window (default: the model's)")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-tokens", max_tokens, "read at most this many tokens")
      ->check(CLI::PositiveNumber);
  app.add_flag("--kl-divergence", kl,
               "with --quantize: KL divergence from the unquantized model, per position");
  app.add_flag("--json", json, "one JSON object");
  const int rc = tessera::run_tool(app, argc, argv, "tessera-eval-ppl", [&] {
    if (text_file.empty() && data_path.empty())
      throw Error("no text: give --text-file F or --data-path PREFIX");
    if (kl && flags.quantize.empty())
      throw Error(
          "--kl-divergence compares a quantized model with the unquantized one: give "
          "--quantize FORMAT");
    std::shared_ptr<tessera::comm::ProcessGroup> world = tessera::comm::ProcessGroup::world();
    tessera::parallel::TensorParallel tp;
    if (world->size() > 1) tp = tessera::parallel::TensorParallel(world, false);
    tessera::set_num_threads(flags.threads);
    inference::LoadedModel loaded = inference::load_for_inference(flags, tp);
    std::unique_ptr<inference::LoadedModel> base;  // the unquantized model, for KL
    if (kl) {
      inference::InferenceFlags plain = flags;
      plain.quantize.clear();
      base = std::make_unique<inference::LoadedModel>(inference::load_for_inference(plain, tp));
    }
    const std::unique_ptr<tessera::data::Tokenizer> tokenizer =
        inference::make_tokenizer(flags, loaded);
    model::GPTModel& m = *loaded.model;
    const int64_t context = m.config().max_positions();
    const int64_t T =
        seq_length > 0 ? seq_length : std::min<int64_t>(m.config().seq_length, context);
    if (T > context)
      throw Error("--seq-length " + std::to_string(T) + ": longer than the model's context of " +
                  std::to_string(context));
    const int part = split.empty() ? -1 : split_part == "valid" ? 1 : split_part == "test" ? 2 : 0;
    const std::vector<int32_t> tokens =
        read_tokens(text_file, data_path, split, part, tokenizer.get(), max_tokens);
    const int64_t V = m.config().vocab_size, windows = static_cast<int64_t>(tokens.size() - 1) / T;
    if (tokens.size() < 2 || windows < 1)
      throw Error("the text has " + std::to_string(tokens.size()) +
                  " tokens: fewer than one "
                  "window of --seq-length " +
                  std::to_string(T) + " + 1");
    for (const int32_t t : tokens)
      if (t < 0 || t >= V)
        throw Error("token " + std::to_string(t) + " is outside the model's vocabulary of " +
                    std::to_string(V));

    double nll = 0, base_nll = 0;
    std::vector<double> kls;
    int64_t scored = 0, same_top = 0;
    for (int64_t w = 0; w < windows; ++w) {
      const std::vector<int32_t> inputs(tokens.begin() + w * T, tokens.begin() + w * T + T);
      const Tensor logits = window_logits(m, inputs);
      const int64_t padded = logits.dim(1);
      Tensor base_logits;
      if (base) base_logits = window_logits(*base->model, inputs);
      for (int64_t t = 0; t < T; ++t) {
        const int32_t target = tokens[w * T + t + 1];
        const std::vector<double> lq = log_softmax(logits.data<float>() + t * padded, V);
        nll -= lq[target];
        ++scored;
        if (!base) continue;
        const std::vector<double> lp = log_softmax(base_logits.data<float>() + t * padded, V);
        base_nll -= lp[target];
        double d = 0;
        for (int64_t v = 0; v < V; ++v) d += std::exp(lp[v]) * (lp[v] - lq[v]);
        kls.push_back(std::max(d, 0.0));  // >= 0 up to rounding
        same_top += std::max_element(lp.begin(), lp.end()) - lp.begin() ==
                    std::max_element(lq.begin(), lq.end()) - lq.begin();
      }
    }
    if (world->rank() != 0) return 0;
    const double mean_nll = nll / scored;
    nlohmann::json out = {{"model", loaded.source}, {"tokens", scored},
                          {"windows", windows},     {"seq_length", T},
                          {"nll", mean_nll},        {"ppl", std::exp(mean_nll)}};
    if (base) {
      double sum = 0;
      for (double d : kls) sum += d;
      out["base_ppl"] = std::exp(base_nll / scored);
      out["kl_mean"] = sum / static_cast<double>(kls.size());
      out["kl_p99"] = percentile(kls, 99);
      out["same_top"] = static_cast<double>(same_top) / static_cast<double>(scored);
    }
    if (json) {
      std::printf("%s\n", out.dump().c_str());
    } else {
      std::printf("%s: %lld tokens in %lld windows of %lld: perplexity %.4f (mean NLL %.6f)\n",
                  loaded.source.c_str(), static_cast<long long>(scored),
                  static_cast<long long>(windows), static_cast<long long>(T), std::exp(mean_nll),
                  mean_nll);
      if (base)
        std::printf(
            "unquantized perplexity %.4f; KL divergence from it: mean %.6f, p99 %.6f; "
            "same top token %.2f%%\n",
            out["base_ppl"].get<double>(), out["kl_mean"].get<double>(),
            out["kl_p99"].get<double>(), 100 * out["same_top"].get<double>());
    }
    return 0;
  });
  tessera::comm::shutdown();
  return rc;
}
