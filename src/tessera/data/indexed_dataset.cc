#include "tessera/data/indexed_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::data {
namespace {

// The format is little-endian; so is every machine we build for, which lets memcpy stand in
// for explicit byte swapping.
static_assert(std::endian::native == std::endian::little, "MMIDIDX I/O assumes little-endian");

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void append(std::vector<unsigned char>& out, T v) {
  const auto* p = reinterpret_cast<const unsigned char*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

std::string errno_text() { return std::strerror(errno); }

// Range of ids a dtype holds exactly. Floats hold every integer up to 2^mantissa bits.
struct IdRange {
  int64_t lo, hi;
};
IdRange id_range(IndexDType dtype) {
  switch (dtype) {
    case IndexDType::kUInt8:
      return {0, 255};
    case IndexDType::kInt8:
      return {-128, 127};
    case IndexDType::kInt16:
      return {-32768, 32767};
    case IndexDType::kUInt16:
      return {0, 65535};
    case IndexDType::kFloat32:
      return {-(int64_t{1} << 24), int64_t{1} << 24};
    case IndexDType::kInt32:
    case IndexDType::kInt64:
    case IndexDType::kFloat64:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
  }
  return {0, -1};
}

template <typename T>
void encode_tokens(std::span<const int32_t> tokens, unsigned char* out) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const T v = static_cast<T>(tokens[i]);
    std::memcpy(out + i * sizeof(T), &v, sizeof(T));
  }
}

template <typename T>
void decode_tokens(const unsigned char* in, int64_t n, int32_t* out, int64_t* bad) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = load<T>(in + i * sizeof(T));
    if constexpr (sizeof(T) < 4 || std::is_same_v<T, int32_t>) {
      out[i] = static_cast<int32_t>(v);
    } else {
      // int64 and floats may hold values that are not int32 ids: stop at the first one.
      const bool ok = std::is_floating_point_v<T>
                          ? (v >= -2147483648.0 && v <= 2147483647.0 &&
                             static_cast<T>(static_cast<int64_t>(v)) == v)
                          : (static_cast<int64_t>(v) >= std::numeric_limits<int32_t>::min() &&
                             static_cast<int64_t>(v) <= std::numeric_limits<int32_t>::max());
      if (!ok) {
        *bad = i;
        return;
      }
      out[i] = static_cast<int32_t>(v);
    }
  }
}

}  // namespace

bool is_valid_index_dtype(uint8_t code) { return code >= 1 && code <= 8; }

size_t index_dtype_size(IndexDType dtype) {
  switch (dtype) {
    case IndexDType::kUInt8:
    case IndexDType::kInt8:
      return 1;
    case IndexDType::kInt16:
    case IndexDType::kUInt16:
      return 2;
    case IndexDType::kInt32:
    case IndexDType::kFloat32:
      return 4;
    case IndexDType::kInt64:
    case IndexDType::kFloat64:
      return 8;
  }
  throw Error("unknown MMIDIDX dtype code " + std::to_string(static_cast<int>(dtype)) +
              ": expected 1..8");
}

const char* index_dtype_name(IndexDType dtype) {
  switch (dtype) {
    case IndexDType::kUInt8:
      return "uint8";
    case IndexDType::kInt8:
      return "int8";
    case IndexDType::kInt16:
      return "int16";
    case IndexDType::kInt32:
      return "int32";
    case IndexDType::kInt64:
      return "int64";
    case IndexDType::kFloat64:
      return "float64";
    case IndexDType::kFloat32:
      return "float32";
    case IndexDType::kUInt16:
      return "uint16";
  }
  return "unknown";
}

IndexDType best_dtype_for_vocab(int64_t vocab) {
  if (vocab <= 0) {
    throw Error("vocabulary size " + std::to_string(vocab) + " is invalid: expected > 0");
  }
  return vocab < 65500 ? IndexDType::kUInt16 : IndexDType::kInt32;
}

std::string data_file_path(const std::string& prefix) { return prefix + ".bin"; }
std::string index_file_path(const std::string& prefix) { return prefix + ".idx"; }

// ---------------------------------------------------------------------------------------------
// Writer

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, IndexDType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype) {
  if (!is_valid_index_dtype(static_cast<uint8_t>(dtype))) {
    throw Error(data_file_path(prefix_) + ": cannot write dtype code " +
                std::to_string(static_cast<int>(dtype)) + ": expected 1..8");
  }
  const std::string tmp = data_file_path(prefix_) + ".tmp";
  bin_ = std::fopen(tmp.c_str(), "wb");
  if (bin_ == nullptr) throw Error(tmp + ": cannot create: " + errno_text());
}

