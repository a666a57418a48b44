// Slice geometry and the sharded checkpoint format: every layout's slices, saved and loaded
// into another layout, give back exactly the global tensor's values (a reference built
// element by element from global coordinates), and the reader refuses what does not fit.
#include "tessera/checkpoint/tensor_slice.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tessera/checkpoint/sharded_checkpoint.h"
#include "tessera/core/error.h"
#include "testing/temp_dir.h"

namespace tessera::checkpoint {
namespace {

// The value of global element (row, col): distinct for every element.
float global_value(int64_t row, int64_t col) { return static_cast<float>(row * 1000 + col); }

// A parameter of `shape` split as `spec` over `tp` ranks, as rank `rank` holds it.
model::Parameter param(const Shape& shape, const model::ShardSpec& spec, int tp, int rank) {
  model::ParameterSet set(tp, rank);
  return set.add("w", shape, model::InitKind::kZeros, 0, true, spec);
}

// The shard's values in local row-major order, from global coordinates.
std::vector<float> shard_values(const model::Parameter& p) {
  const int64_t rows = p.local_shape[0], cols = p.local_shape.size() > 1 ? p.local_shape[1] : 1;
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t gr = p.shard.tp_dim == 0 ? p.global_index(r) : r;
      const int64_t gc = p.shard.tp_dim == 1 ? p.global_index(c) : c;
      out.push_back(global_value(gr, gc));
    }
  return out;
}

struct Layout {
  int tp;
  int parts;  // ZeRO-like flat partitions of each shard
};

// Saves every (tp rank, part) slice of `shape`/`spec` under `from`, loads every slice of `to`
// and checks each element against the global values (padded rows excepted).
void check_reslicing(const Shape& shape, const model::ShardSpec& spec, Layout from, Layout to) {
  std::vector<std::vector<Run>> saved_runs;
  std::vector<std::vector<float>> saved_data;
  for (int r = 0; r < from.tp; ++r) {
    const model::Parameter p = param(shape, spec, from.tp, r);
    const std::vector<float> values = shard_values(p);
    for (int k = 0; k < from.parts; ++k) {
      const int64_t b = p.numel() * k / from.parts, e = p.numel() * (k + 1) / from.parts;
      saved_runs.push_back(runs(TensorSlice::of(p, b, e)));
      saved_data.emplace_back(values.begin() + b, values.begin() + e);
    }
  }
  for (int r = 0; r < to.tp; ++r) {
    const model::Parameter p = param(shape, spec, to.tp, r);
    const std::vector<float> expected = shard_values(p);
    const int64_t real_rows = spec.vocab_rows > 0 ? spec.vocab_rows : shape[0];
    for (int k = 0; k < to.parts; ++k) {
      const int64_t b = p.numel() * k / to.parts, e = p.numel() * (k + 1) / to.parts;
      const std::vector<Run> needed = runs(TensorSlice::of(p, b, e));
      std::vector<float> got(e - b, -1.0f);
      int64_t copied = 0;
      for (size_t s = 0; s < saved_runs.size(); ++s)
        copied += copy_overlap(saved_runs[s], saved_data[s].data(), needed, got.data(), 4);
      int64_t real = 0;
      for (int64_t i = b; i < e; ++i) {
        // A padded row (global row >= the real rows) is neither saved nor loaded.
        const bool padded = expected[i] >= static_cast<float>(real_rows * 1000);
        real += padded ? 0 : 1;
        ASSERT_EQ(got[i - b], padded ? -1.0f : expected[i])
            << "tp " << to.tp << " rank " << r << " part " << k << " element " << i;
      }
      EXPECT_EQ(copied, real);
    }
  }
}

TEST(TensorSlice, RowSplitReslicesIntoEveryLayout) {
  for (Layout from : {Layout{1, 1}, Layout{2, 3}, Layout{4, 2}})
    for (Layout to : {Layout{1, 1}, Layout{1, 5}, Layout{2, 1}, Layout{4, 3}})
      check_reslicing({8, 6}, model::ShardSpec::split(0), from, to);
}

TEST(TensorSlice, ColumnSplitReslicesIntoEveryLayout) {
  for (Layout from : {Layout{1, 2}, Layout{2, 3}, Layout{4, 1}})
    for (Layout to : {Layout{1, 1}, Layout{2, 7}, Layout{4, 3}})
      check_reslicing({5, 8}, model::ShardSpec::split(1), from, to);
}

TEST(TensorSlice, SectionedHeadsReslice) {
  // GPT-2's fused q/k/v rows: three sections of 4 heads of 2 rows each, dealt out per section.
  const model::ShardSpec spec = model::ShardSpec::split(0, {{8, 4}, {8, 4}, {8, 4}});
  for (Layout from : {Layout{1, 1}, Layout{2, 3}, Layout{4, 2}})
    for (Layout to : {Layout{1, 2}, Layout{2, 1}, Layout{4, 5}})
      check_reslicing({24, 3}, spec, from, to);
}

TEST(TensorSlice, PaddedVocabularyRowsAreLeftOut) {
  // 10 real rows padded to 16 (TP 2: 8 per rank) or to 12 (TP 1 here: any padding works).
  check_reslicing({16, 4}, model::ShardSpec::vocab(10), {2, 3}, {1, 1});
  const model::Parameter p = param({16, 4}, model::ShardSpec::vocab(10), 2, 1);
  const TensorSlice s = TensorSlice::of(p, 0, p.numel());
  EXPECT_EQ(s.global_shape, (std::vector<int64_t>{10, 4}));
  int64_t n = 0;
  for (const checkpoint::Run& r : runs(s)) n += r.length;
  EXPECT_EQ(n, 2 * 4);  // rank 1 holds rows 8..15, of which 8 and 9 are real
}

TEST(TensorSlice, ASliceMustFitItsTensor) {
  const model::Parameter p = param({8, 6}, model::ShardSpec::split(1), 2, 0);
  TensorSlice s = TensorSlice::of(p, 0, p.numel());
  s.check_fits_global("here");  // (8, 3) split along columns fits (8, 6)
  s.global_shape = {7, 6};      // a row count the shard does not have
  try {
    s.check_fits_global("ck/metadata.json: tensor w");
    FAIL() << "accepted a slice of 8 rows for a tensor of 7";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "tensor w: a slice of shape [8,3] split along dimension 1 does not fit the "
                  "tensor's shape [7,6]"),
              std::string::npos)
        << e.what();
  }
  s.global_shape = {48};  // another rank
  EXPECT_THROW(s.check_fits_global("here"), Error);
}

