// The streamed rank file: slices given in pieces (interleaved, as the windows of an offloaded
// optimizer give them) make the same bytes as the in-memory snapshot and as the reference (the
// whole file built in memory by write_safetensors with one-shot XXH3 checksums); the published
// checkpoint reads back; pieces out of order, too long, of no declared slice, or missing are
// tessera::Errors naming the slice, and leave no file behind.
#include "tessera/checkpoint/rank_file_writer.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/checkpoint/sharded_checkpoint.h"
#include "tessera/core/error.h"
#include "tessera/io/async_io.h"
#include "testing/temp_dir.h"

namespace tessera::checkpoint {
namespace {

// One slice of the file under test, with its data.
struct Entry {
  std::string name;
  TensorSlice slice;
  std::vector<float> data;
};

// w (8 x 6) split by columns over TP 2, as rank 1 holds it, in two slices (a ZeRO partition
// boundary at element 10), the same for a moment of w, and a whole vector b.
std::vector<Entry> entries() {
  model::ParameterSet set(2, 1);
  const TensorSlice w0 = TensorSlice::of(
      set.add("w", {8, 6}, model::InitKind::kZeros, 0, true, model::ShardSpec::split(1)), 0, 10);
  TensorSlice w1 = w0;
  w1.flat_begin = 10;
  w1.flat_end = 24;
  const TensorSlice b = TensorSlice::of(set.add("b", {5}, model::InitKind::kZeros, 0, false), 0, 5);
  auto values = [](int64_t n, float base) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = base + 0.25f * static_cast<float>(i);
    return v;
  };
  auto part = [](const std::vector<float>& v, int64_t begin, int64_t end) {
    return std::vector<float>(v.begin() + begin, v.begin() + end);
  };
  const std::vector<float> wv = values(24, 1), mv = values(24, -7);
  return {{"w", w0, part(wv, 0, 10)},
          {"optimizer.exp_avg.w", w0, part(mv, 0, 10)},
          {"w", w1, part(wv, 10, 24)},
          {"optimizer.exp_avg.w", w1, part(mv, 10, 24)},
          {"b", b, values(5, 100)}};
}

// The rank file as the in-memory writer made it before streaming existed: every tensor's data
// in memory, checksums in one shot.
void write_reference(const std::string& path, const std::vector<Entry>& es) {
  std::vector<SafeTensorView> views;
  nlohmann::json slices = nlohmann::json::array();
  for (const Entry& e : es) {
    const std::string key = e.name + "@" + std::to_string(e.slice.flat_begin);
    views.push_back({key, SafeDType::kF32, {e.slice.numel()}, e.data.data()});
    nlohmann::json j = e.slice.to_json();
    j["name"] = e.name;
    j["key"] = key;
    j["shape"] = e.slice.global_shape;
    j["xxh3"] = checksum_text(XXH3_64bits(e.data.data(), e.data.size() * sizeof(float)));
    slices.push_back(std::move(j));
  }
  write_safetensors(path, views, {{"tessera.slices", slices.dump()}});
}

// The piece [from, to) of entry i (elements of its slice's packed data).
void give(RankFileWriter& writer, const Entry& e, int64_t from, int64_t to) {
  writer.write(e.name, e.slice.flat_begin + from, e.data.data() + from, to - from);
}

TEST(RankFileWriter, PiecesMakeTheSnapshotsBytesAndReadBack) {
  const std::vector<Entry> es = entries();
  testing::TempDir dir;
  const std::string ref_dir = dir.file("ref"), snap_dir = dir.file("snap");
  std::filesystem::create_directories(ref_dir);
  std::filesystem::create_directories(snap_dir);
  write_reference(ref_dir + "/" + rank_file_name(3), es);

  RankSnapshot snapshot;
  for (const Entry& e : es) snapshot.add(e.name, e.slice, e.data.data());
  snapshot.write(snap_dir, 3);

  // Streamed: declared in the snapshot's order, given as windows would give them (a window
  // ends inside the first slices and inside b; b's first piece comes before w's last ones).
  const std::string save = dir.file("ckpt");
  std::filesystem::create_directories(save);
  prepare_staging(save, 7);
  RankFileWriter writer;
  for (const Entry& e : es) writer.declare(e.name, e.slice);
  writer.open(staging_dir(save, 7), 3);
  give(writer, es[0], 0, 4);
  give(writer, es[1], 0, 4);
  give(writer, es[0], 4, 10);
  give(writer, es[1], 4, 10);
  give(writer, es[2], 0, 1);
  give(writer, es[3], 0, 1);
  give(writer, es[4], 0, 2);
  give(writer, es[2], 1, 14);
  give(writer, es[3], 1, 14);
  give(writer, es[4], 2, 2);  // an empty piece
  give(writer, es[4], 2, 5);
  writer.commit();
  EXPECT_EQ(writer.bytes(), (10 + 10 + 14 + 14 + 5) * 4);

  const std::vector<unsigned char> ref = testing::read_bytes(ref_dir + "/" + rank_file_name(3));
  ASSERT_FALSE(ref.empty());
  EXPECT_EQ(testing::read_bytes(snap_dir + "/" + rank_file_name(3)), ref);
  EXPECT_EQ(testing::read_bytes(staging_dir(save, 7) + "/" + rank_file_name(3)), ref);
  EXPECT_FALSE(std::filesystem::exists(staging_dir(save, 7) + "/" + rank_file_name(3) + ".tmp"));

  // Published as a one-rank checkpoint (ranks 0-2 wrote nothing: empty files), it reads back.
  for (int r = 0; r < 3; ++r) RankSnapshot().write(staging_dir(save, 7), r);
  publish_checkpoint(save, 7, 4, {{"note", "test"}}, 0);
  CheckpointReader reader(*find_checkpoint(save));
  model::ParameterSet set(2, 1);
  const TensorSlice whole_shard = TensorSlice::of(
      set.add("w", {8, 6}, model::InitKind::kZeros, 0, true, model::ShardSpec::split(1)), 0, 24);
  for (const std::string name : {"w", "optimizer.exp_avg.w"}) {
    std::vector<float> got(24);
    reader.read(name, whole_shard, got.data());
    const Entry& lo = name == "w" ? es[0] : es[1];
    const Entry& hi = name == "w" ? es[2] : es[3];
    for (int64_t i = 0; i < 24; ++i)
      EXPECT_EQ(got[i], i < 10 ? lo.data[i] : hi.data[i - 10]) << name << " " << i;
  }
  std::vector<float> b(5);
  reader.read("b", TensorSlice::whole({5}), b.data());
  EXPECT_EQ(b, es[4].data);
}

// `fn` throws a tessera::Error containing `expected`.
template <typename Fn>
void expect_error(Fn fn, const std::string& expected) {
  try {
    fn();
    FAIL() << "no error; expected: " << expected;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(RankFileWriter, WrongPiecesAreErrorsAndLeaveNoFile) {
  const std::vector<Entry> es = entries();
  testing::TempDir dir;
  const std::string file = dir.file(rank_file_name(0));
  {
    RankFileWriter writer;
    for (const Entry& e : es) writer.declare(e.name, e.slice);
    writer.open(dir.path(), 0);
    give(writer, es[0], 0, 4);
    expect_error([&] { give(writer, es[0], 5, 10); },
                 "rank_00000.safetensors: slice w@0 (elements [0, 10)): a piece starts at element "
                 "5 but the data so far ends at 4: expected pieces in order");
    expect_error([&] { give(writer, es[0], 0, 4); }, "a piece starts at element 0");
    expect_error([&] { writer.write("w", 4, es[2].data.data(), 7); },
                 "slice w@0 (elements [0, 10)): a piece of 7 elements from element 4 runs past "
                 "the slice's end");
    expect_error([&] { writer.write("w", 24, es[2].data.data(), 1); },
                 "tensor w: no declared slice holds element 24");
    expect_error([&] { writer.write("v", 0, es[2].data.data(), 1); },
                 "tensor v: no declared slice holds element 0");
    give(writer, es[0], 4, 10);
    expect_error([&] { writer.commit(); },
                 "rank_00000.safetensors: slice optimizer.exp_avg.w@0 received 0 of its 10 "
                 "elements");
    EXPECT_FALSE(std::filesystem::exists(file));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));  // the temporary is gone too

  RankFileWriter overlapping;
  overlapping.declare("w", es[0].slice);
  TensorSlice s = es[2].slice;
  s.flat_begin = 8;
  overlapping.declare("w", s);
  expect_error([&] { overlapping.open(dir.path(), 0); },
               "tensor w: slices [0, 10) and [8, 24) overlap");
}

// Slices of several MiB given in pieces that end at arbitrary bytes (the windows of an offloaded
// optimizer), through O_DIRECT and through the page cache: both files are the reference's bytes.
// In the build tree (a disk file system, as io/'s tests: O_DIRECT is taken there).
TEST(RankFileWriter, DirectAndBufferedWritesMakeTheReferenceBytes) {
  model::ParameterSet set(1, 0);
  const TensorSlice w =
      TensorSlice::of(set.add("w", {1031, 777}, model::InitKind::kZeros, 0, true), 0, 1031 * 777);
  const TensorSlice b = TensorSlice::of(set.add("b", {3}, model::InitKind::kZeros, 0, false), 0, 3);
  std::vector<Entry> es{{"w", w, {}}, {"optimizer.exp_avg.w", w, {}}, {"b", b, {}}};
  for (size_t k = 0; k < es.size(); ++k) {
    es[k].data.resize(es[k].slice.numel());
    for (size_t i = 0; i < es[k].data.size(); ++i)
      es[k].data[i] = static_cast<float>(k) + 1e-3f * static_cast<float>(i % 9973);
  }
  testing::TempDir dir(std::filesystem::current_path().string(), "rank-file-test");
  const std::string ref = dir.file("ref");
  std::filesystem::create_directories(ref);
  write_reference(ref + "/" + rank_file_name(0), es);
  for (const auto mode :
       {RankFileWriter::WriteMode::kDirectWhereSupported, RankFileWriter::WriteMode::kBuffered}) {
    const bool direct = mode == RankFileWriter::WriteMode::kDirectWhereSupported;
    const std::string out = dir.file(direct ? "direct" : "buffered");
    std::filesystem::create_directories(out);
    RankFileWriter writer(mode);
    for (const Entry& e : es) writer.declare(e.name, e.slice);
    writer.open(out, 0);
    EXPECT_EQ(writer.direct(), direct);
    // Windows of 100003 elements: each gives its part of w, then of the moment, b in the first.
    const int64_t n = w.numel(), window = 100003;
    for (int64_t from = 0; from < n; from += window) {
      const int64_t to = std::min(n, from + window);
      give(writer, es[0], from, to);
      give(writer, es[1], from, to);
      if (from == 0) give(writer, es[2], 0, 3);
    }
    writer.commit();
    EXPECT_EQ(testing::read_bytes(out + "/" + rank_file_name(0)),
              testing::read_bytes(ref + "/" + rank_file_name(0)))
        << (direct ? "O_DIRECT" : "page cache");
  }
}

// The direct writer runs on the engine settings it is given (the trainer gives the run's `aio`
// block and back end): on the thread pool, where the test's injected EIO reaches it.
TEST(RankFileWriter, DirectWritesUseTheGivenEngine) {
  const std::vector<Entry> es = entries();
  testing::TempDir dir(std::filesystem::current_path().string(), "rank-file-test");
  io::set_thread_io_fault_injector([](const io::IoRequest&) { return EIO; });
  io::DirectFileWriter::Options options;
  options.backend = io::IoBackend::kThreads;
  RankFileWriter writer(RankFileWriter::WriteMode::kDirectWhereSupported, options);
  for (const Entry& e : es) writer.declare(e.name, e.slice);
  writer.open(dir.path(), 0);
  ASSERT_TRUE(writer.direct());
  for (const Entry& e : es) give(writer, e, 0, e.slice.numel());
  expect_error([&] { writer.commit(); }, std::strerror(EIO));
  io::set_thread_io_fault_injector(nullptr);
  EXPECT_FALSE(std::filesystem::exists(dir.file(rank_file_name(0))));
}

}  // namespace
}  // namespace tessera::checkpoint