IndexedDatasetWriter::~IndexedDatasetWriter() { close_and_remove_temporaries(); }

IndexedDatasetWriter::IndexedDatasetWriter(IndexedDatasetWriter&& other) noexcept
    : prefix_(std::move(other.prefix_)),
      dtype_(other.dtype_),
      bin_(std::exchange(other.bin_, nullptr)),
      lengths_(std::move(other.lengths_)),
      pointers_(std::move(other.pointers_)),
      doc_ends_(std::move(other.doc_ends_)),
      buffer_(std::move(other.buffer_)),
      num_tokens_(other.num_tokens_),
      finalized_(std::exchange(other.finalized_, true)) {}

IndexedDatasetWriter& IndexedDatasetWriter::operator=(IndexedDatasetWriter&& other) noexcept {
  if (this != &other) {
    close_and_remove_temporaries();
    prefix_ = std::move(other.prefix_);
    dtype_ = other.dtype_;
    bin_ = std::exchange(other.bin_, nullptr);
    lengths_ = std::move(other.lengths_);
    pointers_ = std::move(other.pointers_);
    doc_ends_ = std::move(other.doc_ends_);
    buffer_ = std::move(other.buffer_);
    num_tokens_ = other.num_tokens_;
    finalized_ = std::exchange(other.finalized_, true);
  }
  return *this;
}

void IndexedDatasetWriter::close_and_remove_temporaries() {
  if (bin_ != nullptr) {
    std::fclose(bin_);
    bin_ = nullptr;
  }
  if (!finalized_ && !prefix_.empty()) {
    std::remove((data_file_path(prefix_) + ".tmp").c_str());
    std::remove((index_file_path(prefix_) + ".tmp").c_str());
  }
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  add_document(tokens, std::span<const int64_t>(&n, 1));
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens,
                                        std::span<const int64_t> sequence_lengths) {
  TESSERA_CHECK_MSG(!finalized_ && bin_ != nullptr, "add_document after finalize");
  int64_t sum = 0;
  for (int64_t len : sequence_lengths) {
    TESSERA_CHECK_MSG(len >= 0, "negative sequence length");
    if (len > std::numeric_limits<int32_t>::max()) {
      throw Error(data_file_path(prefix_) + ": document " + std::to_string(doc_ends_.size()) +
                  " has a sequence of " + std::to_string(len) +
                  " tokens: the .idx stores lengths as int32, expected < 2^31");
    }
    sum += len;
  }
  TESSERA_CHECK_MSG(sum == static_cast<int64_t>(tokens.size()),
                    "sequence lengths do not add up to the document's tokens");
  const IdRange range = id_range(dtype_);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < range.lo || tokens[i] > range.hi) {
      throw Error(data_file_path(prefix_) + ": token id " + std::to_string(tokens[i]) +
                  " (document " + std::to_string(doc_ends_.size()) + ", position " +
                  std::to_string(i) + ") does not fit dtype " + index_dtype_name(dtype_) +
                  ": expected ids in [" + std::to_string(range.lo) + ", " +
                  std::to_string(range.hi) + "]");
    }
  }
  const size_t elem = index_dtype_size(dtype_);
  buffer_.resize(tokens.size() * elem);
  switch (dtype_) {
    case IndexDType::kUInt8:
      encode_tokens<uint8_t>(tokens, buffer_.data());
      break;
    case IndexDType::kInt8:
      encode_tokens<int8_t>(tokens, buffer_.data());
      break;
    case IndexDType::kInt16:
      encode_tokens<int16_t>(tokens, buffer_.data());
      break;
    case IndexDType::kInt32:
      encode_tokens<int32_t>(tokens, buffer_.data());
      break;
    case IndexDType::kInt64:
      encode_tokens<int64_t>(tokens, buffer_.data());
      break;
    case IndexDType::kFloat64:
      encode_tokens<double>(tokens, buffer_.data());
      break;
    case IndexDType::kFloat32:
      encode_tokens<float>(tokens, buffer_.data());
      break;
    case IndexDType::kUInt16:
      encode_tokens<uint16_t>(tokens, buffer_.data());
      break;
  }
  if (!buffer_.empty() && std::fwrite(buffer_.data(), 1, buffer_.size(), bin_) != buffer_.size()) {
    throw Error(data_file_path(prefix_) + ".tmp: write failed: " + errno_text());
  }
  for (int64_t len : sequence_lengths) {
    pointers_.push_back(num_tokens_ * static_cast<int64_t>(elem));
    lengths_.push_back(static_cast<int32_t>(len));
    num_tokens_ += len;
  }
  doc_ends_.push_back(static_cast<int64_t>(lengths_.size()));
}

