// safetensors files (HuggingFace's weight format): writer and memory-mapped reader.
//
// Layout:
//   u64 little-endian N | N bytes of UTF-8 JSON header, padded with spaces to a multiple of 8 |
//   data bytes.
// The header maps each tensor name to {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}
// (byte range within the data section) and may hold "__metadata__": {string: string}.
// The writer emits the keys sorted by name; tensor data is laid out by element size (largest
// first) then name, as the reference implementation does, so every tensor starts at an offset
// aligned to its element size (the data section starts at 8 + N, a multiple of 8).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/mapped_file.h"

namespace tessera::checkpoint {

// The element types safetensors defines.
enum class SafeDType {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64
};

// Bytes per element.
size_t safe_dtype_size(SafeDType dtype);
// The header spelling: "BOOL", "U8", ..., "F8_E5M2", "F8_E4M3", "BF16", "F32", ...
const char* safe_dtype_name(SafeDType dtype);
// Inverse of safe_dtype_name; nullopt for an unknown spelling.
std::optional<SafeDType> parse_safe_dtype(std::string_view name);
// Tessera's element types map one-to-one onto F32, BF16, F16, I32, I64, U16.
SafeDType to_safe_dtype(DType dtype);
// The Tessera DType of a file's tensor; throws tessera::Error for a type Tessera cannot hold
// (e.g. F64, I8), naming it.
DType to_core_dtype(SafeDType dtype);

// One tensor to write. `data` holds numel(shape) * safe_dtype_size(dtype) bytes, row-major, owned
// by the caller and read only during write_safetensors().
struct SafeTensorView {
  std::string name;
  SafeDType dtype;
  std::vector<int64_t> shape;  // [] is a scalar (one element)
  const void* data;
};

// Where write_safetensors puts each tensor: `header` is the file's first header.size() bytes (the
// length field and the JSON padded with spaces), `offsets[i]` the file offset of tensors[i]'s
// data, in the order given; `file_bytes` the size of the whole file. The tensors' `data` is not
// read (it may be null). Throws tessera::Error as write_safetensors does for a bad name or shape.
// Writers that produce the data piece by piece (checkpoint/rank_file_writer.h) lay out their
// file with it, so every safetensors file Tessera writes has the same layout.
struct SafetensorsLayout {
  std::string header;
  std::vector<uint64_t> offsets;
  uint64_t file_bytes = 0;
};
SafetensorsLayout safetensors_layout(const std::string& path,
                                     std::span<const SafeTensorView> tensors,
                                     const std::map<std::string, std::string>& metadata = {});

// Writes `tensors` and `metadata` to `path` in the layout above. Writes path + ".tmp", fsyncs
// and renames it over `path`, so `path` is either the old file or the complete new one.
// Throws tessera::Error (naming the file and, where it applies, the tensor) for an empty or
// duplicate name, the reserved name "__metadata__", a negative dimension, a null data pointer
// with a non-empty tensor, or an I/O error.
void write_safetensors(const std::string& path, std::span<const SafeTensorView> tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Shape and place of one tensor in a file.
struct SafeTensorInfo {
  SafeDType dtype;
  std::vector<int64_t> shape;
  int64_t numel;
  uint64_t data_begin, data_end;  // byte range within the data section
};

// Read-only, memory-mapped safetensors file. The constructor validates the whole header: the
// header length within the file, valid JSON, every entry a known dtype, non-negative shape and
// data_offsets whose size equals numel * element size, tensors inside the data section, no two
// overlapping, and (as the reference reader demands) the tensors covering the data section
// exactly, without gaps. Violations throw tessera::Error with one line naming the file and the
// tensor. Tensor data is paged in lazily. Thread-safe for reads; move-only.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  SafetensorsFile(SafetensorsFile&& other) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws tessera::Error naming the file for an unknown tensor.
  const SafeTensorInfo& info(const std::string& name) const;
  // Pointer to the tensor's bytes inside the mapping (valid while this object lives). Aligned to
  // the element size if the writer aligned it (Tessera's writer and the reference one do).
  const void* data(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  MappedFile file_;
  size_t data_start_ = 0;
  std::map<std::string, SafeTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tessera::checkpoint
