// Whole-file reads (tokenizer vocabularies, tokenizer.json, cache descriptions) and atomic
// writes (safetensors files, cached dataset indices).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tessera {

// The file's bytes. Throws tessera::Error "cannot read <what> '<path>': <reason>" when the path
// is empty, a directory, missing or unreadable.
std::string read_file(const std::string& path, const std::string& what);

// A file written under a temporary name (path + tmp_suffix) and renamed to `path` by commit(),
// after an fsync: a crash or an error leaves any previous file at `path` untouched, never a
// partial one. The temporary is removed if commit() is not reached. Errors throw
// tessera::Error naming the temporary ("cannot create", "write failed", "cannot rename").
class AtomicFile {
 public:
  explicit AtomicFile(std::string path, const std::string& tmp_suffix = ".tmp");
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends `bytes` at the current end of what write() wrote.
  void write(const void* data, size_t bytes);
  // Writes `bytes` at file offset `offset` (pwrite), wherever write() stands, which does not
  // move; a file whose parts come in any order (checkpoint/rank_file_writer.h). Bytes never
  // written before commit() read as zero.
  void write_at(uint64_t offset, const void* data, size_t bytes);
  void commit();
  // The temporary's name: another descriptor may write it too (checkpoint/rank_file_writer.h
  // writes its data through O_DIRECT); commit() fsyncs the file whichever wrote it.
  const std::string& temporary_path() const { return tmp_; }

 private:
  void fail(const std::string& what);  // closes, removes the temporary, throws

  std::string path_, tmp_;
  std::FILE* file_ = nullptr;
};

// Writes `bytes` (e.g. a JSON text) to `path` through an AtomicFile (fsync'd, renamed into
// place). Throws tessera::Error naming the file that cannot be written.
void write_file_atomically(const std::string& path, const std::string& bytes);

// Copies `from` to `to` through an AtomicFile (fsync'd, renamed into place). Throws
// tessera::Error naming the file that cannot be read or written.
void copy_file_atomically(const std::string& from, const std::string& to);

}  // namespace tessera
