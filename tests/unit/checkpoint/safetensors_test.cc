#include "tessera/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "testing/temp_dir.h"

namespace tessera::checkpoint {
namespace {

using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

std::vector<unsigned char> bytes_of(const std::string& s) {
  return std::vector<unsigned char>(s.begin(), s.end());
}
std::vector<unsigned char> u64_le(uint64_t v) {
  std::vector<unsigned char> out(8);
  std::memcpy(out.data(), &v, 8);
  return out;
}
template <typename T>
std::vector<unsigned char> raw(const std::vector<T>& v) {
  std::vector<unsigned char> out(v.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}
void append(std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  a.insert(a.end(), b.begin(), b.end());
}

// Loading `path` must throw tessera::Error whose one-line message contains every part.
void expect_load_error(const std::string& path, const std::vector<std::string>& parts) {
  try {
    SafetensorsFile f(path);
    ADD_FAILURE() << "no error loading " << path;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg << " / " << p;
  }
}

TEST(Safetensors, RoundTripsMixedDtypesShapesAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-8f, -7.0f};
  const std::vector<uint16_t> b = {0x3f80, 0xc000, 0x7fc0, 0x0001, 0xffff};  // BF16 bits, odd count
  const std::vector<int64_t> steps = {-1, int64_t{1} << 40};
  const std::vector<uint16_t> ids = {0, 65535, 7};
  const std::vector<int32_t> scalar = {42};
  const std::vector<uint16_t> half = {0x3c00, 0xbc00, 0x0000};
  const std::vector<SafeTensorView> tensors = {
      {"w", SafeDType::kF32, {2, 3}, w.data()},       {"norm.b", SafeDType::kBF16, {5}, b.data()},
      {"step", SafeDType::kI64, {2}, steps.data()},   {"Ids", SafeDType::kU16, {3, 1}, ids.data()},
      {"scalar", SafeDType::kI32, {}, scalar.data()}, {"h", SafeDType::kF16, {3}, half.data()},
      {"empty", SafeDType::kF32, {0, 4}, nullptr},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"iteration", "100"}};
  write_safetensors(path, tensors, meta);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  SafetensorsFile f(path);
  EXPECT_EQ(f.names(),
            (std::vector<std::string>{"Ids", "empty", "h", "norm.b", "scalar", "step", "w"}));
  EXPECT_EQ(f.metadata(), meta);
  for (const auto& t : tensors) {
    SCOPED_TRACE(t.name);
    const SafeTensorInfo& info = f.info(t.name);
    EXPECT_EQ(info.dtype, t.dtype);
    EXPECT_EQ(info.shape, t.shape);
    const size_t nbytes = info.numel * safe_dtype_size(t.dtype);
    EXPECT_EQ(info.data_end - info.data_begin, nbytes);
    // Writer puts larger elements first, so every tensor is aligned to its element size.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data(t.name)) % safe_dtype_size(t.dtype), 0u);
    if (nbytes > 0) {
      EXPECT_EQ(std::memcmp(f.data(t.name), t.data, nbytes), 0);
    }
  }
  EXPECT_EQ(f.info("scalar").numel, 1);
  EXPECT_EQ(f.info("empty").numel, 0);
  EXPECT_TRUE(f.contains("w"));
  EXPECT_FALSE(f.contains("missing"));
  EXPECT_THROW(f.info("missing"), Error);

  // Overwriting an existing file replaces it whole.
  write_safetensors(path, std::vector<SafeTensorView>{{"only", SafeDType::kF32, {1}, w.data()}});
  SafetensorsFile g(path);
  EXPECT_EQ(g.names(), std::vector<std::string>{"only"});
  EXPECT_TRUE(g.metadata().empty());
}

// The bytes the format specifies, written out by hand: u64 LE header length, the JSON header
// padded with spaces to a multiple of 8, then the raw little-endian data.
TEST(Safetensors, WriterMatchesHandCheckedBytes) {
  TempDir dir;
  const std::string path = dir.file("tiny.safetensors");
  const std::vector<float> a = {1.0f, 2.0f};
  write_safetensors(path, std::vector<SafeTensorView>{{"a", SafeDType::kF32, {2}, a.data()}});
  // 54 bytes of JSON + 2 spaces = 56 = 0x38.
  std::vector<unsigned char> expected = {0x38, 0, 0, 0, 0, 0, 0, 0};
  append(expected, bytes_of(R"({"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2]}})"));
  append(expected, bytes_of("  "));
  append(expected, {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40});  // 1.0f, 2.0f
  EXPECT_EQ(read_bytes(path), expected);

  // Metadata sorts first ('_' < 'a'); the F32 tensor "b" is laid out before the BF16 "a".
  const std::vector<uint16_t> abf = {0x3f80, 0x4000, 0x4040};  // 1, 2, 3 in bf16
  const std::vector<float> bf = {-1.0f};
  write_safetensors(path,
                    std::vector<SafeTensorView>{{"a", SafeDType::kBF16, {3}, abf.data()},
                                                {"b", SafeDType::kF32, {1}, bf.data()}},
                    {{"format", "pt"}});
  // 140 bytes of JSON + 4 spaces = 144 = 0x90.
  expected = {0x90, 0, 0, 0, 0, 0, 0, 0};
  append(expected, bytes_of(R"({"__metadata__":{"format":"pt"},)"
                            R"("a":{"data_offsets":[4,10],"dtype":"BF16","shape":[3]},)"
                            R"("b":{"data_offsets":[0,4],"dtype":"F32","shape":[1]}})"));
  append(expected, bytes_of("    "));
  append(expected, {0x00, 0x00, 0x80, 0xbf});              // b = -1.0f
  append(expected, {0x80, 0x3f, 0x00, 0x40, 0x40, 0x40});  // a = 1, 2, 3 (bf16)
  EXPECT_EQ(read_bytes(path), expected);
}

