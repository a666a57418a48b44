#include "tessera/inference/serving_metrics.h"

#include <cstdio>

namespace tessera::inference {
namespace {

// A label value with Prometheus' escapes (backslash, double quote, line feed).
std::string escaped(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

class Exposition {
 public:
  explicit Exposition(const std::string& model)
      : model_label_("model_name=\"" + escaped(model) + "\"") {}
  // A metric's HELP and TYPE lines, once before its samples.
  void family(const char* name, const char* type, const char* help) {
    text_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const char* name, double value, const std::string& extra_label = "") {
    char number[64];
    std::snprintf(number, sizeof(number), "%.17g", value);
    text_ += std::string(name) + "{" + model_label_ +
             (extra_label.empty() ? "" : "," + extra_label) + "} " + number + "\n";
  }
  void one(const char* name, const char* type, const char* help, double value) {
    family(name, type, help);
    sample(name, value);
  }
  std::string text() const { return text_; }

 private:
  std::string model_label_, text_;
};

}  // namespace

std::string prometheus_metrics(const ServingStats& stats, const MemorySnapshot& memory,
                               int64_t resident_bytes, const std::string& model_name) {
  Exposition e(model_name);
  e.one("tessera:num_requests_running", "gauge", "Sequences in the running batch.", stats.running);
  e.one("tessera:num_requests_waiting", "gauge", "Requests accepted and not yet in the batch.",
        stats.waiting);
  const double used = static_cast<double>(stats.cache_blocks - stats.free_cache_blocks);
  e.one("tessera:kv_cache_usage_perc", "gauge", "Fraction of the KV-cache blocks in use (0-1).",
        stats.cache_blocks > 0 ? used / static_cast<double>(stats.cache_blocks) : 0.0);
  e.one("tessera:kv_cache_blocks", "gauge", "KV-cache blocks in the pool.", stats.cache_blocks);
  e.one("tessera:kv_cache_free_blocks", "gauge", "KV-cache blocks free.", stats.free_cache_blocks);
  e.one("tessera:prompt_tokens_total", "counter", "Prompt tokens of accepted requests.",
        stats.prompt_tokens);
  e.one("tessera:generation_tokens_total", "counter", "Tokens generated.", stats.generation_tokens);
  e.family("tessera:request_success_total", "counter", "Requests finished, by finished_reason.");
  e.sample("tessera:request_success_total", stats.finished[static_cast<int>(FinishReason::kStop)],
           "finished_reason=\"stop\"");
  e.sample("tessera:request_success_total", stats.finished[static_cast<int>(FinishReason::kLength)],
           "finished_reason=\"length\"");
  e.one("tessera:request_aborted_total", "counter",
        "Requests ended because their client went away.",
        stats.finished[static_cast<int>(FinishReason::kAbort)]);
  e.one("tessera:request_refused_total", "counter", "Requests the engine refused.", stats.refused);
  e.one("tessera:engine_steps_total", "counter", "Engine steps.", stats.steps);
  e.family("tessera:memory_bytes", "gauge", "Tensor memory now, by category.");
  for (int c = 0; c < static_cast<int>(MemoryCategory::kCount); ++c)
    e.sample(
        "tessera:memory_bytes", memory.current[c],
        std::string("category=\"") + memory_category_name(static_cast<MemoryCategory>(c)) + "\"");
  e.one("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", resident_bytes);
  return e.text();
}

}  // namespace tessera::inference
