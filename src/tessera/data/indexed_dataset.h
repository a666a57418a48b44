// Megatron's MMIDIDX indexed dataset (PREFIX.bin + PREFIX.idx), byte-compatible both ways.
//
// PREFIX.bin holds the token ids of every sequence back to back, no header, in one element type.
// PREFIX.idx (little-endian) is:
//   magic "MMIDIDX\0\0" (9 bytes) | version u64 = 1 | dtype code u8 | sequence_count u64 |
//   document_count u64                                      (header: 34 bytes)
//   sequence_lengths   int32[sequence_count]   (tokens per sequence)
//   sequence_pointers  int64[sequence_count]   (byte offset of each sequence in .bin)
//   document_indices   int64[document_count]   (0, then the end sequence of each document;
//                                               document_count = documents + 1)
//   [sequence_modes    int8[sequence_count]]   (optional, multimodal; accepted and ignored)
// The arrays start at byte 34 and so are not naturally aligned: all reads go through memcpy.
//
// add_document(tokens) writes one sequence per document (document_indices = 0, 1, ..., n), which
// is what Megatron's preprocess_data.py writes without --split-sentences; with it, each sentence
// is a sequence and a document's sequences are its sentences (add_document(tokens, lengths)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/mapped_file.h"

namespace tessera::data {

// Element type codes of the .idx header (numpy types in Megatron's DType enum).
enum class IndexDType : uint8_t {
  kUInt8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUInt16 = 8,
};

inline constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kIndexVersion = 1;
inline constexpr size_t kIndexHeaderBytes = 34;

// True for the eight codes above.
bool is_valid_index_dtype(uint8_t code);
// Bytes per element of a valid code. Throws tessera::Error for an unknown code.
size_t index_dtype_size(IndexDType dtype);
// "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"; "unknown" otherwise.
const char* index_dtype_name(IndexDType dtype);
// Megatron's rule: uint16 when vocab < 65500, else int32. Throws tessera::Error if vocab <= 0.
IndexDType best_dtype_for_vocab(int64_t vocab);

// Paths of the two files of a prefix: PREFIX.bin / PREFIX.idx.
std::string data_file_path(const std::string& prefix);
std::string index_file_path(const std::string& prefix);

// Streams documents into PREFIX.bin and writes PREFIX.idx on finalize().
//
// Both files are written under temporary names (PREFIX.bin.tmp, PREFIX.idx.tmp) and renamed,
// .bin first then .idx, only in finalize(): a crash never leaves a half-written file under a
// final name, and an existing .idx always describes a complete .bin. If the writer is destroyed
// without finalize() (e.g. an exception unwinds), the temporary files are removed.
// Not thread-safe; move-only.
class IndexedDatasetWriter {
 public:
  // Throws tessera::Error if the temporary .bin cannot be created or the dtype code is unknown.
  IndexedDatasetWriter(std::string prefix, IndexDType dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(IndexedDatasetWriter&& other) noexcept;
  IndexedDatasetWriter& operator=(IndexedDatasetWriter&& other) noexcept;
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one document made of one sequence (an empty document is allowed: a sequence of
  // length 0). Throws tessera::Error if a token id is not exactly representable in the dtype
  // (e.g. 70000 in uint16, a negative id in uint8, > 2^24 in float32) or on a write error.
  void add_document(std::span<const int32_t> tokens);
  // Appends one document made of sequences of the given lengths (their sum must be
  // tokens.size(); none is allowed: a document without sequences, as Megatron writes for a
  // document whose sentences are all empty). Errors as above, and for a length >= 2^31.
  void add_document(std::span<const int32_t> tokens, std::span<const int64_t> sequence_lengths);
  // Appends every document of the dataset PREFIX (Megatron's add_index): its .bin bytes as they
  // are, its sequences and document boundaries. Throws tessera::Error if it cannot be read, is
  // malformed, stores another dtype, or its sequences are not contiguous in its .bin.
  void add_dataset(const std::string& prefix);

  // Flushes and writes PREFIX.bin then PREFIX.idx (atomically, see above). Throws
  // tessera::Error on an I/O error. Calling anything but the accessors afterwards is a bug.
  void finalize();

  int64_t num_documents() const { return static_cast<int64_t>(doc_ends_.size()); }
  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_tokens() const { return num_tokens_; }
  IndexDType dtype() const { return dtype_; }

 private:
  void close_and_remove_temporaries();

  std::string prefix_;
  IndexDType dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_;
  std::vector<int64_t> doc_ends_;      // document_indices after the leading 0
  std::vector<unsigned char> buffer_;  // one document converted to the dtype
  int64_t num_tokens_ = 0;
  bool finalized_ = false;
};

// Read-only, memory-mapped view of PREFIX.bin + PREFIX.idx.
//
// The constructor validates everything a later read relies on, so accessors never read outside
// the files: magic, version 1, a known dtype code, the .idx size matching its header (optionally
// plus sequence_modes), lengths >= 0, every sequence inside .bin and aligned to the element size,
// document_indices starting at 0, non-decreasing and ending at sequence_count. Any violation
// throws tessera::Error with one line naming the file, what is wrong and what was expected.
// Opening costs one pass over the index arrays (O(sequences)); token data is paged in lazily.
// Thread-safe for concurrent reads; move-only.
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);
  IndexedDataset(IndexedDataset&& other) noexcept = default;
  IndexedDataset& operator=(IndexedDataset&& other) noexcept = default;
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  std::string bin_path() const { return data_file_path(prefix_); }
  std::string idx_path() const { return index_file_path(prefix_); }
  IndexDType dtype() const { return dtype_; }

  int64_t num_sequences() const { return num_sequences_; }
  // Documents, i.e. document_indices().size() - 1.
  int64_t num_documents() const { return static_cast<int64_t>(document_indices_.size()) - 1; }
  // Sum of all sequence lengths.
  int64_t num_tokens() const { return num_tokens_; }
  // Tokens in sequence i. i must be in [0, num_sequences()) (else tessera::Error).
  int64_t sequence_length(int64_t i) const;
  // Byte offset of sequence i in .bin.
  int64_t sequence_pointer(int64_t i) const;
  // 0, then the end (exclusive) sequence index of each document.
  std::span<const int64_t> document_indices() const { return document_indices_; }

  // Copies tokens [offset, offset + length) of sequence i into out[0, length) as int32 ids,
  // converting from the stored dtype. Throws tessera::Error if the range is outside the sequence
  // or a stored value is not an integer representable in int32 (e.g. 1.5 in a float file, or
  // 2^40 in an int64 file), naming the file and token position.
  void get(int64_t i, int64_t offset, int64_t length, int32_t* out) const;

 private:
  std::string prefix_;
  IndexDType dtype_ = IndexDType::kUInt16;
  size_t elem_size_ = 2;
  int64_t num_sequences_ = 0;
  int64_t num_tokens_ = 0;
  std::vector<int64_t> document_indices_;
  // Mapped files; idx_lengths_/idx_pointers_ point into the .idx mapping (unaligned).
  MappedFile idx_file_, bin_file_;
  const unsigned char* idx_lengths_ = nullptr;
  const unsigned char* idx_pointers_ = nullptr;
};

}  // namespace tessera::data