// The other direction: a file as HuggingFace's Python writer lays it out (metadata first, keys
// in dtype/shape/data_offsets order, unpadded header), built by hand.
TEST(Safetensors, ReadsHandBuiltReferenceFile) {
  TempDir dir;
  const std::string path = dir.file("hf.safetensors");
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I16","shape":[3],"data_offsets":[0,6]}})";
  std::vector<unsigned char> file = u64_le(header.size());
  append(file, bytes_of(header));
  append(file, raw(std::vector<int16_t>{-2, 0, 300}));
  write_bytes(path, file);
  SafetensorsFile f(path);
  EXPECT_EQ(f.names(), std::vector<std::string>{"b"});
  EXPECT_EQ(f.info("b").dtype, SafeDType::kI16);
  EXPECT_EQ(f.info("b").shape, std::vector<int64_t>{3});
  EXPECT_EQ(f.metadata().at("format"), "pt");
  int16_t got[3];
  std::memcpy(got, f.data("b"), 6);
  EXPECT_EQ(got[0], -2);
  EXPECT_EQ(got[2], 300);
}

TEST(Safetensors, RejectsTruncatedFiles) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  const std::vector<float> a = {1.0f, 2.0f, 3.0f};
  write_safetensors(path, std::vector<SafeTensorView>{{"a", SafeDType::kF32, {3}, a.data()}});
  const auto good = read_bytes(path);
  uint64_t header_len;
  std::memcpy(&header_len, good.data(), 8);
  ASSERT_EQ(good.size(), 8 + header_len + 12);

  write_bytes(path, std::vector<unsigned char>(good.begin(), good.begin() + 5));
  expect_load_error(path, {path, "truncated", "needs 8"});
  write_bytes(path, std::vector<unsigned char>(good.begin(), good.begin() + 8 + header_len / 2));
  expect_load_error(path, {path, "truncated", "header length is " + std::to_string(header_len)});
  write_bytes(path, std::vector<unsigned char>(good.begin(), good.end() - 1));
  expect_load_error(path, {path, "truncated", "tensor 'a'", "[0, 12)", "11 data bytes"});
  std::filesystem::remove(path);
  expect_load_error(path, {path, "cannot open"});
}

TEST(Safetensors, RejectsInconsistentHeaders) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  auto make = [&](const std::string& header, size_t data_bytes) {
    std::vector<unsigned char> file = u64_le(header.size());
    append(file, bytes_of(header));
    file.resize(file.size() + data_bytes, 0);
    write_bytes(path, file);
  };
  make(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12);
  expect_load_error(path, {path, "tensor 'b' overlaps tensor 'a'"});
  make(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
  expect_load_error(path, {path, "tensor 'a'", "span 8 bytes", "needs 12"});
  make(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8);
  expect_load_error(path, {path, "tensor 'a'", "unknown dtype \"Q7\""});
  make(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8);
  expect_load_error(path, {path, "tensor 'a'", "invalid shape"});
  make(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12);
  expect_load_error(path, {path, "tensor 'a' starts at data byte 4", "contiguous"});
  make(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 9);
  expect_load_error(path, {path, "cover 8 data bytes", "file has 9"});
  make(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8);
  expect_load_error(path, {path, "not valid JSON"});
  make(R"({"__metadata__":{"n":1}})", 0);
  expect_load_error(path, {path, "__metadata__ key 'n'"});
  std::vector<unsigned char> huge = u64_le(uint64_t{1} << 40);
  append(huge, bytes_of("{}"));
  write_bytes(path, huge);
  expect_load_error(path, {path, "header length", "too large"});
}

TEST(Safetensors, WriterRejectsBadTensorLists) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const float x = 1.0f;
  auto expect_write_error = [&](const std::vector<SafeTensorView>& tensors,
                                const std::string& part) {
    try {
      write_safetensors(path, tensors);
      ADD_FAILURE() << "no error, expected " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_write_error({{"a", SafeDType::kF32, {1}, &x}, {"a", SafeDType::kF32, {1}, &x}},
                     "tensor 'a' appears twice");
  expect_write_error({{"__metadata__", SafeDType::kF32, {1}, &x}}, "reserved");
  expect_write_error({{"a", SafeDType::kF32, {-1}, &x}}, "invalid shape [-1]");
  expect_write_error({{"a", SafeDType::kF32, {1}, nullptr}}, "null");
  expect_write_error({{"", SafeDType::kF32, {1}, &x}}, "empty name");
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(Safetensors, DtypeNamesAndCoreMapping) {
  EXPECT_STREQ(safe_dtype_name(SafeDType::kBF16), "BF16");
  EXPECT_STREQ(safe_dtype_name(SafeDType::kF8E4M3), "F8_E4M3");
  EXPECT_EQ(parse_safe_dtype("U16"), SafeDType::kU16);
  EXPECT_EQ(parse_safe_dtype("bf16"), std::nullopt);  // the format's names are upper case
  EXPECT_EQ(safe_dtype_size(SafeDType::kF64), 8u);
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU16}) {
    EXPECT_EQ(to_core_dtype(to_safe_dtype(d)), d);
    EXPECT_EQ(safe_dtype_size(to_safe_dtype(d)), dtype_size(d));
  }
  EXPECT_THROW(to_core_dtype(SafeDType::kF64), Error);
}

}  // namespace
}  // namespace tessera::checkpoint