void IndexedDatasetWriter::add_dataset(const std::string& prefix) {
  TESSERA_CHECK_MSG(!finalized_ && bin_ != nullptr, "add_dataset after finalize");
  const IndexedDataset other(prefix);
  if (other.dtype() != dtype_)
    throw Error(other.idx_path() + " stores " + index_dtype_name(other.dtype()) + ": expected " +
                index_dtype_name(dtype_) + " to append it to " + prefix_);
  const int64_t elem = static_cast<int64_t>(index_dtype_size(dtype_));
  int64_t bytes = 0;
  for (int64_t i = 0; i < other.num_sequences(); ++i) {
    if (other.sequence_pointer(i) != bytes)
      throw Error(other.idx_path() + ": sequence " + std::to_string(i) +
                  " is not right after the one before: expected a contiguous .bin to append");
    bytes += other.sequence_length(i) * elem;
  }
  std::FILE* in = std::fopen(other.bin_path().c_str(), "rb");
  if (in == nullptr) throw Error("cannot open " + other.bin_path() + ": " + errno_text());
  std::vector<char> chunk(1 << 20);
  int64_t copied = 0;
  while (copied < bytes) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(bytes - copied, chunk.size()));
    const size_t got = std::fread(chunk.data(), 1, want, in);
    if (got != want || std::fwrite(chunk.data(), 1, got, bin_) != got) {
      std::fclose(in);
      throw Error(data_file_path(prefix_) + ".tmp: copying " + other.bin_path() +
                  " failed: " + errno_text());
    }
    copied += static_cast<int64_t>(got);
  }
  std::fclose(in);
  const int64_t base = static_cast<int64_t>(lengths_.size());
  for (int64_t i = 0; i < other.num_sequences(); ++i) {
    pointers_.push_back(num_tokens_ * elem);
    lengths_.push_back(static_cast<int32_t>(other.sequence_length(i)));
    num_tokens_ += other.sequence_length(i);
  }
  const auto docs = other.document_indices();
  for (size_t d = 1; d < docs.size(); ++d) doc_ends_.push_back(base + docs[d]);
}

void IndexedDatasetWriter::finalize() {
  TESSERA_CHECK_MSG(!finalized_ && bin_ != nullptr, "finalize called twice");
  const std::string bin_tmp = data_file_path(prefix_) + ".tmp";
  const std::string idx_tmp = index_file_path(prefix_) + ".tmp";

  // fsync before rename: otherwise a power loss can leave the new name pointing at an empty file.
  const bool bin_ok = std::fflush(bin_) == 0 && ::fsync(::fileno(bin_)) == 0;
  const int close_rc = std::fclose(bin_);
  bin_ = nullptr;
  if (!bin_ok || close_rc != 0) throw Error(bin_tmp + ": write failed: " + errno_text());

  const uint64_t n = lengths_.size();
  std::vector<unsigned char> idx;
  const uint64_t docs = doc_ends_.size();
  idx.reserve(kIndexHeaderBytes + n * 12 + (docs + 1) * 8);
  idx.insert(idx.end(), kIndexMagic, kIndexMagic + sizeof(kIndexMagic));
  append<uint64_t>(idx, kIndexVersion);
  append<uint8_t>(idx, static_cast<uint8_t>(dtype_));
  append<uint64_t>(idx, n);         // sequence_count
  append<uint64_t>(idx, docs + 1);  // document_count: documents + 1
  for (int32_t len : lengths_) append<int32_t>(idx, len);
  for (int64_t ptr : pointers_) append<int64_t>(idx, ptr);
  append<int64_t>(idx, 0);
  for (int64_t end : doc_ends_) append<int64_t>(idx, end);

  std::FILE* f = std::fopen(idx_tmp.c_str(), "wb");
  if (f == nullptr) throw Error(idx_tmp + ": cannot create: " + errno_text());
  const bool idx_ok = std::fwrite(idx.data(), 1, idx.size(), f) == idx.size() &&
                      std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  if (std::fclose(f) != 0 || !idx_ok) throw Error(idx_tmp + ": write failed: " + errno_text());

  if (std::rename(bin_tmp.c_str(), data_file_path(prefix_).c_str()) != 0) {
    throw Error(bin_tmp + ": cannot rename to " + data_file_path(prefix_) + ": " + errno_text());
  }
  if (std::rename(idx_tmp.c_str(), index_file_path(prefix_).c_str()) != 0) {
    throw Error(idx_tmp + ": cannot rename to " + index_file_path(prefix_) + ": " + errno_text());
  }
  finalized_ = true;
}

