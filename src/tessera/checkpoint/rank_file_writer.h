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
//   2. open(): fixes the layout and creates the file under a temporary name; write() then hands
//      each slice's data over in consecutive pieces (any number, from its first element on;
//      pieces of different slices may interleave), each written at once at its place in the file
//      (pwrite) while the slice's XXH3 is updated;
//   3. commit(): writes the header, fsyncs and renames the file into place.
// The header is written last because it holds the checksums; they are 16 hex digits whatever
// their value, so the header's length, and with it every data offset, is known at open().
//
// Memory: the writer copies no data; it holds the slice descriptions, the header and an XXH3
// state (about 600 bytes) for each slice that has received part of its data but not all.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/checkpoint/tensor_slice.h"
#include "tessera/core/file_io.h"

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
  RankFileWriter();
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

 private:
  struct Slice;
  // The file's layout; the checksums are placeholders until every slice is complete.
  SafetensorsLayout layout(bool with_checksums) const;

  std::vector<Slice> slices_;
  std::map<std::string, std::vector<size_t>> by_name_;  // each name's slices by flat_begin
  std::unique_ptr<AtomicFile> file_;
  std::string path_;
  size_t header_bytes_ = 0;
  int64_t bytes_ = 0;
  bool committed_ = false;
};

}  // namespace tessera::checkpoint
