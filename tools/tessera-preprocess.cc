// tessera-preprocess: text corpus -> Megatron-compatible indexed datasets (.bin/.idx), taking
// the flags of Megatron's tools/preprocess_data.py.
//
//   tessera-preprocess --input corpus.jsonl --output-prefix out/my --json-keys text
//       --tokenizer-type ByteLevel --append-eod --workers 2   (one command line)
// writes out/my_text_document.bin and out/my_text_document.idx (one per --json-keys key);
// with --split-sentences, out/my_text_sentence.{bin,idx}, as Megatron names them.
// --input may be a directory: its regular files (not hidden ones, not subdirectories) are read
// in name order, each by its own extension (they must share one format).
//
// Tokenizers take Megatron's flags (data/tokenizer.h: ByteLevel, GPT2BPETokenizer,
// HuggingFaceTokenizer, SentencePieceTokenizer, Llama2Tokenizer, TikTokenizer, Llama3Tokenizer,
// NullTokenizer). --train-tokenizer --vocab-size N first trains a byte-level BPE on the input
// (the same documents and keys), writes it as <directory of the output prefix>/tokenizer.json
// (Hugging Face format) and tokenizes with it. Tokens are stored as uint16 when the vocabulary
// is below 65500, else int32.
//
// Input formats (by extension unless --input-format says otherwise; data/text_input.h):
//   .jsonl / .json  one JSON object per line; each key in --json-keys must hold a string.
//                   A malformed line (bad JSON, a missing key, a non-string value) is counted,
//                   reported (the first few, with line numbers) and skipped for every key, so
//                   the datasets of several keys stay document-aligned. Blank lines are ignored.
//   anything else   plain text: documents separated by one or more blank lines; the lines of a
//                   document are joined with '\n'. Goes to the dataset of the first key.
//
// --split-sentences: each document is cut by data/sentence_splitter.h (rule-based, not NLTK's
// punkt) and each sentence with tokens is one sequence of the document; sentences without
// tokens are dropped and --append-eod adds the EOD to the last sentence, as Megatron does.
// --keep-newlines keeps the whitespace between sentences (at the end of each).
// --partitions N cuts the input into N byte ranges at record boundaries, tokenizes them at once
// (--workers shared out between them) into P_<i>_<key>_<level>.{bin,idx} and merges those into
// the output, then removes them. Unlike Megatron, which deals lines round-robin to partitions
// unless --keep-sequential-samples, the order is always the input's: the output is
// byte-identical for every N and every --workers.
// Progress goes to stderr: documents, MB read, MB/s and ETA, every --log-interval documents
// (without it, about every second), then a summary line.
// Errors: one line on stderr, exit code 2.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tessera/core/clock.h"
#include "tessera/core/error.h"
#include "tessera/core/tool_main.h"
#include "tessera/data/indexed_dataset.h"
#include "tessera/data/sentence_splitter.h"
#include "tessera/data/text_input.h"
#include "tessera/data/tokenizer.h"
#include "tessera/data/tokenizer/bpe_trainer.h"
#include "tessera/kernels/build_info.h"

