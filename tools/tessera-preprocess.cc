// tessera-preprocess: text corpus -> Megatron-compatible indexed datasets (.bin/.idx).
//
//   tessera-preprocess --input corpus.jsonl --output-prefix out/my --json-keys text
//       --tokenizer-type ByteLevel --append-eod --workers 2   (one command line)
// writes out/my_text_document.bin and out/my_text_document.idx (one per --json-keys key).
//
// Input formats (by extension unless --input-format says otherwise):
//   .jsonl / .json  one JSON object per line; each key in --json-keys must hold a string.
//                   A malformed line (bad JSON, a missing key, a non-string value) is counted,
//                   reported (the first few, with line numbers) and skipped for every key, so
//                   the datasets of several keys stay document-aligned. Blank lines are ignored.
//   anything else   plain text: documents separated by one or more blank lines; the lines of a
//                   document are joined with '\n'. Goes to the dataset of the first key.
// Output order does not depend on --workers. Errors: one line on stderr, exit code 2.
#include <omp.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/tool_main.h"
#include "tessera/data/indexed_dataset.h"
#include "tessera/data/tokenizer.h"

namespace {

using tessera::Error;
using Clock = std::chrono::steady_clock;

constexpr const char* kTool = "tessera-preprocess";
using tessera::one_line;
constexpr int kMalformedReported = 5;              // malformed lines printed before going quiet
constexpr size_t kBatchBytes = 8u << 20;           // text read per parallel batch
constexpr uint64_t kProgressMinBytes = 64u << 20;  // inputs this big get progress lines
constexpr double kProgressSeconds = 5.0;

struct Options {
  std::string input;
  std::string output_prefix;
  std::vector<std::string> json_keys{"text"};
  std::string tokenizer_type = "ByteLevel";
  std::string input_format = "auto";
  bool append_eod = false;
  int workers = 1;
};

// One unit of input: a JSON line or a text document.
struct Record {
  int64_t line;      // 1-based line number where it starts
  std::string text;  // the raw line (jsonl) or the document (text)
};

// What a worker makes of a record.
struct Encoded {
  std::vector<std::vector<int32_t>> tokens;  // one per key
  std::string error;                         // non-empty: malformed, skip
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// Reads the input in batches of records, line by line (POSIX getline: any line length).
class RecordReader {
 public:
  RecordReader(const std::string& path, bool jsonl) : path_(path), jsonl_(jsonl) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      throw Error("cannot open input file '" + path + "': " + std::strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) throw Error("input '" + path + "' is a directory: expected a file");
    file_ = std::fopen(path.c_str(), "rb");
    if (file_ == nullptr) {
      throw Error("cannot open input file '" + path + "': " + std::strerror(errno));
    }
    total_bytes_ = static_cast<uint64_t>(st.st_size);
  }
  ~RecordReader() {
    std::free(buf_);
    if (file_ != nullptr) std::fclose(file_);
  }

  // Fills `out` with the next records (about kBatchBytes of text; maybe none); false once the
  // input is exhausted and nothing is left.
  bool next_batch(std::vector<Record>& out) {
    out.clear();
    size_t bytes = 0;
    while (!eof_ && bytes < kBatchBytes) {
      const ssize_t n = ::getline(&buf_, &cap_, file_);
      if (n < 0) {
        if (std::ferror(file_)) throw Error(path_ + ": read error: " + std::strerror(errno));
        eof_ = true;
        flush_document(out);  // the end of input ends the last text document
        break;
      }
      ++line_;
      bytes_read_ += static_cast<uint64_t>(n);
      bytes += static_cast<size_t>(n);
      std::string line(buf_, static_cast<size_t>(n));
      if (!line.empty() && line.back() == '\n') line.pop_back();
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (jsonl_) {
        if (!is_blank(line)) out.push_back({line_, std::move(line)});
      } else if (is_blank(line)) {
        flush_document(out);
      } else {
        if (doc_line_ == 0) doc_line_ = line_;
        if (doc_has_line_) doc_.push_back('\n');
        doc_ += line;
        doc_has_line_ = true;
      }
    }
    return !out.empty() || !eof_;
  }

  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  void flush_document(std::vector<Record>& out) {
    if (doc_has_line_) out.push_back({doc_line_, std::move(doc_)});
    doc_.clear();
    doc_has_line_ = false;
    doc_line_ = 0;
  }

