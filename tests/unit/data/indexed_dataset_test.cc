#include "tessera/data/indexed_dataset.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "testing/temp_dir.h"

namespace tessera::data {
namespace {

using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

constexpr IndexDType kAllDTypes[] = {IndexDType::kUInt8,   IndexDType::kInt8,  IndexDType::kInt16,
                                     IndexDType::kInt32,   IndexDType::kInt64, IndexDType::kFloat64,
                                     IndexDType::kFloat32, IndexDType::kUInt16};

// Little-endian byte helpers for hand-built files.
template <typename T>
void put(std::vector<unsigned char>& out, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

// Documents whose ids exercise the extremes each dtype can hold (negative ids where signed).
std::vector<std::vector<int32_t>> documents_for(IndexDType dtype) {
  int32_t lo = 0, hi = 0;
  switch (dtype) {
    case IndexDType::kUInt8:
      lo = 0, hi = 255;
      break;
    case IndexDType::kInt8:
      lo = -128, hi = 127;
      break;
    case IndexDType::kInt16:
      lo = -32768, hi = 32767;
      break;
    case IndexDType::kUInt16:
      lo = 0, hi = 65535;
      break;
    case IndexDType::kFloat32:
      lo = -(1 << 24), hi = 1 << 24;
      break;
    default:
      lo = INT32_MIN, hi = INT32_MAX;
      break;
  }
  // Lengths 0, 1, 5, 17, 33: an empty document and sizes off any power of two.
  std::vector<std::vector<int32_t>> docs = {{}, {hi}, {lo, 0, 1, hi, 7}};
  for (int len : {17, 33}) {
    std::vector<int32_t> d;
    for (int i = 0; i < len; ++i) d.push_back(static_cast<int32_t>((i * 37 + len) % 101));
    docs.push_back(d);
  }
  return docs;
}

TEST(IndexedDataset, RoundTripsEveryDtypeCode) {
  TempDir dir;
  for (IndexDType dtype : kAllDTypes) {
    SCOPED_TRACE(index_dtype_name(dtype));
    const std::string prefix = dir.file(std::string("rt_") + index_dtype_name(dtype));
    const auto docs = documents_for(dtype);
    int64_t total = 0;
    {
      IndexedDatasetWriter w(prefix, dtype);
      for (const auto& d : docs) {
        w.add_document(d);
        total += static_cast<int64_t>(d.size());
      }
      EXPECT_EQ(w.num_documents(), 5);
      EXPECT_EQ(w.num_tokens(), total);
      w.finalize();
    }
    const size_t elem = index_dtype_size(dtype);
    EXPECT_EQ(std::filesystem::file_size(prefix + ".bin"), total * elem);
    EXPECT_EQ(std::filesystem::file_size(prefix + ".idx"), 34u + 5 * 12 + 6 * 8);
    EXPECT_FALSE(std::filesystem::exists(prefix + ".bin.tmp"));
    EXPECT_FALSE(std::filesystem::exists(prefix + ".idx.tmp"));

    IndexedDataset ds(prefix);
    EXPECT_EQ(ds.dtype(), dtype);
    ASSERT_EQ(ds.num_sequences(), 5);
    EXPECT_EQ(ds.num_documents(), 5);
    EXPECT_EQ(ds.num_tokens(), total);
    const std::vector<int64_t> expected_docs = {0, 1, 2, 3, 4, 5};
    EXPECT_EQ(std::vector<int64_t>(ds.document_indices().begin(), ds.document_indices().end()),
              expected_docs);
    int64_t pointer = 0;
    for (int64_t i = 0; i < 5; ++i) {
      const auto& d = docs[i];
      ASSERT_EQ(ds.sequence_length(i), static_cast<int64_t>(d.size()));
      EXPECT_EQ(ds.sequence_pointer(i), pointer);
      pointer += static_cast<int64_t>(d.size() * elem);
      std::vector<int32_t> got(d.size());
      ds.get(i, 0, static_cast<int64_t>(d.size()), got.data());
      EXPECT_EQ(got, d) << "sequence " << i;
    }
    // A window in the middle of the last sequence.
    std::vector<int32_t> window(10);
    ds.get(4, 20, 10, window.data());
    EXPECT_EQ(window, std::vector<int32_t>(docs[4].begin() + 20, docs[4].begin() + 30));
  }
}

TEST(IndexedDataset, BestDtypeFollowsMegatronRule) {
  EXPECT_EQ(best_dtype_for_vocab(257), IndexDType::kUInt16);
  EXPECT_EQ(best_dtype_for_vocab(50257), IndexDType::kUInt16);
  EXPECT_EQ(best_dtype_for_vocab(65499), IndexDType::kUInt16);
  EXPECT_EQ(best_dtype_for_vocab(65500), IndexDType::kInt32);
  EXPECT_EQ(best_dtype_for_vocab(128256), IndexDType::kInt32);
  EXPECT_THROW(best_dtype_for_vocab(0), Error);
}

// The exact bytes of REFERENCE.md's layout, written out by hand: magic, version u64, dtype u8,
// sequence_count u64, document_count u64, lengths int32[], pointers int64[], document_indices.
TEST(IndexedDataset, WriterMatchesHandBuiltMegatronBytes) {
  TempDir dir;
  const std::string prefix = dir.file("tiny");
  {
    IndexedDatasetWriter w(prefix, IndexDType::kUInt16);
    w.add_document(std::vector<int32_t>{1, 2, 3});
    w.add_document(std::vector<int32_t>{7});
    w.add_document(std::vector<int32_t>{65535, 0});
    w.finalize();
  }
  // clang-format off
  const std::vector<unsigned char> expected_idx = {
      'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0,  // magic
      1, 0, 0, 0, 0, 0, 0, 0,                   // version 1
      8,                                        // dtype code 8 = uint16
      3, 0, 0, 0, 0, 0, 0, 0,                   // sequence_count 3
      4, 0, 0, 0, 0, 0, 0, 0,                   // document_count 4 (documents + 1)
      3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0,       // sequence_lengths 3, 1, 2
      0, 0, 0, 0, 0, 0, 0, 0,                   // sequence_pointers 0,
      6, 0, 0, 0, 0, 0, 0, 0,                   //   6 (3 uint16 tokens),
      8, 0, 0, 0, 0, 0, 0, 0,                   //   8
      0, 0, 0, 0, 0, 0, 0, 0,                   // document_indices 0,
      1, 0, 0, 0, 0, 0, 0, 0,                   //   1,
      2, 0, 0, 0, 0, 0, 0, 0,                   //   2,
      3, 0, 0, 0, 0, 0, 0, 0,                   //   3
  };
  // clang-format on
  const std::vector<unsigned char> expected_bin = {1, 0, 2, 0, 3, 0, 7, 0, 0xff, 0xff, 0, 0};
  EXPECT_EQ(read_bytes(prefix + ".idx"), expected_idx);
  EXPECT_EQ(read_bytes(prefix + ".bin"), expected_bin);
}

// The other direction: a file as Megatron writes it with --split-sentences (several sequences
// per document) and with the optional multimodal sequence_modes array, built byte by byte.
TEST(IndexedDataset, ReadsHandBuiltMegatronFileWithSentencesAndModes) {
  TempDir dir;
  const std::string prefix = dir.file("megatron");
  std::vector<unsigned char> idx(kIndexMagic, kIndexMagic + 9);
  put<uint64_t>(idx, 1);
  idx.push_back(4);  // int32
  put<uint64_t>(idx, 3);
  put<uint64_t>(idx, 3);  // 2 documents: sequences [0, 2) and [2, 3)
  for (int32_t len : {2, 1, 3}) put<int32_t>(idx, len);
  for (int64_t ptr : {0, 8, 12}) put<int64_t>(idx, ptr);
  for (int64_t d : {0, 2, 3}) put<int64_t>(idx, d);
  for (int8_t mode : {0, 0, 1}) put<int8_t>(idx, mode);
  std::vector<unsigned char> bin;
  for (int32_t t : {100000, 5, 70000, 1, 2, 3}) put<int32_t>(bin, t);
  write_bytes(prefix + ".idx", idx);
  write_bytes(prefix + ".bin", bin);

  IndexedDataset ds(prefix);
  EXPECT_EQ(ds.dtype(), IndexDType::kInt32);
  EXPECT_EQ(ds.num_sequences(), 3);
  EXPECT_EQ(ds.num_documents(), 2);
  EXPECT_EQ(ds.num_tokens(), 6);
  std::vector<int32_t> out(3);
  ds.get(0, 0, 2, out.data());
  EXPECT_EQ(out[0], 100000);
  EXPECT_EQ(out[1], 5);
  ds.get(2, 1, 2, out.data());
  EXPECT_EQ(out[0], 2);
  EXPECT_EQ(out[1], 3);
}

// A valid 2-sequence uint16 dataset to corrupt.
std::string make_small(const TempDir& dir, const std::string& name) {
  const std::string prefix = dir.file(name);
  IndexedDatasetWriter w(prefix, IndexDType::kUInt16);
  w.add_document(std::vector<int32_t>{1, 2, 3, 4, 5});
  w.add_document(std::vector<int32_t>{6, 7, 8});
  w.finalize();
  return prefix;
}

// Opening `prefix` must throw tessera::Error whose message contains every one of `parts`.
void expect_open_error(const std::string& prefix, const std::vector<std::string>& parts) {
  try {
    IndexedDataset ds(prefix);
    ADD_FAILURE() << "no error opening " << prefix;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg << " / " << p;
  }
}

TEST(IndexedDataset, RejectsCorruptedMagic) {
  TempDir dir;
  const std::string prefix = make_small(dir, "magic");
  auto idx = read_bytes(prefix + ".idx");
  idx[3] = 'X';
  write_bytes(prefix + ".idx", idx);
  expect_open_error(prefix, {prefix + ".idx", "bad magic", "MMIDIDX"});
}

TEST(IndexedDataset, RejectsWrongVersion) {
  TempDir dir;
  const std::string prefix = make_small(dir, "version");
  auto idx = read_bytes(prefix + ".idx");
  idx[9] = 2;
  write_bytes(prefix + ".idx", idx);
  expect_open_error(prefix, {prefix + ".idx", "unsupported version 2", "expected 1"});
}

TEST(IndexedDataset, RejectsUnknownDtypeCode) {
  TempDir dir;
  const std::string prefix = make_small(dir, "dtype");
  auto idx = read_bytes(prefix + ".idx");
  for (unsigned char code : {0, 9, 255}) {
    idx[17] = code;
    write_bytes(prefix + ".idx", idx);
    expect_open_error(prefix, {prefix + ".idx", "unknown dtype code " + std::to_string(code)});
  }
}

TEST(IndexedDataset, RejectsTruncatedIndexAtEveryRegion) {
  TempDir dir;
  const std::string prefix = make_small(dir, "trunc");
  const auto idx = read_bytes(prefix + ".idx");
  ASSERT_EQ(idx.size(), 34u + 2 * 12 + 3 * 8);
  // Cut inside: the magic, the version, the counts, the lengths, the pointers, the last
  // document index, and just one byte short.
  for (size_t cut : {0, 5, 12, 30, 36, 50, 70, 81}) {
    SCOPED_TRACE(cut);
    write_bytes(prefix + ".idx", std::vector<unsigned char>(idx.begin(), idx.begin() + cut));
    if (cut < 9) {
      expect_open_error(prefix, {prefix + ".idx", "bad magic"});
    } else if (cut < 34) {
      expect_open_error(prefix, {prefix + ".idx", "truncated", "header needs 34 bytes"});
    } else {
      expect_open_error(prefix, {prefix + ".idx", "truncated", "header says 2 sequences",
                                 "needs 82 bytes", "file has " + std::to_string(cut) + " bytes"});
    }
  }
}

TEST(IndexedDataset, RejectsTrailingBytesThatAreNotSequenceModes) {
  TempDir dir;
  const std::string prefix = make_small(dir, "trailing");
  auto idx = read_bytes(prefix + ".idx");
  idx.push_back(0);  // 1 extra byte: neither 0 nor sequence_count (2) extra bytes
  write_bytes(prefix + ".idx", idx);
  expect_open_error(prefix, {prefix + ".idx", "size mismatch", "file has 83 bytes"});
}

TEST(IndexedDataset, RejectsTruncatedBin) {
  TempDir dir;
  const std::string prefix = make_small(dir, "bin");
  auto bin = read_bytes(prefix + ".bin");
  ASSERT_EQ(bin.size(), 16u);
  bin.resize(15);
  write_bytes(prefix + ".bin", bin);
  expect_open_error(prefix,
                    {prefix + ".bin", "truncated", "sequence 1", "[10, 16)", "file has 15 bytes"});
}

TEST(IndexedDataset, RejectsBadDocumentIndices) {
  TempDir dir;
  const std::string prefix = make_small(dir, "docs");
  const auto good = read_bytes(prefix + ".idx");
  const size_t docs_at = 34 + 2 * 12;
  auto idx = good;
  idx[docs_at + 16] = 1;  // last entry 1, not sequence_count 2
  write_bytes(prefix + ".idx", idx);
  expect_open_error(prefix, {prefix + ".idx", "document_indices ends at 1", "expected"});
  idx = good;
  idx[docs_at] = 1;  // starts at 1
  write_bytes(prefix + ".idx", idx);
  expect_open_error(prefix, {prefix + ".idx", "document_indices[0] = 1", "expected 0"});
  idx = good;
  idx[docs_at + 8] = 3;  // 0, 3, 2: decreasing
  write_bytes(prefix + ".idx", idx);
  expect_open_error(prefix, {prefix + ".idx", "document_indices[2] = 2", "non-decreasing"});
}

TEST(IndexedDataset, RejectsBadPointerAndLength) {
  TempDir dir;
  const std::string prefix = make_small(dir, "ptr");
  const auto good = read_bytes(prefix + ".idx");
  auto idx = good;
  idx[34 + 8 + 8] = 3;  // pointer of sequence 1 = 3: not a multiple of 2 (uint16)
  write_bytes(prefix + ".idx", idx);
  expect_open_error(prefix, {prefix + ".idx", "sequence 1 has pointer 3", "multiple of 2"});
  idx = good;
  idx[34 + 3] = 0x80;  // length of sequence 0 negative
  write_bytes(prefix + ".idx", idx);
  expect_open_error(prefix, {prefix + ".idx", "sequence 0 has length -", "expected >= 0"});
}

TEST(IndexedDataset, MissingFilesAreNamed) {
  TempDir dir;
  expect_open_error(dir.file("nothing"), {dir.file("nothing") + ".idx", "cannot open"});
  const std::string prefix = make_small(dir, "nobin");
  std::filesystem::remove(prefix + ".bin");
  expect_open_error(prefix, {prefix + ".bin", "cannot open"});
}

TEST(IndexedDataset, GetChecksRangeAndNonIntegerValues) {
  TempDir dir;
  const std::string prefix = dir.file("float");
  {
    IndexedDatasetWriter w(prefix, IndexDType::kFloat32);
    w.add_document(std::vector<int32_t>{1, 2, 3});
    w.finalize();
  }
  {
    IndexedDataset ds(prefix);
    std::vector<int32_t> out(4);
    EXPECT_THROW(ds.get(0, 1, 3, out.data()), Error);  // past the end of the sequence
    EXPECT_THROW(ds.get(1, 0, 1, out.data()), Error);  // no sequence 1
    EXPECT_THROW(ds.sequence_length(-1), Error);
  }
  auto bin = read_bytes(prefix + ".bin");
  const float half = 1.5f;
  std::memcpy(bin.data() + 4, &half, 4);
  write_bytes(prefix + ".bin", bin);
  IndexedDataset ds(prefix);
  std::vector<int32_t> out(3);
  try {
    ds.get(0, 0, 3, out.data());
    ADD_FAILURE() << "no error for a fractional token";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(prefix + ".bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("offset 1"), std::string::npos) << msg;
  }
}

TEST(IndexedDataset, WriterRejectsUnrepresentableIdsAndCleansUp) {
  TempDir dir;
  const std::string prefix = dir.file("bad");
  {
    IndexedDatasetWriter w(prefix, IndexDType::kUInt16);
    w.add_document(std::vector<int32_t>{1, 2});
    try {
      w.add_document(std::vector<int32_t>{3, 70000});
      ADD_FAILURE() << "no error for 70000 in uint16";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("70000"), std::string::npos) << msg;
      EXPECT_NE(msg.find("document 1, position 1"), std::string::npos) << msg;
      EXPECT_NE(msg.find("uint16"), std::string::npos) << msg;
    }
    EXPECT_TRUE(std::filesystem::exists(prefix + ".bin.tmp"));
    IndexedDatasetWriter w8(dir.file("bad8"), IndexDType::kUInt8);
    EXPECT_THROW(w8.add_document(std::vector<int32_t>{-1}), Error);
    // Destroyed without finalize(): nothing may remain, under final or temporary names.
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(IndexedDataset, IsMovable) {
  TempDir dir;
  const std::string prefix = make_small(dir, "move");
  IndexedDataset a(prefix);
  IndexedDataset b(std::move(a));
  EXPECT_EQ(b.num_sequences(), 2);
  IndexedDataset c(make_small(dir, "move2"));
  c = std::move(b);
  std::vector<int32_t> out(3);
  c.get(1, 0, 3, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{6, 7, 8}));
}

}  // namespace
}  // namespace tessera::data