// ---------------------------------------------------------------------------------------------
// Reader

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx_path = index_file_path(prefix_);
  const std::string bin_path = data_file_path(prefix_);
  {
    idx_file_ = MappedFile(idx_path, "index");
    const size_t idx_size = idx_file_.size();
    const unsigned char* idx = idx_file_.data();
    const std::string size_text = std::to_string(idx_size) + " bytes";

    if (idx_size < sizeof(kIndexMagic) || std::memcmp(idx, kIndexMagic, sizeof(kIndexMagic)) != 0) {
      throw Error(idx_path + ": bad magic: expected the MMIDIDX header of a Megatron .idx file" +
                  (idx_size < sizeof(kIndexMagic) ? " but file has only " + size_text : ""));
    }
    if (idx_size < kIndexHeaderBytes) {
      throw Error(idx_path + ": truncated: the header needs " + std::to_string(kIndexHeaderBytes) +
                  " bytes but file has " + size_text);
    }
    const uint64_t version = load<uint64_t>(idx + 9);
    if (version != kIndexVersion) {
      throw Error(idx_path + ": unsupported version " + std::to_string(version) + ": expected 1");
    }
    const uint8_t code = load<uint8_t>(idx + 17);
    if (!is_valid_index_dtype(code)) {
      throw Error(idx_path + ": unknown dtype code " + std::to_string(code) +
                  ": expected 1..8 (uint8, int8, int16, int32, int64, float64, float32, uint16)");
    }
    dtype_ = static_cast<IndexDType>(code);
    elem_size_ = index_dtype_size(dtype_);
    const uint64_t seq_count = load<uint64_t>(idx + 18);
    const uint64_t doc_count = load<uint64_t>(idx + 26);

    // Counts come from the file: bound them before multiplying so the size cannot overflow.
    constexpr uint64_t kMaxCount = uint64_t{1} << 56;
    if (seq_count > kMaxCount || doc_count > kMaxCount) {
      throw Error(idx_path + ": header says " + std::to_string(seq_count) + " sequences and " +
                  std::to_string(doc_count) + " document indices: implausibly large, file has " +
                  size_text);
    }
    const uint64_t needed = kIndexHeaderBytes + seq_count * 12 + doc_count * 8;
    const std::string header_text = "header says " + std::to_string(seq_count) + " sequences and " +
                                    std::to_string(doc_count) + " document indices (needs " +
                                    std::to_string(needed) + " bytes";
    if (idx_size < needed) {
      throw Error(idx_path + ": truncated: " + header_text + ") but file has " + size_text);
    }
    if (idx_size != needed && idx_size != needed + seq_count) {
      throw Error(idx_path + ": size mismatch: " + header_text + ", or " +
                  std::to_string(needed + seq_count) + " with sequence_modes) but file has " +
                  size_text);
    }
    if (doc_count == 0) {
      throw Error(idx_path + ": document_indices is empty: expected at least one entry (0)");
    }
    num_sequences_ = static_cast<int64_t>(seq_count);
    idx_lengths_ = idx + kIndexHeaderBytes;
    idx_pointers_ = idx_lengths_ + seq_count * 4;
    const unsigned char* docs = idx_pointers_ + seq_count * 8;

    document_indices_.resize(doc_count);
    for (uint64_t d = 0; d < doc_count; ++d) {
      document_indices_[d] = load<int64_t>(docs + d * 8);
      const int64_t prev = d == 0 ? 0 : document_indices_[d - 1];
      if (document_indices_[d] < prev) {
        throw Error(idx_path + ": document_indices[" + std::to_string(d) +
                    "] = " + std::to_string(document_indices_[d]) + (d == 0 ? "" : " < previous ") +
                    (d == 0 ? "" : std::to_string(prev)) +
                    ": expected a non-decreasing list starting at 0");
      }
    }
    if (document_indices_.front() != 0) {
      throw Error(idx_path + ": document_indices[0] = " +
                  std::to_string(document_indices_.front()) + ": expected 0");
    }
    if (document_indices_.back() != num_sequences_) {
      throw Error(idx_path + ": document_indices ends at " +
                  std::to_string(document_indices_.back()) + ": expected sequence_count " +
                  std::to_string(num_sequences_));
    }

    bin_file_ = MappedFile(bin_path, "data");
    const size_t bin_size = bin_file_.size();
    for (int64_t i = 0; i < num_sequences_; ++i) {
      const int32_t len = load<int32_t>(idx_lengths_ + i * 4);
      const int64_t ptr = load<int64_t>(idx_pointers_ + i * 8);
      if (len < 0) {
        throw Error(idx_path + ": sequence " + std::to_string(i) + " has length " +
                    std::to_string(len) + ": expected >= 0");
      }
      if (ptr < 0 || ptr % static_cast<int64_t>(elem_size_) != 0) {
        throw Error(idx_path + ": sequence " + std::to_string(i) + " has pointer " +
                    std::to_string(ptr) + ": expected a non-negative multiple of " +
                    std::to_string(elem_size_) + " (" + index_dtype_name(dtype_) + ")");
      }
      const uint64_t end = static_cast<uint64_t>(ptr) + static_cast<uint64_t>(len) * elem_size_;
      if (end > bin_size) {
        throw Error(bin_path + ": truncated: " + idx_path + " puts sequence " + std::to_string(i) +
                    " at bytes [" + std::to_string(ptr) + ", " + std::to_string(end) +
                    ") but file has " + std::to_string(bin_size) + " bytes");
      }
      num_tokens_ += len;
    }
  }
}

