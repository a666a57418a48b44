#include "tessera/data/text_input.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "tessera/core/error.h"

namespace tessera::data {
namespace {

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// Sequential reads of one file from an offset, for finding cuts.
class Scanner {
 public:
  Scanner(const std::string& path, uint64_t offset) : path_(path) {
    file_ = std::fopen(path.c_str(), "rb");
    if (file_ == nullptr)
      throw Error("cannot open input file '" + path + "': " + std::strerror(errno));
    if (::fseeko(file_, static_cast<off_t>(offset), SEEK_SET) != 0)
      throw Error(path + ": cannot seek: " + std::strerror(errno));
    pos_ = offset;
  }
  ~Scanner() {
    std::free(buf_);
    std::fclose(file_);
  }
  // The next line (with its '\n'), or false at the end of the file.
  bool line(std::string_view* out) {
    const ssize_t n = ::getline(&buf_, &cap_, file_);
    if (n < 0) {
      if (std::ferror(file_)) throw Error(path_ + ": read error: " + std::strerror(errno));
      return false;
    }
    *out = std::string_view(buf_, static_cast<size_t>(n));
    pos_ += static_cast<uint64_t>(n);
    return true;
  }
  uint64_t pos() const { return pos_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  char* buf_ = nullptr;
  size_t cap_ = 0;
  uint64_t pos_ = 0;
};

// The first record boundary at or after `offset` in the file (its size if there is none), and
// the number of '\n' in [from, boundary), added to *lines.
uint64_t boundary_at(const std::string& path, bool jsonl, uint64_t offset, uint64_t from,
                     int64_t* lines) {
  Scanner scan(path, from);
  std::string_view line;
  // Count lines up to the first line start >= offset.
  uint64_t start = from;
  while (start < offset && scan.line(&line)) {
    ++*lines;
    start = scan.pos();
  }
  if (start < offset) return start;  // the file ended (without a final '\n')
  if (jsonl) return start;
  // Text: a document may run on from before `start`; cut at the next blank line, where the
  // document before it ends either way.
  while (scan.line(&line)) {
    std::string_view s = line;
    if (!s.empty() && s.back() == '\n') s.remove_suffix(1);
    if (is_blank(s)) return start;
    ++*lines;
    start = scan.pos();
  }
  return start;
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error("cannot open input file '" + path + "': " + std::strerror(errno));
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

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

std::vector<std::vector<InputSegment>> partition_input(const std::vector<std::string>& files,
                                                       const std::vector<bool>& jsonl, int parts) {
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const auto& f : files) total += sizes.emplace_back(file_size(f));
  // Cut k (1 <= k < parts) at global byte k * total / parts, moved to a boundary of its file.
  struct Cut {
    size_t file;
    uint64_t offset;
    int64_t line;  // 1-based number of the line starting at offset
  };
  std::vector<Cut> cuts{{0, 0, 1}};
  size_t file = 0;
  uint64_t file_start = 0;  // global offset of files[file]
  uint64_t counted = 0;     // lines of files[file] are counted up to here...
  int64_t lines = 0;        // ...and number this many
  for (int k = 1; k < parts; ++k) {
    const uint64_t target = total * static_cast<uint64_t>(k) / static_cast<uint64_t>(parts);
    while (file + 1 < files.size() && target >= file_start + sizes[file]) {
      file_start += sizes[file++];
      counted = 0, lines = 0;
    }
    const Cut& prev = cuts.back();
    uint64_t offset = std::min(target - file_start, sizes[file]);
    if (prev.file == file) offset = std::max(offset, prev.offset);
    if (offset < counted) offset = counted;
    const uint64_t cut = boundary_at(files[file], jsonl[file], offset, counted, &lines);
    counted = cut;
    cuts.push_back({file, cut, lines + 1});
  }
  cuts.push_back({files.size() - 1, sizes.back(), 0});
  std::vector<std::vector<InputSegment>> out(static_cast<size_t>(parts));
  for (int k = 0; k < parts; ++k) {
    const Cut& a = cuts[k];
    const Cut& b = cuts[k + 1];
    for (size_t f = a.file; f <= b.file; ++f) {
      InputSegment s;
      s.path = files[f];
      s.jsonl = jsonl[f];
      s.begin = f == a.file ? a.offset : 0;
      s.end = f == b.file ? b.offset : sizes[f];
      s.first_line = f == a.file ? a.line : 1;
      if (s.end > s.begin) out[k].push_back(std::move(s));
    }
  }
  return out;
}

RecordReader::RecordReader(const InputSegment& segment) : segment_(segment) {
  file_ = std::fopen(segment_.path.c_str(), "rb");
  if (file_ == nullptr)
    throw Error("cannot open input file '" + segment_.path + "': " + std::strerror(errno));
  if (segment_.begin > 0 && ::fseeko(file_, static_cast<off_t>(segment_.begin), SEEK_SET) != 0)
    throw Error(segment_.path + ": cannot seek: " + std::strerror(errno));
  pos_ = segment_.begin;
  line_ = segment_.first_line - 1;
}

RecordReader::~RecordReader() {
  std::free(buf_);
  if (file_ != nullptr) std::fclose(file_);
}

bool RecordReader::next_batch(std::vector<Record>& out, size_t batch_bytes) {
  out.clear();
  size_t bytes = 0;
  while (!eof_ && bytes < batch_bytes) {
    const ssize_t n = pos_ < segment_.end ? ::getline(&buf_, &cap_, file_) : -1;
    if (n < 0) {
      if (std::ferror(file_)) throw Error(segment_.path + ": read error: " + std::strerror(errno));
      eof_ = true;
      flush_document(out);  // the end of input ends the last text document
      break;
    }
    ++line_;
    pos_ += static_cast<uint64_t>(n);
    pending_bytes_ += static_cast<uint64_t>(n);
    bytes += static_cast<size_t>(n);
    std::string line(buf_, static_cast<size_t>(n));
    if (!line.empty() && line.back() == '\n') line.pop_back();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (segment_.jsonl) {
      if (!is_blank(line)) {
        out.push_back({line_, pending_bytes_, std::move(line)});
        pending_bytes_ = 0;
      }
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

void RecordReader::flush_document(std::vector<Record>& out) {
  if (doc_has_line_) {
    out.push_back({doc_line_, pending_bytes_, std::move(doc_)});
    pending_bytes_ = 0;
  }
  doc_.clear();
  doc_has_line_ = false;
  doc_line_ = 0;
}

}  // namespace tessera::data
