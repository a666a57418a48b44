// tessera-generate: text from a trained model (docs/inference.md).
//
//   tessera-generate --load DIR --prompt "Once upon a time" --max-tokens 64
//   tessera-generate --load DIR --prompt-ids 1,2,3 --temperature 0 --json
//   tessera-generate --load DIR --prompt-file prompts.txt     (one prompt a line; - for stdin)
//
// DIR: a Tessera checkpoint saved under any layout, or a Hugging Face model directory
// (inference/load_model.h). All prompts run together in the engine's batch (inference/engine.h).
// Text needs a tokenizer: --tokenizer-type/--tokenizer-model as tessera-train takes them, else
// the tokenizer.json found beside the weights; without one, prompts are --prompt-ids and the
// output has no text. The tokenizer's end-of-document token ends a generation unless
// --ignore-eos. Without --json one prompt's text streams to the terminal as it is generated
// (several prompts: each completion when it finishes); --json prints one object per prompt:
// {"prompt_ids", "tokens", "text", "logprobs", "finish_reason"} (and "top_logprobs" with
// --logprobs N). Bad flags or requests: one line, exit code 2.
//
// Under mpirun the ranks are one tensor-parallel group (`mpirun -np 2 tessera-generate ...`):
// each holds its shard of the weights and of the KV cache, all decode together, rank 0 prints.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/core/error.h"
#include "tessera/core/threads.h"
#include "tessera/core/tool_main.h"
#include "tessera/data/tokenizer.h"
#include "tessera/inference/engine.h"
#include "tessera/inference/inference_flags.h"
#include "tessera/inference/load_model.h"
#include "tessera/inference/text_output.h"
#include "tessera/kernels/build_info.h"

