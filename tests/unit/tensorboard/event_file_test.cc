// TensorBoard event files: CRC-32C check values, hand-worked protobuf bytes of the two events,
// TFRecord framing, and a writer's file read back record by record.
#include "tessera/tensorboard/event_file.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/tensorboard/crc32c.h"

namespace tessera::tensorboard {
namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

uint64_t read_le(const std::string& s, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

TEST(Crc32c, CheckValues) {
  // The standard check value of CRC-32C (RFC 3720 / iSCSI), and TFRecord's mask of it.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(mask_crc(0xE3069283u), 0xC78AB0E5u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // RFC 3720 B.4: 32 bytes of zeros.
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
}

TEST(EventEncoding, ScalarEventBytes) {
  // Event{wall_time 1.5, step 3, summary{value{tag "a", simple_value 2.0}}}, by hand:
  // 09 <1.5 as little-endian double> 10 03 2A 0A | 0A 08 | 0A 01 'a' 15 <2.0f little-endian>
  const std::string want =
      bytes({0x09, 0,    0,    0,    0,    0,   0,    0xF8, 0x3F, 0x10, 0x03, 0x2A,
             0x0A, 0x0A, 0x08, 0x0A, 0x01, 'a', 0x15, 0,    0,    0,    0x40});
  EXPECT_EQ(scalar_event(1.5, 3, "a", 2.0f), want);
  // Steps are varints: 300 = AC 02; a negative int64 takes ten bytes.
  const std::string e300 = scalar_event(0.0, 300, "a", 0.0f);
  EXPECT_EQ(e300.substr(9, 3), bytes({0x10, 0xAC, 0x02}));
  const std::string neg = scalar_event(0.0, -1, "a", 0.0f);
  EXPECT_EQ(neg.substr(9, 11),
            bytes({0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}));
}

TEST(EventEncoding, FileVersionEventBytes) {
  const std::string want = bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x1A, 13}) + "brain.Event:2";
  EXPECT_EQ(file_version_event(0.0), want);
}

TEST(EventEncoding, TfRecordFraming) {
  const std::string data = "hello";
  const std::string r = tfrecord(data);
  ASSERT_EQ(r.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(read_le(r, 0, 8), data.size());
  EXPECT_EQ(read_le(r, 8, 4), mask_crc(crc32c(r.data(), 8)));
  EXPECT_EQ(r.substr(12, data.size()), data);
  EXPECT_EQ(read_le(r, 12 + data.size(), 4), mask_crc(crc32c(data.data(), data.size())));
}

TEST(EventFileWriter, WritesTheRecordsInOrder) {
  const auto dir =
      std::filesystem::temp_directory_path() /
      ("tessera-tb-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::remove_all(dir);
  std::string path;
  {
    EventFileWriter w(dir.string(), 2);  // a queue of 2: add_scalar must wait for room
    path = w.path();
    EXPECT_NE(std::filesystem::path(path).filename().string().find("tfevents"), std::string::npos);
    for (int s = 0; s < 50; ++s) w.add_scalar("lm loss", 10.0 - s * 0.125, s);
    w.flush();
  }
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  for (size_t at = 0; at < file.size();) {
    ASSERT_LE(at + 12, file.size());
    const uint64_t n = read_le(file, at, 8);
    ASSERT_EQ(read_le(file, at + 8, 4), mask_crc(crc32c(file.data() + at, 8)));
    ASSERT_LE(at + 12 + n + 4, file.size());
    const std::string data = file.substr(at + 12, n);
    ASSERT_EQ(read_le(file, at + 12 + n, 4), mask_crc(crc32c(data.data(), data.size())));
    records.push_back(data);
    at += 12 + n + 4;
  }
  ASSERT_EQ(records.size(), 51u);
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);
  for (int s = 0; s < 50; ++s) {
    // Everything after wall_time (9 bytes) is the step and the summary, known exactly.
    EXPECT_EQ(records[s + 1].substr(9),
              scalar_event(0.0, s, "lm loss", static_cast<float>(10.0 - s * 0.125)).substr(9));
  }
  std::filesystem::remove_all(dir);
}

TEST(EventFileWriter, UncreatableDirectoryIsAUserError) {
  EXPECT_THROW(EventFileWriter("/proc/tessera-cannot-create-this", 4), Error);
}

}  // namespace
}  // namespace tessera::tensorboard
