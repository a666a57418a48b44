// The input side of tessera-preprocess: which files, records read from them, and the cutting of
// the input into partitions (--partitions) at record boundaries.
//
// Formats: .jsonl / .json (or --input-format jsonl): one record per non-blank line. Anything
// else: plain text, a record (document) per run of non-blank lines, its lines joined with '\n';
// a line of only spaces, tabs and '\r' is blank. The end of a file ends its last document.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace tessera::data {

// One unit of input: a JSON line or a text document.
struct Record {
  int64_t line;      // 1-based line number where it starts, within its file
  uint64_t bytes;    // input bytes it accounts for: its lines and the blank lines before it
  std::string text;  // the raw line (jsonl) or the document (text)
};

// A byte range [begin, end) of one file that starts and ends at record boundaries (end may be
// past the file's size: to its end).
struct InputSegment {
  std::string path;
  bool jsonl = false;
  uint64_t begin = 0, end = 0;
  int64_t first_line = 1;  // 1-based number of the line starting at `begin`
};

// The files of --input: `input` itself, or the regular files of the directory `input` (not
// hidden ones, not subdirectories) in name order. Throws tessera::Error for an unlistable or
// empty directory.
std::vector<std::string> input_files(const std::string& input);

// Cuts the files, taken in order as one stream, into `parts` partitions of about equal bytes
// (each a list of segments, possibly none), every cut moved forward to the next record boundary
// (the start of a line; for text, the start of a blank line or of the file's end) so that
// reading the partitions one after another gives exactly the records of reading the files.
// `jsonl[i]` is the format of files[i]. Throws tessera::Error if a file cannot be read.
std::vector<std::vector<InputSegment>> partition_input(const std::vector<std::string>& files,
                                                       const std::vector<bool>& jsonl, int parts);

// Reads the records of a segment in batches, line by line (POSIX getline: any line length).
class RecordReader {
 public:
  // Throws tessera::Error naming the file if it cannot be opened.
  explicit RecordReader(const InputSegment& segment);
  ~RecordReader();
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;

  // Fills `out` with the next records (about `batch_bytes` of text; maybe none); false once the
  // segment is exhausted and nothing is left. Throws tessera::Error on a read error.
  bool next_batch(std::vector<Record>& out, size_t batch_bytes);
  // Bytes of the segment read so far.
  uint64_t bytes_read() const { return pos_ - segment_.begin; }

 private:
  void flush_document(std::vector<Record>& out);

  InputSegment segment_;
  std::FILE* file_ = nullptr;
  char* buf_ = nullptr;
  size_t cap_ = 0;
  uint64_t pos_ = 0;  // file offset of the next line
  int64_t line_ = 0;  // number of the last line read
  bool eof_ = false;
  uint64_t pending_bytes_ = 0;  // read since the last record
  std::string doc_;
  bool doc_has_line_ = false;
  int64_t doc_line_ = 0;
};

}  // namespace tessera::data