TEST(TensorSlice, JsonRoundTripAndValidation) {
  const model::Parameter p = param({8, 6}, model::ShardSpec::split(1), 2, 1);
  const TensorSlice s = TensorSlice::of(p, 5, 17);
  TensorSlice back = TensorSlice::from_json(s.to_json(), "here");
  back.global_shape = s.global_shape;
  EXPECT_EQ(back.to_json(), s.to_json());
  nlohmann::json bad = s.to_json();
  bad["flat"] = {5, 100};
  try {
    TensorSlice::from_json(bad, "ck/metadata.json: tensor w");
    FAIL() << "accepted a flat range outside the shard";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ck/metadata.json: tensor w: slice description out of range"),
              std::string::npos)
        << e.what();
  }
}

// Two "ranks" save halves of a tensor; one process reads it whole; damage is refused.
class ShardedCheckpoint : public ::testing::Test {
 protected:
  void save(int64_t iteration, int keep = 0) {
    const model::Parameter p = param({6, 4}, model::ShardSpec::split(0), 1, 0);
    const std::vector<float> v = shard_values(p);
    prepare_staging(dir.path(), iteration);
    for (int rank = 0; rank < 2; ++rank) {
      RankSnapshot snap;
      snap.add("w", TensorSlice::of(p, rank * 12, rank * 12 + 12), v.data() + rank * 12);
      snap.write(staging_dir(dir.path(), iteration), rank);
    }
    publish_checkpoint(dir.path(), iteration, 2, {{"note", "test"}}, keep);
  }
  std::vector<float> read_whole(const std::string& path) {
    CheckpointReader reader(*find_checkpoint(path));
    std::vector<float> out(24);
    reader.read("w", TensorSlice::whole({6, 4}), out.data());
    return out;
  }
  testing::TempDir dir;
};

TEST_F(ShardedCheckpoint, PublishesAtomicallyAndReadsBack) {
  save(5);
  save(10);
  EXPECT_FALSE(std::filesystem::exists(staging_dir(dir.path(), 10)));
  std::ifstream latest(latest_file(dir.path()));
  int64_t it = 0;
  latest >> it;
  EXPECT_EQ(it, 10);
  CheckpointReader reader(*find_checkpoint(dir.path()));
  EXPECT_EQ(reader.iteration(), 10);
  EXPECT_EQ(reader.state()["note"], "test");
  const std::vector<float> got = read_whole(dir.path());
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(got[i], global_value(i / 4, i % 4));
  // A shape the checkpoint does not have is named with both shapes.
  std::vector<float> out(24);
  try {
    reader.read("w", TensorSlice::whole({4, 6}), out.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor w has shape [6,4] in the checkpoint but the model needs [4,6]"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ShardedCheckpoint, KeepsTheNewest) {
  for (int64_t it : {2, 4, 6, 8}) save(it, 2);
  EXPECT_FALSE(std::filesystem::exists(iteration_dir(dir.path(), 4)));
  EXPECT_TRUE(std::filesystem::exists(iteration_dir(dir.path(), 6)));
  EXPECT_TRUE(std::filesystem::exists(iteration_dir(dir.path(), 8)));
}

TEST_F(ShardedCheckpoint, ACorruptedByteIsAChecksumMismatch) {
  save(3);
  const std::string file = iteration_dir(dir.path(), 3) + "/rank_00001.safetensors";
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-4, std::ios::end);
  f.put('\x7f');
  f.close();
  try {
    read_whole(dir.path());
    FAIL() << "read a corrupted file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank_00001.safetensors: tensor w (w@12): checksum mismatch"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ShardedCheckpoint, AMissingSliceIsNamed) {
  save(3);
  // Drop rank 1's slice from the metadata: the checkpoint then lacks half of w.
  const std::string meta = iteration_dir(dir.path(), 3) + "/metadata.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(meta));
  j["tensors"]["w"]["slices"].erase(1);
  std::ofstream(meta) << j.dump();
  try {
    read_whole(dir.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor w: the checkpoint holds 12 of the 24 elements"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::checkpoint
