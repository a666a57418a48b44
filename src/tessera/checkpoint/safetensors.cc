#include "tessera/checkpoint/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"

namespace tessera::checkpoint {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

using nlohmann::json;

// The reference implementation refuses headers above 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

struct DTypeEntry {
  SafeDType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {SafeDType::kBool, "BOOL", 1},      {SafeDType::kU8, "U8", 1},
    {SafeDType::kI8, "I8", 1},          {SafeDType::kF8E5M2, "F8_E5M2", 1},
    {SafeDType::kF8E4M3, "F8_E4M3", 1}, {SafeDType::kI16, "I16", 2},
    {SafeDType::kU16, "U16", 2},        {SafeDType::kF16, "F16", 2},
    {SafeDType::kBF16, "BF16", 2},      {SafeDType::kI32, "I32", 4},
    {SafeDType::kU32, "U32", 4},        {SafeDType::kF32, "F32", 4},
    {SafeDType::kF64, "F64", 8},        {SafeDType::kI64, "I64", 8},
    {SafeDType::kU64, "U64", 8},
};

const DTypeEntry& entry_of(SafeDType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e;
  }
  TESSERA_CHECK_MSG(false, "SafeDType without a table entry");
  return kDTypes[0];
}

// numel of a shape, or nullopt if a dimension is negative or the product overflows int64.
std::optional<int64_t> checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return std::nullopt;
    n *= d;
  }
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

size_t safe_dtype_size(SafeDType dtype) { return entry_of(dtype).size; }
const char* safe_dtype_name(SafeDType dtype) { return entry_of(dtype).name; }

std::optional<SafeDType> parse_safe_dtype(std::string_view name) {
  for (const auto& e : kDTypes) {
    if (name == e.name) return e.dtype;
  }
  return std::nullopt;
}

SafeDType to_safe_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return SafeDType::kF32;
    case DType::kBF16:
      return SafeDType::kBF16;
    case DType::kF16:
      return SafeDType::kF16;
    case DType::kI32:
      return SafeDType::kI32;
    case DType::kI64:
      return SafeDType::kI64;
    case DType::kU16:
      return SafeDType::kU16;
  }
  TESSERA_CHECK_MSG(false, "DType without a safetensors equivalent");
  return SafeDType::kF32;
}

DType to_core_dtype(SafeDType dtype) {
  switch (dtype) {
    case SafeDType::kF32:
      return DType::kF32;
    case SafeDType::kBF16:
      return DType::kBF16;
    case SafeDType::kF16:
      return DType::kF16;
    case SafeDType::kI32:
      return DType::kI32;
    case SafeDType::kI64:
      return DType::kI64;
    case SafeDType::kU16:
      return DType::kU16;
    default:
      break;
  }
  throw Error(std::string("safetensors dtype ") + safe_dtype_name(dtype) +
              " is not supported: expected one of F32, BF16, F16, I32, I64, U16");
}

// ---------------------------------------------------------------------------------------------
// Writer

SafetensorsLayout safetensors_layout(const std::string& path,
                                     std::span<const SafeTensorView> tensors,
                                     const std::map<std::string, std::string>& metadata) {
  struct Planned {
    size_t index;
    uint64_t nbytes;
  };
  std::vector<Planned> plan;
  std::set<std::string_view> seen;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafeTensorView& t = tensors[i];
    const std::string where = path + ": tensor '" + t.name + "'";
    if (t.name.empty()) throw Error(path + ": a tensor has an empty name: expected a name");
    if (t.name == kMetadataKey) {
      throw Error(where + ": the name is reserved for metadata: expected another name");
    }
    if (!seen.insert(t.name).second) throw Error(where + " appears twice: expected unique names");
    const auto numel = checked_numel(t.shape);
    if (!numel) throw Error(where + ": invalid shape " + shape_text(t.shape));
    plan.push_back({i, static_cast<uint64_t>(*numel) * safe_dtype_size(t.dtype)});
  }
  // Largest elements first, then by name: keeps each tensor aligned to its element size.
  std::sort(plan.begin(), plan.end(), [&](const Planned& a, const Planned& b) {
    const SafeTensorView &ta = tensors[a.index], &tb = tensors[b.index];
    const size_t sa = safe_dtype_size(ta.dtype), sb = safe_dtype_size(tb.dtype);
    return sa != sb ? sa > sb : ta.name < tb.name;
  });

  json header = json::object();  // std::map-backed: keys come out sorted by name
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::vector<uint64_t> data_offsets(tensors.size());
  uint64_t offset = 0;
  for (const auto& p : plan) {
    const SafeTensorView& t = tensors[p.index];
    header[t.name] = {{"dtype", safe_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + p.nbytes}}};
    data_offsets[p.index] = offset;
    offset += p.nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();

  SafetensorsLayout layout;
  layout.header.resize(8);
  std::memcpy(layout.header.data(), &header_len, 8);
  layout.header += text;
  for (uint64_t o : data_offsets) layout.offsets.push_back(layout.header.size() + o);
  layout.file_bytes = layout.header.size() + offset;
  return layout;
}

void write_safetensors(const std::string& path, std::span<const SafeTensorView> tensors,
                       const std::map<std::string, std::string>& metadata) {
  const SafetensorsLayout layout = safetensors_layout(path, tensors, metadata);
  std::vector<uint64_t> nbytes;
  for (const SafeTensorView& t : tensors) {
    nbytes.push_back(static_cast<uint64_t>(*checked_numel(t.shape)) * safe_dtype_size(t.dtype));
    if (nbytes.back() > 0 && t.data == nullptr)
      throw Error(path + ": tensor '" + t.name + "': data pointer is null");
  }
  // The data in file order (a tensor of no bytes may share its offset with the next).
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return layout.offsets[a] < layout.offsets[b]; });

  AtomicFile file(path);
  file.write(layout.header.data(), layout.header.size());
  for (size_t i : order) file.write(tensors[i].data, nbytes[i]);
  file.commit();
}