namespace {

using tessera::Clock;
using tessera::Error;
using tessera::one_line;
using tessera::seconds_since;
using tessera::data::InputSegment;
using tessera::data::Record;
using tessera::data::RecordReader;

constexpr const char* kTool = "tessera-preprocess";

constexpr int kMalformedReported = 5;     // malformed lines printed before going quiet
constexpr size_t kBatchBytes = 8u << 20;  // text read per parallel batch
constexpr double kProgressSeconds = 1.0;  // between progress lines without --log-interval

struct Options {
  std::string input;
  std::string output_prefix;
  std::vector<std::string> json_keys{"text"};
  tessera::data::TokenizerOptions tokenizer;
  bool train_tokenizer = false;
  int64_t vocab_size = 0;
  std::string input_format = "auto";
  bool append_eod = false;
  int workers = 1;
  bool split_sentences = false;
  bool keep_newlines = false;
  int partitions = 1;
  int64_t log_interval = 0;  // 0: a progress line about every second
  // Megatron flags with no effect here (a note says so) or refused when given.
  std::string lang = "english";
  std::string dataset_impl = "mmap";
  bool keep_sequential_samples = false;
  bool legacy_tokenizer = false;
  bool trust_remote_code = false;
  std::string tokenizer_metadata;
  int vocab_extra_ids = 0;
  bool find_optimal_num_workers = false;
  std::vector<int> workers_to_check;
  int64_t max_documents = 0;
  std::string performance_dir;
};

// What a worker makes of a record.
struct Encoded {
  std::vector<std::vector<int32_t>> tokens;   // one per key
  std::vector<std::vector<int64_t>> lengths;  // per key: its sequences' lengths
  std::string error;                          // non-empty: malformed, skip
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_jsonl(const Options& opt, const std::string& path) {
  return opt.input_format == "jsonl" ||
         (opt.input_format == "auto" && (ends_with(path, ".jsonl") || ends_with(path, ".json")));
}

InputSegment whole_file(const std::string& path, bool jsonl) {
  InputSegment s;
  s.path = path;
  s.jsonl = jsonl;
  s.end = UINT64_MAX;  // to the end of the file
  return s;
}

std::string format_seconds(double s) {
  char buf[32];
  if (s < 100) {
    std::snprintf(buf, sizeof buf, "%.0f s", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600,
                  static_cast<int>(s) / 60 % 60);
  }
  return buf;
}

// Progress lines on stderr, from the writers of every partition: documents written, input bytes
// consumed (of the total size of the input files), MB/s and the ETA at that rate. A line every
// `interval` documents, or about every second when interval is 0. Thread-safe.
class Progress {
 public:
  Progress(uint64_t total_bytes, int64_t interval)
      : total_(total_bytes), interval_(interval), t0_(Clock::now()), last_(t0_) {}

  // One record done: a document written, or a malformed line skipped (no document).
  void add(uint64_t bytes, bool document) {
    std::lock_guard<std::mutex> lock(mu_);
    bytes_ += bytes;
    if (!document) return;
    ++documents_;
    const bool due =
        interval_ > 0 ? documents_ % interval_ == 0 : seconds_since(last_) >= kProgressSeconds;
    if (due) print_line();
  }
  // The summary line; returns the seconds since the start.
  double finish() {
    std::lock_guard<std::mutex> lock(mu_);
    const double secs = seconds_since(t0_);
    std::fprintf(stderr, "%s: done: %lld documents, %.2f MB in %.2f s (%.2f MB/s)\n", kTool,
                 static_cast<long long>(documents_), total_ / 1e6, secs,
                 secs > 0 ? total_ / 1e6 / secs : 0.0);
    return secs;
  }

 private:
  void print_line() {
    last_ = Clock::now();
    const double secs = seconds_since(t0_);
    const double rate = secs > 0 ? bytes_ / secs : 0.0;  // bytes/s
    const uint64_t left = total_ > bytes_ ? total_ - bytes_ : 0;
    std::fprintf(stderr, "%s: %lld documents, %.2f of %.2f MB (%.1f%%), %.2f MB/s, ETA %s\n", kTool,
                 static_cast<long long>(documents_), bytes_ / 1e6, total_ / 1e6,
                 total_ > 0 ? 100.0 * bytes_ / total_ : 100.0, rate / 1e6,
                 rate > 0 ? format_seconds(left / rate).c_str() : "unknown");
  }

