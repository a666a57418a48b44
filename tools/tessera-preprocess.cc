// tessera-preprocess: text corpus -> Megatron-compatible indexed datasets (.bin/.idx).
//
//   tessera-preprocess --input corpus.jsonl --output-prefix out/my --json-keys text
//       --tokenizer-type ByteLevel --append-eod --workers 2   (one command line)
// writes out/my_text_document.bin and out/my_text_document.idx (one per --json-keys key).
// --input may be a directory: its regular files (not hidden ones, not subdirectories) are read
// in name order, each by its own extension (they must share one format).
//
// Tokenizers take Megatron's flags: --tokenizer-type ByteLevel | GPT2BPETokenizer (--vocab-file,
// --merge-file) | HuggingFaceTokenizer (--tokenizer-model tokenizer.json) |
// SentencePieceTokenizer (--tokenizer-model x.model). --train-tokenizer --vocab-size N first
// trains a byte-level BPE on the input (the same documents and keys), writes it as
// <directory of the output prefix>/tokenizer.json (Hugging Face format) and tokenizes with it.
// Tokens are stored as uint16 when the vocabulary is below 65500, else int32.
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
#include <future>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tessera/core/clock.h"
#include "tessera/core/error.h"
#include "tessera/core/tool_main.h"
#include "tessera/kernels/build_info.h"
#include "tessera/data/indexed_dataset.h"
#include "tessera/data/tokenizer.h"
#include "tessera/data/tokenizer/bpe_trainer.h"

namespace {

using tessera::Error;
using tessera::Clock;
using tessera::seconds_since;

constexpr const char* kTool = "tessera-preprocess";
using tessera::one_line;

constexpr int kMalformedReported = 5;     // malformed lines printed before going quiet
constexpr size_t kBatchBytes = 8u << 20;  // text read per parallel batch
constexpr double kProgressSeconds = 5.0;  // between progress lines on stderr

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
    file_ = std::fopen(path.c_str(), "rb");
    if (file_ == nullptr) {
      throw Error("cannot open input file '" + path + "': " + std::strerror(errno));
    }
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
  uint64_t bytes_read_ = 0;
  std::string doc_;
  bool doc_has_line_ = false;
  int64_t doc_line_ = 0;
};

// The input files: `input` itself, or the regular files of the directory `input` in name order.
std::vector<std::string> input_files(const std::string& input) {
  std::error_code ec;
  if (!std::filesystem::is_directory(input, ec)) return {input};
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(input, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(".") && e.is_regular_file(ec)) files.push_back(e.path().string());
  }
  if (ec) throw Error("cannot list input directory '" + input + "': " + ec.message());
  std::sort(files.begin(), files.end());
  if (files.empty())
    throw Error("input directory '" + input + "' holds no files: expected .jsonl or text files");
  return files;
}

bool is_jsonl(const Options& opt, const std::string& path) {
  return opt.input_format == "jsonl" ||
         (opt.input_format == "auto" && (ends_with(path, ".jsonl") || ends_with(path, ".json")));
}

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
    RecordReader reader(path, jsonl);
    while (reader.next_batch(batch))
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
                      const tessera::data::Tokenizer& tok, bool append_eod) {
  Encoded e;
  e.error = for_each_text(r, jsonl, keys, [&](std::string_view text) {
    e.tokens.push_back(tok.encode(text));
    if (append_eod) e.tokens.back().push_back(tok.eod());
  });
  if (!e.error.empty()) e.tokens.clear();
  return e;
}