  std::string path_;
  bool jsonl_;
  std::FILE* file_ = nullptr;
  char* buf_ = nullptr;
  size_t cap_ = 0;
  int64_t line_ = 0;
  bool eof_ = false;
  uint64_t bytes_read_ = 0, total_bytes_ = 0;
  std::string doc_;
  bool doc_has_line_ = false;
  int64_t doc_line_ = 0;
};

Encoded encode_record(const Record& r, bool jsonl, const std::vector<std::string>& keys,
                      const tessera::data::Tokenizer& tok, bool append_eod) {
  Encoded e;
  auto add = [&](std::string_view text) {
    e.tokens.push_back(tok.encode(text));
    if (append_eod) e.tokens.back().push_back(tok.eod());
  };
  if (!jsonl) {
    add(r.text);
    return e;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(r.text);
  } catch (const nlohmann::json::exception& ex) {
    e.error = ex.what();
    return e;
  }
  if (!j.is_object()) {
    e.error = "expected a JSON object";
    return e;
  }
  for (const auto& key : keys) {
    const auto it = j.find(key);
    if (it == j.end()) {
      e.error = "key '" + key + "' is missing";
      e.tokens.clear();
      return e;
    }
    if (!it->is_string()) {
      e.error = "key '" + key + "' holds " + std::string(it->type_name()) + ", expected a string";
      e.tokens.clear();
      return e;
    }
    add(it->get_ref<const std::string&>());
  }
  return e;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int run(const Options& opt) {
  const bool jsonl = opt.input_format == "jsonl" ||
                     (opt.input_format == "auto" &&
                      (ends_with(opt.input, ".jsonl") || ends_with(opt.input, ".json")));
  std::set<std::string> unique_keys(opt.json_keys.begin(), opt.json_keys.end());
  if (unique_keys.size() != opt.json_keys.size()) {
    throw Error("--json-keys lists a key twice: expected distinct keys");
  }
  if (opt.output_prefix.empty()) throw Error("--output-prefix is empty: expected a path prefix");
  const auto tokenizer = tessera::data::make_tokenizer(opt.tokenizer_type);
  const auto dtype = tessera::data::best_dtype_for_vocab(tokenizer->vocab_size());
  // Text input fills only the first key's dataset.
  const std::vector<std::string> keys =
      jsonl ? opt.json_keys : std::vector<std::string>{opt.json_keys.front()};

  RecordReader reader(opt.input, jsonl);
  std::vector<tessera::data::IndexedDatasetWriter> writers;
  std::vector<std::string> prefixes;
  for (const auto& key : keys) {
    prefixes.push_back(opt.output_prefix + "_" + key + "_document");
    writers.emplace_back(prefixes.back(), dtype);
  }

  const auto t0 = Clock::now();
  auto last_progress = t0;
  const bool show_progress = reader.total_bytes() >= kProgressMinBytes;
  int64_t documents = 0, malformed = 0;
  std::vector<Record> batch;
  std::vector<Encoded> encoded;
  while (reader.next_batch(batch)) {
    encoded.assign(batch.size(), Encoded{});
    const int64_t n = static_cast<int64_t>(batch.size());
    // Workers only encode; writing stays in record order below, so output is worker-invariant.
#pragma omp parallel for num_threads(opt.workers) schedule(dynamic, 16)
    for (int64_t i = 0; i < n; ++i) {
      try {
        encoded[i] = encode_record(batch[i], jsonl, keys, *tokenizer, opt.append_eod);
      } catch (const std::exception& ex) {
        encoded[i].error = ex.what();  // never let an exception cross the OpenMP region
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      if (!encoded[i].error.empty()) {
        if (malformed < kMalformedReported) {
          std::fprintf(stderr, "%s: %s:%lld: skipping malformed line: %s\n", kTool,
                       opt.input.c_str(), static_cast<long long>(batch[i].line),
                       one_line(encoded[i].error).c_str());
        }
        ++malformed;
        continue;
      }
      for (size_t k = 0; k < keys.size(); ++k) writers[k].add_document(encoded[i].tokens[k]);
      ++documents;
    }
    if (show_progress && seconds_since(last_progress) >= kProgressSeconds) {
      last_progress = Clock::now();
      const double mb = reader.bytes_read() / 1e6;
      std::fprintf(stderr, "%s: %.1f%% (%.1f of %.1f MB), %lld documents, %.1f MB/s\n", kTool,
                   100.0 * reader.bytes_read() / reader.total_bytes(), mb,
                   reader.total_bytes() / 1e6, static_cast<long long>(documents),
                   mb / seconds_since(t0));
    }
  }
  for (auto& w : writers) w.finalize();

  const double secs = seconds_since(t0);
  const double mb = reader.bytes_read() / 1e6;
  if (malformed > kMalformedReported) {
    std::fprintf(stderr, "%s: ... and %lld more malformed lines\n", kTool,
                 static_cast<long long>(malformed - kMalformedReported));
  }
  std::printf(
      "%s: %lld documents, %lld malformed lines skipped, %.2f MB in %.2f s (%.1f MB/s), "
      "tokenizer %s (vocab %lld, stored as %s)\n",
      kTool, static_cast<long long>(documents), static_cast<long long>(malformed), mb, secs,
      secs > 0 ? mb / secs : 0.0, tokenizer->name().c_str(),
      static_cast<long long>(tokenizer->vocab_size()), tessera::data::index_dtype_name(dtype));
  for (size_t k = 0; k < keys.size(); ++k) {
    std::printf("%s: key '%s': %lld tokens -> %s.{bin,idx}\n", kTool, keys[k].c_str(),
                static_cast<long long>(writers[k].num_tokens()), prefixes[k].c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Tokenize a text corpus into Megatron-compatible .bin/.idx indexed datasets."};
  app.add_option("--input", opt.input, "Input file: .jsonl (one JSON object per line) or text")
      ->required();
  app.add_option("--output-prefix", opt.output_prefix,
                 "Output prefix P: writes P_{key}_document.bin/.idx")
      ->required();
  app.add_option("--json-keys", opt.json_keys, "JSON keys to extract, one dataset each")
      ->capture_default_str();
  app.add_option("--tokenizer-type", opt.tokenizer_type, "Tokenizer: ByteLevel")
      ->capture_default_str();
  app.add_option("--input-format", opt.input_format, "auto (by extension), jsonl or text")
      ->check(CLI::IsMember({"auto", "jsonl", "text"}))
      ->capture_default_str();
  app.add_flag("--append-eod", opt.append_eod, "Append the end-of-document token to each document");
  app.add_option("--workers", opt.workers, "Encoding threads (output is identical for any N)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  return tessera::run_tool(app, argc, argv, kTool, [&] { return run(opt); });
}