  std::mutex mu_;
  const uint64_t total_;
  const int64_t interval_;
  const Clock::time_point t0_;
  Clock::time_point last_;
  int64_t documents_ = 0;
  uint64_t bytes_ = 0;
};

// Malformed lines of all partitions: counted, the first few printed.
struct Malformed {
  std::mutex mu;
  int64_t count = 0;
  void report(const std::string& path, int64_t line, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (count++ < kMalformedReported)
      std::fprintf(stderr, "%s: %s:%lld: skipping malformed line: %s\n", kTool, path.c_str(),
                   static_cast<long long>(line), one_line(why).c_str());
  }
};

// Calls fn(text) for the texts of one record: the document (text input) or the value of each
// key in order (jsonl). The view lives only during the call. Returns "" or, for a malformed
// line, why; fn may then already have seen the keys before the bad one: the caller discards
// them, so that a malformed line is skipped for every key.
template <class Fn>
std::string for_each_text(const Record& r, bool jsonl, const std::vector<std::string>& keys,
                          Fn fn) {
  if (!jsonl) {
    fn(std::string_view(r.text));
    return "";
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(r.text);
  } catch (const nlohmann::json::exception& ex) {
    return ex.what();
  }
  if (!j.is_object()) return "expected a JSON object";
  for (const auto& key : keys) {
    const auto it = j.find(key);
    if (it == j.end()) return "key '" + key + "' is missing";
    if (!it->is_string())
      return "key '" + key + "' holds " + std::string(it->type_name()) + ", expected a string";
    fn(std::string_view(it->get_ref<const std::string&>()));
  }
  return "";
}

// Trains a byte-level BPE on the input and writes it next to the output prefix; returns its path.
std::string train_tokenizer(const Options& opt, const std::vector<std::string>& files,
                            const std::vector<std::string>& keys) {
  const auto t0 = Clock::now();
  tessera::data::BpeTrainer trainer;
  std::vector<Record> batch;
  std::vector<std::string> texts;
  uint64_t bytes = 0;
  for (const auto& path : files) {
    const bool jsonl = is_jsonl(opt, path);
    RecordReader reader(whole_file(path, jsonl));
    while (reader.next_batch(batch, kBatchBytes))
      for (const auto& r : batch) {
        // Copied (the views die with the parsed line) and added only if the whole line is good,
        // as encoding skips a malformed line for every key.
        texts.clear();
        const std::string error =
            for_each_text(r, jsonl, keys, [&](std::string_view t) { texts.emplace_back(t); });
        if (error.empty())
          for (const auto& t : texts) trainer.add_text(t);
      }
    bytes += reader.bytes_read();
  }
  const auto trained = trainer.train(opt.vocab_size);
  const std::filesystem::path dir = std::filesystem::path(opt.output_prefix).parent_path();
  const std::string path =
      (dir.empty() ? std::filesystem::path("tokenizer.json") : dir / "tokenizer.json").string();
  tessera::data::write_byte_level_bpe_json(path, trained.vocab, trained.merges, "<|endoftext|>");
  std::printf(
      "%s: trained a byte-level BPE of %zu tokens (%zu merges) on %.2f MB, %lld distinct "
      "words, in %.2f s -> %s\n",
      kTool, trained.vocab.size(), trained.merges.size(), bytes / 1e6,
      static_cast<long long>(trainer.num_words()), seconds_since(t0), path.c_str());
  return path;
}

Encoded encode_record(const Record& r, bool jsonl, const std::vector<std::string>& keys,
                      const tessera::data::Tokenizer& tok, const Options& opt) {
  Encoded e;
  e.error = for_each_text(r, jsonl, keys, [&](std::string_view text) {
    auto& ids = e.tokens.emplace_back();
    auto& lengths = e.lengths.emplace_back();
    if (!opt.split_sentences) {
      ids = tok.encode(text);
      if (opt.append_eod) ids.push_back(tok.eod());
      lengths.push_back(static_cast<int64_t>(ids.size()));
      return;
    }
    // Megatron's sentence level: sentences without tokens are dropped, the EOD (only for a
    // document with tokens) belongs to the last sentence.
    for (const std::string_view sentence :
         tessera::data::split_sentences(text, opt.keep_newlines)) {
      const std::vector<int32_t> s = tok.encode(sentence);
      if (s.empty()) continue;
      ids.insert(ids.end(), s.begin(), s.end());
      lengths.push_back(static_cast<int64_t>(s.size()));
    }
    if (opt.append_eod && !ids.empty()) {
      ids.push_back(tok.eod());
      ++lengths.back();
    }
  });
  if (!e.error.empty()) e.tokens.clear(), e.lengths.clear();
  return e;
}

// Tokenizes one partition's segments into `writers` (one per key) with `threads` encoding
// threads. Three stages overlap: while the workers encode batch k, one thread reads batch k + 1
// and another writes batch k - 1 (in record order, so the output does not depend on threads).
void run_partition(const std::vector<InputSegment>& segments, const std::vector<std::string>& keys,
                   const tessera::data::Tokenizer& tokenizer, const Options& opt, int threads,
                   std::vector<tessera::data::IndexedDatasetWriter>& writers, Progress& progress,
                   Malformed& malformed) {
  std::vector<Record> batch, next, written;
  std::vector<Encoded> encoded, to_write;
  for (const InputSegment& segment : segments) {
    RecordReader reader(segment);
    auto write_batch = [&](const std::vector<Record>& records, const std::vector<Encoded>& enc) {
      for (size_t i = 0; i < records.size(); ++i) {
        if (!enc[i].error.empty()) {
          malformed.report(segment.path, records[i].line, enc[i].error);
          progress.add(records[i].bytes, false);
          continue;
        }
        for (size_t k = 0; k < keys.size(); ++k)
          writers[k].add_document(enc[i].tokens[k], enc[i].lengths[k]);
        progress.add(records[i].bytes, true);
      }
    };
    bool have = reader.next_batch(batch, kBatchBytes);
    written.clear();
    to_write.clear();
    while (have) {
      auto reading =
          std::async(std::launch::async, [&] { return reader.next_batch(next, kBatchBytes); });
      auto writing = std::async(std::launch::async, [&] { write_batch(written, to_write); });
      encoded.assign(batch.size(), Encoded{});
      const int64_t n = static_cast<int64_t>(batch.size());
#pragma omp parallel for num_threads(threads) schedule(dynamic, 16)
      for (int64_t i = 0; i < n; ++i) {
        try {
          encoded[i] = encode_record(batch[i], segment.jsonl, keys, tokenizer, opt);
        } catch (const std::exception& ex) {
          encoded[i].error = ex.what();  // never let an exception cross the OpenMP region
        }
      }
      writing.get();  // rethrows what the stage threw
      have = reading.get();
      written.swap(batch);
      to_write.swap(encoded);
      batch.swap(next);
    }
    write_batch(written, to_write);
  }
}

// Notes (one line each, on stderr) for Megatron flags that change nothing here; errors for
// those that ask for something Tessera does not do.
void check_megatron_flags(const Options& opt, const CLI::App& app) {
  const auto given = [&](const char* flag) { return app.count(flag) > 0; };
  const auto note = [&](const std::string& what) {
    std::fprintf(stderr, "%s: %s\n", kTool, what.c_str());
  };
  if (opt.dataset_impl != "mmap")
    throw Error("--dataset-impl " + opt.dataset_impl +
                ": expected mmap, the only format written (Megatron's MMIDIDX .bin/.idx)");
  if (opt.vocab_extra_ids != 0)
    throw Error("--vocab-extra-ids " + std::to_string(opt.vocab_extra_ids) +
                ": T5 sentinel tokens are not supported, expected 0");
  if (!opt.tokenizer_metadata.empty())
    throw Error(
        "--tokenizer-metadata is not supported (Megatron's megatron.core tokenizer library): "
        "expected the tokenizer from --tokenizer-type and its files");
  if (opt.find_optimal_num_workers || given("--workers-to-check") || given("--max-documents") ||
      given("--performance-dir"))
    throw Error(
        "--find-optimal-num-workers (and --workers-to-check, --max-documents, "
        "--performance-dir) is not supported: the output is the same for any --workers, so "
        "time a few runs instead");
  if (given("--lang"))
    note("--lang " + opt.lang +
         " has no effect: the rule-based sentence splitter is the same for every language");
  if (opt.keep_newlines && !opt.split_sentences)
    note("--keep-newlines has no effect without --split-sentences");
  if (opt.keep_sequential_samples)
    note("--keep-sequential-samples has no effect: the input's order is always kept");
  if (opt.legacy_tokenizer)
    note("--legacy-tokenizer has no effect: the tokenizers are Megatron's legacy ones");
  if (opt.trust_remote_code) note("--trust-remote-code has no effect: no tokenizer code is loaded");
}

int run(Options opt, const CLI::App& app) {
  check_megatron_flags(opt, app);
  std::set<std::string> unique_keys(opt.json_keys.begin(), opt.json_keys.end());
  if (unique_keys.size() != opt.json_keys.size()) {
    throw Error("--json-keys lists a key twice: expected distinct keys");
  }
  if (opt.output_prefix.empty()) throw Error("--output-prefix is empty: expected a path prefix");
  const std::vector<std::string> files = tessera::data::input_files(opt.input);
  // Text input fills only the first key's dataset; a directory's files must share one format so
  // that the datasets of several keys stay document-aligned.
  std::vector<bool> jsonl;
  for (const auto& f : files) jsonl.push_back(is_jsonl(opt, f));
  const bool any_jsonl = std::count(jsonl.begin(), jsonl.end(), true) > 0;
  const bool all_jsonl = std::count(jsonl.begin(), jsonl.end(), false) == 0;
  if (any_jsonl && !all_jsonl)
    throw Error("input directory '" + opt.input +
                "' mixes .jsonl/.json and text files: expected "
                "one format (or --input-format)");
  const std::vector<std::string> keys =
      any_jsonl ? opt.json_keys : std::vector<std::string>{opt.json_keys.front()};
  if (opt.train_tokenizer) {
    if (opt.vocab_size <= 0) throw Error("--train-tokenizer needs --vocab-size N");
    if (opt.vocab_size < 257)
      throw Error("--train-tokenizer --vocab-size " + std::to_string(opt.vocab_size) +
                  ": expected at least 257 (the 256 bytes and an end-of-text token)");
    if (opt.tokenizer.type != "ByteLevel" && opt.tokenizer.type != "HuggingFaceTokenizer")
      throw Error(
          "--train-tokenizer trains a HuggingFaceTokenizer: expected no --tokenizer-type "
          "or HuggingFaceTokenizer, not " +
          opt.tokenizer.type);
    opt.tokenizer.type = "HuggingFaceTokenizer";
    opt.tokenizer.tokenizer_model = train_tokenizer(opt, files, keys);
  } else if (opt.vocab_size > 0) {
    if (!tessera::data::tokenizer_takes_vocab_size(opt.tokenizer.type))
      throw Error("--vocab-size goes with --train-tokenizer, NullTokenizer or TikTokenizer (" +
                  opt.tokenizer.type + " has a vocabulary of its own)");
    opt.tokenizer.vocab_size = opt.vocab_size;
  }
  const auto tokenizer = tessera::data::make_tokenizer(opt.tokenizer);
  const auto dtype = tessera::data::best_dtype_for_vocab(tokenizer->vocab_size());
  if (opt.append_eod) tokenizer->eod();  // fails now, with the reason, if there is none

  const auto parts = tessera::data::partition_input(files, jsonl, opt.partitions);
  uint64_t total_bytes = 0;
  for (const auto& part : parts)
    for (const auto& s : part) total_bytes += s.end - s.begin;
  const std::string level = opt.split_sentences ? "sentence" : "document";
  const auto dataset_prefix = [&](const std::string& prefix, const std::string& key) {
    return prefix + "_" + key + "_" + level;
  };
  std::vector<tessera::data::IndexedDatasetWriter> writers;
  std::vector<std::string> prefixes;
  for (const auto& key : keys) {
    prefixes.push_back(dataset_prefix(opt.output_prefix, key));
    writers.emplace_back(prefixes.back(), dtype);
  }

  Progress progress(total_bytes, opt.log_interval);
  Malformed malformed;
  const int n_parts = opt.partitions;
  if (n_parts == 1) {
    run_partition(parts[0], keys, *tokenizer, opt, opt.workers, writers, progress, malformed);
  } else {
    // Megatron's partition outputs, P_<i>_<key>_<level>, merged below in order.
    std::vector<std::vector<tessera::data::IndexedDatasetWriter>> part_writers(n_parts);
    std::vector<std::vector<std::string>> part_prefixes(n_parts);
    for (int i = 0; i < n_parts; ++i)
      for (const auto& key : keys) {
        part_prefixes[i].push_back(
            dataset_prefix(opt.output_prefix + "_" + std::to_string(i), key));
        part_writers[i].emplace_back(part_prefixes[i].back(), dtype);
      }
    std::vector<std::exception_ptr> failures(n_parts);
    std::vector<std::thread> threads;
    for (int i = 0; i < n_parts; ++i) {
      const int share = std::max(1, opt.workers / n_parts + (i < opt.workers % n_parts ? 1 : 0));
      threads.emplace_back([&, i, share] {
        try {
          run_partition(parts[i], keys, *tokenizer, opt, share, part_writers[i], progress,
                        malformed);
          for (auto& w : part_writers[i]) w.finalize();
        } catch (...) {
          failures[i] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& f : failures)
      if (f) std::rethrow_exception(f);
    for (size_t k = 0; k < keys.size(); ++k)
      for (int i = 0; i < n_parts; ++i) writers[k].add_dataset(part_prefixes[i][k]);
    for (int i = 0; i < n_parts; ++i)
      for (const auto& p : part_prefixes[i]) {
        std::filesystem::remove(tessera::data::data_file_path(p));
        std::filesystem::remove(tessera::data::index_file_path(p));
      }
  }
  for (auto& w : writers) w.finalize();
  const double secs = progress.finish();

  const double mb = total_bytes / 1e6;
  const int64_t documents = writers.front().num_documents();
  if (malformed.count > kMalformedReported) {
    std::fprintf(stderr, "%s: ... and %lld more malformed lines\n", kTool,
                 static_cast<long long>(malformed.count - kMalformedReported));
  }
  std::printf(
      "%s: %lld documents, %lld malformed lines skipped, %.2f MB in %.2f s (%.1f MB/s, %.0f "
      "documents/s), tokenizer %s (vocab %lld, stored as %s)\n",
      kTool, static_cast<long long>(documents), static_cast<long long>(malformed.count), mb, secs,
      secs > 0 ? mb / secs : 0.0, secs > 0 ? documents / secs : 0.0, tokenizer->name().c_str(),
      static_cast<long long>(tokenizer->vocab_size()), tessera::data::index_dtype_name(dtype));
  for (size_t k = 0; k < keys.size(); ++k) {
    std::printf("%s: key '%s': %lld tokens in %lld %ss -> %s.{bin,idx}\n", kTool, keys[k].c_str(),
                static_cast<long long>(writers[k].num_tokens()),
                static_cast<long long>(opt.split_sentences ? writers[k].num_sequences()
                                                           : writers[k].num_documents()),
                opt.split_sentences ? "sentence" : "document", prefixes[k].c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Tokenize a text corpus into Megatron-compatible .bin/.idx indexed datasets."};
  app.set_version_flag("--version", tessera::kernels::version_line);
  app.add_option("--input", opt.input,
                 "Input file (.jsonl: one JSON object per line; else text) or a directory of them")
      ->required();
  app.add_option("--output-prefix", opt.output_prefix,
                 "Output prefix P: writes P_{key}_document.bin/.idx (P_{key}_sentence with "
                 "--split-sentences)")
      ->required();
  app.add_option("--json-keys", opt.json_keys, "JSON keys to extract, one dataset each")
      ->capture_default_str();
  app.add_option("--tokenizer-type", opt.tokenizer.type,
                 "ByteLevel, GPT2BPETokenizer, HuggingFaceTokenizer, SentencePieceTokenizer, "
                 "Llama2Tokenizer, TikTokenizer, Llama3Tokenizer or NullTokenizer")
      ->capture_default_str();
  app.add_option("--vocab-file", opt.tokenizer.vocab_file, "GPT2BPETokenizer: encoder.json");
  app.add_option("--merge-file", opt.tokenizer.merge_file, "GPT2BPETokenizer: vocab.bpe");
  app.add_option("--tokenizer-model", opt.tokenizer.tokenizer_model,
                 "HuggingFaceTokenizer: tokenizer.json; SentencePieceTokenizer, Llama2Tokenizer: "
                 ".model; TikTokenizer, Llama3Tokenizer: tiktoken ranks (.json: Megatron's)");
  app.add_option("--tiktoken-pattern", opt.tokenizer.tiktoken_pattern,
                 "TikTokenizer's pre-tokenizer regex: v1 or v2 (Megatron's)")
      ->check(CLI::IsMember({"v1", "v2"}));
  app.add_option("--tiktoken-num-special-tokens", opt.tokenizer.tiktoken_num_special_tokens,
                 "TikTokenizer: ids below this are special tokens")
      ->capture_default_str();
  app.add_option("--tiktoken-special-tokens", opt.tokenizer.tiktoken_special_tokens,
                 "TikTokenizer: the special tokens (must hold <unk> <s> </s>)");
  app.add_flag("--train-tokenizer", opt.train_tokenizer,
               "Train a byte-level BPE on the input first (writes tokenizer.json next to the "
               "output prefix) and tokenize with it");
  app.add_option("--vocab-size", opt.vocab_size,
                 "With --train-tokenizer: vocabulary size; NullTokenizer: ids are below it (it is "
                 "the EOD); TikTokenizer: the whole vocabulary (default 131072)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--input-format", opt.input_format, "auto (by extension), jsonl or text")
      ->check(CLI::IsMember({"auto", "jsonl", "text"}))
      ->capture_default_str();
  app.add_flag("--append-eod", opt.append_eod, "Append the end-of-document token to each document");
  app.add_option("--workers", opt.workers, "Encoding threads (output is identical for any N)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_flag("--split-sentences", opt.split_sentences,
               "Each sentence is a sequence of its document (rule-based splitter, see "
               "docs/training.md); writes P_{key}_sentence.bin/.idx");
  app.add_flag("--keep-newlines", opt.keep_newlines,
               "With --split-sentences: keep the whitespace (newlines) between sentences");
  app.add_option("--partitions", opt.partitions,
                 "Tokenize N byte ranges of the input at once and merge them (output identical "
                 "for any N)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--log-interval", opt.log_interval,
                 "A progress line every N documents (default: about every second)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 62));
  app.add_option("--lang", opt.lang, "Megatron's NLTK language: no effect (rule-based splitter)")
      ->capture_default_str();
  app.add_option("--dataset-impl", opt.dataset_impl, "mmap, the only format written")
      ->capture_default_str();
  app.add_flag("--keep-sequential-samples", opt.keep_sequential_samples,
               "No effect: the input's order is always kept");
  app.add_flag("--legacy-tokenizer", opt.legacy_tokenizer, "No effect");
  app.add_flag("--trust-remote-code", opt.trust_remote_code, "No effect");
  app.add_option("--tokenizer-metadata", opt.tokenizer_metadata, "Refused: not supported");
  app.add_option("--vocab-extra-ids", opt.vocab_extra_ids, "T5 sentinels: only 0 is supported")
      ->capture_default_str();
  app.add_flag("--find-optimal-num-workers", opt.find_optimal_num_workers,
               "Refused: not supported");
  app.add_option("--workers-to-check", opt.workers_to_check, "Refused: not supported");
  app.add_option("--max-documents", opt.max_documents, "Refused: not supported");
  app.add_option("--performance-dir", opt.performance_dir, "Refused: not supported");
  return tessera::run_tool(app, argc, argv, kTool, [&] { return run(opt, app); });
}