int run(Options opt) {
  std::set<std::string> unique_keys(opt.json_keys.begin(), opt.json_keys.end());
  if (unique_keys.size() != opt.json_keys.size()) {
    throw Error("--json-keys lists a key twice: expected distinct keys");
  }
  if (opt.output_prefix.empty()) throw Error("--output-prefix is empty: expected a path prefix");
  const std::vector<std::string> files = input_files(opt.input);
  // Text input fills only the first key's dataset; a directory's files must share one format so
  // that the datasets of several keys stay document-aligned.
  bool any_jsonl = false, all_jsonl = true;
  for (const auto& f : files) {
    any_jsonl = any_jsonl || is_jsonl(opt, f);
    all_jsonl = all_jsonl && is_jsonl(opt, f);
  }
  if (any_jsonl && !all_jsonl)
    throw Error("input directory '" + opt.input +
                "' mixes .jsonl/.json and text files: expected "
                "one format (or --input-format)");
  const std::vector<std::string> keys =
      any_jsonl ? opt.json_keys : std::vector<std::string>{opt.json_keys.front()};
  if (opt.train_tokenizer) {
    if (opt.vocab_size <= 0) throw Error("--train-tokenizer needs --vocab-size N");
    if (opt.tokenizer.type != "ByteLevel" && opt.tokenizer.type != "HuggingFaceTokenizer")
      throw Error(
          "--train-tokenizer trains a HuggingFaceTokenizer: expected no --tokenizer-type "
          "or HuggingFaceTokenizer, not " +
          opt.tokenizer.type);
    opt.tokenizer.type = "HuggingFaceTokenizer";
    opt.tokenizer.tokenizer_model = train_tokenizer(opt, files, keys);
  } else if (opt.vocab_size > 0) {
    throw Error("--vocab-size goes with --train-tokenizer (the tokenizer fixes the vocabulary)");
  }
  const auto tokenizer = tessera::data::make_tokenizer(opt.tokenizer);
  const auto dtype = tessera::data::best_dtype_for_vocab(tokenizer->vocab_size());
  if (opt.append_eod) tokenizer->eod();  // fails now, with the reason, if there is none
  uint64_t total_bytes = 0;
  for (const auto& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0)
      throw Error("cannot open input file '" + f + "': " + std::strerror(errno));
    total_bytes += static_cast<uint64_t>(st.st_size);
  }

  std::vector<tessera::data::IndexedDatasetWriter> writers;
  std::vector<std::string> prefixes;
  for (const auto& key : keys) {
    prefixes.push_back(opt.output_prefix + "_" + key + "_document");
    writers.emplace_back(prefixes.back(), dtype);
  }

  const auto t0 = Clock::now();
  auto last_progress = t0;
  int64_t documents = 0, malformed = 0;
  uint64_t done_bytes = 0;  // of the files already read
  // Three stages overlap: while the workers encode batch k, one thread reads batch k + 1 and
  // another writes batch k - 1 (in record order, so the output does not depend on --workers).
  std::vector<Record> batch, next, written;
  std::vector<Encoded> encoded, to_write;
  for (const auto& path : files) {
    const bool jsonl = is_jsonl(opt, path);
    RecordReader reader(path, jsonl);
    auto write_batch = [&](const std::vector<Record>& records, const std::vector<Encoded>& enc) {
      for (size_t i = 0; i < records.size(); ++i) {
        if (!enc[i].error.empty()) {
          if (malformed < kMalformedReported) {
            std::fprintf(stderr, "%s: %s:%lld: skipping malformed line: %s\n", kTool,
                         path.c_str(), static_cast<long long>(records[i].line),
                         one_line(enc[i].error).c_str());
          }
          ++malformed;
          continue;
        }
        for (size_t k = 0; k < keys.size(); ++k) writers[k].add_document(enc[i].tokens[k]);
        ++documents;
      }
    };
    bool have = reader.next_batch(batch);
    written.clear();
    to_write.clear();
    while (have) {
      auto reading = std::async(std::launch::async, [&] { return reader.next_batch(next); });
      auto writing = std::async(std::launch::async, [&] { write_batch(written, to_write); });
      encoded.assign(batch.size(), Encoded{});
      const int64_t n = static_cast<int64_t>(batch.size());
#pragma omp parallel for num_threads(opt.workers) schedule(dynamic, 16)
      for (int64_t i = 0; i < n; ++i) {
        try {
          encoded[i] = encode_record(batch[i], jsonl, keys, *tokenizer, opt.append_eod);
        } catch (const std::exception& ex) {
          encoded[i].error = ex.what();  // never let an exception cross the OpenMP region
        }
      }
      writing.get();  // rethrows what the stage threw
      have = reading.get();
      written.swap(batch);
      to_write.swap(encoded);
      batch.swap(next);
      if (seconds_since(last_progress) >= kProgressSeconds) {
        last_progress = Clock::now();
        const double mb = (done_bytes + reader.bytes_read()) / 1e6, secs = seconds_since(t0);
        std::fprintf(stderr,
                     "%s: %.1f%% (%.1f of %.1f MB), %lld documents, %.0f documents/s, "
                     "%.1f MB/s\n",
                     kTool, 100.0 * mb / (total_bytes / 1e6), mb, total_bytes / 1e6,
                     static_cast<long long>(documents), documents / secs, mb / secs);
      }
    }
    write_batch(written, to_write);
    done_bytes += reader.bytes_read();
  }
  for (auto& w : writers) w.finalize();

  const double secs = seconds_since(t0);
  const double mb = done_bytes / 1e6;
  if (malformed > kMalformedReported) {
    std::fprintf(stderr, "%s: ... and %lld more malformed lines\n", kTool,
                 static_cast<long long>(malformed - kMalformedReported));
  }
  std::printf(
      "%s: %lld documents, %lld malformed lines skipped, %.2f MB in %.2f s (%.1f MB/s, %.0f "
      "documents/s), tokenizer %s (vocab %lld, stored as %s)\n",
      kTool, static_cast<long long>(documents), static_cast<long long>(malformed), mb, secs,
      secs > 0 ? mb / secs : 0.0, secs > 0 ? documents / secs : 0.0, tokenizer->name().c_str(),
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
  app.set_version_flag("--version", tessera::kernels::version_line);
  app.add_option("--input", opt.input,
                 "Input file (.jsonl: one JSON object per line; else text) or a directory of them")
      ->required();
  app.add_option("--output-prefix", opt.output_prefix,
                 "Output prefix P: writes P_{key}_document.bin/.idx")
      ->required();
  app.add_option("--json-keys", opt.json_keys, "JSON keys to extract, one dataset each")
      ->capture_default_str();
  app.add_option("--tokenizer-type", opt.tokenizer.type,
                 "ByteLevel, GPT2BPETokenizer, HuggingFaceTokenizer or SentencePieceTokenizer")
      ->capture_default_str();
  app.add_option("--vocab-file", opt.tokenizer.vocab_file, "GPT2BPETokenizer: encoder.json");
  app.add_option("--merge-file", opt.tokenizer.merge_file, "GPT2BPETokenizer: vocab.bpe");
  app.add_option("--tokenizer-model", opt.tokenizer.tokenizer_model,
                 "HuggingFaceTokenizer: tokenizer.json; SentencePieceTokenizer: .model");
  app.add_flag("--train-tokenizer", opt.train_tokenizer,
               "Train a byte-level BPE on the input first (writes tokenizer.json next to the "
               "output prefix) and tokenize with it");
  app.add_option("--vocab-size", opt.vocab_size, "With --train-tokenizer: vocabulary size")
      ->check(CLI::Range(int64_t{257}, int64_t{1} << 24));
  app.add_option("--input-format", opt.input_format, "auto (by extension), jsonl or text")
      ->check(CLI::IsMember({"auto", "jsonl", "text"}))
      ->capture_default_str();
  app.add_flag("--append-eod", opt.append_eod, "Append the end-of-document token to each document");
  app.add_option("--workers", opt.workers, "Encoding threads (output is identical for any N)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  return tessera::run_tool(app, argc, argv, kTool, [&] { return run(opt); });
}
