// One rank's file of a distributed checkpoint (sharded_checkpoint.h), written as its data
// arrives, so that a rank whose optimizer state does not fit in memory (on NVMe,
// offload/nvme_state_storage.h) can save it window by window.
//
// The file is a safetensors file (safetensors.h) of fp32 tensors, one per slice, named
// "<name>@<flat_begin>", laid out as write_safetensors lays out any file. Its metadata key
// "tessera.slices" holds a JSON array with one object per slice, in declaration order: the
// slice's TensorSlice JSON (tensor_slice.h) plus "name", "key" (the safetensors tensor),
// "shape" (the global shape) and "xxh3", the checksum of the slice's packed data (checksum_text).
//
// Three phases:
//   1. declare() every slice (name and TensorSlice, no data);
//   2. open(): fixes the layout and creates the file under a temporary name (with O_DIRECT its
//      whole size reserved: a full disk is an error here); write() then hands each slice's data
//      over in consecutive pieces (any number, from its first element on; pieces of different
//      slices may interleave), each copied to its place in the file while the slice's XXH3 is
//      updated;
//   3. commit(): writes the header, waits for the writes, fsyncs and renames the file into place.
// The data goes through O_DIRECT (io/direct_file_writer.h: asynchronous, so the caller's next
// piece, or its next read from NVMe, overlaps the disk's writing), not the page cache, whose
// writeback ran at a sixth of the disk's rate on a project machine (docs/offload.md); through
// the page cache (pwrite) where the file system refuses O_DIRECT or asks for an alignment above
// 64 KiB, or when asked (kBuffered). The direct writer runs an I/O engine of its own, with the
// settings it is given (the trainer gives the run's `aio` block and back end).
// The header is written last because it holds the checksums; they are 16 hex digits whatever
// their value, so the header's length, and with it every data offset, is known at open().
//
// Memory: the slice descriptions, the header, an XXH3 state (about 600 bytes) for each slice
// that has received part of its data but not all, and with O_DIRECT the staging buffers (4 of
// 8 MiB at most, never more than the file, in the accountant's "other") and one alignment block
// (4 KiB on ext4 and XFS) for each block that two slices share while it is incomplete or being
// written. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/checkpoint/tensor_slice.h"
#include "tessera/core/file_io.h"
#include "tessera/io/direct_file_writer.h"

namespace tessera::checkpoint {

// The name of world rank `rank`'s file in a checkpoint directory: "rank_00003.safetensors".
std::string rank_file_name(int rank);
// The safetensors metadata key of a rank file's slice descriptions.
inline constexpr const char* kSlicesMetadataKey = "tessera.slices";
// A slice's recorded checksum: the XXH3 64-bit hash (seed 0) of its packed data as 16
// lower-case hex digits.
std::string checksum_text(uint64_t xxh3);

class RankFileWriter {
 public:
  enum class WriteMode {
    kDirectWhereSupported,  // O_DIRECT unless the file system refuses it
    kBuffered,              // the page cache (pwrite)
  };

  // `io`: the direct writer's engine settings (the run's `aio` block and back end).
  explicit RankFileWriter(WriteMode mode = WriteMode::kDirectWhereSupported,
                          const io::DirectFileWriter::Options& io = {});
  ~RankFileWriter();  // before commit(): removes the temporary file
  RankFileWriter(const RankFileWriter&) = delete;
  RankFileWriter& operator=(const RankFileWriter&) = delete;

  // Phase 1: a slice of tensor `name` (its data comes later).
  void declare(const std::string& name, const TensorSlice& slice);

  // Phase 2: creates <dir>/rank_<rank>.safetensors's temporary. tessera::Error for two slices of
  // one tensor that overlap, or when the file cannot be created.
  void open(const std::string& dir, int rank);
  // The next `count` elements of the declared slice of `name` that holds shard element
  // `flat_begin`: they must continue that slice where its last piece ended (the first piece
  // starts at the slice's flat_begin) and end within it. tessera::Error naming the file and the
  // slice otherwise (no such slice, a piece out of order, a piece too long) and on a write error.
  void write(const std::string& name, int64_t flat_begin, const float* data, int64_t count);

  // Phase 3: writes the header, fsyncs, renames the file into place. tessera::Error naming the
  // slice when one has not received all its data, and on I/O errors.
  void commit();

  // Bytes of slice data (the file's data section).
  int64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }
  // After open(): whether the data goes through O_DIRECT.
  bool direct() const { return direct_ != nullptr; }

 private:
  struct Slice;
  // The file's layout; the checksums are placeholders until every slice is complete.
  SafetensorsLayout layout(bool with_checksums) const;
  // Writes a slice's (or the header's) bytes at `offset` through whichever file is in use.
  void write_bytes(uint64_t offset, const void* data, size_t bytes);

  std::vector<Slice> slices_;
  std::map<std::string, std::vector<size_t>> by_name_;  // each name's slices by flat_begin
  WriteMode mode_;
  io::DirectFileWriter::Options io_options_;
  std::unique_ptr<AtomicFile> file_;              // the temporary: naming, fsync, rename
  std::unique_ptr<io::DirectFileWriter> direct_;  // its data through O_DIRECT, where used
  std::string path_;
  size_t header_bytes_ = 0;
  int64_t bytes_ = 0;
  bool committed_ = false;
};

}  // namespace tessera::checkpoint