namespace {

using tessera::Error;
namespace inference = tessera::inference;

std::vector<std::string> read_lines(const std::string& file) {
  std::ifstream f;
  std::istream* in = &std::cin;
  if (file != "-") {
    f.open(file);
    if (!f) throw Error("--prompt-file " + file + ": cannot open");
    in = &f;
  }
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(*in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  if (lines.empty()) throw Error("--prompt-file " + file + ": no prompts (every line is empty)");
  return lines;
}

}  // namespace

int main(int argc, char** argv) {
  inference::InferenceFlags flags;
  std::string prompt_file;
  std::vector<std::string> prompts, stops;
  std::vector<int64_t> prompt_ids, stop_ids;
  inference::GenerationRequest base;
  base.max_tokens = 64;
  int64_t seed = -1;
  int logprobs = 0;
  bool json = false, ignore_eos = false;

  CLI::App app("Generate text from a Tessera checkpoint or a Hugging Face model directory");
  app.set_version_flag("--version", tessera::kernels::version_line);
  inference::add_inference_flags(app, flags);
  app.add_option("--prompt", prompts, "a prompt (repeat for several)");
  app.add_option("--prompt-ids", prompt_ids, "one prompt as token ids, comma-separated")
      ->delimiter(',');
  app.add_option("--prompt-file", prompt_file, "prompts, one a line (- reads stdin)");
  app.add_option("--max-tokens", base.max_tokens, "tokens to generate at most")
      ->capture_default_str();
  app.add_option("--temperature", base.sampling.temperature, "0: greedy")->capture_default_str();
  app.add_option("--top-k", base.sampling.top_k, "0: off")->capture_default_str();
  app.add_option("--top-p", base.sampling.top_p, "1: off")->capture_default_str();
  app.add_option("--min-p", base.sampling.min_p, "0: off")->capture_default_str();
  app.add_option("--repetition-penalty", base.sampling.repetition_penalty, "1: off")
      ->capture_default_str();
  app.add_option("--seed", seed, "the draws' seed (default: a random one, printed with --json)");
  app.add_option("--stop", stops, "a stop string (repeat for several): the text ends before it");
  app.add_option("--stop-token-ids", stop_ids, "token ids that end a generation")->delimiter(',');
  app.add_flag("--ignore-eos", ignore_eos, "do not stop at the tokenizer's end-of-document token");
  app.add_option("--logprobs", logprobs, "also the N most likely tokens at each step (--json)");
  app.add_flag("--json", json, "one JSON object per prompt");

  const int rc = tessera::run_tool(app, argc, argv, "tessera-generate", [&] {
    // The ranks of the job (one without mpirun) are the tensor-parallel group; an error on any
    // is the job's, reported once.
    std::shared_ptr<tessera::comm::ProcessGroup> world = tessera::comm::ProcessGroup::world();
    return tessera::comm::run_on_ranks(*world, "tessera-generate", [&] {
      tessera::parallel::TensorParallel tp;
      if (world->size() > 1) tp = tessera::parallel::TensorParallel(world, false);
      if (world->rank() != 0 && !std::freopen("/dev/null", "w", stdout))
        throw Error("cannot silence stdout on rank " + std::to_string(world->rank()));
      tessera::set_num_threads(flags.threads);
      inference::LoadedModel loaded = inference::load_for_inference(flags, tp);
      const std::unique_ptr<tessera::data::Tokenizer> tokenizer =
          inference::make_tokenizer(flags, loaded);
      if (prompt_file.size()) {
        const std::vector<std::string> lines = read_lines(prompt_file);
        prompts.insert(prompts.end(), lines.begin(), lines.end());
      }
      std::vector<std::vector<int32_t>> inputs;
      if (!prompts.empty() && tokenizer == nullptr)
        throw Error(
            "--prompt: text needs a tokenizer (--tokenizer-type/--tokenizer-model; none "
            "was found beside " +
            flags.load + "); give --prompt-ids instead");
      for (const std::string& p : prompts) inputs.push_back(tokenizer->encode(p));
      if (!prompt_ids.empty()) inputs.emplace_back(prompt_ids.begin(), prompt_ids.end());
      if (inputs.empty()) throw Error("no prompt: give --prompt, --prompt-ids or --prompt-file");
      if (!stops.empty() && tokenizer == nullptr)
        throw Error("--stop: stop strings need a tokenizer; use --stop-token-ids");

      if (seed < 0) {  // one random seed for the job: rank 0's
        tessera::Tensor t = tessera::Tensor::empty({1}, tessera::DType::kI64);
        t.data<int64_t>()[0] = static_cast<int64_t>(std::random_device{}());
        world->broadcast(t, 0).wait();
        seed = t.data<int64_t>()[0];
      }
      base.sampling.seed = static_cast<uint64_t>(seed);
      base.top_logprobs = logprobs;
      for (int64_t t : stop_ids) base.stop_tokens.push_back(static_cast<int32_t>(t));
      if (tokenizer != nullptr && !ignore_eos) {
        try {
          base.stop_tokens.push_back(tokenizer->eod());
        } catch (const Error&) {  // a tokenizer without an end-of-document token
        }
      }
      inference::Engine engine(*loaded.model, flags.engine);
      std::vector<uint64_t> ids;
      for (size_t i = 0; i < inputs.size(); ++i) {
        inference::GenerationRequest r = base;
        r.prompt = inputs[i];
        try {
          ids.push_back(engine.submit(r));
        } catch (const Error& e) {
          throw Error("prompt " + std::to_string(i + 1) + ": " + e.what());
        }
      }
      // Each generation's text: decoded, cut before a stop string (which ends it), streamed.
      std::map<uint64_t, inference::TextOutput> texts;
      if (tokenizer != nullptr)
        for (uint64_t id : ids) texts.emplace(id, inference::TextOutput(*tokenizer, stops));
      const bool stream = !json && ids.size() == 1;
      if (stream && !prompts.empty()) std::printf("%s", prompts[0].c_str());
      while (!engine.idle()) {
        for (uint64_t id : engine.step()) {
          if (tokenizer == nullptr) continue;
          const inference::Generation& g = engine.generation(id);
          inference::TextOutput& text = texts.at(id);
          if (text.update(g.text_tokens())) engine.finish(id);
          if (stream) {
            const std::string piece = text.take(g.finished());
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
          }
        }
      }
      for (size_t i = 0; i < ids.size(); ++i) {
        const inference::Generation& g = engine.generation(ids[i]);
        if (json) {
          nlohmann::json j;
          j["prompt_ids"] = g.request.prompt;
          std::vector<int32_t> toks;
          std::vector<double> lps;
          nlohmann::json tops = nlohmann::json::array();
          for (const inference::GeneratedToken& t : g.tokens) {
            toks.push_back(t.token);
            lps.push_back(t.logprob.logprob);
            if (logprobs > 0) {
              nlohmann::json alt = nlohmann::json::array();
              for (const auto& [tok, lp] : t.logprob.top)
                alt.push_back({{"token", tok}, {"logprob", lp}});
              tops.push_back(alt);
            }
          }
          j["tokens"] = toks;
          if (tokenizer != nullptr) j["text"] = texts.at(ids[i]).text();
          j["logprobs"] = lps;
          if (logprobs > 0) j["top_logprobs"] = tops;
          j["finish_reason"] = inference::finish_reason_name(g.finish);
          j["seed"] = g.request.sampling.seed;
          // Bytes that are not UTF-8 (a byte-level model's output need not be) print as U+FFFD.
          std::printf("%s\n",
                      j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        } else if (stream) {
          std::printf("\n");
        } else if (tokenizer != nullptr) {
          std::printf("%s%s\n\n", prompts.size() > i ? prompts[i].c_str() : "",
                      texts.at(ids[i]).text().c_str());
        } else {
          for (const inference::GeneratedToken& t : g.tokens) std::printf("%d ", t.token);
          std::printf("\n");
        }
      }
      return 0;
    });
  });
  tessera::comm::shutdown();
  return rc;
}
