// Randomised damage to .idx/.bin pairs: truncations, flipped bytes in the header, the lengths,
// the pointers and the document indices, wrong magic/version/dtype, pointers past the end of
// .bin. Opening and then reading every sequence must either work or throw one tessera::Error
// of one line; never crash, never read outside the files (run under ASan to see the latter).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/philox.h"
#include "tessera/data/gpt_dataset.h"
#include "tessera/data/indexed_dataset.h"
#include "testing/temp_dir.h"

namespace tessera::data {
namespace {

using testing::TempDir;

std::vector<unsigned char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Opens the prefix and reads every sequence; returns "" on success or the error's message.
// Anything but tessera::Error escapes and fails the test.
std::string open_and_read(const std::string& prefix) {
  try {
    IndexedDataset ds(prefix);
    std::vector<int32_t> buf;
    for (int64_t s = 0; s < ds.num_sequences(); ++s) {
      buf.resize(static_cast<size_t>(ds.sequence_length(s)));
      ds.get(s, 0, ds.sequence_length(s), buf.data());
    }
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : key_(philox_key(seed, RngPurpose::kTest, 0)) {}
  uint64_t next() {
    const auto r = philox_block(key_, n_++, 0);
    return (static_cast<uint64_t>(r[0]) << 32) | r[1];
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }

 private:
  PhiloxKey key_;
  uint64_t n_ = 0;
};

TEST(IndexedDatasetFuzz, DamagedFilesGiveOneClearError) {
  TempDir dir;
  const std::string good = dir.file("good"), bad = dir.file("bad");
  Rng rng(2026);
  int errors = 0;
  for (IndexDType dtype : {IndexDType::kUInt16, IndexDType::kInt32, IndexDType::kFloat32,
                           IndexDType::kUInt8, IndexDType::kInt64}) {
    {
      IndexedDatasetWriter w(good, dtype);
      for (int d = 0; d < 9; ++d) {
        std::vector<int32_t> doc(rng.below(12));
        for (auto& t : doc) t = static_cast<int32_t>(rng.below(200));
        w.add_document(doc);
      }
      w.finalize();
    }
    const std::vector<unsigned char> idx = slurp(index_file_path(good));
    const std::vector<unsigned char> bin = slurp(data_file_path(good));
    // Control: the undamaged pair opens and reads.
    EXPECT_EQ(open_and_read(good), "");
    uint64_t seq_count = 0;
    std::memcpy(&seq_count, idx.data() + 18, 8);
    const size_t lengths_at = kIndexHeaderBytes, pointers_at = lengths_at + 4 * seq_count;
    const size_t docs_at = pointers_at + 8 * seq_count;
    bool bin_is_original = false;
    for (int trial = 0; trial < 160; ++trial) {
      std::vector<unsigned char> i2 = idx, b2 = bin;
      bool must_fail = true;
      switch (trial % 8) {
        case 0:  // truncated .idx (anywhere, including inside the header)
          i2.resize(rng.below(idx.size()));
          break;
        case 1:  // wrong magic
          i2[rng.below(9)] ^= static_cast<unsigned char>(1 + rng.below(255));
          break;
        case 2:  // wrong version
          i2[9 + rng.below(8)] ^= static_cast<unsigned char>(1 + rng.below(255));
          break;
        case 3:  // unknown dtype code
          i2[17] = static_cast<unsigned char>(rng.below(2) ? 0 : 9 + rng.below(247));
          break;
        case 4: {  // a pointer past the end of .bin
          const size_t at = pointers_at + 8 * rng.below(seq_count);
          const int64_t past = static_cast<int64_t>(bin.size()) + 8 * (1 + rng.below(1000));
          std::memcpy(i2.data() + at, &past, 8);
          break;
        }
        case 5:  // truncated .bin (an empty one is valid only when every sequence is empty)
          b2.resize(rng.below(bin.size() + 1));
          must_fail = b2.size() < bin.size();
          break;
        default: {  // 1-4 random byte flips in the counts, lengths, pointers or doc indices
          must_fail = false;
          const int flips = 1 + static_cast<int>(rng.below(4));
          for (int f = 0; f < flips; ++f) {
            const size_t region = rng.below(4);
            const size_t begin = region == 0   ? 18
                                 : region == 1 ? lengths_at
                                 : region == 2 ? pointers_at
                                               : docs_at;
            const size_t end = region == 0   ? 34
                               : region == 1 ? pointers_at
                               : region == 2 ? docs_at
                                             : idx.size();
            if (end > begin)
              i2[begin + rng.below(end - begin)] ^= static_cast<unsigned char>(1 + rng.below(255));
          }
        }
      }
      spit(index_file_path(bad), i2);
      // Rewritten only when it changes (the test's time is in file writes).
      if (!bin_is_original || b2 != bin) spit(data_file_path(bad), b2);
      bin_is_original = b2 == bin;
      const std::string error = open_and_read(bad);
      if (must_fail) {
        EXPECT_FALSE(error.empty()) << "case " << trial % 8 << " was accepted";
      }
      if (!error.empty()) {
        ++errors;
        EXPECT_EQ(error.find('\n'), std::string::npos) << error;
        EXPECT_NE(error.find(bad), std::string::npos) << "the error must name the file: " << error;
      }
    }
  }
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace tessera::data