// ---------------------------------------------------------------------------------------------
// Reader

SafetensorsFile::SafetensorsFile(const std::string& path)
    : path_(path), file_(path, "safetensors file") {
  const size_t file_size = file_.size();
  if (file_size < 8) {
    throw Error(path + ": truncated: file has " + std::to_string(file_size) +
                " bytes but the header length field alone needs 8");
  }
  {
    const auto* bytes = reinterpret_cast<const char*>(file_.data());
    uint64_t header_len;
    std::memcpy(&header_len, bytes, 8);
    if (header_len > kMaxHeaderBytes) {
      throw Error(path + ": header length " + std::to_string(header_len) +
                  " is too large: expected at most " + std::to_string(kMaxHeaderBytes) +
                  " bytes (not a safetensors file?)");
    }
    if (header_len > file_size - 8) {
      throw Error(path + ": truncated: header length is " + std::to_string(header_len) +
                  " bytes but file has only " + std::to_string(file_size - 8) +
                  " after the length");
    }
    data_start_ = 8 + header_len;
    const uint64_t data_size = file_size - data_start_;

    json header;
    try {
      header = json::parse(bytes + 8, bytes + data_start_);
    } catch (const json::exception& e) {
      // nlohmann's message is one line: "[json.exception.parse_error.101] parse error at ...".
      throw Error(path + ": header is not valid JSON: " + e.what());
    }
    if (!header.is_object()) throw Error(path + ": header is not a JSON object");

    for (const auto& [name, value] : header.items()) {
      const std::string where = path + ": tensor '" + name + "'";
      if (name == kMetadataKey) {
        if (!value.is_object()) throw Error(path + ": __metadata__ is not a JSON object");
        for (const auto& [k, v] : value.items()) {
          if (!v.is_string()) {
            throw Error(path + ": __metadata__ key '" + k +
                        "' is not a string: expected a "
                        "string-to-string map");
          }
          metadata_[k] = v.get<std::string>();
        }
        continue;
      }
      if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
          !value.contains("data_offsets")) {
        throw Error(where + ": expected an object with dtype, shape and data_offsets");
      }
      const json& jd = value["dtype"];
      const auto dtype = jd.is_string() ? parse_safe_dtype(jd.get<std::string>()) : std::nullopt;
      if (!dtype) throw Error(where + ": unknown dtype " + jd.dump());
      const json& js = value["shape"];
      const json& jo = value["data_offsets"];
      SafeTensorInfo info{*dtype, {}, 0, 0, 0};
      bool shape_ok = js.is_array();
      for (const auto& d : js) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0) {
          shape_ok = false;
          break;
        }
        info.shape.push_back(d.get<int64_t>());
      }
      const auto numel = shape_ok ? checked_numel(info.shape) : std::nullopt;
      if (!numel) throw Error(where + ": invalid shape " + js.dump());
      info.numel = *numel;
      if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() ||
          !jo[1].is_number_unsigned() || jo[0].get<uint64_t>() > jo[1].get<uint64_t>()) {
        throw Error(where + ": invalid data_offsets " + jo.dump() +
                    ": expected [begin, end] with 0 <= begin <= end");
      }
      info.data_begin = jo[0].get<uint64_t>();
      info.data_end = jo[1].get<uint64_t>();
      const uint64_t expected = static_cast<uint64_t>(info.numel) * safe_dtype_size(info.dtype);
      if (info.data_end - info.data_begin != expected) {
        throw Error(where + ": data_offsets " + jo.dump() + " span " +
                    std::to_string(info.data_end - info.data_begin) + " bytes but shape " +
                    shape_text(info.shape) + " of " + safe_dtype_name(info.dtype) + " needs " +
                    std::to_string(expected));
      }
      if (info.data_end > data_size) {
        throw Error(path + ": truncated: tensor '" + name + "' needs data bytes [" +
                    std::to_string(info.data_begin) + ", " + std::to_string(info.data_end) +
                    ") but the file has " + std::to_string(data_size) + " data bytes");
      }
      tensors_.emplace(name, std::move(info));
    }

    // No overlaps and no holes: walk the tensors in data order.
    std::vector<std::tuple<uint64_t, uint64_t, const std::string*>> order;
    for (const auto& [name, info] : tensors_) {
      order.emplace_back(info.data_begin, info.data_end, &name);
    }
    std::sort(order.begin(), order.end());
    uint64_t end = 0;
    const std::string* prev = nullptr;
    for (const auto& [begin, tensor_end, name] : order) {
      if (begin < end) {
        throw Error(path + ": tensor '" + *name + "' overlaps tensor '" + *prev +
                    "' in the data section: expected disjoint data_offsets");
      }
      if (begin > end) {
        throw Error(path + ": tensor '" + *name + "' starts at data byte " + std::to_string(begin) +
                    " but the previous tensor ends at " + std::to_string(end) +
                    ": expected contiguous data_offsets");
      }
      end = tensor_end;
      prev = name;
    }
    if (end != data_size) {
      throw Error(path + ": the tensors cover " + std::to_string(end) +
                  " data bytes but the file has " + std::to_string(data_size) +
                  ": expected them to match");
    }
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

const SafeTensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(path_ + ": no tensor named '" + name + "'");
  return it->second;
}

const void* SafetensorsFile::data(const std::string& name) const {
  return file_.data() + data_start_ + info(name).data_begin;
}

}  // namespace tessera::checkpoint