int64_t IndexedDataset::sequence_length(int64_t i) const {
  if (i < 0 || i >= num_sequences_) {
    throw Error(idx_path() + ": sequence " + std::to_string(i) + " out of range: expected [0, " +
                std::to_string(num_sequences_) + ")");
  }
  return load<int32_t>(idx_lengths_ + i * 4);
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  if (i < 0 || i >= num_sequences_) {
    throw Error(idx_path() + ": sequence " + std::to_string(i) + " out of range: expected [0, " +
                std::to_string(num_sequences_) + ")");
  }
  return load<int64_t>(idx_pointers_ + i * 8);
}

void IndexedDataset::get(int64_t i, int64_t offset, int64_t length, int32_t* out) const {
  const int64_t len = sequence_length(i);
  if (offset < 0 || length < 0 || offset > len || length > len - offset) {
    throw Error(bin_path() + ": tokens [" + std::to_string(offset) + ", " +
                std::to_string(offset + length) + ") of sequence " + std::to_string(i) +
                " out of range: the sequence has " + std::to_string(len) + " tokens");
  }
  if (length == 0) return;
  const auto* src =
      bin_file_.data() + sequence_pointer(i) + offset * static_cast<int64_t>(elem_size_);
  int64_t bad = -1;
  switch (dtype_) {
    case IndexDType::kUInt8:
      decode_tokens<uint8_t>(src, length, out, &bad);
      break;
    case IndexDType::kInt8:
      decode_tokens<int8_t>(src, length, out, &bad);
      break;
    case IndexDType::kInt16:
      decode_tokens<int16_t>(src, length, out, &bad);
      break;
    case IndexDType::kInt32:
      decode_tokens<int32_t>(src, length, out, &bad);
      break;
    case IndexDType::kInt64:
      decode_tokens<int64_t>(src, length, out, &bad);
      break;
    case IndexDType::kFloat64:
      decode_tokens<double>(src, length, out, &bad);
      break;
    case IndexDType::kFloat32:
      decode_tokens<float>(src, length, out, &bad);
      break;
    case IndexDType::kUInt16:
      decode_tokens<uint16_t>(src, length, out, &bad);
      break;
  }
  if (bad >= 0) {
    const unsigned char* p = src + bad * static_cast<int64_t>(elem_size_);
    const std::string value = dtype_ == IndexDType::kInt64     ? std::to_string(load<int64_t>(p))
                              : dtype_ == IndexDType::kFloat64 ? std::to_string(load<double>(p))
                                                               : std::to_string(load<float>(p));
    throw Error(bin_path() + ": token at sequence " + std::to_string(i) + ", offset " +
                std::to_string(offset + bad) + " is " + value + " (" + index_dtype_name(dtype_) +
                "): expected an integer token id representable as int32");
  }
}

}  // namespace tessera::data
