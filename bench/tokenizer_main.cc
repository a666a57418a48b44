// Tokenizer throughput: MB/s of text per thread for GPT2BPETokenizer (cold: empty word cache;
// warm: second pass), the same vocabulary through HuggingFaceTokenizer (tokenizer.json), two
// threads at once (per-thread MB/s), GPT-2's pre-tokeniser alone (hand-written vs PCRE2 running
// the same regex), and byte-level BPE training time.
//
//   tokenizer encoder.json vocab.bpe corpus.txt      (bench/tokenizer.sh runs it on English text)
// Documents are the corpus's blank-line-separated paragraphs, as tessera-preprocess reads text.
// Rates are per wall-clock second and per CPU second of the encoding thread: on a shared
// machine the second says what a thread does when it has a core to itself.
#include <omp.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/data/tokenizer/bpe_trainer.h"
#include "tessera/data/tokenizer/gpt2_split.h"
#include "tessera/data/tokenizer/gpt2_tokenizer.h"
#include "tessera/data/tokenizer/hf_tokenizer.h"
#include "tessera/core/clock.h"
#include "tessera/data/tokenizer/regex.h"

namespace {

using namespace tessera::data;
using tessera::Clock;
using tessera::seconds_since;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Rate {
  double wall = 0, cpu = 0;  // MB per wall-clock second, per CPU second of the thread
};

std::vector<std::string> documents(const std::string& text) {
  std::vector<std::string> docs;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find("\n\n", pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos) docs.push_back(text.substr(pos, end - pos));
    pos = end + 2;
  }
  return docs;
}

// MB/s of encoding docs[first, last) with `tok`.
Rate encode_rate(const Tokenizer& tok, const std::vector<std::string>& docs, size_t first,
                 size_t last, size_t* tokens = nullptr) {
  size_t bytes = 0, n = 0;
  const auto t0 = Clock::now();
  const double c0 = thread_cpu_seconds();
  for (size_t i = first; i < last; ++i) {
    n += tok.encode(docs[i]).size();
    bytes += docs[i].size();
  }
  if (tokens) *tokens = n;
  return {bytes / 1e6 / seconds_since(t0), bytes / 1e6 / (thread_cpu_seconds() - c0)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s encoder.json vocab.bpe corpus.txt\n", argv[0]);
    return 2;
  }
  try {
    const std::string text = tessera::read_file(argv[3], "corpus");
    const auto docs = documents(text);
    std::printf("corpus: %.2f MB, %zu documents\n", text.size() / 1e6, docs.size());

    const Gpt2BpeTokenizer gpt2(argv[1], argv[2]);
    size_t tokens = 0;
    const Rate cold = encode_rate(gpt2, docs, 0, docs.size(), &tokens);
    const Rate warm = encode_rate(gpt2, docs, 0, docs.size());
    std::printf(
        "GPT2BPETokenizer, 1 thread: %.1f MB/s cold cache, %.1f MB/s warm (per CPU second: "
        "%.1f cold, %.1f warm; %.2f bytes/token; target >= 5 MB/s)\n",
        cold.wall, warm.wall, cold.cpu, warm.cpu, static_cast<double>(text.size()) / tokens);

    // Two threads, each on its own half, each with its own (cold) cache.
    const Gpt2BpeTokenizer gpt2b(argv[1], argv[2]);
    Rate rates[2];
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(2)
    {
      const int t = omp_get_thread_num();
      const size_t half = docs.size() / 2;
      rates[t] = encode_rate(gpt2b, docs, t == 0 ? 0 : half, t == 0 ? half : docs.size());
    }
    const double both = text.size() / 1e6 / seconds_since(t0);
    std::printf(
        "GPT2BPETokenizer, 2 threads (cold caches): %.1f and %.1f MB/s per thread (per CPU "
        "second: %.1f and %.1f), %.1f MB/s together = %.2fx one cold thread\n",
        rates[0].wall, rates[1].wall, rates[0].cpu, rates[1].cpu, both, both / cold.wall);

    const auto json = std::filesystem::temp_directory_path() / "tessera-bench-gpt2.json";
    write_byte_level_bpe_json(json.string(), gpt2.vocab(), gpt2.merges(), "<|endoftext|>");
    const HfTokenizer hf(json.string());
    const Rate hf_cold = encode_rate(hf, docs, 0, docs.size());
    const Rate hf_warm = encode_rate(hf, docs, 0, docs.size());
    std::printf(
        "HuggingFaceTokenizer (GPT-2 as tokenizer.json), 1 thread: %.1f MB/s cold, %.1f MB/s "
        "warm (per CPU second: %.1f cold, %.1f warm)\n",
        hf_cold.wall, hf_warm.wall, hf_cold.cpu, hf_warm.cpu);
    std::filesystem::remove(json);

    std::vector<std::string_view> pieces;
    auto t1 = Clock::now();
    size_t n_hand = 0;
    for (const auto& d : docs) {
      pieces.clear();
      gpt2_split(d, pieces);
      n_hand += pieces.size();
    }
    const double hand = text.size() / 1e6 / seconds_since(t1);
    const Regex re(
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
        "bench");
    t1 = Clock::now();
    size_t n_re = 0;
    for (const auto& d : docs) n_re += re.find_all(d).size();
    const double pcre = text.size() / 1e6 / seconds_since(t1);
    std::printf(
        "GPT-2 pre-tokeniser alone: hand-written %.1f MB/s, PCRE2 (JIT) %.1f MB/s "
        "(%zu vs %zu pieces)\n",
        hand, pcre, n_hand, n_re);

    for (const int64_t vocab : {4096, 16384}) {
      t1 = Clock::now();
      BpeTrainer trainer;
      for (const auto& d : docs) trainer.add_text(d);
      const auto trained = trainer.train(vocab);
      std::printf("byte-level BPE training, vocab %lld: %.2f s (%zu merges)\n",
                  static_cast<long long>(vocab), seconds_since(t1), trained.merges.size());
    }
  } catch (const tessera::Error& e) {
    std::fprintf(stderr, "tokenizer: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
